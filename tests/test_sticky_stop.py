"""A stop sticks: running again never resets a STOP (docs/loop.md "A stop sticks").

The verdict is about a failure set and a code state: after a stop, a run with the same
failures and the same code says STOP again (``already_stopped``) and captures nothing; with
the code changed it is the stopped incident's next iteration, its budget going on.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import TWO_BUGS_TESTS, cli, clone_project, events_named, git_commit_all

from pytest_selfheal.records.models import Failure
from pytest_selfheal.store import judging
from pytest_selfheal.store.root import Store

TESTS = TWO_BUGS_TESTS
BUGGY = "def add(a, b):\n    return a - b\n\ndef sub(a, b):\n    return a + b\n"
ALREADY = re.compile(r"^selfheal: incident (incident_\S+) iteration (\d+) of 3: (\d+) failure\(s\) already stopped "
                     r"\((\w+)\), code unchanged -> STOP already_stopped$", re.M)
STATUS = re.compile(r"^selfheal: incident (incident_\S+) iteration (\d+) of (\d+): .* -> (CONTINUE|STOP \w+)"
                    r"(?: \(.* changed since the capture\))?$", re.M)


def _ids(p: pytest.Pytester, bucket: str) -> list[str]:
    base = p.path / ".selfheal" / ("error_inbox" if bucket == "inbox" else f"error_archive/{bucket}")
    return sorted(d.name for d in base.glob("incident_*")) if base.exists() else []


def _attempts(p: pytest.Pytester, incident_id: str) -> list[dict[str, Any]]:
    runs = p.path / ".selfheal" / "error_runs" / incident_id
    return [json.loads(f.read_text()) for f in sorted(runs.glob("attempt_*.json"))]


# One stopped project per test process (each test gets a copy): building it costs a capture and a loop.
_STOPPED_TEMPLATE: list[Path] = []


@pytest.fixture
def stopped(pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory) -> pytest.Pytester:
    """A capture, then a verify-only loop that stops with repeated_fingerprint."""
    if _STOPPED_TEMPLATE:
        clone_project(_STOPPED_TEMPLATE[0], pytester.path)
        return pytester
    pytester.makepyfile(mod=BUGGY, test_mod=TESTS)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    assert pytester.runpytest("--selfheal").ret == 1
    (incident_id,) = _ids(pytester, "inbox")
    looped = cli("loop", incident_id, "--json", cwd=pytester.path)
    assert json.loads(looped.stdout)["stop_reason"] == "repeated_fingerprint", looped.stderr
    assert _ids(pytester, "escalated") == [incident_id]
    template = tmp_path_factory.mktemp("stopped") / "project"
    shutil.copytree(pytester.path, template, symlinks=True)
    _STOPPED_TEMPLATE.append(template)
    return pytester


def test_running_again_with_the_code_unchanged_stops_again(stopped: pytest.Pytester) -> None:
    (earlier,) = _ids(stopped, "escalated")
    for _ in range(3):  # however often: never a new incident with a fresh budget
        result = stopped.runpytest("--selfheal")
        assert result.ret == 1  # the plugin never changes pytest's outcome
        out = result.stdout.str()
        found = ALREADY.search(out)
        assert found, out
        assert found.group(1) == earlier and found.group(3) == "2" and found.group(4) == "repeated_fingerprint"
        assert f"selfheal reopen {earlier}" in out
        assert "captured" not in out and "CONTINUE" not in out
        assert _ids(stopped, "inbox") == [] and _ids(stopped, "escalated") == [earlier]
    attached = events_named(Store(stopped.path / ".selfheal"), earlier, "capture_attached")
    assert [e["attachment"] for e in attached] == ["already_stopped"] * 3
    assert sorted(attached[0]["nodeids"]) == ["test_mod.py::test_add", "test_mod.py::test_sub"]
    # `selfheal status` shows no new incident in the inbox.
    status = cli("status", "--json", cwd=stopped.path)
    rows = json.loads(status.stdout)
    rows = rows["incidents"] if isinstance(rows, dict) else rows
    assert [(r["incident_id"], r["status"]) for r in rows] == [(earlier, "escalated")]


def test_the_stop_line_counts_the_stopped_runs_budget_not_todays(stopped: pytest.Pytester) -> None:
    """The budget is the capture's judging key: a later max_iterations is not the "of N"."""
    (earlier,) = _ids(stopped, "escalated")
    out = stopped.runpytest("--selfheal", "--selfheal-set", "max_iterations=7").stdout.str()
    found = ALREADY.search(out)  # "iteration 1 of 3", as the stopped run had it
    assert found and found.group(1) == earlier, out
    assert "of 7" not in out


