"""The loop report (report.py): head shape, headline, semantics, escaping, caps, merge rules."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import ATTEMPT_DEFAULTS, INCIDENT_DEFAULTS
from test_report_golden import _load_script

from pytest_selfheal.errors import InputError, UsageError
from pytest_selfheal.records.report import REPORT_SCHEMA_VERSION, Report, ReportIncident, as_report
from pytest_selfheal.records.run_result import DecisionPoint
from pytest_selfheal.records.vocab import StopReason
from pytest_selfheal.report.data import IncidentRun
from pytest_selfheal.report.data import build_report as build_record
from pytest_selfheal.report.merge import merge_reports as merge_records
from pytest_selfheal.report.outcome import REASON_ORDER, deciding_incident
from pytest_selfheal.report.render import (
    GRID_MAX_COLUMNS,
    GRID_MAX_TESTS,
    MERMAID_MAX_INCIDENTS,
    REPORT_HEADING,
    code,
    render_headline,
    render_markdown,
    render_terminal,
    text,
)

GOLDEN = Path(__file__).resolve().parent / "golden_reports"

# Byte for byte: GSD plan summaries paste this section unchanged.
SPEC_HEAD = """\
## RALF Lite Loop Report

- Enabled: true
- Effective config: max_iterations=3, error_fingerprint_repeats=2, no_progress_repeats=2
- Auto tasks looped: 2
- Total retries: 3

### Task Attempts

| Task | Attempts | Stop Reason |
|------|----------|-------------|
| A1   | 1        | success |
| A2   | 3        | repeated_fingerprint |
"""


def build_report(**options: Any) -> dict[str, Any]:
    """The JSON of ``build_report``'s report (what every surface writes)."""
    return build_record(**options).to_json()


def merge_reports(reports: list[dict[str, Any]], *, names: Optional[list[str]] = None) -> dict[str, Any]:
    """The JSON of ``merge_reports`` of report JSON, each parsed first as ``read_report`` parses a file."""
    return merge_records([Report.read(r, f"shard {i}") for i, r in enumerate(reports, start=1)], names=names).to_json()


# The golden inputs' documents, parsed as the store parses them (the script that writes the expected files).
run_of = _load_script().incident_run


def golden_runs(case: str) -> list[IncidentRun]:
    doc = json.loads((GOLDEN / f"{case}.input.json").read_text(encoding="utf-8"))
    return [run_of(d) for d in doc["incidents"]]


def golden_report(case: str) -> dict[str, Any]:
    doc = json.loads((GOLDEN / f"{case}.input.json").read_text(encoding="utf-8"))
    return build_report(incidents=golden_runs(case), effective_config=doc["effective_config"], origins=doc["origins"])


# --------------------------------------------------------------------------- synthetic data

N = 0


def make_run(
    *,
    incident_id: Optional[str] = None,
    tests: Optional[list[str]] = None,
    actions: Optional[list[list[str]]] = None,
    attempts: Optional[list[dict[str, Any]]] = None,
    run_result: Optional[dict[str, Any]] = None,
    status: str = "running",
    bucket: str = "inbox",
    created_at: str = "2026-11-22T10:00:00+00:00",
    title: str = "Fix it",
) -> IncidentRun:
    """A small incident; ``attempts`` entries need only outcomes (+ failures / verification_passed)."""
    global N
    N += 1
    incident_id = incident_id or f"incident_20261122_100000_t{N:04d}"
    tests = tests if tests is not None else ["tests/test_a.py::test_one"]
    failures = [{"nodeid": t, "test": t, "fingerprint": f"fp{i:010d}", "failure_type": "TEST_ASSERTION",
                 "outcome": "failed"} for i, t in enumerate(tests)]
    # A whole incident document, as the store holds it (the report parses it).
    incident = {**INCIDENT_DEFAULTS, "incident_id": incident_id, "status": status, "created_at": created_at,
                "failures": failures}
    groups = actions if actions is not None else [tests]
    plan = {"incident_id": incident_id, "generated_at": created_at, "summary": "", "root_cause_hypotheses": [],
            "actions": [{"id": f"A{i}", "title": title, "priority": "high", "risk": "low", "target_paths": [],
                         "verification": [], "nodeids": g} for i, g in enumerate(groups, start=1)],
            "verification_commands": [], "done_criteria": []}
    records = []
    for i, a in enumerate(attempts or [], start=1):
        # A whole attempt document, as the store holds it.
        record = {**ATTEMPT_DEFAULTS, "incident_id": incident_id, "iteration": i}
        record.update(a)
        records.append(record)
    result = {"incident_id": incident_id, **run_result} if run_result is not None else None
    # The documents parsed into the report's input records.
    return run_of({"incident": incident, "plan": plan, "attempts": records, "run_result": result,
                                  "bucket": bucket})


