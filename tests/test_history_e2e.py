"""The failure history end to end: a real git repository, ``selfheal ci``
driven as in tests/test_ci.py, the loopback GitHub server, one reports root persisted from a
push run on ``main`` to the pull-request runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_github import FakeGitHub
from helpers import cli, git_commit_all, make_project
from junitparser.xunit2 import JUnitXml
from test_ci import FLAKY_TEST, PR, actions_env, first_visible_line, ours, outputs_of, run_ci

from pytest_selfheal.errors import EXIT_OK, EXIT_UNRESOLVED
from pytest_selfheal.github.ci_verdict import only_quarantined, unresolved_failures
from pytest_selfheal.gitrepo import run_git
from pytest_selfheal.history.triage import QuarantineEntry
from pytest_selfheal.records.report import Report, ReportIncident

GOLDEN = Path(__file__).resolve().parent / "golden_reports" / "triage_pull_request.expected.json"

KNOWN = "def test_known():\n    assert 2 + 2 == 5, 'broken on main already'\n"
NEW = "def test_new():\n    assert 'pr' == 'main', 'broken by the pull request'\n"
UPSTREAM = "def test_upstream():\n    raise ConnectionError('the sandbox is down')\n"
PASSING = "def test_{name}():\n    pass\n"
BASE_QUARANTINE = """\
quarantine:
  - test: test_upstream.py::test_upstream
    reason: upstream sandbox flaps, OPS-12
    owner: "@platform"
  - test: test_known.py::test_known
    reason: an old entry
    expires: 2020-01-31
"""
OWN_ENTRY = """\
  - test: test_new.py::test_new
    reason: the PR quarantines its own failure
