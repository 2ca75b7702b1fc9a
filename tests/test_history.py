"""The failure history: the SQLite database, triage, the quarantine list and their commands."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import sqlite3
from pathlib import Path

import pytest
from helpers import DETERMINISTIC, FLAKY, capture, cli, git_commit_all, make_project
from junitparser.xunit2 import JUnitXml as XunitXml

from pytest_selfheal.config.keys import HistorySettings
from pytest_selfheal.errors import EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_OK, EXIT_UNRESOLVED, EXIT_USAGE
from pytest_selfheal.gitrepo import run_git
from pytest_selfheal.history import records as hr
from pytest_selfheal.history.db import HISTORY_FILE, SCHEMA_VERSION, HistoryDB, HistoryUnavailable
from pytest_selfheal.history.recording import record_and_triage, run_info
from pytest_selfheal.history.sources import ActionsContext, judge_event, read_quarantine
from pytest_selfheal.history.triage import (
    QuarantineEntry,
    add_entry,
    parse_quarantine,
    remove_entries,
    triage_failure,
    triage_headline,
    triage_summary,
)
from pytest_selfheal.records.incident import Failure, Triage
from pytest_selfheal.report.data import report_triage

TODAY = dt.date(2026, 11, 24)


def run(key: str, at: str, *, branch: str = "main", commit: str = "c0ffee", kind: str = hr.CAPTURE) -> hr.RunInfo:
    return hr.RunInfo(run_key=key, recorded_at=at, kind=kind, branch=branch, commit=commit, tests_run=10)


def failed(nodeid: str, fp: str = "fp1", outcome: str = hr.FAILED) -> hr.TestOutcome:
    return hr.TestOutcome(nodeid, outcome, fp, "deterministic")


# --------------------------------------------------------------------------- the database


def test_record_is_idempotent_per_run_key_and_reads_back(tmp_path: Path) -> None:
    with HistoryDB.open(tmp_path) as db:
        assert db.record(run("r1", "2026-11-01T10:00:00+00:00"), [failed("t.py::a"), failed("t.py::b", "fp2")])
        assert not db.record(run("r1", "2026-11-01T10:00:00+00:00"), [failed("t.py::c")])  # seen: ignored
        (info, outcomes), = list(db.runs())
    assert info.run_key == "r1" and info.branch == "main" and info.tests_run == 10
    assert [o.nodeid for o in outcomes] == ["t.py::a", "t.py::b"]
    assert (tmp_path / HISTORY_FILE).is_file()
    with sqlite3.connect(tmp_path / HISTORY_FILE) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_sightings_count_only_the_base_branch(tmp_path: Path) -> None:
    with HistoryDB.open(tmp_path) as db:
        db.record(run("m1", "2026-11-01T10:00:00+00:00", commit="aaa111"), [failed("t.py::a")])
        db.record(run("m2", "2026-11-02T10:00:00+00:00", commit="bbb222"), [failed("t.py::a")])
        db.record(run("f1", "2026-10-01T10:00:00+00:00", branch="feature"), [failed("t.py::a"), failed("t.py::z", "fpz")])
        seen = db.sightings(["fp1", "fpz", "never"], "main")
    assert set(seen) == {"fp1"}
    assert (seen["fp1"].first_commit, seen["fp1"].first_seen_at, seen["fp1"].occurrences) == (
        "aaa111", "2026-11-01T10:00:00+00:00", 2)


def test_a_sighting_names_the_commit_of_its_earliest_run_whatever_order_runs_were_recorded(tmp_path: Path) -> None:
    with HistoryDB.open(tmp_path) as db:
        db.record(run("m2", "2026-11-02T10:00:00+00:00", commit="bbb222"), [failed("t.py::a")])
        db.record(run("m3", "2026-11-03T10:00:00+00:00", commit="ccc333"), [failed("t.py::a")])
        db.record(run("m1", "2026-11-01T10:00:00+00:00", commit="aaa111"), [failed("t.py::a")])
        seen = db.sightings(["fp1"], "main")
    assert (seen["fp1"].first_commit, seen["fp1"].first_seen_at, seen["fp1"].occurrences) == (
        "aaa111", "2026-11-01T10:00:00+00:00", 3)


def test_sightings_of_more_fingerprints_than_one_query_holds(tmp_path: Path) -> None:
    """Fingerprints are looked up in chunks (SQLite bounds the parameters of a statement):
    every seen one is found, in the order asked, whatever chunk it falls in."""
    asked = [f"fp{i:04d}" for i in range(1203)]
    seen_ones = [asked[3], asked[499], asked[500], asked[1202]]
    with HistoryDB.open(tmp_path) as db:
        db.record(run("m1", "2026-11-01T10:00:00+00:00", commit="aaa111"),
                  [failed(f"t.py::{fp}", fp) for fp in seen_ones])
        db.record(run("m2", "2026-11-02T10:00:00+00:00", commit="bbb222"), [failed("t.py::x", asked[500])])
        found = db.sightings(list(reversed(asked)) + asked, "main")
    assert list(found) == list(reversed(seen_ones))
    assert found[asked[500]].occurrences == 2 and found[asked[500]].first_commit == "aaa111"
    assert {f.occurrences for fp, f in found.items() if fp != asked[500]} == {1}


def test_flake_rates_rank_by_rate_then_count(tmp_path: Path) -> None:
    with HistoryDB.open(tmp_path) as db:
        at = "2026-11-0{}T10:00:00+00:00"
        db.record(run("1", at.format(1)), [failed("t.py::half"), failed("t.py::always"), failed("t.py::solid")])
        db.record(run("2", at.format(2), kind=hr.LOOP),
                  [failed("t.py::half", outcome=hr.PASSED_ON_RERUN), failed("t.py::always", outcome=hr.PASSED_ON_RERUN),
                   failed("t.py::solid")])
        db.record(run("3", at.format(3)), [failed("t.py::half")])
        db.record(run("old", "2020-01-01T00:00:00+00:00"), [failed("t.py::ancient", outcome=hr.PASSED_ON_RERUN)])
        rates = db.flake_rates("2026-10-01T00:00:00+00:00")
        only = db.flake_rates("2026-10-01T00:00:00+00:00", nodeids=["t.py::half"])
    assert [(r.nodeid, r.flaky, r.failed) for r in rates] == [("t.py::always", 1, 2), ("t.py::half", 1, 3)]
    assert rates[0].rate == 0.5 and [r.nodeid for r in only] == ["t.py::half"]


def test_history_of_a_test_and_a_fingerprint_newest_first(tmp_path: Path) -> None:
    with HistoryDB.open(tmp_path) as db:
        db.record(run("1", "2026-11-01T10:00:00+00:00"), [failed("t.py::a", "fpa")])
        db.record(run("2", "2026-11-02T10:00:00+00:00"), [failed("t.py::a", "fpb")])
        by_test = db.history_of(nodeid="t.py::a")
        by_fp = db.history_of(fingerprint="fpa")
    assert [o.fingerprint for _, o in by_test] == ["fpb", "fpa"]
    assert [r.run_key for r, _ in by_fp] == ["1"]


def test_merge_from_a_shard_adds_only_unseen_runs(tmp_path: Path) -> None:
    with HistoryDB.open(tmp_path / "a") as a, HistoryDB.open(tmp_path / "b") as b:
        a.record(run("shared", "2026-11-01T10:00:00+00:00"), [failed("t.py::a")])
        b.record(run("shared", "2026-11-01T10:00:00+00:00"), [failed("t.py::a")])
        b.record(run("b-only", "2026-11-02T10:00:00+00:00"), [failed("t.py::b")])
        assert a.import_runs(b.runs()) == 1
        assert [info.run_key for info, _ in a.runs()] == ["shared", "b-only"]


@pytest.mark.parametrize("kind", ["foreign", "corrupted", "newer", "symlink"])
def test_an_unusable_database_is_one_line_and_nothing_is_changed(tmp_path: Path, kind: str) -> None:
    path = tmp_path / HISTORY_FILE
    if kind == "foreign":
        with sqlite3.connect(path) as other:
            other.execute("CREATE TABLE accounts (id INTEGER)")
    elif kind == "corrupted":
        path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    elif kind == "newer":
        with HistoryDB.open(tmp_path):
            pass
        with sqlite3.connect(path) as raw:
            raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    else:
        target = tmp_path / "elsewhere.sqlite3"
        target.write_bytes(b"")
        path.symlink_to(target)
    before = path.read_bytes() if not path.is_symlink() else None
    with pytest.raises(HistoryUnavailable) as info:
        HistoryDB.open(tmp_path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(path)) and "continuing without history" in message
    if before is not None:
        assert path.read_bytes() == before


def _record_many(root: str, worker: int) -> None:
    with HistoryDB.open(Path(root)) as db:
        for i in range(20):
            db.record(run(f"w{worker}-{i}", f"2026-11-01T10:00:{i:02d}+00:00"), [failed(f"t.py::w{worker}")])


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_record_many, args=(str(tmp_path), w)) for w in range(3)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(60)
        assert process.exitcode == 0
    with HistoryDB.open(tmp_path) as db:
        assert len(list(db.runs())) == 60


# --------------------------------------------------------------------------- triage


def test_triage_labels_and_their_precedence(tmp_path: Path) -> None:
    with HistoryDB.open(tmp_path) as db:
        db.record(run("m", "2026-11-01T10:00:00+00:00", commit="abcdef1234567890"), [failed("t.py::known", "fpk")])
        for i in range(3):
            db.record(run(f"f{i}", f"2026-11-0{i + 2}T10:00:00+00:00", branch="pr"),
                      [failed("t.py::rate", "fpr", hr.PASSED_ON_RERUN if i else hr.FAILED)])
        sightings = db.sightings(["fpk", "fpn", "fpr", "fpq"], "main")
        rates = {r.nodeid: r for r in db.flake_rates("2026-01-01T00:00:00+00:00")}
    quarantine = [QuarantineEntry(reason="sandbox flaps", test="t.py::q", owner="@ops")]
    common = dict(base_branch="main", sightings=sightings, flake_rates=rates, quarantine=quarantine,
                  passed_on_rerun={"t.py::now", "t.py::q"})
    known = triage_failure("t.py::known", "fpk", **common)  # type: ignore[arg-type]
    assert known.label == "known" and known.occurrences == 1 and known.first_seen_commit == "abcdef1234567890"
    assert known.detail == "known on main: first seen at abcdef123456 (2026-11-01), once"
    assert triage_failure("t.py::new", "fpn", **common).label == "new"  # type: ignore[arg-type]
    assert triage_failure("t.py::now", "fpn", **common).label == "flaky"  # type: ignore[arg-type]
    by_rate = triage_failure("t.py::rate", "fpr", **common)  # type: ignore[arg-type]
    assert by_rate.label == "flaky" and by_rate.flake_rate == 0.667
    quarantined = triage_failure("t.py::q", "fpq", **common)  # type: ignore[arg-type]  # wins over flaky
    assert quarantined.label == "quarantined" and quarantined.to_json() == {
        "label": "quarantined", "detail": "quarantined: sandbox flaps, owner @ops", "quarantine_reason": "sandbox flaps",
        "base_branch": "main"}
    assert triage_headline(["new", "known", "new", "flaky"], "main") == "2 new, 1 known on main, 1 flaky"
    assert triage_headline([], "main") == "no failures"


# --------------------------------------------------------------------------- quarantine


def test_the_report_triage_turns_a_rerun_pass_flaky_but_a_quarantine_wins() -> None:
    def failure(name: str, label: str) -> Failure:
        return Failure.from_json(
            {"nodeid": f"t.py::{name}", "fingerprint": f"fp{name}", "failure_type": "TEST_ASSERTION",
             "triage": {"label": label, "detail": f"{label} detail", "base_branch": "main", "odd": [1]}}, "f")
    entries = report_triage([failure("a", "new"), failure("b", "quarantined"), failure("c", "known"),
                             Failure(nodeid="t.py::d"), failure("e", "bogus")], flaky=["t.py::a", "t.py::b"])
    docs = [e.to_json() for e in entries]
    assert [(e["nodeid"], e["label"], e["detail"]) for e in docs] == [
        ("t.py::a", "flaky", "failed, then passed on re-run with no code change"),
        ("t.py::b", "quarantined", "quarantined detail"), ("t.py::c", "known", "known detail")]
    assert "odd" not in docs[0] and docs[0]["fingerprint"] == "fpa"
    assert list(docs[0]) == ["fingerprint", "failure_type", "nodeid", "label", "detail", "base_branch"]
    assert triage_summary([e.triage for e in entries]) == {"counts": {"known": 1, "flaky": 1, "quarantined": 1},
                                                           "line": "1 known on main, 1 flaky (passed on re-run), 1 quarantined"}
    assert triage_summary([]) is None


def test_quarantine_warnings_name_the_line_and_the_rest_applies() -> None:
    text = ("quarantine:\n"
            "  - test: t.py::a\n"
            "  - test: t.py::b\n    reason: r\n    expires: 2026-01-01\n"
            "  - fingerprint: f\n    reason: ok\n    expires: 2026-11-24\n"
            "  - test: t.py::c\n    fingerprint: g\n    reason: both\n")
    entries, warnings = parse_quarantine(text, "q.yml", TODAY)
    assert [(e.fingerprint, e.line) for e in entries] == [("f", 6)]
    assert warnings == ["q.yml:2: `reason` is required; entry ignored",
                        "q.yml:3: expired on 2026-01-01; entry ignored",
                        "q.yml:9: give exactly one of `test` or `fingerprint`; entry ignored"]
    assert parse_quarantine("quarantine: [", "q.yml", TODAY) == ([], ["q.yml:1: not valid YAML; quarantine ignored"])
    assert parse_quarantine("- a\n", "q.yml", TODAY)[1] == [
        "q.yml:1: expected `quarantine:` with a list of entries; quarantine ignored"]


def test_add_and_remove_keep_every_other_line() -> None:
    text = "# owned by the platform team\nquarantine:\n  - test: t.py::old\n    reason: keep me  # why\n"
    added = add_entry(text, QuarantineEntry(reason="new one", fingerprint="abc"))
    assert added.startswith(text)
    assert [e.fingerprint or e.test for e in parse_quarantine(added, "q", TODAY)[0]] == ["t.py::old", "abc"]
    removed, count = remove_entries(added, test="t.py::old")
    assert count == 1 and removed.startswith("# owned by the platform team\nquarantine:\n")
    assert [e.fingerprint for e in parse_quarantine(removed, "q", TODAY)[0]] == ["abc"]
    with pytest.raises(ValueError, match="not valid YAML"):
        add_entry("quarantine: [", QuarantineEntry(reason="x", test="t"))


def test_on_a_pull_request_the_list_comes_from_the_base_revision(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {".selfheal-quarantine.yml": "quarantine:\n  - test: t.py::base\n    reason: on main\n"})
    base = git_head(project)
    (project / ".selfheal-quarantine.yml").write_text("quarantine:\n  - test: t.py::mine\n    reason: my own PR\n")
    git_commit_all(project, "the PR quarantines its own failure")
    at_base, warnings = read_quarantine(project, ".selfheal-quarantine.yml", revision=base, today=TODAY)
    assert [e.test for e in at_base] == ["t.py::base"] and warnings == []
    head, _ = read_quarantine(project, ".selfheal-quarantine.yml", today=TODAY)
    assert [e.test for e in head] == ["t.py::mine"]
    missing, warnings = read_quarantine(project, "nope.yml", revision=base, today=TODAY)
    assert (missing, warnings) == ([], [])
    outside, warnings = read_quarantine(project, "../x.yml", today=TODAY)
    assert outside == [] and "inside the project" in warnings[0]
    pr = ActionsContext(in_actions=True, event_name="pull_request")
    assert judge_event(pr, {"pull_request": {"base": {"sha": base}}}, project).revision == base
    assert judge_event(pr, {"pull_request": {"base": {"sha": "; rm -rf /"}}}, project).revision is None


def git_head(project: Path) -> str:
    return run_git(project, ["rev-parse", "HEAD"]).decode().strip()


# --------------------------------------------------------------------------- the commands


def test_quarantine_commands(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_a.py": "def test_a():\n    pass\n"})
    code, out, err = cli("quarantine", "add", "--test", "test_a.py::test_a", "--reason", "flaps",
                         "--expires", "2099-01-01", "--owner", "@me", cwd=project)
    assert code == EXIT_OK, err
    assert out == "quarantined test test_a.py::test_a in .selfheal-quarantine.yml\n"
    code, out, _ = cli("quarantine", "list", "--json", cwd=project)
    assert json.loads(out) == [{"test": "test_a.py::test_a", "reason": "flaps", "expires": "2099-01-01",
                                "owner": "@me", "line": 4}]
    code, out, _ = cli("quarantine", "list", cwd=project)
    assert out == ".selfheal-quarantine.yml:4: test test_a.py::test_a: flaps, owner @me, until 2099-01-01\n"
    assert cli("quarantine", "add", "--test", "x", cwd=project).returncode == EXIT_USAGE  # no reason
    assert cli("quarantine", "add", "--test", "x", "--reason", "r", "--expires", "soon", cwd=project).returncode == EXIT_USAGE
    code, out, _ = cli("quarantine", "remove", "--test", "test_a.py::test_a", cwd=project)
    assert (code, out) == (EXIT_OK, "removed 1 entry from .selfheal-quarantine.yml\n")
    assert cli("quarantine", "remove", "--test", "test_a.py::test_a", cwd=project).returncode == EXIT_NOT_FOUND


def test_history_and_flaky_commands(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_a.py": "def test_a():\n    pass\n"})
    root = project / ".selfheal"
    code, _, err = cli("flaky", cwd=project)
    assert code == EXIT_NOT_FOUND and "no history recorded yet" in err
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    stamps: list[str] = [(now - dt.timedelta(hours=h)).isoformat() for h in (3, 2)]
    with HistoryDB.open(root) as db:
        db.record(run("1", stamps[0]), [failed("test_a.py::test_a")])
        db.record(run("2", stamps[1], kind=hr.LOOP), [failed("test_a.py::test_a", outcome=hr.PASSED_ON_RERUN)])
    code, out, err = cli("flaky", "--json", cwd=project)
    assert code == EXIT_OK, err
    assert [(r["nodeid"], r["flaky"], r["failed"], r["flake_rate"]) for r in json.loads(out)] == [
        ("test_a.py::test_a", 1, 2, 0.5)]
    code, out, _ = cli("flaky", cwd=project)
    assert "50%     1 / 2    test_a.py::test_a" in out
    assert cli("flaky", "--window", "0", cwd=project).returncode == EXIT_USAGE
    code, out, _ = cli("history", "--test", "test_a.py::test_a", "--json", cwd=project)
    assert [row["outcome"] for row in json.loads(out)] == ["passed_on_rerun", "failed"]
    code, out, _ = cli("history", "--fingerprint", "nope", cwd=project)
    assert (code, out) == (EXIT_OK, "no recorded outcome for fingerprint nope\n")
    # What the Action caches: the database path from the config, empty when history is off.
    (project / "sub").mkdir()
    assert tuple(cli("history", "--path", cwd=project / "sub")) == (EXIT_OK, f"{root / HISTORY_FILE}\n", "")
    (project / ".planning").mkdir()
    (project / ".planning" / "config.json").write_text('{"ralf_lite": {"history": {"enabled": false}}}')
    assert tuple(cli("history", "--path", cwd=project)) == (EXIT_OK, "\n", "")


# --------------------------------------------------------------------------- selfheal junit


def test_junit_writes_flaky_failures_that_junitparser_reads_back(tmp_path: Path) -> None:
    flaky = FLAKY.format(state=str(tmp_path / "flaky.state"))
    project = make_project(tmp_path / "p", {"test_flaky.py": flaky, "test_calc.py": DETERMINISTIC})
    incident_id = capture(project)
    assert cli("loop", incident_id, cwd=project).returncode == EXIT_UNRESOLVED  # the real bug repeats
    # Each loop iteration recorded: the re-run pass with the fingerprint it failed with.
    with HistoryDB.open(project / ".selfheal", create=False) as db:
        loop_runs = [(info, outcomes) for info, outcomes in db.runs() if info.kind == hr.LOOP]
    first_iteration = {o.nodeid: (o.outcome, o.fingerprint) for o in loop_runs[0][1]}
    assert loop_runs[0][0].run_key == f"loop:{incident_id}:1"
    (incident_json,) = (project / ".selfheal").glob(f"error_*/**/{incident_id}/incident.json")
    captured = {f["nodeid"]: f["fingerprint"] for f in json.loads(incident_json.read_text())["failures"]}
    assert first_iteration["test_flaky.py::test_flaky"] == (hr.PASSED_ON_RERUN, captured["test_flaky.py::test_flaky"])
    assert first_iteration["test_calc.py::test_sub"][0] == hr.FAILED
    assert cli("quarantine", "add", "--test", "test_calc.py::test_sub", "--reason", "tracked in BUG-1",
               cwd=project).returncode == EXIT_OK
    out = tmp_path / "reports" / "selfheal.xml"
    code, stdout, err = cli("junit", incident_id[:-1], "--output", str(out), cwd=project)
    assert code == EXIT_OK, err
    assert stdout == f"wrote {out}: 2 test(s) of {incident_id}, 1 flaky\n"
    cases = {case.name: case for suite in XunitXml.fromfile(str(out)) for case in suite}
    flaky_case, bug = cases["test_flaky"], cases["test_sub"]
    assert flaky_case.is_flaky and flaky_case.result == []
    (first,) = flaky_case.flaky_failures()
    assert first.message.startswith("AssertionError: first run fails") and first.type == "TEST_ASSERTION"
    assert not bug.is_flaky and bug.result[0].message.startswith("assert 7 == 3")
    assert {(p.name, p.value) for p in bug.properties()} == {("selfheal.quarantined", "tracked in BUG-1")}
    assert cli("junit", "--output", str(out), "--dir", str(tmp_path / "empty")).returncode == EXIT_NOT_FOUND


# --------------------------------------------------------------------------- recording a run


def test_a_pull_request_run_is_triaged_against_main_and_the_base_quarantine(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {".selfheal-quarantine.yml":
                                            "quarantine:\n  - test: t.py::base_q\n    reason: tracked on main\n"})
    base = git_head(project)
    root = project / ".selfheal"
    settings = HistorySettings()
    main_env = ActionsContext(ref_name="main", sha=base, run_id="1")
    first = record_and_triage(root, settings, run_info(run_key="push-1", kind=hr.CAPTURE, project_root=project,
                                                       actions=main_env),
                              [failed("t.py::known", "fpk")], project_root=project, actions=main_env)
    assert first.triage["t.py::known"].label == "new"  # the run does not make itself known
    # The PR quarantines its own new failure: ignored, the list comes from the base revision.
    (project / ".selfheal-quarantine.yml").write_text("quarantine:\n  - test: t.py::new\n    reason: mine\n")
    git_commit_all(project, "PR")
    pr_env = ActionsContext.from_env({"GITHUB_BASE_REF": "main", "GITHUB_HEAD_REF": "feature", "GITHUB_RUN_ID": "2",
                                      "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request"})
    event = {"pull_request": {"base": {"sha": base}}}
    result = record_and_triage(
        root, settings, run_info(run_key="pr-2", kind=hr.LOOP, project_root=project, actions=pr_env),
        [failed("t.py::known", "fpk"), failed("t.py::new", "fpn"), failed("t.py::flaky", "fpf", hr.PASSED_ON_RERUN),
         failed("t.py::base_q", "fpq")],
        project_root=project, actions=pr_env, event=event)
    labels = {nodeid: t.label for nodeid, t in result.triage.items()}
    assert labels == {"t.py::known": "known", "t.py::new": "new", "t.py::flaky": "flaky", "t.py::base_q": "quarantined"}
    assert result.base_branch == "main" and result.warnings == []
    with HistoryDB.open(root) as db:
        (_, pushed), (pr_run, recorded) = list(db.runs())
    assert pr_run.branch == "feature" and pr_run.ci_run_id == "2"
    assert {o.nodeid: o.outcome for o in recorded} == {"t.py::known": "failed", "t.py::new": "failed",
                                                        "t.py::flaky": "passed_on_rerun", "t.py::base_q": "quarantined"}


def test_a_fork_pull_requests_own_main_runs_are_not_known_on_main(tmp_path: Path) -> None:
    """"Known" counts the base repository's branch: a fork's ``main`` (GITHUB_HEAD_REF) is
    another branch (through selfheal ci: tests/reliability/test_trust_ci_events.py)."""
    project = make_project(tmp_path / "p", {"t.py": ""})
    root = project / ".selfheal"
    fork = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_REPOSITORY": "octo/app",
            "GITHUB_BASE_REF": "main", "GITHUB_HEAD_REF": "main"}
    event = {"pull_request": {"base": {"sha": git_head(project), "ref": "main", "repo": {"full_name": "octo/app"}},
                              "head": {"ref": "main", "repo": {"full_name": "forker/app"}}}}
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps(event))
    fork["GITHUB_EVENT_PATH"] = str(event_file)

    def triage(key: str, env: dict[str, str]) -> str:
        actions = ActionsContext.from_env(env)
        done = record_and_triage(root, HistorySettings(), run_info(run_key=key, kind=hr.CAPTURE, project_root=project,
                                                                   actions=actions),
                                 [failed("t.py::mine", "fpm")], project_root=project, actions=actions)
        return str(done.triage["t.py::mine"].label)

    assert [triage("fork-1", fork), triage("fork-2", fork)] == ["new", "new"]
    with HistoryDB.open(root) as db:
        assert {run.repository for run, _ in db.runs()} == {"forker/app"}
    # The base repository's own main makes it known.
    push = {"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "push", "GITHUB_REPOSITORY": "octo/app",
            "GITHUB_REF_NAME": "main", "GITHUB_REF": "refs/heads/main"}
    assert triage("main-1", push) == "new"
    assert triage("fork-3", fork) == "known"


def test_an_unusable_history_is_a_warning_and_triage_still_answers(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"t.py": ""})
    root = project / ".selfheal"
    root.mkdir()
    (root / HISTORY_FILE).write_bytes(b"not a database at all" * 100)
    result = record_and_triage(root, HistorySettings(), run_info(run_key="r", kind=hr.CAPTURE, project_root=project,
                                                                 actions=ActionsContext()),
                               [failed("t.py::a", "fpa")], project_root=project, actions=ActionsContext())
    assert result.triage["t.py::a"].label == "new"
    assert len(result.warnings) == 1 and "history unavailable" in result.warnings[0]
    disabled = record_and_triage(root, HistorySettings(enabled=False), run_info(
        run_key="r", kind=hr.CAPTURE, project_root=project, actions=ActionsContext()),
        [failed("t.py::a", "fpa")], project_root=project, actions=ActionsContext())
    assert disabled.triage == {} and disabled.warnings == []


def test_merge_adds_the_shards_histories(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"t.py": ""})
    for shard, key in (("s1", "a"), ("s2", "b")):
        with HistoryDB.open(tmp_path / shard) as db:
            db.record(run(key, "2026-11-01T10:00:00+00:00"), [failed(f"t.py::{key}")])
            db.record(run("both", "2026-11-01T09:00:00+00:00"), [failed("t.py::both")])
    code, out, err = cli("merge", "--history", str(tmp_path / "s1"), str(tmp_path / "s2" / HISTORY_FILE), cwd=project)
    assert (code, out) == (EXIT_OK, ""), err
    assert err.splitlines()[0].startswith(f"merged 2 run(s) of {tmp_path / 's1'} into ")
    assert err.splitlines()[1].startswith("merged 1 run(s)")
    with HistoryDB.open(project / ".selfheal") as db:
        assert sorted(info.run_key for info, _ in db.runs()) == ["a", "b", "both"]
    assert cli("merge", cwd=project).returncode == EXIT_USAGE
    assert cli("merge", "--history", str(tmp_path / "none"), cwd=project).returncode == EXIT_NOT_FOUND
    (tmp_path / "bad.sqlite3").write_bytes(b"junk" * 1000)
    assert cli("merge", "--history", str(tmp_path / "bad.sqlite3"), cwd=project).returncode == EXIT_BAD_INPUT


def test_history_json_loads_the_config_once_and_redacts_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_selfheal.cli import ci as history_command
    from pytest_selfheal.cli import common as _common

    project = make_project(tmp_path / "p", {"test_a.py": "def test_a():\n    pass\n"})
    (project / ".planning").mkdir()
    (project / ".planning" / "config.json").write_text('{"ralf_lite": {"redaction": {"patterns": ["feature-[0-9]+"]}}}')
    with HistoryDB.open(project / ".selfheal") as db:
        db.record(run("1", "2026-01-01T00:00:00+00:00", branch="feature-42"), [failed("test_a.py::test_a")])
    loads: list[Path] = []
    real = history_command.load_config

    def counted(root: Path) -> object:
        loads.append(root)
        return real(root)

    monkeypatch.setattr(history_command, "load_config", counted)
    monkeypatch.setattr(_common, "load_config", counted)
    code, out, err = cli("history", "--test", "test_a.py::test_a", "--json", cwd=project)
    assert code == EXIT_OK, err
    assert len(loads) == 1
    assert [row["branch"] for row in json.loads(out)] == ["[REDACTED]"]


FLIP = """
    import os
    STATE = {state!r}

    def test_flip():
        if os.path.exists(STATE):
            os.remove(STATE)
            return
        open(STATE, "w").close()
        assert False, "fails every other run"

    def test_real():
        assert 1 + 1 == 3