def finished(stop_reason: str, final_status: str, loops: int, **extra: Any) -> dict[str, Any]:
    result = {"final_status": final_status, "loops_used": loops, "runtime_minutes": 0.5,
              "same_error_repeats": 1, "archived_to": None, "stop_reason": stop_reason}
    result.update(extra)
    return result


# --------------------------------------------------------------------------- head


def test_head_is_the_spec_block_byte_for_byte() -> None:
    markdown = render_markdown(golden_report("two_actions"))
    assert markdown.startswith(SPEC_HEAD)
    assert markdown[len(SPEC_HEAD):].startswith("\n### ")  # the extended sections follow


def test_headline_goes_before_the_heading_and_changes_nothing_else() -> None:
    report = golden_report("two_actions")
    plain = render_markdown(report)
    with_headline = render_markdown(report, headline=True)
    first, blank, rest = with_headline.split("\n", 2)
    assert first == ("**selfheal: escalated — stop reason `repeated_fingerprint`** "
                     "(incident_20261122_101500_ab12cd, 3 iterations)")
    assert blank == ""
    assert rest == plain
    assert rest.startswith(REPORT_HEADING + "\n")


def test_headline_variants() -> None:
    flaky = golden_report("flaky_success")
    assert render_headline(flaky) == ("**selfheal: resolved — stop reason `success`** "
                                      "(incident_20261122_090000_fl4ky1, 1 iteration, 1 flaky test)")
    planned = golden_report("planned_not_run")
    assert render_headline(planned) == ("**selfheal: planned — loop not run yet** "
                                        "(incident_20261122_110000_plan01, 0 iterations)")
    empty = build_report(incidents=[])
    assert render_headline(empty) == "**selfheal: no incidents — nothing to loop**"
    running = build_report(incidents=[make_run(attempts=[{"outcomes": {"tests/test_a.py::test_one": "failed"}}])])
    assert "running — loop not finished" in render_headline(running)


def test_head_uses_the_effective_config_and_enabled_flag() -> None:
    run = make_run()
    report = build_report(incidents=[run], effective_config={"ralf_lite": {"max_iterations": 5, "enabled": False}})
    lines = render_markdown(report).splitlines()
    assert lines[2] == "- Enabled: false"
    assert lines[3] == "- Effective config: max_iterations=5, error_fingerprint_repeats=2, no_progress_repeats=2"
    assert build_report(incidents=[run], enabled=False)["enabled"] is False
    assert build_report(incidents=[run])["enabled"] is True


def test_planned_incident_renders_not_run() -> None:
    report = golden_report("planned_not_run")
    entry = report["incidents"][0]
    assert [(t["task"], t["attempts"], t["stop_reason"]) for t in entry["tasks"]] == [("A1", 0, None), ("A2", 0, None)]
    assert (report["auto_tasks_looped"], report["total_retries"], report["stop_reason"]) == (0, 0, None)
    assert report["final_status"] == "planned"
    assert report["recommended_next_action"] == (
        "Run the loop: selfheal loop incident_20261122_110000_plan01 (or fix the code and run pytest --selfheal again)")
    markdown = render_markdown(report)
    assert "| A1   | 0        | — |" in markdown
    assert "- Stop reason: not run (the loop has not run yet)" in markdown


def test_incident_without_plan_says_so() -> None:
    run = make_run()
    bare = IncidentRun(run.incident, None, (), None, "inbox")
    report = build_report(incidents=[bare])
    assert report["incidents"][0]["tasks"] == []
    assert "selfheal loop" in report["recommended_next_action"] and "plan first" in report["recommended_next_action"]
    markdown = render_markdown(report)
    assert "|------|----------|-------------|\n\n### Stop Reason" in markdown
    assert "No plan yet" in markdown


def test_report_without_incidents() -> None:
    report = build_report(incidents=[])
    assert (report["final_status"], report["stop_reason"], report["total_retries"]) == ("no_incidents", None, 0)
    markdown = render_markdown(report, headline=True)
    assert "No incident was captured" in markdown
    assert render_terminal(report) == ["RALF Lite Loop Report: no incidents"]


