"""``selfheal report`` and ``selfheal merge`` through the console script's ``main`` (in process) on a real store."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import SECTIONS_PLUGIN, CliResult, cli, fake_distribution

from pytest_selfheal.cli.main import main
from pytest_selfheal.errors import EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.report import REPORT_SCHEMA_VERSION, Report
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.report.render import REPORT_HEADING
from pytest_selfheal.store.root import Store

GOLDEN = Path(__file__).resolve().parent / "golden_reports"
GHOST = "incident_20990101_000000_zz"


def one_line_error(result: CliResult) -> str:
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("selfheal: error: ")
    assert result.stdout == ""
    return result.stderr.strip()


def golden_run(case: str) -> dict[str, Any]:
    doc = json.loads((GOLDEN / f"{case}.input.json").read_text(encoding="utf-8"))
    run: dict[str, Any] = doc["incidents"][0]
    return run


def store_incident(store: Store, case: str, *, archive: bool = True) -> str:
    """Replay a golden case through the real Store API: create, plan, attempts, run result, archive."""
    run = golden_run(case)
    # The golden incident as the capture hands it over: the store's fields left empty.
    incident = dataclasses.replace(Incident.from_json(run["incident"], case), status="new", created_at="",
                                   updated_at="", year=0, month=0, ym="", run_id="")
    created = datetime.fromisoformat(run["incident"]["created_at"]).astimezone(timezone.utc)
    incident_id = store.create_incident(incident, log_tail="E boom\n", context=RunContext(), now=created)
    assert incident_id == run["incident"]["incident_id"]
    store.write_plan(incident_id, Plan.from_json(run["plan"], "plan.json"), "# plan\n")
    store.set_status(incident_id, "planned")
    if not run["attempts"] and run["run_result"] is None:
        return incident_id
    store.set_status(incident_id, "running")
    for attempt in run["attempts"]:
        store.write_attempt(incident_id, Attempt.from_json(attempt, "golden attempt"))
    if run["run_result"] is not None:
        store.write_run_result(incident_id, RunResult.from_json(run["run_result"], "golden run result"))
        bucket = run["run_result"]["final_status"]
        if archive and bucket in ("resolved", "escalated"):
            store.archive(incident_id, bucket)
    return incident_id


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory whose reports root holds three incidents (resolved, escalated, planned)."""
    store = Store(tmp_path / ".selfheal")
    store_incident(store, "flaky_success")
    store_incident(store, "two_actions")
    store_incident(store, "planned_not_run")
    return tmp_path