"""


def test_the_triage_figure_counts_this_runs_failure_as_selfheal_flaky_does(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_a.py": "def test_a():\n    pass\n"})
    root = project / ".selfheal"

    def triage(key: str, outcome: str = hr.FAILED) -> Triage:
        info = run_info(run_key=key, kind=hr.CAPTURE, project_root=project, actions=ActionsContext())
        return record_and_triage(root, HistorySettings(), info, [failed("t.py::f", "fp", outcome)],
                                 project_root=project, actions=ActionsContext()).triage["t.py::f"]

    triage("r1")
    triage("r2", hr.PASSED_ON_RERUN)
    third = triage("r3")
    with HistoryDB.open(root) as db:
        (rate,) = db.flake_rates("2000-01-01T00:00:00+00:00")
    assert (rate.flaky, rate.failed) == (1, 3)
    assert "passed on re-run 1 of 3 recorded failures (33% > 10%)" in third.detail


@pytest.mark.slow  # a capture, a loop and a capture: the figure has a fast test above
def test_a_failure_the_history_calls_flaky_reads_flaky_everywhere_with_one_figure(tmp_path: Path) -> None:
    """The triage counted the failures before this run's (1 of 2, 50 %) while `selfheal flaky`
    counted it (1 of 3, 33 %), and the class said deterministic."""
    project = make_project(tmp_path / "flip", {"test_flip.py": FLIP.format(state=str(tmp_path / "flip.state"))})
    first = capture(project, "-p", "no:randomly")
    looped = cli("loop", first, cwd=project)  # test_flip passes on the re-run: flaky; test_real repeats
    assert "flaky (passed on re-run with no code change): test_flip.py::test_flip" in looped.stdout, looped.stdout
    second = capture(project, "-p", "no:randomly")  # test_real stays stopped; test_flip is captured
    incident = json.loads(next((project / ".selfheal").rglob(f"{second}/incident.json")).read_text())
    (entry,) = incident["failures"]
    assert entry["triage"]["label"] == "flaky", entry
    assert "passed on re-run 1 of 3 recorded failures (33% > 10%)" in entry["triage"]["detail"]
    assert entry["failure_class"] == "transient" and incident["failure_class"] == "transient"
    flaky = json.loads(cli("flaky", "--json", cwd=project).stdout)
    assert [(r["nodeid"], r["flaky"], r["failed"]) for r in flaky] == [("test_flip.py::test_flip", 1, 3)]
    shown = cli("show", second, cwd=project).stdout
    assert "transient" in shown and "deterministic" not in shown, shown