# --------------------------------------------------------------------------- semantics


def test_task_attempts_count_until_all_tests_of_the_action_passed() -> None:
    a, b, c = "t.py::a", "t.py::b", "t.py::c"
    run = make_run(tests=[a, b, c], actions=[[a, b], [c]], attempts=[
        {"outcomes": {a: "passed", b: "failed", c: "failed"}, "failures": [{"fingerprint": "x"}]},
        {"outcomes": {b: "passed", c: "failed"}, "failures": [{"fingerprint": "x"}]},  # a not re-run
        {"outcomes": {c: "failed"}, "result": "stop", "stop_reason": "max_iterations"},
    ], run_result=finished("max_iterations", "escalated", 3))
    report = build_report(incidents=[run])
    tasks = report["incidents"][0]["tasks"]
    assert [(t["attempts"], t["stop_reason"], t["passed"]) for t in tasks] == [
        (2, "success", True), (3, "max_iterations", False)]
    assert report["auto_tasks_looped"] == 2
    assert report["total_retries"] == 3  # every verification iteration re-ran tests that had failed


@pytest.mark.parametrize("reason", ["unverified_failures", "tests_edited"])
def test_a_task_that_passes_at_a_stop_that_is_no_success_is_not_success(reason: str) -> None:
    a = "t.py::a"
    run = make_run(tests=[a], actions=[[a]], attempts=[
        {"outcomes": {a: "passed"}, "verification_passed": True, "result": "stop", "stop_reason": reason}],
        run_result=finished(reason, "escalated", 1))
    report = build_report(incidents=[run])
    assert [(t["attempts"], t["stop_reason"]) for t in report["incidents"][0]["tasks"]] == [(1, reason)]
    assert f"| A1   | 1        | {reason} |" in render_markdown(report)


def test_task_attempts_without_per_test_outcomes_fall_back_to_verification_passed() -> None:
    run = make_run(attempts=[{"verification_passed": False}, {"verification_passed": True, "result": "stop",
                                                               "stop_reason": "success"}])
    report = build_report(incidents=[run])
    task = report["incidents"][0]["tasks"][0]
    assert (task["attempts"], task["stop_reason"]) == (2, "success")
    # No run_result yet, but the last attempt stopped: the stop reason is known.
    assert report["stop_reason"] == "success"
    assert report["final_status"] == "running"  # no run_result: the status, not a guess


def test_action_never_verified_is_not_credited_with_the_incident_stop_reason() -> None:
    a, b = "t.py::a", "t.py::tdd"
    run = make_run(tests=[a, b], actions=[[a], [b]], attempts=[
        {"outcomes": {a: "passed"}, "verification_passed": True, "result": "stop", "stop_reason": "success"}],
        run_result=finished("success", "resolved", 1))
    tasks = build_report(incidents=[run])["incidents"][0]["tasks"]
    assert [(t["attempts"], t["stop_reason"]) for t in tasks] == [(1, "success"), (0, None)]


def test_stop_before_any_iteration_gives_the_incident_reason_to_every_task() -> None:
    report = golden_report("tooling_env")
    assert [(t["attempts"], t["stop_reason"]) for t in report["incidents"][0]["tasks"]] == [(0, "tooling_env")]
    assert report["auto_tasks_looped"] == 0


def test_flaky_action_and_fixed_tests() -> None:
    report = golden_report("flaky_success")
    entry = report["incidents"][0]
    assert entry["flaky_tests"] == ["tests/test_net.py::test_fetch_profile"]
    assert entry["tests_fixed"] == []  # passed without a code change: flaky, not fixed
    assert entry["tasks"][0]["flaky"] is True
    agent = golden_report("agent_fixed")["incidents"][0]
    assert agent["tests_fixed"] == ["tests/test_calc.py::test_add", "tests/test_calc.py::test_sub[neg]"]
    assert agent["flaky_tests"] == [] and not any(t["flaky"] for t in agent["tasks"])


def test_flaky_and_fixed_are_computed_when_no_run_result_exists() -> None:
    run = make_run(attempts=[{"outcomes": {"tests/test_a.py::test_one": "passed"}, "verification_passed": True}])
    entry = build_report(incidents=[run])["incidents"][0]
    assert entry["flaky_tests"] == ["tests/test_a.py::test_one"]
    assert entry["handoff"]["recommended_next_action"].startswith("Continue the loop: selfheal loop ")