"""


def head(project: Path) -> str:
    return run_git(project, ["rev-parse", "HEAD"]).decode().strip()


def pr_env(tmp_path: Path, fake: FakeGitHub, base: str, sha: str) -> dict[str, str]:
    event = {"pull_request": {"number": PR, "base": {"sha": base, "ref": "main"}, "head": {"sha": sha}}}
    env = actions_env(tmp_path, fake, event=event)
    env.update({"GITHUB_BASE_REF": "main", "GITHUB_HEAD_REF": "feature", "GITHUB_SHA": sha,
                "GITHUB_REF_NAME": f"{PR}/merge", "FLAKY_STATE": str(tmp_path / "flaky.state")})
    return env


def triage_of(report_json: str) -> dict[str, str]:
    report = json.loads(Path(report_json).read_text())
    return {t["nodeid"]: t["label"] for entry in report["incidents"] for t in entry["triage"]}


@pytest.mark.slow  # ~12 s of real CI runs; the shared-history tests check known/new by default
def test_known_new_flaky_and_quarantined_from_main_to_the_pull_request(tmp_path: Path,
                                                                       fake_github: FakeGitHub) -> None:
    project = make_project(tmp_path / "proj", {"test_known.py": KNOWN, ".selfheal-quarantine.yml": BASE_QUARANTINE})
    base = head(project)

    # 1. A push run on main: one failing test, recorded in the history.
    (tmp_path / "push").mkdir()
    push = actions_env(tmp_path / "push", None, event={}, event_name="push")
    push.update({"GITHUB_REF_NAME": "main", "GITHUB_SHA": base, "GITHUB_RUN_ID": "1"})
    first = run_ci(project, push, "--no-comment", "--", "-q")
    assert first.returncode == EXIT_UNRESOLVED, first.stdout + first.stderr
    assert triage_of(outputs_of(push)["report-json-path"]) == {"test_known.py::test_known": "new"}

    # 2. The pull request: a new failing test, a flaky one, a third failing test that main's
    #    committed quarantine lists, and its own quarantine entry for its new failure.
    run_git(project, ["checkout", "-q", "-b", "feature"])
    for name, text in (("test_new.py", NEW), ("test_flaky.py", FLAKY_TEST), ("test_upstream.py", UPSTREAM)):
        (project / name).write_text(text)
    (project / ".selfheal-quarantine.yml").write_text(BASE_QUARANTINE + OWN_ENTRY)
    git_commit_all(project, "the pull request")
    env = pr_env(tmp_path, fake_github, base, head(project))
    result = run_ci(project, env, "--", "-q")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr  # known and new still fail
    # The expired entry of the base revision's list: ignored, with a warning naming its line.
    assert f"::warning::.selfheal-quarantine.yml@{base[:12]}:5: expired on 2020-01-31" in result.stdout
    assert result.stdout.count("expired on 2020-01-31") == 2, result.stdout  # the capture's line and the job's annotation
    outputs = outputs_of(env)
    assert triage_of(outputs["report-json-path"]) == {
        "test_known.py::test_known": "known",
        "test_new.py::test_new": "new",  # its own quarantine entry is ignored: the base's list applies
        "test_flaky.py::test_flaky": "flaky",
        "test_upstream.py::test_upstream": "quarantined",
    }
    report = json.loads(Path(outputs["report-json-path"]).read_text())
    assert report["triage_summary"]["line"] == "1 new, 1 known on main, 1 flaky (passed on re-run), 1 quarantined"
    (comment,) = ours(fake_github)
    body = str(comment["body"])
    assert "1 new, 1 known on main, 1 flaky (passed on re-run), 1 quarantined" in first_visible_line(body)
    failures = body.split("### Failures", 1)[1].split("\n### ", 1)[0]
    assert "| `test_known.py::test_known` |" in failures and "known on main: first seen at " + base[:12] in failures
    assert "**new**" in failures and "**flaky**" in failures and "test_upstream" not in failures
    quarantined = body.split("### Quarantined Failures", 1)[1].split("\n### ", 1)[0]
    assert "`test_upstream.py::test_upstream`" in quarantined and "upstream sandbox flaps, OPS-12" in quarantined
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "1 new, 1 known on main, 1 flaky (passed on re-run), 1 quarantined" in summary.splitlines()[0]

    # selfheal flaky ranks the flaky test; selfheal junit writes its <flakyFailure>.
    code, out, err = cli("flaky", "--json", cwd=project, env=env)
    assert code == EXIT_OK, err
    assert json.loads(out)[0]["nodeid"] == "test_flaky.py::test_flaky"
    xml = tmp_path / "selfheal-junit.xml"
    code, out, err = cli("junit", outputs["incident-id"], "--output", str(xml), cwd=project, env=env)
    assert code == EXIT_OK, err
    cases = {case.name: case for suite in JUnitXml.fromfile(str(xml)) for case in suite}
    (rerun,) = cases["test_flaky"].flaky_failures()
    assert cases["test_flaky"].is_flaky and "fails on the first run only" in rerun.message
    assert {(p.name, p.value) for p in cases["test_upstream"].properties()} == {
        ("selfheal.quarantined", "upstream sandbox flaps, OPS-12")}
    assert not list(cases["test_new"].properties())  # the head's own entry is not in force

    # 3. The exit code ignores only the base-quarantined failure: with the known failure
    #    fixed, the PR's own "quarantined" new failure still fails the job ...
    (project / "test_known.py").write_text(PASSING.format(name="known"))
    git_commit_all(project, "fix the known failure")
    env = pr_env(tmp_path, fake_github, base, head(project))
    fixed_known = run_ci(project, env, "--", "-q")
    assert fixed_known.returncode == EXIT_UNRESOLVED, fixed_known.stdout
    # ... and with it fixed too, only the base-quarantined failure is left: the job passes.
    (project / "test_new.py").write_text(PASSING.format(name="new"))
    git_commit_all(project, "fix the new failure")
    env = pr_env(tmp_path, fake_github, base, head(project))
    last = run_ci(project, env, "--", "-q")
    assert last.returncode == EXIT_OK, last.stdout + last.stderr
    assert outputs_of(env)["final-status"] == "escalated"  # the verdict stays honest
    assert triage_of(outputs_of(env)["report-json-path"]) == {"test_upstream.py::test_upstream": "quarantined"}
    assert "every failure left is quarantined (test_upstream.py::test_upstream)" in last.stdout


def test_the_job_passes_only_when_every_failure_left_is_quarantined() -> None:
    report = Report.read(json.loads(GOLDEN.read_text()), str(GOLDEN))
    left = unresolved_failures(report)  # test_clock passed on re-run: flaky, not left
    assert left == {"tests/test_calc.py::test_divide": "4b8e0c1d2f3a", "tests/test_calc.py::test_parse": "5c6d7e8f9a0b",
                    "tests/test_calc.py::test_upstream": "7e8f9a0b1c2d"}
    upstream = QuarantineEntry(reason="sandbox", test="tests/test_calc.py::test_upstream")
    assert only_quarantined(report, [upstream]) == {}
    by_fingerprint = [upstream, QuarantineEntry(reason="known", fingerprint="4b8e0c1d2f3a"),
                      QuarantineEntry(reason="parser", test="tests/test_calc.py::test_parse")]
    assert only_quarantined(report, by_fingerprint) == {"tests/test_calc.py::test_upstream": "sandbox",
                                                        "tests/test_calc.py::test_divide": "known",
                                                        "tests/test_calc.py::test_parse": "parser"}
    fixed = ReportIncident.from_json({"incident_id": "i", "tests_fixed": ["t.py::x"], "capture_tests": ["t.py::x"]})
    assert unresolved_failures(Report.from_json({"incidents": [fixed.to_json()]})) == {}