def test_reopen_is_the_way_back(stopped: pytest.Pytester) -> None:
    (earlier,) = _ids(stopped, "escalated")
    assert cli("reopen", earlier, cwd=stopped.path).returncode == 0
    out = stopped.runpytest("--selfheal").stdout.str()
    found = STATUS.search(out)
    # The reopened incident's next iteration: a new loop run, the user's decision.
    assert found and found.group(1) == earlier and found.group(2) == "1", out
    assert len(_attempts(stopped, earlier)) == 2


def test_a_code_change_continues_the_stopped_incident_with_its_budget(stopped: pytest.Pytester) -> None:
    (earlier,) = _ids(stopped, "escalated")
    # A change that does not fix anything: the same failures, the code changed.
    stopped.makepyfile(mod="TOUCHED = 1\n" + BUGGY)
    out = stopped.runpytest("--selfheal").stdout.str()
    found = STATUS.search(out)
    assert found, out
    # Iteration 2 of the same incident, not iteration 1 of a new one; the same failure
    # seen again is still a repeat.
    assert found.group(1) == earlier and found.group(2) == "2" and found.group(4) == "STOP repeated_fingerprint"
    assert _ids(stopped, "inbox") == [] and _ids(stopped, "escalated") == [earlier]
    assert [a["mode"] for a in _attempts(stopped, earlier)] == ["verify", "agent"]
    events = events_named(Store(stopped.path / ".selfheal"), earlier, "capture_attached")
    assert [e["attachment"] for e in events] == ["continued"]


def test_a_comment_only_edit_is_no_code_change(stopped: pytest.Pytester) -> None:
    """A comment or a blank line cannot change what the code does: the stop stays (it
    counted as a code change, and as "progress yes")."""
    (earlier,) = _ids(stopped, "escalated")
    stopped.makepyfile(mod="# touched\n" + BUGGY.replace("return a - b", "return a - b  # why?") + "\n\n")
    out = stopped.runpytest("--selfheal").stdout.str()
    found = ALREADY.search(out)
    assert found and found.group(1) == earlier, out
    assert len(_attempts(stopped, earlier)) == 1


def test_an_agents_own_settings_are_no_code_change(stopped: pytest.Pytester) -> None:
    """The stop hook's install (``.claude/settings.json``) and other tools' hidden folders
    are no code under test: the stop stays (a real change counts: the test below)."""
    (earlier,) = _ids(stopped, "escalated")
    assert cli("stop-gate", "install", "claude", cwd=stopped.path).returncode == 0
    (stopped.path / ".cursor").mkdir()
    (stopped.path / ".cursor" / "rules.md").write_text("fix the code\n")
    out = stopped.runpytest("--selfheal").stdout.str()
    found = ALREADY.search(out)
    assert found and found.group(1) == earlier and "progress yes" not in out, out


def test_the_budget_is_not_fresh_after_a_code_change(stopped: pytest.Pytester) -> None:
    (earlier,) = _ids(stopped, "escalated")
    stopped.makepyfile(mod="ONE = 1\n" + BUGGY)
    stopped.runpytest("--selfheal")  # iteration 2: repeated again, escalated again
    stopped.makepyfile(mod="TWO = 2\n" + BUGGY)
    out = stopped.runpytest("--selfheal").stdout.str()
    found = STATUS.search(out)
    assert found and found.group(1) == earlier and found.group(2) == "3", out
    assert found.group(4).startswith("STOP")
    assert _ids(stopped, "inbox") == []
    # The budget of 3 is used up: another change has no iteration left (it was "iteration 4 of 3").
    stopped.makepyfile(mod="THREE = 3\n" + BUGGY)
    out = stopped.runpytest("--selfheal").stdout.str()
    assert "iteration 4" not in out, out
    assert (f"incident {earlier} iteration 3 of 3: 2 failure(s) already stopped (repeated_fingerprint), "
            "no iteration left -> STOP already_stopped") in out
    assert f"only a reopen gives it new iterations: selfheal reopen {earlier}" in out
    assert len(_attempts(stopped, earlier)) == 3 and _ids(stopped, "inbox") == []