def test_fingerprints_per_iteration_start_with_the_capture() -> None:
    entry = golden_report("two_actions")["incidents"][0]
    assert entry["fingerprints_per_iteration"] == [
        ["a0a0a0a0a0a0", "b0b0b0b0b0b0"], ["b1b1b1b1b1b1"], ["b2b2b2b2b2b2"], ["b2b2b2b2b2b2"]]
    assert [i["fingerprint_changed"] for i in entry["iterations"]] == [True, True, False]


def test_reason_order_covers_every_stop_reason() -> None:
    assert set(REASON_ORDER) - {None} == set(StopReason)
    assert REASON_ORDER[-2:] == (None, "success")


@pytest.mark.parametrize(
    ("a", "b", "worst"),
    [
        (("success", "resolved"), ("repeated_fingerprint", "escalated"), 1),
        (("replan_requested", "replan_requested"), ("max_iterations", "escalated"), 1),
        (("success", "resolved"), (None, "planned"), 1),
        ((None, "planned"), ("replan_requested", "replan_requested"), 1),
        (("tooling_env", "escalated"), ("repeated_fingerprint", "escalated"), 0),  # loop precedence
        (("max_iterations", "escalated"), ("no_progress", "escalated"), 1),
        (("repeated_fingerprint", "escalated"), ("repeated_fingerprint", "escalated"), 0),  # report order
        (("cancelled", "running"), ("success", "resolved"), 0),
    ],
)
def test_plan_level_worst_rule(a: Any, b: Any, worst: int) -> None:
    entries = [ReportIncident.from_json({"incident_id": f"i{i}", "stop_reason": r, "final_status": s,
                                         "finished": r is not None}) for i, (r, s) in enumerate((a, b))]
    chosen = deciding_incident(entries)
    assert chosen is not None and chosen.incident_id == f"i{worst}"


def test_plan_level_fields_follow_the_deciding_incident() -> None:
    good = make_run(attempts=[{"outcomes": {"tests/test_a.py::test_one": "passed"}, "verification_passed": True,
                               "result": "stop", "stop_reason": "success"}],
                    run_result=finished("success", "resolved", 1), created_at="2026-11-22T09:00:00+00:00")
    bad = make_run(attempts=[{"outcomes": {"tests/test_a.py::test_one": "failed"}, "result": "stop",
                              "stop_reason": "no_progress"}],
                   run_result=finished("no_progress", "escalated", 1), created_at="2026-11-22T11:00:00+00:00")
    report = build_report(incidents=[bad, good])
    assert [e["incident_id"] for e in report["incidents"]] == [good.incident.incident_id, bad.incident.incident_id]
    assert (report["stop_reason"], report["final_status"]) == ("no_progress", "escalated")
    assert report["deciding_incident"] == bad.incident.incident_id
    assert report["recommended_next_action"].startswith(bad.incident.incident_id + ": Regenerate the plan")


def test_same_task_ids_across_incidents_get_an_incident_label() -> None:
    one = make_run(incident_id="incident_20261122_100000_ab12cd")
    two = make_run(incident_id="incident_20261122_100000_ff12cd")  # same last 4: labels grow until unique
    report = build_report(incidents=[one, two])
    labels = [t["label"] for e in report["incidents"] for t in e["tasks"]]
    assert labels == ["A1 (…ab12cd)", "A1 (…ff12cd)"]
    assert "| A1 (…ab12cd) | 0        | — |" in render_markdown(report)
    assert [t["label"] for t in build_report(incidents=[one])["incidents"][0]["tasks"]] == ["A1"]


def test_duplicate_incidents_are_kept_once_and_order_is_deterministic() -> None:
    runs = [make_run(created_at=f"2026-11-22T10:0{i}:00+00:00") for i in range(5)]
    baseline = build_report(incidents=runs)
    shuffled = runs[:] + [runs[0]]
    random.Random(4).shuffle(shuffled)
    again = build_report(incidents=shuffled)
    assert again == baseline
    assert render_markdown(again) == render_markdown(baseline)


# --------------------------------------------------------------------------- config


