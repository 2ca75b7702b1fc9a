"""``selfheal loop`` / ``plan`` / ``replay`` end to end: real pytest projects in real git repos,
``pytest --selfheal`` to capture, the ``selfheal`` command in process (``helpers.selfheal``;
a real subprocess where a signal is what is tested)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import (
    DETERMINISTIC,
    PY,
    ROOT_ON_PATH,
    SPLIT,
    SPLIT_FIXED,
    TOOLING,
    CliResult,
    assert_files_valid,
    assert_replay_equals_disk,
    capture,
    deterministic_project,
    events_named,
    flaky_project,
    hanging_project,
    make_project,
    run_env,
    selfheal,
)

from pytest_selfheal.errors import (
    EXIT_BAD_INPUT,
    EXIT_CANCELLED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNRESOLVED,
    EXIT_USAGE,
)
from pytest_selfheal.store.root import Store


def one_line_error(result: CliResult) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("selfheal: error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_flaky_resolves_and_is_archived_to_resolved(tmp_path: Path) -> None:
    project = flaky_project(tmp_path)
    incident_id = capture(project)
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "-> STOP success" in result.stdout
    assert (f"resolved: stop_reason success after 1 iteration(s) -> error_archive/resolved/{incident_id}; "
            "flaky (passed on re-run with no code change): test_flaky.py::test_flaky") in result.stdout
    store = Store(project / ".selfheal")
    assert store.locate(incident_id)[0] == "resolved"
    run_result = store.read_run_result(incident_id)
    assert run_result is not None and run_result.flaky_tests == ("test_flaky.py::test_flaky",)
    assert_files_valid(store, incident_id)
    replay = selfheal(project, "replay", incident_id)
    assert replay.returncode == EXIT_OK and "replay equals the files" in replay.stdout
    # Archived: a second loop is refused.
    again = selfheal(project, "loop", incident_id)
    assert again.returncode == EXIT_REFUSED and "already archived" in one_line_error(again)


def test_deterministic_failure_is_escalated_at_iteration_one(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    result = selfheal(project, "loop", incident_id, "--json")
    assert result.returncode == EXIT_UNRESOLVED, result.stderr
    data = json.loads(result.stdout)
    assert data["stop_reason"] == "repeated_fingerprint" and data["loops_used"] == 1
    assert data["final_status"] == "escalated" and data["archived_to"] == f"error_archive/escalated/{incident_id}"
    assert "STOP repeated_fingerprint" in result.stderr  # progress goes to stderr with --json
    store = Store(project / ".selfheal")
    assert store.locate(incident_id)[0] == "escalated"
    replay = selfheal(project, "replay", incident_id, "--json")
    assert replay.returncode == EXIT_OK and json.loads(replay.stdout)["equal"] is True


def test_fixed_between_capture_and_loop_is_resolved_with_tests_fixed(tmp_path: Path) -> None:
    project = make_project(tmp_path / "fix", SPLIT, ini=ROOT_ON_PATH)
    incident_id = capture(project)
    (project / "sub.py").write_text(SPLIT_FIXED)
    result = selfheal(project, "loop", incident_id, "--json")
    assert result.returncode == EXIT_OK, result.stderr
    data = json.loads(result.stdout)
    assert data["stop_reason"] == "success"
    assert data["tests_fixed"] == ["test_calc.py::test_sub"]
    assert data["flaky_tests"] == []  # the code changed: not flaky
    assert "flaky" not in result.stderr and "stop_reason success after 1 iteration(s)" in result.stderr
    store = Store(project / ".selfheal")
    assert store.read_attempts(incident_id)[0].progress_reasons == ("tests_fixed", "diff_changed")
    assert_replay_equals_disk(store, incident_id)


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf {victim}",
        "pytest; touch {marker}",
        "python -m pytest -q test_calc.py && touch {marker}",
        "python -c 'open(\"{marker}\", \"w\")'",
    ],
)
def test_commands_that_are_not_allowlisted_are_refused_and_never_run(tmp_path: Path, command: str) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    victim = tmp_path / "victim"
    victim.mkdir()
    marker = tmp_path / "pwned"
    plan_path = project / ".selfheal" / "error_plans" / incident_id / "plan.json"
    plan = json.loads(plan_path.read_text())
    plan["verification_commands"] = [command.format(victim=victim, marker=marker)]
    plan_path.write_text(json.dumps(plan))
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == EXIT_REFUSED
    assert "refusing verification command" in one_line_error(result)
    assert not marker.exists() and victim.is_dir()
    store = Store(project / ".selfheal")
    assert store.count_attempts(incident_id) == 0 and store.read_status(incident_id) == "planned"
    refused = events_named(store, incident_id, "decision_point_needed")
    assert refused and refused[-1]["refused"] is True
    assert refused[-1]["decision_point"]["reason"] == "verification_command_refused"


def test_hung_test_times_out_retries_once_and_stops(tmp_path: Path) -> None:
    project = hanging_project(tmp_path)
    # The judging keys in force at the capture judge the incident (docs/loop.md "The seal").
    incident_id = capture(project, "--selfheal-set=verification.timeout_seconds=1")
    start = time.monotonic()
    result = selfheal(project, "loop", incident_id, "--set", "verification.timeout_seconds=1")
    assert result.returncode == EXIT_UNRESOLVED, result.stderr
    assert time.monotonic() - start < 60
    assert "STOP timeout" in result.stdout
    store = Store(project / ".selfheal")
    assert [a.timed_out for a in store.read_attempts(incident_id)] == [True, True]
    assert_replay_equals_disk(store, incident_id)


def test_tooling_env_stops_at_once(tmp_path: Path) -> None:
    project = make_project(tmp_path / "env", {"test_env.py": TOOLING})
    incident_id = capture(project)
    result = selfheal(project, "loop", incident_id, "--json")
    assert result.returncode == EXIT_UNRESOLVED
    data = json.loads(result.stdout)
    assert data["stop_reason"] == "tooling_env" and data["loops_used"] == 0
    assert data["decision_point"]["options"][0]["id"] == "change_test_command"
    assert Store(project / ".selfheal").count_attempts(incident_id) == 0


def test_tooling_env_says_why_and_a_reopen_after_the_fix_runs_the_verification(tmp_path: Path) -> None:
    project = make_project(tmp_path / "env", {"test_env.py": TOOLING})
    incident_id = capture(project)
    why = "No module named 'nonexistent_dep_xyz' (test_env.py::test_env)"
    stopped = selfheal(project, "loop", incident_id)
    assert stopped.returncode == EXIT_UNRESOLVED
    assert "STOP tooling_env" in stopped.stdout and why in stopped.stdout.splitlines()[-1], stopped.stdout
    assert why in selfheal(project, "show", incident_id).stdout
    assert why in selfheal(project, "report", incident_id).stdout
    # Still broken: the reopen runs the verification (iteration 1), which stops again, saying why.
    again = selfheal(project, "loop", incident_id, "--reopen")
    assert "iteration 1 of 3: running" in again.stdout and "STOP tooling_env" in again.stdout, again.stdout
    assert Store(project / ".selfheal").count_attempts(incident_id) == 1
    # The environment fixed (the module installed on the path): the reopen verifies it, success.
    site = tmp_path / "site"
    site.mkdir()
    (site / "nonexistent_dep_xyz.py").write_text("")
    fixed = selfheal(project, "loop", incident_id, "--reopen", env={"PYTHONPATH": str(site)})
    assert fixed.returncode == EXIT_OK, fixed.stdout + fixed.stderr
    assert "iteration 1 of 3: running" in fixed.stdout and "STOP success" in fixed.stdout


def test_sigterm_cancels_kills_the_verification_and_the_loop_resumes(tmp_path: Path) -> None:
    project = hanging_project(tmp_path)
    incident_id = capture(project)
    pidfile = tmp_path / "hang.pid"
    proc = subprocess.Popen([PY, "-m", "pytest_selfheal", "loop", incident_id], cwd=project, env=run_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pidfile.exists(), "the verification never started"
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_CANCELLED, err
    assert "cancelled by SIGTERM" in err and "Traceback" not in err
    hung = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(hung, 0)
    store = Store(project / ".selfheal")
    assert store.count_attempts(incident_id) == 0  # the half iteration was not written
    assert store.read_status(incident_id) == "running" and store.locate(incident_id)[0] == "inbox"
    assert events_named(store, incident_id, "loop_stopped")[-1]["stop_reason"] == "cancelled"
    assert events_named(store, incident_id, "decision_point_needed")[-1]["decision_point"]["reason"] == "cancelled"
    replayed = assert_replay_equals_disk(store, incident_id)
    assert replayed["loop_stops"][-1]["stop_reason"] == "cancelled"
    # Resume: the hang is gone, the failure is deterministic.
    (tmp_path / "hang.stop").write_text("")
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == EXIT_UNRESOLVED and "STOP repeated_fingerprint" in result.stdout
    assert [a.iteration for a in store.read_attempts(incident_id)] == [1]
    assert_replay_equals_disk(store, incident_id)


def test_loop_usage_errors(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    assert selfheal(project, "loop", "../etc").returncode == EXIT_USAGE
    assert selfheal(project, "loop", "incident_20990101_000000_zz").returncode == EXIT_NOT_FOUND
    bad = selfheal(project, "loop", incident_id, "--set", "max_iterations=lots")
    assert bad.returncode == EXIT_USAGE and "max_iterations" in one_line_error(bad)
    assert selfheal(project, "loop", incident_id, "--set", "nonsense=1").returncode == EXIT_USAGE
    store = Store(project / ".selfheal")
    assert store.count_attempts(incident_id) == 0


def test_corrupted_attempt_is_exit_3(tmp_path: Path) -> None:
    project = make_project(tmp_path / "m", {"test_m.py": DETERMINISTIC})
    incident_id = capture(project)
    runs = project / ".selfheal" / "error_runs" / incident_id
    runs.mkdir(parents=True)
    (runs / "attempt_01.json").write_text('{"incident_id": "trunc')
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == EXIT_BAD_INPUT and "attempt_01.json" in one_line_error(result)


def test_disabled_loop_exits_1_and_leaves_the_incident_open(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project, "--selfheal-set=enabled=false")
    result = selfheal(project, "loop", incident_id, "--set", "enabled=false", "--json")
    assert result.returncode == EXIT_UNRESOLVED
    assert json.loads(result.stdout)["stop_reason"] == "disabled"
    assert Store(project / ".selfheal").read_status(incident_id) == "planned"


def test_loop_honours_dir(tmp_path: Path) -> None:
    project = flaky_project(tmp_path)
    incident_id = capture(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = selfheal(elsewhere, "loop", incident_id, "--dir", str(project / ".selfheal"))
    assert result.returncode == EXIT_OK, result.stderr  # verification runs in the capture's rootdir


# --------------------------------------------------------------------------- selfheal plan


def test_plan_prints_and_force_regenerates(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    shown = selfheal(project, "plan", incident_id)
    assert shown.returncode == EXIT_OK and shown.stdout.startswith(f"# Remediation plan: {incident_id}")
    as_json = json.loads(selfheal(project, "plan", incident_id, "--json").stdout)
    assert as_json["verification_commands"] == ["python -m pytest -q test_calc.py::test_sub"]
    store = Store(project / ".selfheal")
    plan_path = store.plans_dir(incident_id) / "plan.json"
    edited = dict(as_json, summary="hand edited", revision=4)
    plan_path.write_text(json.dumps(edited))
    forced = selfheal(project, "plan", incident_id, "--force", "--json")
    assert forced.returncode == EXIT_OK
    regenerated = json.loads(forced.stdout)
    assert regenerated["revision"] == 1 and regenerated["summary"] != "hand edited"
    assert store.read_status(incident_id) == "planned"
    assert events_named(store, incident_id, "plan_generated")[-1]["forced"] is True
    assert selfheal(project, "plan", "incident_20990101_000000_zz").returncode == EXIT_NOT_FOUND
    assert selfheal(project, "plan", "nope").returncode == EXIT_USAGE


def test_plan_without_a_plan_is_not_found_until_forced(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    store = Store(project / ".selfheal")
    for name in ("plan.json", "plan.md"):
        (store.plans_dir(incident_id) / name).unlink()
    missing = selfheal(project, "plan", incident_id)
    assert missing.returncode == EXIT_NOT_FOUND and "no plan" in one_line_error(missing)
    assert selfheal(project, "plan", incident_id, "--force").returncode == EXIT_OK
    assert store.has_plan(incident_id)


# --------------------------------------------------------------------------- selfheal replay


def test_replay_exit_3_when_events_and_files_disagree(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    assert selfheal(project, "loop", incident_id).returncode == EXIT_UNRESOLVED
    store = Store(project / ".selfheal")
    log = store.incident_dir(incident_id) / "audit_tail.jsonl"
    kept = [line for line in log.read_text().splitlines() if '"verification_finished"' not in line]
    log.write_text("\n".join(kept) + "\n")
    result = selfheal(project, "replay", incident_id)
    assert result.returncode == EXIT_BAD_INPUT
    assert "replay differs from the files" in result.stdout and "iterations:" in result.stdout


HASH_ORDER = """
    def names():
        return list({"alpha", "bravo", "charlie", "delta", "echo", "foxtrot"})

    def test_sorted():
        assert names() == sorted(names())
