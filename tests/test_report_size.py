"""The markdown report in proportion to its failures: ``selfheal report`` of an incident with
28, 300 or 10,000 failures stays a few KiB; the JSON keeps every test (docs/report.md "Size")."""

from __future__ import annotations

import copy
import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import cli

from pytest_selfheal.errors import EXIT_OK
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.store.root import Store

GOLDEN = Path(__file__).resolve().parent / "golden_reports"


def one_bug_run(count: int, *, flaky: bool = False) -> dict[str, Any]:
    """The golden flaky-success incident grown to ``count`` failures of one bug (one plan action):
    captured with a "new" triage each, then all passing at iteration 1 — fixed, or ``flaky``."""
    run: dict[str, Any] = json.loads((GOLDEN / "flaky_success.input.json").read_text(encoding="utf-8"))["incidents"][0]
    template = run["incident"]["failures"][0]
    tests = [f"tests/test_api.py::test_endpoint_{i:05d}" for i in range(count)]
    failures = []
    for i, nodeid in enumerate(tests):
        failure = copy.deepcopy(template)
        failure.update(nodeid=nodeid, test=nodeid.replace("/", ".").replace(".py::", "::"), fingerprint=f"{i:012x}",
                       triage={"label": "new", "detail": "new: never seen failing on main", "base_branch": "main"})
        failures.append(failure)
    run["incident"]["failures"] = failures
    action = run["plan"]["actions"][0]
    action.update(nodeids=tests, fingerprints=[f["fingerprint"] for f in failures])
    attempt = run["attempts"][0]
    attempt["outcomes"] = {t: "passed" for t in tests}
    result = run["run_result"]
    result["fingerprints_per_iteration"] = [[f["fingerprint"] for f in failures], []]
    result["tests_fixed"] = tests
    result["flaky_tests"] = tests if flaky else []
    result["handoff"].update(fixed=tests, flaky_tests=result["flaky_tests"],
                             fingerprints_per_iteration=result["fingerprints_per_iteration"])
    return run


def store_run(root: Path, run: dict[str, Any]) -> str:
    """``run`` written through the real Store API (create, plan, attempts, run result, archive)."""
    store = Store(root / ".selfheal")
    incident = dataclasses.replace(Incident.from_json(run["incident"], "run"), status="new", created_at="",
                                   updated_at="", year=0, month=0, ym="", run_id="")
    created = datetime.fromisoformat(run["incident"]["created_at"]).astimezone(timezone.utc)
    incident_id = store.create_incident(incident, log_tail="E boom\n", context=RunContext(), now=created)
    store.write_plan(incident_id, Plan.from_json(run["plan"], "plan.json"), "# plan\n")
    store.set_status(incident_id, "planned")
    store.set_status(incident_id, "running")
    for attempt in run["attempts"]:
        store.write_attempt(incident_id, Attempt.from_json(attempt, "attempt"))
    store.write_run_result(incident_id, RunResult.from_json(run["run_result"], "run result"))
    store.archive(incident_id, run["run_result"]["final_status"])
    return incident_id


def report_of(tmp_path: Path, count: int, *args: str, flaky: bool = False) -> str:
    incident_id = store_run(tmp_path, one_bug_run(count, flaky=flaky))
    result = cli("report", incident_id, *args, cwd=tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    return result.stdout


def test_a_one_bug_report_names_each_test_once_per_section_that_needs_it(tmp_path: Path) -> None:
    # 28 tests of one bug, all fixed: before, 171 lines / 9.3 KB, every test listed three times.
    markdown = report_of(tmp_path, 28)
    assert len(markdown.splitlines()) <= 110 and len(markdown.encode()) <= 5_000, markdown
    # The Failures table owns the list (its first ten); the grid gives the 28 one row.
    assert markdown.count("test_endpoint_00000") == 2
    assert markdown.count("test_endpoint_00009") == 1 and "test_endpoint_00010" not in markdown
    assert "… and 18 more new failures: `selfheal report --format json` has them all." in markdown
    assert "| `tests/test_api.py::test_endpoint_00000` and 27 more with these outcomes | ❌ | ✅ |" in markdown
    assert "- All 28 captured failures" in markdown.split("### Tests Fixed Along the Way", 1)[1]
    assert "| 28 tests |" in markdown  # the one task counts its tests


@pytest.mark.parametrize("count", [300, pytest.param(10_000, marks=pytest.mark.slow)])
@pytest.mark.parametrize("flaky", [False, True])
def test_the_markdown_report_does_not_grow_with_the_failures_the_json_keeps_them(
        tmp_path: Path, count: int, flaky: bool) -> None:
    # Before: 300 failures 55-61 KB, 10,000 failures 1.7-1.9 MB of markdown.
    markdown = report_of(tmp_path, count, flaky=flaky)
    assert len(markdown.encode()) <= 5_000, len(markdown.encode())
    label = "flaky" if flaky else "new"
    assert f"… and {count - 10:,} more {label} failures: `selfheal report --format json` has them all." in markdown
    listed = markdown.split("### Flaky Tests" if flaky else "### Tests Fixed Along the Way", 1)[1]
    assert listed.split("###", 1)[0].strip().endswith(f"- All {count:,} captured failures")
    report = json.loads(cli("report", "--format", "json", cwd=tmp_path).stdout)
    entry = report["incidents"][0]
    assert len(entry["triage"]) == count
    assert len(entry["flaky_tests"] if flaky else entry["tests_fixed"]) == count


def test_many_tasks_and_new_failures_are_counted_past_the_first_ten(tmp_path: Path) -> None:
    run = one_bug_run(25)
    tests = run["plan"]["actions"][0]["nodeids"]
    template = run["plan"]["actions"][0]
    run["plan"]["actions"] = [{**template, "id": f"A{i}", "nodeids": [t], "fingerprints": [f"{i - 1:012x}"]}
                              for i, t in enumerate(tests, start=1)]
    run["attempts"][0]["new_failures"] = [{**run["incident"]["failures"][0], "nodeid": f"tests/test_new.py::t{i}",
                                           "fingerprint": f"n{i:011d}"} for i in range(15)]
    store_run(tmp_path, run)
    markdown = cli("report", cwd=tmp_path).stdout
    head = markdown.split("### Stop Reason", 1)[0]
    assert "| A10  |" in head and "| A11  |" not in head
    assert head.count("… and 15 more tasks: `selfheal report --format json` has them all.") == 1
    assert markdown.count("… and 15 more tasks:") == 2  # the head and the Tasks section
    assert "tests/test_new.py::t9`" in markdown and "tests/test_new.py::t10`" not in markdown
    assert "… and 5 more new failures: `selfheal report --format json` has them all." in markdown
    report = json.loads(cli("report", "--json", cwd=tmp_path).stdout)
    assert len(report["incidents"][0]["tasks"]) == 25 and len(report["incidents"][0]["new_failures"]) == 15