def test_config_origins_and_fallbacks() -> None:
    run = make_run(run_result=finished("success", "resolved", 0, effective_config={"ralf_lite": {"max_iterations": 7}}))
    report = build_report(incidents=[run])
    assert report["effective_config"]["max_iterations"] == 7
    assert report["origins"]["max_iterations"] == "run_result.json"
    assert report["origins"]["no_progress_repeats"] == "default"
    given = build_report(incidents=[run], effective_config={"max_iterations": 4},
                         origins={"ralf_lite.max_iterations": ".planning/config.json"})
    assert given["effective_config"]["max_iterations"] == 4
    assert given["effective_config"]["apply_to"] == {"auto_tasks": True, "autonomous_plans": True, "tdd_tasks": False}
    assert given["origins"]["max_iterations"] == ".planning/config.json"
    markdown = render_markdown(given)
    assert "| `max_iterations` | `4` | .planning/config.json |" in markdown
    # The incident ran with 7: said below the table.
    assert "ran with `max_iterations=7` (from its run_result.json)" in markdown


# --------------------------------------------------------------------------- escaping and caps


def test_code_spans_survive_backticks() -> None:
    assert code("plain") == "`plain`"
    assert code("a`b") == "``a`b``"
    assert code("`x`") == "`` `x` ``"
    assert code("") == "—"
    assert code("two\nlines") == "`two lines`"


def test_text_is_one_line_without_raw_html() -> None:
    assert text("a\nb\r\n  c") == "a b c"
    assert text("<!-- selfheal-report -->") == "&lt;!-- selfheal-report --&gt;"
    assert text("x" * 500).endswith("…") and len(text("x" * 500)) == 200
    assert text("fixture @pytest.fixture, mail a@b") == "fixture @\u200bpytest.fixture, mail a@\u200bb"
    assert code("@pytest.fixture") == "`@pytest.fixture`"  # code spans never notify


def test_table_cells_are_escaped() -> None:
    nasty = "title | with pipe\nand `tick` <!-- marker -->"
    # Two tasks: the Tasks table names their tests (one task leaves that to the grid).
    run = make_run(tests=["t.py::test_x[a|b]", "t.py::y"], actions=[["t.py::test_x[a|b]"], ["t.py::y"]], title=nasty)
    markdown = render_markdown(build_report(incidents=[run]))
    row = next(line for line in markdown.splitlines() if line.startswith("| A1 | title"))
    assert row == ("| A1 | title \\| with pipe and \\`tick\\` &lt;!-- marker --&gt; | `t.py::test_x[a\\|b]` | 0 | "
                   "not run | no |")
    assert "<!--" not in markdown
    # Every table row has the same number of unescaped pipes as its header.
    for block in markdown.split("\n\n"):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        if rows:
            counts = {line.replace("\\|", "").count("|") for line in rows}
            assert len(counts) == 1, block