"""


def test_a_hash_order_message_stops_by_repetition_before_max_iterations(tmp_path: Path) -> None:
    project = make_project(tmp_path / "hash", {"test_order.py": HASH_ORDER})
    incident_id = capture(project, env={"PYTHONHASHSEED": "1"})
    result = selfheal(project, "loop", incident_id, "--set", "max_iterations=5", env={"PYTHONHASHSEED": "random"})
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    store = Store(project / ".selfheal")
    run_result = store.read_run_result(incident_id)
    assert run_result is not None and run_result.stop_reason == "repeated_fingerprint"
    assert run_result.loops_used < 5
    # Every run sorts the same set the same way: one fingerprint however the hash seed orders it.
    fingerprints = {fp for row in run_result.fingerprints_per_iteration for fp in row}
    assert len(fingerprints) == 1


TARGET_CONFTEST = """
    import pytest

    def pytest_addoption(parser):
        parser.addoption("--target", default=None)

    @pytest.fixture
    def target(request):
        value = request.config.getoption("--target")
        if value is None:
            pytest.fail("run with --target")
        return value
"""

TARGET_TEST = """
    def test_deploy(target):
        assert target == "production"
"""


def test_the_captures_own_options_are_replayed_in_every_verification_run(tmp_path: Path) -> None:
    project = make_project(tmp_path / "opts", {"conftest.py": TARGET_CONFTEST, "test_deploy.py": TARGET_TEST})
    incident_id = capture(project, "--target=staging", "-W", "default", "-k", "deploy", "--tb=short",
                          '--selfheal-set=verification.args=["-W", "ignore::UserWarning"]')
    store = Store(project / ".selfheal")
    # The helper's own -p no:cacheprovider is an option of the run too; -q, -k, --tb and -p
    # pytest_selfheal.plugin, --selfheal are not replayed.
    assert store.read_incident(incident_id).pytest_options == (
        "-p", "no:cacheprovider", "--target=staging", "-W", "default")
    result = selfheal(project, "loop", incident_id, "--set", 'verification.args=["-W", "ignore::UserWarning"]')
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    assert "-p no:cacheprovider --target=staging -W default -W ignore::UserWarning" in result.stdout
    run_result = store.read_run_result(incident_id)
    assert run_result is not None and run_result.stop_reason == "repeated_fingerprint"
    # The same failure came back, not "run with --target": one fingerprint throughout.
    assert len({fp for row in run_result.fingerprints_per_iteration for fp in row}) == 1


MANY_FLAKY = """
    import os
    import pytest
    STATE = {state!r}

    @pytest.mark.parametrize("n", range(12))
    def test_flaky(n):
        mark = STATE + str(n)
        if not os.path.exists(mark):
            open(mark, "w").close()
            assert False, "first run fails"

    def test_bug():
        assert 1 + 1 == 3
