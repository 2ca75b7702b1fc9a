"""A test that failed and then passed on a re-run by the project's own re-run plugin
(pytest-rerunfailures, flaky) is recorded as flaky: in the history as ``passed_on_rerun`` with
its fingerprint, in a red run and in a green one, once per run; the capture, the report and
``selfheal flaky`` count it (docs/history.md). Real pytest runs (pytester) with the real plugins."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import cli, make_project
from test_ci import actions_env, outputs_of

from pytest_selfheal.github.ci_verdict import ci_headline, sanitize_ci_info
from pytest_selfheal.history.records import FAILED, PASSED_ON_RERUN
from pytest_selfheal.history.segments import ci_capture_run_id, local_segments, passed_on_rerun_in, this_run_segments
from pytest_selfheal.history.triage import triage_headline
from pytest_selfheal.names import CI_RUN_ENV
from pytest_selfheal.records.ci import CiVerdict
from pytest_selfheal.records.vocab import FinalStatus
from pytest_selfheal.report.data import IncidentRun, build_report
from pytest_selfheal.report.render import render_headline
from pytest_selfheal.store.root import Store

pytest.importorskip("pytest_rerunfailures")

# Fails on every other run: the marker file flips it (its first run fails, its re-run passes).
FLIPS = """
import pathlib

def test_flaky():
    mark = pathlib.Path(__file__).with_name("flipped")
    if not mark.exists():
        mark.write_text("x")
        assert 1 == 3, "first run fails"
    mark.unlink()
"""
BAD = "\ndef test_bad():\n    assert 1 == 2\n"
OK = "\ndef test_ok():\n    pass\n"
# The project's re-run plugin only: each test names the one it runs under.
RERUNFAILURES = ("-p", "no:flaky", "--reruns", "2")


@pytest.fixture(autouse=True)
def _rerun_plugins(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plugins the rest of the suite leaves out (tests/conftest.py): each test names the one it runs."""
    monkeypatch.delenv("PYTEST_ADDOPTS")


def assert_outcomes(result: pytest.RunResult, **counts: int) -> None:
    """pytest's summary counts, re-runs (pytest-rerunfailures' own count) included."""
    assert result.parseoutcomes() == counts, result.stdout.str()


def history(root: Path) -> list[tuple[str, str, str, str]]:
    """``(run kind, node id, outcome, fingerprint)`` of every recorded outcome, in run order."""
    with sqlite3.connect(root / ".selfheal" / "history.sqlite3") as db:
        rows = db.execute("SELECT runs.kind, nodeid, outcome, fingerprint FROM outcomes "
                          "JOIN runs ON runs.id = outcomes.run_id ORDER BY runs.id").fetchall()
    return [tuple(row) for row in rows]


def incident_of(root: Path) -> dict[str, Any]:
    (folder,) = (root / ".selfheal" / "error_inbox").iterdir()
    data: dict[str, Any] = json.loads((folder / "incident.json").read_text())
    return data


def flaky_listing(root: Path) -> str:
    code, out, err = cli("flaky", cwd=root)
    assert (code, err) == (0, ""), err
    return out