def test_a_fix_after_the_stop_is_a_plain_green_run(stopped: pytest.Pytester) -> None:
    stopped.makepyfile(mod="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n")
    result = stopped.runpytest("--selfheal")
    assert result.ret == 0
    assert _ids(stopped, "inbox") == []


def test_a_partial_selection_never_splits_one_failure_set(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(mod=BUGGY, test_mod=TESTS)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    pytester.runpytest("--selfheal", "test_mod.py::test_add")  # captures only test_add
    verdicts = []
    for _ in range(6):  # unchanged runs: each incident stops at its second
        out = pytester.runpytest("--selfheal").stdout.str()
        assert len(_ids(pytester, "inbox")) <= 1, out  # never two open incidents
        verdicts.append(out)
    # The runs settle: the last ones stop every failure again, capture and continue nothing.
    for out in verdicts[-2:]:
        assert "CONTINUE" not in out and "captured" not in out, out
        assert len(ALREADY.findall(out)) >= 1
    assert _ids(pytester, "inbox") == []


REPORT = re.compile(r"^RALF Lite Loop Report: (\w+)(?:, stop reason (\w+))?", re.M)
OPEN = ("planned", "running")


def _one_verdict(p: pytest.Pytester, out: str, incident_id: str) -> str:
    """The verdict the run's surfaces state about the incident — the iteration line, the
    report line and its next step, ``selfheal status`` and ``selfheal show`` — asserted to
    be one, and returned (CONTINUE or the stop reason)."""
    found = STATUS.search(out)
    assert found and found.group(1) == incident_id, out
    line = found.group(4)
    status = next(r["status"] for r in json.loads(cli("status", "--json", cwd=p.path).stdout)
                  if r["incident_id"] == incident_id)
    shown = json.loads(cli("show", incident_id, "--json", cwd=p.path).stdout)
    result = shown["run_result"]
    report = REPORT.search(out)
    if line == "CONTINUE":
        assert status in OPEN and shown["status"] == status and result is None, (status, result)
        assert report and report.group(1) == status and report.group(2) is None, out
        assert "--reopen" not in out and "Investigate" not in out, out
        return line
    reason = line.removeprefix("STOP ")
    assert status not in OPEN and shown["status"] == status, status
    assert result is not None and result["stop_reason"] == reason and result["final_status"] == status
    assert report and report.groups() == (status, reason), out
    return reason


def test_every_surface_states_the_one_verdict_after_a_change(stopped: pytest.Pytester) -> None:
    (earlier,) = _ids(stopped, "escalated")
    # Half a fix: the fingerprint changes, progress — the loop run goes on (the report said
    # "escalated, stop reason repeated_fingerprint" beside CONTINUE, show said escalated).
    stopped.makepyfile(mod="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a + b\n")
    assert _one_verdict(stopped, stopped.runpytest("--selfheal").stdout.str(), earlier) == "CONTINUE"
    # The same code again: an iteration with nothing tried, its last: one verdict still.
    assert _one_verdict(stopped, stopped.runpytest("--selfheal").stdout.str(), earlier) != "CONTINUE"


@pytest.mark.slow  # the change sequence above stays in the default tier
def test_every_surface_states_the_one_verdict_without_a_change(stopped: pytest.Pytester) -> None:
    (earlier,) = _ids(stopped, "escalated")
    out = stopped.runpytest("--selfheal").stdout.str()
    found = ALREADY.search(out)
    assert found and found.group(1) == earlier and not REPORT.search(out), out
    shown = json.loads(cli("show", earlier, "--json", cwd=stopped.path).stdout)
    assert shown["status"] == "escalated" and shown["run_result"]["stop_reason"] == found.group(4)


@pytest.mark.slow  # the change sequence above stays in the default tier
def test_every_surface_states_the_one_verdict_after_a_reopen(stopped: pytest.Pytester) -> None:
    (earlier,) = _ids(stopped, "escalated")
    assert cli("reopen", earlier, cwd=stopped.path).returncode == 0
    shown = json.loads(cli("show", earlier, "--json", cwd=stopped.path).stdout)
    assert shown["status"] == "planned" and shown["run_result"] is None  # the old stop is history
    _one_verdict(stopped, stopped.runpytest("--selfheal").stdout.str(), earlier)


def test_a_run_with_other_options_leaves_a_stopped_incident_stopped(stopped: pytest.Pytester) -> None:
    """The code changed, the same failures, other options: not an iteration (like with like),
    so nothing is reopened and no verdict is printed."""
    (earlier,) = _ids(stopped, "escalated")
    stopped.makepyfile(mod="TOUCHED = 1\n" + BUGGY)
    out = stopped.runpytest("--selfheal", "--doctest-modules").stdout.str()
    assert f"incident {earlier}: this run is not counted as an iteration: its options (--doctest-modules)" in out
    assert not STATUS.search(out) and "next iteration" not in out and "captured" not in out, out
    assert _ids(stopped, "escalated") == [earlier] and len(_attempts(stopped, earlier)) == 1


DOCTESTED = 'def add(a, b):\n    """\n    >>> add(1, 2)\n    3\n    """\n    return a - b\n'
ADD_TEST = "from mod import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def test_a_match_whose_failing_tests_did_not_run_is_no_verdict() -> None:
    """The rule (pure): a stopped incident matched by a green run whose failing tests that run
    did not run is not_collected, and its line says which, in those words; a failing test
    gone from a file the run ran, or from an edited test file, is a test edit, judged."""
    from pytest_selfheal.loop import sticky

    def stopped(*failing: str) -> sticky.StoppedIncident:
        return sticky.StoppedIncident("incident_1", "escalated", "escalated", "no_fix_found", 2, frozenset({"f"}),
                                      "h", frozenset({"t.py::a", *failing}), failing=frozenset(failing), remaining=1)

    edited = lambda _: ["other.py"]  # noqa: E731 - its test code changed since the capture
    (match,) = sticky.match_green([stopped("mod.py::mod.add", "u.py::b")], {"t.py::a"}, (), "h2", edited)
    assert match.attachment is sticky.Attachment.NOT_COLLECTED
    assert match.absent == ("mod.py::mod.add", "u.py::b")
    line = sticky.not_collected_line(match, {"u.py::b"}, ["--doctest-modules"])
    assert line == ("selfheal: incident incident_1 stopped (no_fix_found); of the tests it failed, 1 not collected "
                    "by this run (mod.py::mod.add) and 1 skipped by this run (u.py::b): this run reaches no verdict "
                    "on it (pytest --selfheal --doctest-modules runs them)")
    for gone, changed in (("t.py::b", ["other.py"]), ("gone.py::b", ["gone.py"])):
        (judged,) = sticky.match_green([stopped(gone)], {"t.py::a"}, (), "h2", lambda _, c=changed: c)
        assert judged.attachment is sticky.Attachment.CONTINUED, gone
    # Every failing test ran and passed: the match is what it was (a changed test: its next iteration).
    (ran,) = sticky.match_green([stopped("u.py::b")], {"t.py::a", "u.py::b"}, (), "h2", edited)
    assert ran.attachment is sticky.Attachment.CONTINUED
    # Its test code unchanged (a fix after the stop): every failing test passing is said, a
    # failing test not run is no verdict, one deselected from a file that ran is nothing.
    unchanged = lambda _: []  # noqa: E731
    (fixed,) = sticky.match_green([stopped("u.py::b")], {"t.py::a", "u.py::b"}, (), "h2", unchanged)
    assert fixed.attachment is sticky.Attachment.PASSED_AFTER_STOP
    assert sticky.passed_after_stop_line(fixed) == (
        "selfheal: incident incident_1 stopped (no_fix_found); the 1 test(s) it failed (u.py::b) pass in this run, "
        "which is no iteration of it: the run passes and the incident stays escalated until "
        "`selfheal loop incident_1 --reopen` judges the change")
    (unseen,) = sticky.match_green([stopped("mod.py::mod.add")], {"t.py::a"}, (), "h2", unchanged)
    assert unseen.attachment is sticky.Attachment.NOT_COLLECTED
    assert sticky.match_green([stopped("t.py::b")], {"t.py::a"}, (), "h2", unchanged) == []


def test_an_already_stopped_line_says_code_unchanged_only_when_it_is() -> None:
    from pytest_selfheal.loop import sticky

    waiting = sticky.StoppedIncident("incident_1", "error_inbox", "plan_proposed", "replan_requested", 2,
                                     frozenset({"f"}), "h", remaining=1)
    failure = Failure(test="t", fingerprint="f", signature="s", scheme=1, failure_type="TEST_ASSERTION",
                      code_fixable=True, transient=False, failure_class="deterministic", message="m", outcome="failed")
    matches, _ = sticky.match_stopped([waiting], [failure], "h2")
    line = sticky.already_stopped_line(matches[0], 3)
    assert "code unchanged" not in line and "its proposed plan waits -> STOP already_stopped" in line, line
    matches, _ = sticky.match_stopped([waiting], [failure], "h")
    assert ", code unchanged -> STOP already_stopped" in sticky.already_stopped_line(matches[0], 3)


@pytest.mark.slow  # five runs: the pure rule above stays in the default tier
def test_a_run_that_did_not_collect_the_failing_tests_reaches_no_verdict(pytester: pytest.Pytester) -> None:
    """Captured with --doctest-modules, stopped, fixed, tests edited: a run without the option
    never ran the failing doctest, so it says so and neither stops nor continues the incident."""
    pytester.makepyfile(mod=DOCTESTED, test_mod=ADD_TEST)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    for _ in range(3):  # the capture, then two unchanged runs: STOP no_fix_found
        pytester.runpytest("--selfheal", "--doctest-modules")
    (earlier,) = _ids(pytester, "escalated")
    pytester.makepyfile(mod=DOCTESTED.replace("a - b", "a + b"), test_mod="# edited\n" + ADD_TEST)
    result = pytester.runpytest("--selfheal")
    out = result.stdout.str()
    assert result.ret == 0
    assert (f"incident {earlier} stopped (no_fix_found); of the tests it failed, 1 not collected by this run "
            "(mod.py::mod.add): this run reaches no verdict on it (pytest --selfheal --doctest-modules runs them)"
            ) in out, out
    assert "-> STOP" not in out and "CONTINUE" not in out and "next iteration" not in out
    assert _ids(pytester, "escalated") == [earlier] and len(_attempts(pytester, earlier)) == 2
    # The command printed works: the run with the capture's option is the incident's next iteration.
    found = STATUS.search(pytester.runpytest("--selfheal", "--doctest-modules").stdout.str())
    assert found and (found.group(1), found.group(2)) == (earlier, "3")


# --------------------------------------------------------------------------- a green run sticks too

WEAKENED = TESTS.replace("assert add(2, 3) == 5", "assert True").replace("assert sub(5, 3) == 2", "assert True")
GREEN_ALREADY = re.compile(r"^selfheal: incident (incident_\S+) iteration (\d+) of 3: (\d+) passing test\(s\) already "
                           r"stopped \((\w+)\), code unchanged -> STOP already_stopped$", re.M)


@pytest.fixture
def weakened(pytester: pytest.Pytester) -> tuple[pytest.Pytester, str]:
    """A capture, then the agent weakens both tests: STOP tests_edited."""
    pytester.makepyfile(mod=BUGGY, test_mod=TESTS)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    assert pytester.runpytest("--selfheal").ret == 1
    (incident_id,) = _ids(pytester, "inbox")
    pytester.makepyfile(test_mod=WEAKENED)
    found = STATUS.search(pytester.runpytest("--selfheal").stdout.str())
    assert found and found.group(4) == "STOP tests_edited"
    return pytester, incident_id


@pytest.mark.slow
def test_after_tests_edited_show_gives_the_test_diff_and_the_next_runs_stop_again(weakened: tuple[pytest.Pytester, str]) -> None:
    p, incident_id = weakened
    # What the stop asks a person to review is there: the edited tests' diff against the
    # capture; and nothing suggests a command this incident cannot take (no patch to apply).
    shown = cli("show", incident_id, cwd=p.path)
    assert shown.returncode == 0
    assert "test edits  test_mod.py changed since the capture" in shown.stdout, shown.stdout
    assert "-    assert add(2, 3) == 5" in shown.stdout and "+    assert True" in shown.stdout
    edits = json.loads(cli("show", incident_id, "--json", cwd=p.path).stdout)["test_edits"]
    assert edits["files"] == ["test_mod.py"] and edits["not_in_git"] == [] and "--- a/test_mod.py" in edits["text"]
    point = json.loads((p.path / ".selfheal" / "error_runs" / incident_id / "run_result.json").read_text())[
        "decision_point"]
    assert not [o for o in point["options"] if "selfheal apply" in (o["command"] or "")], point
    assert "allow_test_edits" not in point["message"]
    assert "selfheal apply" not in shown.stdout and "allow_test_edits" not in shown.stdout
    for _ in range(2):
        result = p.runpytest("--selfheal")
        assert result.ret == 0  # pytest's own verdict stands
        out = result.stdout.str()
        found = GREEN_ALREADY.search(out)
        assert found, out
        assert (found.group(1), found.group(3), found.group(4)) == (incident_id, "2", "tests_edited")
        assert f"selfheal reopen {incident_id}" in out and "captured" not in out
    assert _attempts(p, incident_id)[-1]["iteration"] == 1  # nothing recorded: the same verdict
    # Committing the weakened test changes no code under test: the next run is the incident's
    # next iteration, and a pass with the test still weakened stops tests_edited again.
    git_commit_all(p.path, "weaken the tests")
    found = STATUS.search(p.runpytest("--selfheal").stdout.str())
    assert found and (found.group(1), found.group(2), found.group(4)) == (incident_id, "2", "STOP tests_edited")
    assert GREEN_ALREADY.search(p.runpytest("--selfheal").stdout.str())
    # A change of the code under test, the test still weakened: still no success.
    p.makepyfile(mod="TOUCHED = 1\n" + BUGGY)
    found = STATUS.search(p.runpytest("--selfheal").stdout.str())
    assert found and found.group(4) == "STOP tests_edited"
    assert _ids(p, "inbox") == [] and _ids(p, "resolved") == [] and _ids(p, "escalated") == [incident_id]


def test_a_test_weakened_after_a_stop_is_judged_not_a_plain_pass(stopped: pytest.Pytester) -> None:
    (earlier,) = _ids(stopped, "escalated")
    stopped.makepyfile(test_mod=WEAKENED)
    found = STATUS.search(stopped.runpytest("--selfheal").stdout.str())
    assert found and (found.group(1), found.group(4)) == (earlier, "STOP tests_edited")
    assert _ids(stopped, "resolved") == []


# --------------------------------------------------------------------------- nothing verified, nothing resolved

FLAKY_THEN_REAL = """
import os, pytest

@pytest.mark.parametrize("n", range(3))
def test_flaky(n):
    state = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"flaky_{n}.state")
    if not os.path.exists(state):
        open(state, "w").close()
        assert False, "fails on the first run only"

def test_real():
    assert 1 + 1 == 3
"""


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_failures_over_the_capture_cap_keep_the_incident_from_success(pytester: pytest.Pytester,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture keeps at most MAX_FAILURES failures (10,000; 3 here): three flaky ones are
    kept, the real one after them is not. The flaky ones pass on re-run, yet the real failure
    was never verified: not success, and the count is said where the verdict is."""
    from pytest_selfheal.junit import reader

    monkeypatch.setattr(reader, "MAX_FAILURES", 3)
    pytester.makepyfile(test_mix=FLAKY_THEN_REAL)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n*.state\n")
    git_commit_all(pytester.path, "project")
    captured = pytester.runpytest("--selfheal", "-p", "no:randomly")
    out = captured.stdout.str()
    assert "1 more failing test(s) over the capture's cap of 3 are never verified" in out, out
    (incident_id,) = _ids(pytester, "inbox")
    looped = cli("loop", incident_id, "--json", cwd=pytester.path)
    result = json.loads(looped.stdout)
    assert (result["stop_reason"], result["final_status"]) == ("unverified_failures", "escalated"), looped.stderr
    report = cli("report", incident_id, cwd=pytester.path).stdout
    assert "**Never verified**" in report and "1 failing test(s) over the capture's cap" in report


# --------------------------------------------------------------------------- a stop outlives its records

GONE = re.compile(r"^selfheal: incident (incident_\S+) iteration 1 of 3: this run's tests already stopped "
                  r"\(tests_edited\), its records are gone from the reports root \(deleted or moved outside selfheal\) "
                  r"-> STOP already_stopped$", re.M)


def _green_verdict(p: pytest.Pytester, *args: str) -> str:
    result = p.runpytest("--selfheal", *args)
    assert result.ret == 0  # pytest's own verdict stands
    return result.stdout.str()


@pytest.mark.slow
def test_a_stop_outlives_its_records_renamed_moved_pruned_or_deleted(weakened: tuple[pytest.Pytester, str]) -> None:
    """After `tests_edited`, whatever takes the incident out of the reports root, the weakened
    test's green run is that stop again, never a plain pass."""
    p, incident_id = weakened
    escalated = p.path / ".selfheal" / "error_archive" / "escalated"
    pruned = cli("prune", "--older-than", "0", cwd=p.path)
    assert f"kept {incident_id}: it stopped tests_edited" in pruned.stdout and (escalated / incident_id).is_dir()
    (escalated / incident_id).rename(escalated / "incident_renamed")
    found = GONE.search(_green_verdict(p))
    assert found and found.group(1) == incident_id
    (escalated / "incident_renamed").rename(escalated / incident_id)
    out = _green_verdict(p, "--selfheal-dir", "elsewhere")  # another reports root
    assert GONE.search(out) and f"incident {incident_id} stopped tests_edited (" in out, out
    shutil.rmtree(p.path / ".selfheal")
    out = _green_verdict(p)
    assert GONE.search(out) and "captured" not in out, out


@pytest.mark.slow
def test_a_success_over_the_stopped_tests_forgets_the_stop(weakened: tuple[pytest.Pytester, str]) -> None:
    """The records deleted, the tests restored: their new incident's honest fix forgets the old stop."""
    p, incident_id = weakened
    shutil.rmtree(p.path / ".selfheal")
    p.makepyfile(test_mod=TESTS)
    assert p.runpytest("--selfheal").ret == 1
    (fresh,) = _ids(p, "inbox")
    p.makepyfile(mod="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n")
    found = STATUS.search(_green_verdict(p))
    assert found and (found.group(1), found.group(4)) == (fresh, "STOP success")
    assert "already stopped" not in _green_verdict(p) and judging.remembered(p.path) == []


def test_a_kept_stop_whose_records_are_gone_is_no_pass_until_a_success(pytester: pytest.Pytester) -> None:
    """The cheap look of a green run: a kept `harness_changed` stop, its incident in no reports root."""
    pytester.makepyfile(test_ok="def test_ok():\n    assert True\n")
    stop = judging.RememberedStop("incident_20260101_000000_abcdef", "harness_changed", "tests/__init__.py", 2, 3)
    judging.remember_stop(pytester.path, stop)
    out = _green_verdict(pytester)
    assert ("selfheal: incident incident_20260101_000000_abcdef iteration 2 of 3: this run's tests already stopped "
            "(harness_changed), its records are gone") in out, out
    assert "incident incident_20260101_000000_abcdef stopped harness_changed (tests/__init__.py); its records" in out
    judging.remember_stop(pytester.path, replace(stop, stop_reason="success"))
    assert "already stopped" not in _green_verdict(pytester)
