"""The loop state is read once and held in memory (docs/architecture.md "The loop state"):
one iteration does not go back to the files it already read."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from helpers import (
    PY,
    PYTEST_SELFHEAL,
    assert_replay_equals_disk,
    capture,
    clone_project,
    deterministic_project,
    effective_config,
    run_env,
)

from pytest_selfheal.loop.attempts import record_iteration
from pytest_selfheal.loop.replay import disk_state, state_from_disk
from pytest_selfheal.loop.seal_check import judged_config
from pytest_selfheal.loop.state import LoopRun
from pytest_selfheal.store.root import Store

# Judging keys of the capture under which one iteration only continues: nothing is archived.
NEVER_STOP = ("max_iterations=1000", "error_fingerprint_repeats=1000", "no_progress_repeats=1000")

# Run in a child: an audit hook cannot be removed, so it must not stay in the test process.
# The verifier reports the captured failure again (no pytest child), as a real run would.
COUNT_OPENS = textwrap.dedent("""
    import collections, json, os, sys
    from pathlib import Path
    from pytest_selfheal.config.files import load_config
    from pytest_selfheal.loop.driver import verify_iteration
    from pytest_selfheal.loop.verify import VerificationRun
    from pytest_selfheal.store.root import Store

    project, incident_id = Path(sys.argv[1]), sys.argv[2]
    root = str(project / ".selfheal") + os.sep
    store, effective = Store(project / ".selfheal"), load_config(project)
    JUNIT = ('<testsuite name="pytest" tests="1" failures="1"><testcase classname="test_calc" name="test_sub">'
             '<failure message="assert 7 == 3">assert 7 == 3</failure></testcase></testsuite>')

    def verifier(argv, *, cwd, junit_path, timeout_seconds, env=None, invocation_dir=None, selection_file=None, judged=False):
        junit_path.write_text(JUNIT)
        return VerificationRun(list(argv), 1, False, 0.01, "1 failed", junit_path)

    opened = collections.Counter()

    def hook(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].startswith(root):
            opened[os.path.basename(args[0])] += 1

    sys.addaudithook(hook)
    outcome = verify_iteration(store, incident_id, effective=effective, project_root=project, verifier=verifier)
    print(json.dumps({"closed": outcome.closed, "opened": opened}))
""")


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One capture for the module (each test loops a copy)."""
    project = deterministic_project(tmp_path_factory.mktemp("loop-state"))
    return project, capture(project, *(word for key in NEVER_STOP for word in ("--selfheal-set", key)))