def test_grid_is_capped() -> None:
    tests = [f"tests/test_many.py::test_{i:02d}" for i in range(GRID_MAX_TESTS + 5)]
    # Each test its own outcomes in the shown iterations (bit i % 9 of j): no two share a row.
    attempts = [{"outcomes": {t: ("failed" if (j >> (i % 9)) & 1 else "passed") for j, t in enumerate(tests)}}
                for i in range(12)]
    report = build_report(incidents=[make_run(tests=tests, attempts=attempts)])
    markdown = render_markdown(report)
    grid = markdown.split("### Iterations × Tests\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert grid[0] == "| Test | capture | " + " | ".join(str(i) for i in range(4, 13)) + " |"
    assert len(grid[0].split("|")) - 2 == 1 + GRID_MAX_COLUMNS
    assert len(grid) == 2 + GRID_MAX_TESTS
    assert "… 5 more tests not shown; … 3 earlier iterations not shown." in markdown


def test_grid_symbols() -> None:
    outcomes = {"t.py::p": "passed", "t.py::f": "failed", "t.py::e": "error", "t.py::s": "skipped", "t.py::m": "missing"}
    run = make_run(tests=["t.py::f"], attempts=[{"outcomes": outcomes}])
    markdown = render_markdown(build_report(incidents=[run]))
    assert "| `t.py::f` | ❌ | ❌ |" in markdown
    assert "| `t.py::e` | — | ❌ |" in markdown
    assert "| `t.py::m` | — | ⚠️ |" in markdown
    assert "| `t.py::p` | — | ✅ |" in markdown
    assert "| `t.py::s` | — | ⚠️ |" in markdown


def test_mermaid_is_small_and_optional() -> None:
    report = golden_report("two_actions")
    assert "```mermaid\nflowchart LR\n" in render_markdown(report)
    assert "```mermaid" not in render_markdown(report, mermaid=False)
    many = build_report(incidents=[make_run() for _ in range(MERMAID_MAX_INCIDENTS + 1)])
    assert "```mermaid" not in render_markdown(many)
    assert f"Omitted for more than {MERMAID_MAX_INCIDENTS} incidents" in render_markdown(many)
    long_run = make_run(attempts=[{"outcomes": {"tests/test_a.py::test_one": "failed"}} for _ in range(14)])
    chart = render_markdown(build_report(incidents=[long_run])).split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert 'skip["4 earlier iterations"]' in chart and "i14" in chart and "i4[" not in chart
    # An attempt record only has a known mode; a report read back from a file may hold anything.
    hostile = build_report(incidents=[make_run(attempts=[{"outcomes": {}, "mode": "verify"}])])
    hostile["incidents"][0]["iterations"][0]["mode"] = 'x"]; click c0 call alert()'
    assert 'click c0 call alert()"' not in render_markdown(hostile)


def test_extra_sections_are_appended() -> None:
    report = golden_report("flaky_success")
    markdown = render_markdown(report, extra_sections=[{"title": "Coverage", "markdown": "Line coverage: 91%\n"}])
    assert markdown.endswith("\n### Coverage\n\nLine coverage: 91%\n")


def test_terminal_lines_are_compact() -> None:
    lines = render_terminal(golden_report("two_actions"))
    assert lines[0] == ("RALF Lite Loop Report: escalated, stop reason repeated_fingerprint "
                        "(1 incident, 3 retries)")
    assert lines[1] == ("  incident_20261122_101500_ab12cd: escalated (repeated_fingerprint) after 3 iterations: "
                        "A1 1x success, A2 3x repeated_fingerprint")
    assert lines[-1].startswith("  next: Investigate manually")
    assert len(lines) <= 6 and all("\n" not in line for line in lines)
    flaky = render_terminal(golden_report("flaky_success"))
    assert "  flaky: tests/test_net.py::test_fetch_profile" in flaky


# --------------------------------------------------------------------------- JSON, validation, merge


def test_report_json_round_trips_through_validation() -> None:
    report = golden_report("two_actions")
    text_form = json.loads(json.dumps(report))
    assert Report.read(text_form).to_json() == report
    assert report["schema_version"] == REPORT_SCHEMA_VERSION


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda r: r.update(schema_version=2), "unsupported report schema_version 2"),
        (lambda r: r.update(schema_version=True), "schema_version true"),
        (lambda r: r.pop("incidents"), "field incidents: required field missing"),
        (lambda r: r.update(incidents={}), "field incidents: expected array, got object"),
        (lambda r: r["incidents"][0].pop("tasks"), r"incidents\[0\].tasks"),
        (lambda r: r["incidents"][0]["tasks"][0].update(attempts="3"), r"tasks\[0\].attempts"),
        (lambda r: r["incidents"][0].update(loops_used="3"),
         r"^shard.json: invalid report: field incidents\[0\].loops_used: expected integer, got string$"),
        (lambda r: r["incidents"].append("x"), r"field incidents\[1\]: expected object, got string$"),
        (lambda r: r["incidents"][0]["iterations"][0].update(outcomes=[]),
         r"field incidents\[0\].iterations\[0\].outcomes: expected object, got array$"),
        (lambda r: r.update(enabled="yes"), "field enabled: expected boolean, got string$"),
        (lambda r: r.update(origins=None), "field origins: expected object, got null$"),
        # The missing key is named before a bad value; values in the document's order.
        (lambda r: r.update(enabled=1, title=None) or r.pop("stop_reason"), "field stop_reason: required field missing$"),
    ],
)
def test_validate_report_names_the_problem(mutate: Any, needle: str) -> None:
    report = copy.deepcopy(golden_report("two_actions"))
    mutate(report)
    with pytest.raises(InputError, match=needle):
        Report.read(report, "shard.json")
    with pytest.raises(InputError, match="^shard.json: expected a JSON object"):
        Report.read([], "shard.json")