"""


@pytest.mark.slow  # a few seconds: test_policy keeps the fast test of these lines
def test_the_stop_lines_name_the_first_few_flaky_tests_and_count_the_rest(tmp_path: Path) -> None:
    """Twelve flaky tests and a real bug: the escalation line named all of them (10,000 flaky
    failures made it 365 KB); now the first five and "and 7 more"."""
    project = make_project(tmp_path / "many", {"test_many.py": MANY_FLAKY.format(state=str(tmp_path / "m"))})
    incident_id = capture(project, "-p", "no:randomly")
    looped = selfheal(project, "loop", incident_id)
    lines = (looped.stdout + looped.stderr).splitlines()
    final = [line for line in lines if "stop_reason repeated_fingerprint" in line]
    assert len(final) == 1, looped.stdout + looped.stderr
    assert final[0].endswith("test_many.py::test_flaky[4] and 7 more"), final[0]
    assert any(line.endswith("fingerprint same, progress no (flaky) -> STOP repeated_fingerprint") for line in lines)
    (running,) = [line for line in lines if ": running python -m pytest" in line]
    assert "'test_many.py::test_flaky[4]' (+8 more test ids) -p no:cacheprovider" in running, running
    result = Store(project / ".selfheal").read_run_result(incident_id)
    assert result is not None and len(result.flaky_tests) == 12  # the record keeps them all


@pytest.mark.slow  # a capture and a loop run, ~3 s; the line is one branch of the command
def test_reopen_of_an_open_incident_says_it_has_nothing_to_reopen(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    result = selfheal(project, "loop", incident_id, "--reopen")
    assert f"selfheal: {incident_id} is open (in the inbox), not archived: --reopen has nothing to reopen" \
        in result.stdout, result.stdout + result.stderr
