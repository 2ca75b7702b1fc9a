"""A stop sticks: running again never resets a STOP (docs/loop.md "A stop sticks").

The verdict is about a failure set and a code state: after a stop, a run with the same
failures and the same code says STOP again (``already_stopped``) and captures nothing; with
the code changed it is the stopped incident's next iteration, its budget going on.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import TWO_BUGS_TESTS, cli, clone_project, events_named, git_commit_all

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


def test_after_tests_edited_the_next_runs_stop_again_not_a_plain_pass(weakened: tuple[pytest.Pytester, str]) -> None:
    p, incident_id = weakened
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