@pytest.mark.parametrize("case", sorted(p.name[: -len(".expected.json")] for p in GOLDEN.glob("*.expected.json")))
def test_a_report_read_back_is_the_same_report(case: str) -> None:
    # One set of records is built, written and read back: a file comes back key for key
    # (the run result's decision point with its context, each failure's triage evidence).
    text_form = (GOLDEN / f"{case}.expected.json").read_text(encoding="utf-8")
    report = Report.read(json.loads(text_form), case)
    assert json.dumps(report.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n" == text_form
    assert Report.read(json.loads(text_form), case) == report
    # And it renders as the report it was built as.
    given = json.loads((GOLDEN / f"{case}.input.json").read_text(encoding="utf-8"))
    markdown = render_markdown(report, headline=bool(given.get("render", {}).get("headline")),
                               extra_sections=given.get("extra_sections", ()))
    assert markdown == (GOLDEN / f"{case}.expected.md").read_text(encoding="utf-8")


def test_a_config_read_back_renders_as_built() -> None:
    # A file's config is held frozen: an empty object and objects in a list still render as JSON.
    built = build_record(incidents=[], effective_config={"weird": {}, "lst": [{"a": 1}]},
                         origins={"weird": "pyproject.toml", "lst": "pyproject.toml"})
    back = Report.read(json.loads(json.dumps(built.to_json())))
    markdown = render_markdown(back)
    assert "| `weird` | `{}` | pyproject.toml |" in markdown and '`[{"a": 1}]`' in markdown
    assert markdown == render_markdown(built)


def test_a_file_read_back_reads_integral_floats_as_counts() -> None:
    report = golden_report("two_actions")
    report["incidents"][0]["loops_used"] = 3.0  # what JSON Schema counts as an integer
    report["incidents"][0]["tasks"][1]["attempts"] = 3.0
    merged = merge_reports([report])
    assert merged["total_retries"] == 3 and merged["incidents"][0]["loops_used"] == 3
    assert [t["attempts"] for t in merged["incidents"][0]["tasks"]] == [1, 3]


def test_merge_keeps_the_keys_of_a_newer_version() -> None:
    newer = golden_report("two_actions")
    entry = newer["incidents"][0]
    entry["blame"] = {"commit": "abc1234"}
    entry["tasks"][0]["owner"] = "team-a"
    entry["iterations"][0]["cpu_seconds"] = 1.5
    merged = merge_reports([newer, golden_report("flaky_success")], names=["new", "old"])
    kept = merged["incidents"][0]
    assert kept["blame"] == {"commit": "abc1234"}
    assert kept["tasks"][0]["owner"] == "team-a" and kept["iterations"][0]["cpu_seconds"] == 1.5
    assert "owner" not in merged["incidents"][1]["tasks"][0]
    # A shard's own head (its ``ci`` block, say) is the shard's: the merge derives its own.
    assert "ci" not in merge_reports([{**newer, "ci": {"final_status": "escalated"}}])
    assert Report.read({**newer, "ci": {"final_status": "x"}}).extra == {"ci": {"final_status": "x"}}


def test_merge_rules() -> None:
    flaky = golden_report("flaky_success")
    det = golden_report("deterministic_repeated_fingerprint")
    other = build_report(incidents=golden_runs("deterministic_repeated_fingerprint"),
                         effective_config={"max_iterations": 5, "enabled": False})
    merged = merge_reports([flaky, det, other], names=["a", "b", "c"])
    assert [e["incident_id"] for e in merged["incidents"]] == [
        "incident_20261122_090000_fl4ky1", "incident_20261122_093000_det001"]  # deduplicated, shard order
    assert merged["total_retries"] == 2 and merged["auto_tasks_looped"] == 2
    assert (merged["stop_reason"], merged["final_status"]) == ("repeated_fingerprint", "escalated")
    assert merged["effective_config"] == flaky["effective_config"]
    assert merged["config_differences"] == [
        {"shard": "c", "keys": ["enabled", "max_iterations"], "values": {"enabled": False, "max_iterations": 5}}]
    assert [s["duplicates"] for s in merged["shards"]] == [[], [], ["incident_20261122_093000_det001"]]
    assert [t["label"] for e in merged["incidents"] for t in e["tasks"]] == ["A1 (…fl4ky1)", "A1 (…det001)"]
    markdown = render_markdown(merged)
    assert "- Shard c ran with `enabled=false`, `max_iterations=5`" in markdown
    off = merge_reports([flaky, build_report(incidents=[], enabled=False)], names=["a", "off"])
    assert off["config_differences"] == [{"shard": "off", "keys": ["(enabled)"], "values": {"(enabled)": False}}]
    assert "1 incident already in an earlier shard" in markdown
    # The inputs are not modified, and merging a merged report keeps its notes.
    assert flaky == golden_report("flaky_success")
    again = merge_reports([merged], names=["all"])
    assert again["config_differences"][0]["shard"] == "all / c"
    assert default_names_ok()


def default_names_ok() -> bool:
    merged = merge_reports([golden_report("flaky_success"), golden_report("agent_fixed")])
    return [s["name"] for s in merged["shards"]] == ["shard 1", "shard 2"]


def test_merge_all_resolved_stays_resolved() -> None:
    merged = merge_reports([golden_report("flaky_success"), golden_report("agent_fixed")])
    assert (merged["stop_reason"], merged["final_status"]) == ("success", "resolved")


def test_merge_errors() -> None:
    with pytest.raises(UsageError, match="nothing to merge"):
        merge_reports([])
    with pytest.raises(UsageError, match="1 names for 2 reports"):
        merge_reports([golden_report("flaky_success")] * 2, names=["x"])
    with pytest.raises(InputError, match="^shard 2: unsupported report schema_version"):
        merge_reports([golden_report("flaky_success"), {"schema_version": 9}], names=["a", "b"])


def test_terminal_line_of_a_loop_in_progress() -> None:
    run = make_run(attempts=[{"outcomes": {"tests/test_a.py::test_one": "failed"}}])
    lines = render_terminal(build_report(incidents=[run]))
    assert lines[0] == "RALF Lite Loop Report: running, loop not finished (1 incident, 1 retry)"
    assert lines[1].endswith(": running (not finished) after 1 iteration: A1 1x not run")
    assert lines[-1] == f"  next: Continue the loop: selfheal loop {run.incident.incident_id}"


def test_every_json_field_is_documented() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "report.md").read_text(encoding="utf-8")
    report = golden_report("max_iterations_progress")
    entry = report["incidents"][0]
    fields = set(report) | set(entry) | set(entry["tasks"][0]) | set(entry["iterations"][0])
    fields |= set(merge_reports([report])["shards"][0])
    missing = sorted(f for f in fields if f"`{f}`" not in doc)
    assert not missing, f"docs/report.md does not mention {missing}"


