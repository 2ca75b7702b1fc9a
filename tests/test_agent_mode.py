"""Agent-in-the-loop: the next `pytest --selfheal` run is the open incident's next iteration."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import TWO_BUGS_TESTS, cli, git_commit_all
from schema_check import assert_valid

from pytest_selfheal.history.db import HistoryDB

TESTS = TWO_BUGS_TESTS
STATUS_LINE = re.compile(
    r"^selfheal: incident (?P<id>incident_\S+) iteration (?P<k>\d+) of (?P<n>\d+): "
    r"fingerprint (?P<fp>same|changed), progress (?P<progress>yes|no) -> (?P<verdict>CONTINUE|STOP(?: (?P<reason>\w+))?)"
    r"(?: \(.* changed since the capture\))?$",
    re.M,
)


def _root(p: pytest.Pytester) -> Path:
    return p.path / ".selfheal"


def _incident_dirs(p: pytest.Pytester, bucket: str) -> list[Path]:
    base = _root(p) / ("error_inbox" if bucket == "inbox" else f"error_archive/{bucket}")
    return sorted(base.glob("incident_*")) if base.exists() else []


def _attempts(p: pytest.Pytester, incident_id: str) -> list[dict[str, Any]]:
    runs = _root(p) / "error_runs" / incident_id
    return [json.loads(f.read_text()) for f in sorted(runs.glob("attempt_*.json"))]


def _commit_all(p: pytest.Pytester) -> None:
    (p.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(p.path, "project")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(mod="def add(a, b):\n    return a - b\n\ndef sub(a, b):\n    return a - b\n", test_mod=TESTS)
    _commit_all(pytester)
    result = pytester.runpytest("--selfheal")
    assert result.ret == 1
    assert len(_incident_dirs(pytester, "inbox")) == 1
    return pytester


def test_fixed_between_runs_resolves_and_archives(project: pytest.Pytester) -> None:
    (incident,) = _incident_dirs(project, "inbox")
    project.makepyfile(mod="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n")
    result = project.runpytest("--selfheal")
    assert result.ret == 0
    match = STATUS_LINE.search(result.stdout.str())
    assert match, result.stdout.str()
    assert match["id"] == incident.name and match["k"] == "1" and match["n"] == "3"
    assert match["verdict"] == "STOP success" and match["progress"] == "yes"
    assert _incident_dirs(project, "inbox") == []
    assert [p.name for p in _incident_dirs(project, "resolved")] == [incident.name]
    (attempt,) = _attempts(project, incident.name)
    assert_valid("attempt", attempt)
    assert attempt["mode"] == "agent" and attempt["verification_passed"] is True
    result_doc = json.loads((_root(project) / "error_runs" / incident.name / "run_result.json").read_text())
    assert_valid("run_result", result_doc)
    assert result_doc["final_status"] == "resolved" and result_doc["stop_reason"] == "success"
    assert "test_mod.py::test_add" in result_doc["tests_fixed"]
    assert result_doc["flaky_tests"] == []  # the code changed: a fix, not a flake


def test_every_agent_mode_run_records_in_the_history(project: pytest.Pytester) -> None:
    project.runpytest("--selfheal")  # the same failure again: agent iteration 1
    project.makepyfile(mod="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n")
    project.runpytest("--selfheal")  # fixed: agent iteration 2, the incident resolves
    with HistoryDB.open(_root(project), create=False) as db:
        runs = list(db.runs())
    assert [(info.kind, info.iteration) for info, _ in runs] == [("capture", None), ("agent", 1), ("agent", 2)]
    (info, outcomes) = runs[1]
    assert info.run_key == f"agent:{info.incident_id}:1" and info.tests_run == 1
    assert [(o.nodeid, o.outcome) for o in outcomes] == [("test_mod.py::test_add", "failed")]
    assert outcomes[0].fingerprint == runs[0][1][0].fingerprint
    assert [(o.nodeid, o.outcome) for o in runs[2][1]] == [("test_mod.py::test_add", "passed")]


def test_same_failure_again_after_a_change_stops_by_repetition(project: pytest.Pytester) -> None:
    (incident,) = _incident_dirs(project, "inbox")
    project.makepyfile(mod="TRIED = 1\ndef add(a, b):\n    return a - b\n\ndef sub(a, b):\n    return a - b\n")
    result = project.runpytest("--selfheal")
    match = STATUS_LINE.search(result.stdout.str())
    assert match and match["fp"] == "same" and match["verdict"] == "STOP repeated_fingerprint"
    assert [p.name for p in _incident_dirs(project, "escalated")] == [incident.name]
    assert _incident_dirs(project, "inbox") == []  # no second incident for the same failure


def test_an_unchanged_run_is_no_attempt(project: pytest.Pytester) -> None:
    (incident,) = _incident_dirs(project, "inbox")
    # The code as at the capture: an iteration with nothing tried; the budget goes on.
    out = project.runpytest("--selfheal").stdout.str()
    match = STATUS_LINE.search(out)
    assert match and (match["k"], match["verdict"]) == ("1", "CONTINUE"), out
    assert (f"selfheal: incident {incident.name}: nothing changed since the last run: counted as an iteration with "
            "nothing tried; a second such run in a row stops (no_fix_found)") in out
    # The second in a row stops: the empty-diff stop.
    out = project.runpytest("--selfheal").stdout.str()
    match = STATUS_LINE.search(out)
    assert match and (match["k"], match["verdict"]) == ("2", "STOP no_fix_found"), out
    assert [p.name for p in _incident_dirs(project, "escalated")] == [incident.name]
    attempts = _attempts(project, incident.name)
    for attempt in attempts:
        assert_valid("attempt", attempt)
    assert [(a["repair"]["provider"], a["repair"]["result"]) for a in attempts] == [("agent", "no_fix_found")] * 2
    # A change between two runs is an attempt again: not "nothing changed".
    assert cli("reopen", incident.name, cwd=project.path).returncode == 0
    project.makepyfile(mod="def add(a, b):\n    return a * b\n\ndef sub(a, b):\n    return a - b\n")
    out = project.runpytest("--selfheal").stdout.str()
    assert "nothing changed" not in out and STATUS_LINE.search(out), out


@pytest.mark.parametrize("how", ["deselect", "keyword", "rename", "delete", "skip"])
def test_a_failing_test_that_no_longer_runs_is_not_verified_and_reaches_a_stop(project: pytest.Pytester,
                                                                              how: str) -> None:
    (incident,) = _incident_dirs(project, "inbox")
    args: list[str] = []
    if how == "deselect":
        args = ["--deselect", "test_mod.py::test_add"]
    elif how == "keyword":
        args = ["-k", "not test_add"]
    elif how == "rename":
        project.makepyfile(test_mod=TESTS.replace("def test_add", "def test_add_renamed"))
    elif how == "delete":
        (project.path / "test_mod.py").unlink()
        project.makepyfile(test_other="def test_other():\n    assert True\n")
    else:
        project.makepyfile(test_mod="import pytest\n\n" + TESTS.replace("def test_add", "@pytest.mark.skip\ndef test_add"))
    verdicts = []
    for run in range(1, 4):
        # Each run changes the code, so each one is an attempt: only the budget stops them.
        project.makepyfile(mod=f"TRY = {run}\ndef add(a, b):\n    return a - b\n\ndef sub(a, b):\n    return a - b\n")
        out = project.runpytest("--selfheal", *args).stdout.str()
        match = STATUS_LINE.search(out)
        assert match and match["id"] == incident.name and match["k"] == str(run), out
        label = "skipped" if how == "skip" else "not collected or deselected"
        assert f"selfheal: incident {incident.name}: 1 {label} (test_mod.py::test_add): verified nothing" in out, out
        verdicts.append(match["verdict"])
        if match["verdict"].startswith("STOP"):
            break
    assert verdicts[-1] == "STOP max_iterations" and len(verdicts) == 3, verdicts  # never a success, never endless
    outcome = "skipped" if how == "skip" else "missing"
    assert [a["outcomes"]["test_mod.py::test_add"] for a in _attempts(project, incident.name)] == [outcome] * 3


def test_code_change_that_still_fails_continues(project: pytest.Pytester) -> None:
    project.makepyfile(mod="def add(a, b):\n    return a * b\n\ndef sub(a, b):\n    return a - b\n")
    result = project.runpytest("--selfheal")
    match = STATUS_LINE.search(result.stdout.str())
    assert match and match["fp"] == "changed" and match["progress"] == "yes" and match["verdict"] == "CONTINUE"
    (incident,) = _incident_dirs(project, "inbox")
    assert (incident / "status.txt").read_text().strip() == "running"


def test_subset_run_keeps_unrun_failures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(mod="def add(a, b):\n    return a - b\n\ndef sub(a, b):\n    return a + b\n", test_mod=TESTS)
    _commit_all(pytester)
    pytester.runpytest("--selfheal")
    (incident,) = _incident_dirs(pytester, "inbox")
    pytester.makepyfile(mod="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a + b\n")
    result = pytester.runpytest("--selfheal", "test_mod.py::test_add")
    match = STATUS_LINE.search(result.stdout.str())
    assert match and match["verdict"] == "CONTINUE"  # test_sub was not run: no success claimed
    (attempt,) = _attempts(pytester, incident.name)
    assert attempt["outcomes"] == {"test_mod.py::test_add": "passed", "test_mod.py::test_sub": "failed"}


def test_new_failure_waits_while_incident_open(project: pytest.Pytester) -> None:
    project.makepyfile(test_new="def test_new():\n    assert 1 == 2\n")
    project.makepyfile(mod="def add(a, b):\n    return a * b\n\ndef sub(a, b):\n    return a - b\n")
    result = project.runpytest("--selfheal")
    assert "new failure(s) outside the open incident" in result.stdout.str()
    (incident,) = _incident_dirs(project, "inbox")
    (attempt,) = _attempts(project, incident.name)
    assert [f["nodeid"] for f in attempt["new_failures"]] == ["test_new.py::test_new"]


def test_run_not_touching_the_selection_captures_normally(project: pytest.Pytester) -> None:
    project.makepyfile(test_new="def test_new():\n    assert 1 == 2\n")
    project.runpytest("--selfheal", "test_new.py")
    assert len(_incident_dirs(project, "inbox")) == 2


def test_an_exitfirst_run_counts_only_the_tests_that_ran(pytester: pytest.Pytester) -> None:
    # Three failing tests; the agent fixes the second and runs with -x: the first fails again
    # and pytest stops, so the second and third never run.
    pytester.makepyfile(
        mod="def f(x):\n    return x + 1\n\ndef g(x):\n    return x\n",
        test_x="from mod import f, g\n\n"
               "def test_a():\n    assert f(1) == 3\n\n"
               "def test_b():\n    assert g(2) == 4\n\n"
               "def test_c():\n    assert f(3) == 5\n",
    )
    _commit_all(pytester)
    pytester.runpytest("--selfheal")
    (incident,) = _incident_dirs(pytester, "inbox")
    pytester.makepyfile(mod="def f(x):\n    return x + 1\n\ndef g(x):\n    return x * 2\n")
    result = pytester.runpytest("--selfheal", "-x")
    out = result.stdout.str()
    match = STATUS_LINE.search(out)
    # test_b is fixed but did not run: neither passed nor gone, and the run is not a success.
    assert match and match["verdict"] != "STOP success", out
    assert f"incident {incident.name}: this run ran 1 of 3 selected tests; 2 not run" in out
    (attempt,) = _attempts(pytester, incident.name)
    assert_valid("attempt", attempt)
    assert sorted(attempt["not_run"]) == ["test_x.py::test_b", "test_x.py::test_c"]
    assert attempt["outcomes"] == {n: "failed" for n in ("test_x.py::test_a", "test_x.py::test_b", "test_x.py::test_c")}
    assert attempt["verification_passed"] is False
    # The report counts an iteration for an action only when it ran that action's tests.
    code, report_json, err = cli("report", incident.name, "--format", "json", "--dir", str(_root(pytester)))
    assert code == 0, err
    report = json.loads(report_json)
    (entry,) = report["incidents"]
    tasks = {tuple(sorted(t["nodeids"])): t["attempts"] for t in entry["tasks"]}
    # test_a and test_c share their root cause (f) and are one action: it ran (test_a).
    assert tasks == {("test_x.py::test_a", "test_x.py::test_c"): 1, ("test_x.py::test_b",): 0}
    assert entry["iterations"][0]["outcomes"] == {"test_x.py::test_a": "failed"}


def test_an_agent_run_with_other_options_is_not_an_iteration(pytester: pytest.Pytester) -> None:
    # Like with like: captured with a conftest option, an agent run without it fails on a
    # different error ("run with --target"); that is not the incident's next iteration.
    pytester.makeconftest(
        "import pytest\n\n"
        "def pytest_addoption(parser):\n    parser.addoption('--target', default=None)\n\n"
        "@pytest.fixture\ndef target(request):\n"
        "    value = request.config.getoption('--target')\n"
        "    if value is None:\n        pytest.fail('run with --target')\n    return value\n"
    )
    pytester.makepyfile(test_deploy="def test_deploy(target):\n    assert target == 'production'\n")
    _commit_all(pytester)
    assert pytester.runpytest("--selfheal", "--target=staging").ret == 1
    (incident,) = _incident_dirs(pytester, "inbox")
    result = pytester.runpytest("--selfheal")
    out = result.stdout.str()
    assert (f"selfheal: incident {incident.name}: this run is not counted as an iteration: its options (none) "
            "differ from the capture's (--target=staging)") in out
    assert _attempts(pytester, incident.name) == [] and not STATUS_LINE.search(out)
    assert _incident_dirs(pytester, "inbox") == [incident]  # and no second incident for it
    result = pytester.runpytest("--selfheal", "--target=staging")
    match = STATUS_LINE.search(result.stdout.str())
    assert match and match["id"] == incident.name
    (attempt,) = _attempts(pytester, incident.name)
    assert attempt["mode"] == "agent"


def test_an_agent_that_weakens_the_test_is_never_a_success(project: pytest.Pytester) -> None:
    (incident,) = _incident_dirs(project, "inbox")
    # The agent "fixes" test_add by weakening it, and fixes nothing in the code.
    project.makepyfile(test_mod=TESTS.replace("assert add(2, 3) == 5", "assert True or add(2, 3) == 5")
                       .replace("assert sub(5, 3) == 2", "assert True"))
    result = project.runpytest("--selfheal")
    assert result.ret == 0  # pytest's own verdict stands: the weakened tests pass
    match = STATUS_LINE.search(result.stdout.str())
    assert match and match["verdict"] == "STOP tests_edited", result.stdout.str()
    assert [p.name for p in _incident_dirs(project, "escalated")] == [incident.name]
    (attempt,) = _attempts(project, incident.name)
    assert attempt["tests_edited"] == ["test_mod.py"] and attempt["verification_passed"] is True
    report = cli("report", incident.name, cwd=project.path)
    assert "**Tests edited**" in report.stdout and "`test_mod.py`" in report.stdout, report.stdout