def test_a_red_run_records_the_test_that_passed_on_a_rerunfailures_rerun_as_flaky(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=FLIPS + BAD + OK)
    result = pytester.runpytest("--selfheal", *RERUNFAILURES)
    assert_outcomes(result, failed=1, passed=2, rerun=3)
    result.stdout.re_match_lines([r"captured incident_\S+: 1 failure\(s\) \(1 new\), 1 flaky \(passed on re-run\) -> "])
    # One failure each run: test_bad failed all three runs, noted on its line.
    result.stdout.re_match_lines([r"  \w{12}  TEST_ASSERTION +new +test_x.py::test_bad \(failed again on 2 re-runs\)",
                                  r"  \w{12}  TEST_ASSERTION +flaky +test_x.py::test_flaky$"])
    incident = incident_of(pytester.path)
    assert [f["nodeid"] for f in incident["failures"]] == ["test_x.py::test_bad"]
    assert incident["counts"] == {"tests": 3, "failed": 1, "skipped": 0, "rerun": 3}
    (flaky,) = incident["passed_on_rerun"]
    assert (flaky["nodeid"], flaky["triage"]["label"], flaky["message"]) == (
        "test_x.py::test_flaky", "flaky", "AssertionError: first run fails")
    recorded = history(pytester.path)
    assert recorded == [("capture", "test_x.py::test_bad", FAILED, incident["failures"][0]["fingerprint"]),
                        ("capture", "test_x.py::test_flaky", PASSED_ON_RERUN, flaky["fingerprint"])]
    assert "test_x.py::test_flaky" in flaky_listing(pytester.path)
    # The report (and so the job summary and the PR comment) counts it the same way.
    store = Store(pytester.path / ".selfheal")
    report = build_report(incidents=[IncidentRun(store.read_incident(incident["incident_id"]))])
    assert report.triage_line == "1 new, 1 flaky (passed on re-run)"
    assert "1 new, 1 flaky (passed on re-run)" in render_headline(report)
    assert list(report.incidents[0].flaky_tests) == ["test_x.py::test_flaky"]
    # The incident's junit: the flaky test passes with its failed run, the Surefire way.
    code, out, err = cli("junit", "--output", "rerun.xml", cwd=pytester.path)
    assert (code, err) == (0, "") and out.endswith("2 test(s) of " + incident["incident_id"] + ", 1 flaky\n"), out
    assert '<flakyFailure message="AssertionError: first run fails"' in (pytester.path / "rerun.xml").read_text()


def test_a_green_run_records_only_what_passed_on_a_rerun(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=FLIPS + OK)
    result = pytester.runpytest("--selfheal", *RERUNFAILURES)
    assert_outcomes(result, passed=2, rerun=1)
    result.stdout.fnmatch_lines(["selfheal: 1 flaky (passed on re-run), recorded in the history",
                                 "  * TEST_ASSERTION flaky       test_x.py::test_flaky"])
    assert not (pytester.path / ".selfheal" / "error_inbox").exists()  # nothing to loop
    ((kind, nodeid, outcome, fingerprint),) = history(pytester.path)
    assert (kind, nodeid, outcome) == ("capture", "test_x.py::test_flaky", PASSED_ON_RERUN) and len(fingerprint) == 12
    assert "100%     1 / 1    test_x.py::test_flaky" in flaky_listing(pytester.path)
    # The same failure captured without a re-run has the same fingerprint: one path fingerprints both.
    (pytester.path / "flipped").unlink(missing_ok=True)
    pytester.runpytest("--selfheal", "-p", "no:flaky", "-p", "no:rerunfailures", "-k", "flaky").assert_outcomes(failed=1)
    assert incident_of(pytester.path)["failures"][0]["fingerprint"] == fingerprint


def test_a_green_run_with_no_rerun_writes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=OK)
    result = pytester.runpytest("--selfheal", *RERUNFAILURES)
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".selfheal").exists() and "- selfheal -" not in result.stdout.str()


def test_a_test_failing_every_rerun_is_one_failure_recorded_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=BAD + OK)
    result = pytester.runpytest("--selfheal", "-p", "no:flaky", "--reruns", "3")
    assert_outcomes(result, failed=1, passed=1, rerun=3)
    result.stdout.re_match_lines([r"captured incident_\S+: 1 failure\(s\) \(1 new\) -> "])
    assert [row[1:3] for row in history(pytester.path)] == [("test_x.py::test_bad", FAILED)]
    assert incident_of(pytester.path)["counts"] == {"tests": 2, "failed": 1, "skipped": 0, "rerun": 3}


def test_a_pass_on_a_flaky_rerun_is_recorded_as_flaky(pytester: pytest.Pytester) -> None:
    """flaky logs only a test's last run: its failed runs reach other plugins only at their
    failure (pytest_exception_interact), in the process that runs them."""
    pytest.importorskip("flaky")
    pytester.makepyfile(test_x="from flaky import flaky\n" + FLIPS.replace("def test_flaky", "@flaky(max_runs=3)\n"
                                                                         "def test_flaky") + OK)
    result = pytester.runpytest("--selfheal", "-p", "no:rerunfailures")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["selfheal: 1 flaky (passed on re-run), recorded in the history"])
    assert [row[1:3] for row in history(pytester.path)] == [("test_x.py::test_flaky", PASSED_ON_RERUN)]
    # A test failing all its runs is one failure, its two re-runs counted as pytest-rerunfailures' are.
    pytester.makepyfile(test_y="from flaky import flaky\n\n@flaky(max_runs=3)\ndef test_always():\n    assert 0\n")
    result = pytester.runpytest("--selfheal", "-p", "no:rerunfailures", "test_y.py", "test_x.py")
    result.assert_outcomes(failed=1, passed=2)
    result.stdout.re_match_lines([r"captured incident_\S+: 1 failure\(s\) \(1 new\), 1 flaky \(passed on re-run\) -> "])
    assert incident_of(pytester.path)["counts"] == {"tests": 3, "failed": 1, "skipped": 0, "rerun": 3}