def test_report_of_one_incident_as_json(project: Path) -> None:
    result = cli("report", "incident_20261122_101500_ab12cd", "--format", "json", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    report = json.loads(result.stdout)
    Report.read(report)
    assert report["schema_version"] == REPORT_SCHEMA_VERSION
    assert report["title"] == "RALF Lite Loop Report"
    assert (report["stop_reason"], report["final_status"]) == ("repeated_fingerprint", "escalated")
    assert (report["auto_tasks_looped"], report["total_retries"]) == (2, 3)
    entry = report["incidents"][0]
    assert (entry["bucket"], entry["status"]) == ("escalated", "escalated")
    assert entry["archived_to"] == "error_archive/escalated/incident_20261122_101500_ab12cd"
    assert [(t["task"], t["attempts"], t["stop_reason"]) for t in entry["tasks"]] == [
        ("A1", 1, "success"), ("A2", 3, "repeated_fingerprint")]
    assert report["origins"]["max_iterations"] == "default"
    # --json is the same as --format json.
    assert cli("report", "incident_20261122_101500_ab12cd", "--json", cwd=project).stdout == result.stdout
    # The store's data gives what the golden file says (the same report, built from disk).
    golden = json.loads((GOLDEN / "two_actions.expected.json").read_text(encoding="utf-8"))
    assert report == golden


def test_report_markdown_defaults_to_the_latest_incident(project: Path) -> None:
    result = cli("report", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout.startswith(REPORT_HEADING + "\n")
    assert "incident_20261122_110000_plan01" in result.stdout  # the latest by created_at: planned, not run
    assert "| A1   | 0        | — |" in result.stdout
    assert "Run the loop: selfheal loop incident_20261122_110000_plan01" in result.stdout
    headline = cli("report", "--headline", cwd=project)
    assert headline.stdout.splitlines()[0] == ("**selfheal: planned — loop not run yet** "
                                               "(incident_20261122_110000_plan01, 0 iterations)")
    assert headline.stdout.split("\n", 2)[2] == result.stdout


def test_report_without_an_id_picks_the_newest_readable_incident_and_says_so(project: Path) -> None:
    root = project / ".selfheal"
    # A folder named like an incident newer than any, with nothing readable in it (a copy, a crash).
    (root / "error_inbox" / "incident_20991231_235959_junk01").mkdir(parents=True)
    # The oldest incident, edited afterwards: a later created_at and the newest files on disk.
    old = root / "error_archive" / "resolved" / "incident_20261122_090000_fl4ky1"
    doc = json.loads((old / "incident.json").read_text(encoding="utf-8"))
    doc["created_at"] = "2027-06-01T00:00:00+00:00"
    (old / "incident.json").write_text(json.dumps(doc), encoding="utf-8")
    for path in old.rglob("*"):
        os.utime(path)
    result = cli("report", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    assert "`incident_20261122_110000_plan01`" in result.stdout  # the newest by the time in its id
    assert "incident_20261122_090000_fl4ky1" not in result.stdout and "junk01" not in result.stdout
    assert result.stderr == ("selfheal: reporting incident_20261122_110000_plan01, the newest of 4 incidents by "
                             "the time in its id (1 unreadable skipped); give an ID for another\n")
    # An id given, or --all: no choice was made, nothing to say.
    assert cli("report", "incident_20261122_090000_fl4ky1", cwd=project).stderr == ""


def test_report_of_the_only_incident_says_nothing_on_stderr(tmp_path: Path) -> None:
    store_incident(Store(tmp_path / ".selfheal"), "flaky_success")
    result = cli("report", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (EXIT_OK, "")
    assert "incident_20261122_090000_fl4ky1" in result.stdout


def test_report_all(project: Path) -> None:
    result = cli("report", "--all", "--json", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    report = json.loads(result.stdout)
    assert [e["incident_id"] for e in report["incidents"]] == [
        "incident_20261122_090000_fl4ky1", "incident_20261122_101500_ab12cd", "incident_20261122_110000_plan01"]
    assert (report["stop_reason"], report["final_status"]) == ("repeated_fingerprint", "escalated")
    assert report["total_retries"] == 4
    labels = [t["label"] for e in report["incidents"] for t in e["tasks"]]
    assert labels[:2] == ["A1 (…fl4ky1)", "A1 (…ab12cd)"]


def test_report_all_as_the_compact_terminal_text(project: Path) -> None:
    result = cli("report", "--all", "--format", "text", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("RALF Lite Loop Report: escalated, stop reason repeated_fingerprint (3 incidents, 4 retries")
    assert [line.split(":")[0].strip() for line in lines[1:4]] == [
        "incident_20261122_090000_fl4ky1", "incident_20261122_101500_ab12cd", "incident_20261122_110000_plan01"]
    assert lines[-1].startswith("  next: ") and len(lines) < 10


def test_report_output_file_and_dir(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "out" / "report.md"
    result = cli("report", "incident_20261122_090000_fl4ky1", "--dir", str(project / ".selfheal"),
                      "--output", str(target), "--headline", cwd=elsewhere)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == ""
    body = target.read_text(encoding="utf-8")
    assert body.startswith("**selfheal: resolved — stop reason `success`**")
    assert not [p.name for p in target.parent.iterdir() if p.name != "report.md"]  # no temp file left


def test_report_uses_the_project_config_and_its_origin(project: Path) -> None:
    planning = project / ".planning"
    planning.mkdir()
    (planning / "config.json").write_text(json.dumps({"workflow": {}, "ralf_lite": {"max_iterations": 5}}))
    result = cli("report", "incident_20261122_101500_ab12cd", cwd=project)
    assert "- Effective config: max_iterations=5, error_fingerprint_repeats=2, no_progress_repeats=2" in result.stdout
    assert f"| `max_iterations` | `5` | {planning / 'config.json'} |" in result.stdout
    (planning / "config.json").write_text(json.dumps({"ralf_lite": {"max_iterations": "5"}}))
    bad = cli("report", cwd=project)
    assert bad.returncode == EXIT_USAGE
    assert "max_iterations" in one_line_error(bad)


def test_report_without_incidents(tmp_path: Path) -> None:
    result = cli("report", "--json", cwd=tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    report = json.loads(result.stdout)
    assert (report["incidents"], report["final_status"]) == ([], "no_incidents")
    assert not (tmp_path / ".selfheal").exists()  # reading never creates the root


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        ([GHOST], EXIT_NOT_FOUND, f"no incident {GHOST}"),
        (["../etc"], EXIT_USAGE, "invalid incident id"),
        (["incident_20261122_090000_fl4ky1", "--all"], EXIT_USAGE, "not both"),
        (["--json", "--format", "md"], EXIT_USAGE, "contradict"),
        (["--json", "--format", "text"], EXIT_USAGE, "--json and --format text contradict each other"),
        (["--format", "html"], EXIT_USAGE, "invalid choice"),
    ],
)
def test_report_errors(project: Path, args: list[str], code: int, needle: str) -> None:
    result = cli("report", *args, cwd=project)
    assert result.returncode == code
    assert needle in one_line_error(result)


def test_report_corrupted_run_result(project: Path) -> None:
    runs = project / ".selfheal" / "error_runs" / "incident_20261122_101500_ab12cd"
    (runs / "run_result.json").write_text('{"incident_id": "incident_20261122_101500_ab12cd", "final_stat')
    result = cli("report", "incident_20261122_101500_ab12cd", cwd=project)
    assert result.returncode == EXIT_BAD_INPUT
    assert "run_result.json: corrupted JSON" in one_line_error(result)
    (runs / "run_result.json").write_text(json.dumps({"incident_id": "incident_20261122_101500_ab12cd"}))
    invalid = cli("report", "--all", cwd=project)
    assert invalid.returncode == EXIT_BAD_INPUT
    assert "run_result.json" in one_line_error(invalid)


# --------------------------------------------------------------------------- merge


def write_shard(project: Path, incident_id: str, path: Path) -> Path:
    result = cli("report", incident_id, "--format", "json", "--output", str(path), cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    return path


def test_merge_two_shards(project: Path, tmp_path: Path) -> None:
    a = write_shard(project, "incident_20261122_090000_fl4ky1", tmp_path / "py39" / "report.json")
    b = write_shard(project, "incident_20261122_101500_ab12cd", tmp_path / "py312" / "report.json")
    result = cli("merge", str(a), str(b), "--name", "py3.9", "py3.12", "--json", cwd=tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    merged = json.loads(result.stdout)
    Report.read(merged)
    assert [s["name"] for s in merged["shards"]] == ["py3.9", "py3.12"]
    assert (merged["stop_reason"], merged["final_status"], merged["total_retries"]) == (
        "repeated_fingerprint", "escalated", 4)
    markdown = cli("merge", str(a), str(b), "--headline", cwd=tmp_path)
    assert markdown.returncode == EXIT_OK
    first = markdown.stdout.splitlines()[0]
    assert first == "**selfheal: escalated — stop reason `repeated_fingerprint`** (2 incidents, 4 iterations, 1 flaky test)"
    assert f"| {a} | `incident_20261122_090000_fl4ky1` |" in markdown.stdout  # default names: the paths
    out = tmp_path / "merged.md"
    assert cli("merge", str(a), str(b), "--output", str(out), cwd=tmp_path).returncode == EXIT_OK
    assert out.read_text(encoding="utf-8") == cli("merge", str(a), str(b), cwd=tmp_path).stdout


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{", "corrupted JSON"),
        ("", "corrupted JSON (empty file)"),
        ("[]", "expected a JSON object"),
        ('{"schema_version": 99}', "unsupported report schema_version 99"),
        ('{"schema_version": 1, "title": "x"}', "invalid report: field enabled: required field missing"),
    ],
)
def test_merge_bad_file(tmp_path: Path, project: Path, content: str, needle: str) -> None:
    good = write_shard(project, "incident_20261122_090000_fl4ky1", tmp_path / "good.json")
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = cli("merge", str(good), str(bad), cwd=tmp_path)
    assert result.returncode == EXIT_BAD_INPUT
    message = one_line_error(result)
    assert str(bad) in message and needle in message


def test_merge_usage_errors(tmp_path: Path, project: Path) -> None:
    good = write_shard(project, "incident_20261122_090000_fl4ky1", tmp_path / "good.json")
    missing = cli("merge", str(good), str(tmp_path / "nope.json"), cwd=tmp_path)
    assert missing.returncode == EXIT_NOT_FOUND and "no such report file" in one_line_error(missing)
    names = cli("merge", str(good), str(good), "--name", "only-one", cwd=tmp_path)
    assert names.returncode == EXIT_USAGE and "1 --name values for 2 reports" in one_line_error(names)
    nothing = cli("merge", cwd=tmp_path)
    assert nothing.returncode == EXIT_USAGE


# --------------------------------------------------------------------------- report-section hooks


@pytest.fixture
def sections_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``pytest11`` plugin (in a fake distribution on sys.path) adding a report section."""
    name = "report_sections_cli"
    site = tmp_path / "site"
    site.mkdir()
    fake_distribution(site, name, SECTIONS_PLUGIN)
    monkeypatch.syspath_prepend(str(site))
    return name


def test_report_markdown_carries_hook_sections(project: Path, sections_plugin: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(project)
    assert main(["report", "incident_20261122_090000_fl4ky1"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(REPORT_HEADING + "\n")
    assert out.endswith("\n### Coverage\n\nCovered: incident_20261122_090000_fl4ky1 (resolved)\n")
    target = tmp_path / "report.md"
    assert main(["report", "incident_20261122_090000_fl4ky1", "--output", str(target)]) == EXIT_OK
    assert target.read_text(encoding="utf-8") == out
    # The JSON is the data only: sections are markdown, added where markdown is rendered.
    assert main(["report", "incident_20261122_090000_fl4ky1", "--json"]) == EXIT_OK
    assert "Covered:" not in capsys.readouterr().out


def test_merge_markdown_carries_hook_sections(project: Path, sections_plugin: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(project)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["report", "incident_20261122_090000_fl4ky1", "--json", "--output", str(a)]) == EXIT_OK
    assert main(["report", "incident_20261122_101500_ab12cd", "--json", "--output", str(b)]) == EXIT_OK
    capsys.readouterr()
    assert main(["merge", str(a), str(b), "--headline"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("**selfheal: escalated")
    covered = "incident_20261122_090000_fl4ky1,incident_20261122_101500_ab12cd (escalated)"
    assert out.endswith(f"\n### Coverage\n\nCovered: {covered}\n")


def test_a_crashing_section_hook_is_one_config_error(project: Path, sections_plugin: str,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(project)
    monkeypatch.setenv("SECTIONS_HOOK_CRASH", "1")
    assert main(["report", "incident_20261122_090000_fl4ky1"]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (f"selfheal: error: the pytest_selfheal_report_sections hook of plugin {sections_plugin!r} "
                   "failed: RuntimeError: coverage server down\n")