# --------------------------------------------------------------------------- records


@pytest.mark.parametrize("case", ["two_actions", "flaky_success", "triage_pull_request", "replan_requested"])
def test_render_reads_records_parsed_once(case: str) -> None:
    # The renderer parses the JSON into records once; given the records, it renders the same bytes.
    report = golden_report(case)
    records = Report.from_json(report)
    assert as_report(records) is records
    assert render_markdown(records, headline=True) == render_markdown(report, headline=True)
    assert render_terminal(records) == render_terminal(report)
    assert render_headline(records) == render_headline(report)


def test_report_records_read_odd_fields_as_defaults() -> None:
    report = golden_report("two_actions")
    entry = copy.deepcopy(report["incidents"][0])
    entry.update(tasks=[{"task": "A1", "attempts": "2", "stop_reason": 3, "nodeids": ["a", 1]}],
                 iterations=[{"iteration": "x", "outcomes": {"a": "passed", "b": None}, "progress": 0}],
                 runtime_minutes=True, decision_point={"reason": "no_progress", "options": ["retry", {"id": "o1"}]})
    parsed = ReportIncident.from_json(entry)
    task, iteration = parsed.tasks[0], parsed.iterations[0]
    assert (task.label, task.attempts, task.stop_reason, task.nodeids) == ("A1", 0, None, ("a",))
    assert (iteration.iteration, dict(iteration.outcomes), iteration.progress) == (None, {"a": "passed"}, False)
    assert parsed.runtime_minutes is None
    assert parsed.decision_point is not None
    assert [(o.label, o.id) for o in parsed.decision_point.options] == [("retry", ""), ("o1", "o1")]
    assert isinstance(parsed.decision_point, DecisionPoint)  # the run result's record, declared once


def test_terminal_line_of_a_capture_names_no_attempt_count() -> None:
    # Captured, no iteration yet: its task was not run, not "run 0 times".
    lines = render_terminal(build_report(incidents=[make_run(attempts=[])]))
    assert lines[1].endswith(": A1 not run") and "0x" not in lines[1], lines