@pytest.mark.slow
def test_under_xdist_the_controller_records_a_rerunfailures_pass_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=FLIPS + BAD + OK)
    result = pytester.runpytest_subprocess("--selfheal", *RERUNFAILURES, "-n", "2", "-p", "no:cacheprovider")
    assert_outcomes(result, failed=1, passed=2, rerun=3)
    result.stdout.re_match_lines([r"captured incident_\S+: 1 failure\(s\) \(1 new\), 1 flaky \(passed on re-run\) -> "])
    assert [row[1:3] for row in history(pytester.path)] == [("test_x.py::test_bad", FAILED),
                                                             ("test_x.py::test_flaky", PASSED_ON_RERUN)]


def test_the_headline_counts_the_flaky_tests_that_passed_on_a_rerun() -> None:
    assert triage_headline(["new", "flaky"], "main", passed_on_rerun=1) == "1 new, 1 flaky (passed on re-run)"
    assert triage_headline(["flaky", "known", "flaky"], "main", passed_on_rerun=1) == (
        "1 known on main, 2 flaky (1 passed on re-run)")
    assert triage_headline(["new"], "main", passed_on_rerun=1) == "1 new"


def test_under_selfheal_ci_the_green_run_is_found_by_its_token(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`selfheal ci` finds its pytest's record of a green run by the run token, which the
    tests never see; a record without the token is not its run's."""
    pytester.makepyfile(test_x=FLIPS + OK)
    root = pytester.path / ".selfheal"
    pytester.runpytest("--selfheal", *RERUNFAILURES)  # another run's record, before ci's
    before = set(local_segments(root))
    monkeypatch.setenv(CI_RUN_ENV, "token-of-this-ci-run")
    assert_outcomes(pytester.runpytest("--selfheal", *RERUNFAILURES), passed=2, rerun=1)
    token_run = ci_capture_run_id("token-of-this-ci-run")
    assert passed_on_rerun_in(this_run_segments(root, before, token_run)) == ["test_x.py::test_flaky"]
    assert passed_on_rerun_in(this_run_segments(root, set(), ci_capture_run_id("another-token"))) == []
    assert len(this_run_segments(root, before, token_run)) == 1


def test_the_ci_headline_of_a_green_run_counts_its_rerun_passes() -> None:
    info = CiVerdict(FinalStatus.PASSED, "none", 0, None, 0, passed_on_rerun=("t.py::test_a", "t.py::test_b"))
    report = build_report(incidents=[])
    assert ci_headline(report, info) == ("**selfheal: passed — stop reason `none`** (pytest passed, 2 flaky (passed on "
                                         "re-run): t.py::test_a, t.py::test_b; nothing to loop)")
    # Read back from an artifact (comment-only mode), checked.
    block = {**info.to_json(), "passed_on_rerun": ["t.py::test_a", 7, "t.py::test_b"]}
    assert sanitize_ci_info(block, report).passed_on_rerun == info.passed_on_rerun
    assert "passed_on_rerun" not in CiVerdict(FinalStatus.PASSED, "none", 0, None, 0).to_json()


@pytest.mark.slow
def test_selfheal_ci_counts_a_green_runs_rerun_pass_and_shares_its_record(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", ini=None, files={"test_x.py": FLIPS + OK})
    env = actions_env(tmp_path, None, event={"ref": "refs/heads/main", "repository": {"default_branch": "main"}},
                      event_name="push")
    env["GITHUB_REF_NAME"] = "main"
    done = cli("ci", "--", "-q", "-p", "no:flaky", "--reruns", "2", cwd=project, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = outputs_of(env)
    assert out["final-status"] == "passed" and out["history-segments"], out
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "pytest passed, 1 flaky (passed on re-run): test_x.py::test_flaky; nothing to loop" in summary.splitlines()[0]