def test_one_verify_only_iteration_reads_each_incident_file_at_most_once(
    tmp_path: Path, captured: tuple[Path, str]
) -> None:
    project, incident_id = clone_project(captured[0], tmp_path / "project"), captured[1]
    child = subprocess.run([PY, "-c", COUNT_OPENS, str(project), incident_id], capture_output=True, text=True,
                           env=run_env(), timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    result = json.loads(child.stdout.splitlines()[-1])
    assert result["closed"] is False  # a plain "continue": the iteration was recorded, nothing archived
    opened = result["opened"]
    assert opened.get("attempt_01.json", 0) == 0  # written (through a temporary file), never read back
    for name in ("status.txt", "incident.json", "plan.json"):
        assert opened.get(name, 0) <= 1, opened


# The whole process of a surface, its command line included, under the same hook.
COUNT_PROCESS_OPENS = textwrap.dedent("""
    import collections, json, os, sys
    root = os.path.join(os.getcwd(), ".selfheal") + os.sep
    opened = collections.Counter()

    def hook(event, args):
        if event == "open" and isinstance(args[0], str) and args[0].startswith(root) and isinstance(args[1], str) \
                and "r" in args[1]:
            opened[os.path.basename(args[0])] += 1

    sys.addaudithook(hook)
    if sys.argv[1] == "pytest":
        import pytest
        code = pytest.main(sys.argv[2:])
    else:
        from pytest_selfheal.cli.main import main
        code = main(sys.argv[1:])
    print(json.dumps({"code": int(code), "opened": opened}))
""")


def test_a_red_capture_and_a_selfheal_loop_read_each_incident_file_at_most_once(tmp_path: Path) -> None:
    project = deterministic_project(tmp_path)

    def counted(*argv: str) -> dict[str, int]:
        child = subprocess.run([PY, "-c", COUNT_PROCESS_OPENS, *argv], cwd=project, capture_output=True, text=True,
                               env=run_env(), timeout=120, check=False)
        assert child.stderr == "" or "Traceback" not in child.stderr, child.stderr
        opened: dict[str, int] = json.loads(child.stdout.splitlines()[-1])["opened"]
        return opened

    assert counted("pytest", *PYTEST_SELFHEAL, "-q", "-p", "no:cacheprovider") == {}  # written, never read back
    (incident_id,) = [p.name for p in (project / ".selfheal" / "error_inbox").iterdir()]
    opened = counted("loop", incident_id)  # to its stop: verified, archived
    for name in ("status.txt", "incident.json", "plan.json"):
        assert opened.get(name, 0) <= 1, opened


@pytest.mark.slow  # a capture and a verification in children: seconds (the red run and the loop above stay by default)
def test_selfheal_ci_reads_each_incident_file_at_most_once(tmp_path: Path) -> None:
    """The capture, the loop to its stop, then the report, the comment, the history and the
    new-test check, all from the state the loop returns."""
    project = deterministic_project(tmp_path)
    event = tmp_path / "event.json"
    event.write_text("{}")
    env = {**run_env(), "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push", "GITHUB_EVENT_PATH": str(event),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_OUTPUT": str(tmp_path / "output.txt"),
           "GITHUB_REPOSITORY": "octo-org/hello-world", "GITHUB_SHA": "0" * 40}
    child = subprocess.run([PY, "-c", COUNT_PROCESS_OPENS, "ci", "--no-fail-on-unresolved", "--", "-q", "-p", "pytest_selfheal.plugin"], cwd=project,
                           capture_output=True, text=True, env=env, timeout=120, check=False)
    assert "Traceback" not in child.stderr, child.stderr
    result = json.loads(child.stdout.splitlines()[-1])
    assert "STOP repeated_fingerprint" in child.stdout, child.stdout
    for name in ("status.txt", "incident.json", "plan.json"):
        assert result["opened"].get(name, 0) <= 1, result


def test_the_state_in_memory_is_what_the_files_say_after_a_loop(tmp_path: Path, captured: tuple[Path, str]) -> None:
    """Written through: after each iteration and the close-out (archived), the state the
    loop held equals the state read back from the files, and the event log alone tells the
    same story."""
    project, incident_id = clone_project(captured[0], tmp_path / "project"), captured[1]
    store = Store(project / ".selfheal")
    run = LoopRun.resume(store, incident_id)
    nodeid = "test_calc.py::test_sub"
    judged, _ = judged_config(effective_config(project), run.incident)  # the capture's keys, as the driver takes them
    common = dict(effective=judged, mode="verify", verification_commands=[], project_root=project)
    # The captured failure seen again, the code unchanged: the loop continues (the capture never stops it).
    seen_again = record_iteration(
        run, outcomes={nodeid: "failed"}, failures=[run.incident.failures[0]],
        diff_hash=run.capture_hash, started_at="2026-01-01T00:00:00+00:00", finished_at="2026-01-01T00:00:01+00:00",
        exit_code=1, **common,
    )
    assert not seen_again.closed and run.status == "running"
    assert disk_state(run) == state_from_disk(store, incident_id)
    # Then it passes after a code change: success, resolved and archived.
    fixed = record_iteration(
        run, outcomes={nodeid: "passed"}, failures=[], diff_hash="0" * 16,
        started_at="2026-01-01T00:01:00+00:00", finished_at="2026-01-01T00:01:01+00:00", exit_code=0, **common,
    )
    assert fixed.closed and fixed.decision.stop_reason == "success"
    assert run.bucket == "resolved" and [a.iteration for a in run.attempts] == [1, 2]
    assert disk_state(run) == state_from_disk(store, incident_id)
    assert_replay_equals_disk(store, incident_id)
