"""Agent-in-the-loop: the next `pytest --selfheal` run is the open incident's next iteration."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

import pytest
from helpers import git_commit_all
from schema_check import assert_valid

from pytest_selfheal.history.db import HistoryDB

TESTS = """
from mod import add, sub

def test_add():
    assert add(2, 3) == 5

def test_sub():
    assert sub(5, 3) == 2

def test_other():
    assert True
"""
STATUS_LINE = re.compile(
    r"^selfheal: incident (?P<id>incident_\S+) iteration (?P<k>\d+) of (?P<n>\d+): "
    r"fingerprint (?P<fp>same|changed), progress (?P<progress>yes|no) -> (?P<verdict>CONTINUE|STOP(?: (?P<reason>\w+))?)$",
    re.M,
)


def _root(p: pytest.Pytester) -> Path:
    return p.path / ".selfheal"


def _incident_dirs(p: pytest.Pytester, bucket: str) -> List[Path]:
    base = _root(p) / ("error_inbox" if bucket == "inbox" else f"error_archive/{bucket}")
    return sorted(base.glob("incident_*")) if base.exists() else []


def _attempts(p: pytest.Pytester, incident_id: str) -> List[Dict[str, Any]]:
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
    project.runpytest("--selfheal")  # fixed: nothing open any more, a plain green run
    with HistoryDB.open(_root(project), create=False) as db:
        runs = list(db.runs())
    assert [(info.kind, info.iteration) for info, _ in runs] == [("capture", None), ("agent", 1)]
    (info, outcomes) = runs[1]
    assert info.run_key == f"agent:{info.incident_id}:1" and info.tests_run == 1
    assert [(o.nodeid, o.outcome) for o in outcomes] == [("test_mod.py::test_add", "failed")]
    assert outcomes[0].fingerprint == runs[0][1][0].fingerprint


def test_same_failure_again_stops_by_repetition(project: pytest.Pytester) -> None:
    (incident,) = _incident_dirs(project, "inbox")
    result = project.runpytest("--selfheal")
    match = STATUS_LINE.search(result.stdout.str())
    assert match and match["fp"] == "same" and match["verdict"] == "STOP repeated_fingerprint"
    assert [p.name for p in _incident_dirs(project, "escalated")] == [incident.name]
    assert _incident_dirs(project, "inbox") == []  # no second incident for the same failure


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
