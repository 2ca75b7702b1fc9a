"""New tests are checked for flakiness before they merge: `selfheal ci` on a pull request
re-runs the tests the pull request adds or changes (github/new_tests.py)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import git
import pytest
from fake_github import FakeGitHub
from helpers import cli, git_commit_all, make_project
from test_ci import PR, actions_env, ours, outputs_of, run_ci

from pytest_selfheal.config.settings import merge_layers
from pytest_selfheal.errors import EXIT_OK, EXIT_UNRESOLVED
from pytest_selfheal.github.ci_verdict import new_tests_section, sanitize_ci_info
from pytest_selfheal.github.new_tests import (
    BUDGET_FLOOR_SECONDS,
    NewTestsRun,
    budget_seconds,
    changed_tests,
    check_new_tests,
    find_new_tests,
    rerun_options,
)
from pytest_selfheal.history.sources import RunBase
from pytest_selfheal.records.ci import NEW_FLAKY, NEW_UNCHECKED, NewTestResult, NewTestsCheck
from pytest_selfheal.records.jsondoc import plain_json
from pytest_selfheal.records.report import Report

MODULE = textwrap.dedent('''\
    import pytest

    VALUE = 1


    def helper():
        return VALUE


    @pytest.mark.parametrize("n", [1, 2])
    def test_param(n):
        assert n


    def test_plain():
        assert helper()


    class TestGroup:
        limit = 3

        def test_one(self):
            assert self.limit

        def test_two(self):
            assert True
    ''')


def _line(text: str) -> int:
    return next(i for i, line in enumerate(MODULE.splitlines(), start=1) if text in line)


@pytest.mark.parametrize(("changed", "expected"), [
    ("[1, 2]", ["test_param"]),  # a parametrisation is part of its test
    ("assert helper()", ["test_plain"]),
    ("assert self.limit", ["TestGroup::test_one"]),
    ("limit = 3", ["TestGroup"]),  # a class attribute: every test of the class
    ("VALUE = 1", []),  # module-level code is not a test
    ("return VALUE", []),  # nor a helper function
])
def test_changed_lines_name_the_tests_they_touch(changed: str, expected: list[str]) -> None:
    line = _line(changed)
    assert changed_tests(MODULE, [(line, line)]) == expected


def test_an_added_module_is_all_new() -> None:
    assert changed_tests(MODULE, [(1, len(MODULE.splitlines()))]) == ["test_param", "test_plain", "TestGroup"]


def test_reruns_keep_the_jobs_options_not_its_selections() -> None:
    args = ["-q", "tests", "-k", "fast", "-p", "no:warnings", "tests/unit/test_a.py::test_x", "--tb=short", "-x"]
    assert rerun_options(args) == ["-q", "-k", "fast", "-p", "no:warnings", "--tb=short", "-x"]


def test_the_budget_is_the_share_above_a_floor_and_below_the_cap() -> None:
    assert budget_seconds(300.0, 120.0, 0.2) == pytest.approx(60.0)
    assert budget_seconds(10_000.0, 120.0, 0.2) == 120.0
    # A suite that runs in a second still gets the floor: its new tests are re-run their count.
    assert budget_seconds(0.5, 120.0, 0.2) == BUDGET_FLOOR_SECONDS
    assert budget_seconds(0.5, 10.0, 0.2) == 10.0  # a cap set below the floor is the user's word


@pytest.mark.parametrize(("base", "note"), [
    (RunBase("pull_request", True, None), "the pull_request event names no base revision"),
    (RunBase("pull_request_target", True, None), "the pull_request_target event names no base revision"),
    (RunBase("push", True, "ab" * 20), "not a pull request event"),
    (RunBase(), "not a pull request event"),
])
def test_the_run_base_says_why_no_new_test_is_checked(tmp_path: Path, base: RunBase, note: str) -> None:
    """A pull request without a base revision is not told it is no pull request."""
    check = check_new_tests(NewTestsRun(tmp_path, base, [], 1.0), merge_layers([]), say=print)
    assert check.note == f"new tests not checked: {note}"


def test_an_artifacts_new_tests_block_is_checked_field_by_field() -> None:
    check = NewTestsCheck("3 new tests re-run 4 of 5 time(s) (seed 7)",
                          (NewTestResult("t.py::test_a", 3, 2, "boom", reruns=4, planned=5),
                           NewTestResult("t.py::test_b", 5, 0, reruns=5, planned=5),
                           NewTestResult("t.py::test_c", 5, 0, reruns=4, planned=5)),
                          seed=7, reruns=4, not_rerun=1, fails_job=True, unchecked_fails_job=True)
    block = {"final_status": "passed", "stop_reason": "none", "new_tests": plain_json(check)}
    back = sanitize_ci_info(block, Report.from_json({}))
    assert back.new_tests == check
    assert back.new_tests.flaky == ("t.py::test_a",)
    assert back.new_tests.unchecked == ("t.py::test_c",)  # passed every run it had, but not its count
    hostile = sanitize_ci_info({"new_tests": {"tests": [{"nodeid": 5}, "x", {"nodeid": "a", "passed": -3}],
                                              "note": ["no"]}}, Report.from_json({}))
    assert hostile.new_tests is not None
    assert [(t.nodeid, t.passed) for t in hostile.new_tests.tests] == [("a", 0)]


def test_the_section_names_the_flaky_ones_and_bounds_the_lists() -> None:
    tests = tuple(NewTestResult(f"t.py::test_{i}", 1, 1, "AssertionError: odd run") for i in range(25))
    section = new_tests_section(NewTestsCheck("25 re-run", tests, fails_job=True))
    assert "**25 new or changed tests are flaky**" in section and "this fails the job" in section
    assert section.count(f"- {NEW_FLAKY}") == 20 and "… and 5 more" in section


def test_the_section_gives_unchecked_tests_their_own_line() -> None:
    tests = (NewTestResult("t.py::test_slow", 1, 0, reruns=2, planned=5), NewTestResult("t.py::test_ok", 6, 0, reruns=5, planned=5))
    section = new_tests_section(NewTestsCheck("2 re-run", tests, unchecked_fails_job=True))
    assert "**1 new or changed test is unchecked** — not re-run their count, so not checked; this fails the job" \
        in section
    assert f"- {NEW_UNCHECKED} `t.py::test_slow` — re-run 2 of 5 time(s)" in section
    assert "Checked, passed every run: `t.py::test_ok`" in section
    reported = new_tests_section(NewTestsCheck("2 re-run", tests))
    assert "reported only (`fail-on-new-unchecked: false`)" in reported


def test_new_tests_are_what_the_pull_request_collects_and_its_base_did_not(tmp_path: Path) -> None:
    """A parametrisation added through a module-level list (no test's line changed), a test
    bound by assignment, and a test changed in place: each found, nothing else."""
    project = make_project(tmp_path / "proj", {
        "test_m.py": "import pytest\n\nCASES = [1]\n\n\n@pytest.mark.parametrize('n', CASES)\n"
                     "def test_p(n):\n    assert n\n\n\ndef test_same():\n    assert True\n\n\n"
                     "def test_edited():\n    assert 1\n"})
    base = git.Repo(project).head.commit.hexsha
    text = (project / "test_m.py").read_text()
    text = text.replace("CASES = [1]", "CASES = [1, 2]").replace("assert 1\n", "assert 2\n")
    (project / "test_m.py").write_text(text + "\n\ndef _impl():\n    pass\n\n\ntest_bound = _impl\n")
    git_commit_all(project, "change tests")
    said: list[str] = []
    run = NewTestsRun(project, RunBase("pull_request", True, base), [], 1.0, env=dict(os.environ))
    found = find_new_tests(run, merge_layers([]), base, say=said.append)
    assert found == ["test_m.py::test_p[2]", "test_m.py::test_edited", "test_m.py::test_bound"]
    assert said == []
    assert git.Repo(project).git.worktree("list").count("\n") == 0  # the base's checkout is gone


# --------------------------------------------------------------------------- selfheal ci end to end

OLD_TEST = '''
import os
from pathlib import Path


def test_old():
    with Path(os.environ["RUNS_LOG"]).open("a") as log:
        log.write("old\\n")
'''

NEW_TESTS = '''
import os
from pathlib import Path


def _runs():
    log = Path(os.environ["RUNS_LOG"])
    with log.open("a") as out:
        out.write("flaky\\n")
    return log.read_text().splitlines().count("flaky")


def _impl():
    assert _runs() % 2 == 1, "fails every second run"


test_flaky = _impl  # a test bound by assignment: only pytest's collection sees it


def test_stable():
    assert True
'''


def _pull_request(tmp_path: Path) -> tuple[Path, str]:
    """A project whose base commit has test_old.py and whose head adds test_new.py: ``(project, base sha)``."""
    project = make_project(tmp_path / "proj", {"test_old.py": OLD_TEST})
    base = git.Repo(project).head.commit.hexsha
    (project / "test_new.py").write_text(NEW_TESTS)
    git_commit_all(project, "add tests")
    return project, base


def _env(tmp_path: Path, fake: FakeGitHub, base: str) -> dict[str, str]:
    env = actions_env(tmp_path, fake, event={"pull_request": {"number": PR, "base": {"sha": base}}})
    env["RUNS_LOG"] = str(tmp_path / "runs.log")
    return env


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_a_new_test_failing_every_second_run_fails_the_job(tmp_path: Path, fake_github: FakeGitHub) -> None:
    project, base = _pull_request(tmp_path)
    env = _env(tmp_path, fake_github, base)
    result = run_ci(project, env, "--set", "new_tests.seed=11",
                    "--set", "new_tests.reruns=3")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout
    assert "flaky (new): test_new.py::test_flaky" in result.stdout  # bound by assignment, found by collection
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "### New tests checked for flakiness" in summary
    assert "`test_new.py::test_flaky` — 2 passed, 2 failed: AssertionError: fails every second run" in summary
    assert "Checked, passed every run: `test_new.py::test_stable`" in summary
    assert "re-run 3 of 3 time(s) (seed 11)" in summary
    [comment] = ours(fake_github)
    assert "flaky (new) `test_new.py::test_flaky`" in str(comment["body"])
    assert json.loads(outputs_of(env)["new-flaky-tests"]) == ["test_new.py::test_flaky"]
    runs = Path(env["RUNS_LOG"]).read_text().splitlines()
    assert runs.count("old") == 1  # an unchanged test runs once: the job's own run
    assert runs.count("flaky") == 4  # the job's own run and 3 re-runs
    # Only reported: the job passes, the summary says so.
    reported = run_ci(project, env, "--set", "new_tests.reruns=1",
                      "--no-comment", "--no-fail-on-new-flaky")
    assert reported.returncode == EXIT_OK, reported.stdout
    assert "selfheal ci: flaky (new): test_new.py::test_flaky" in reported.stdout
    assert "reported only (`fail-on-new-flaky: false`)" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    history = cli("flaky", cwd=project, env=env)  # the flaky new test is in the failure history
    assert "test_new.py::test_flaky" in history.stdout


def test_a_spent_budget_leaves_the_new_tests_unchecked_and_fails_the_job(tmp_path: Path,
                                                                         fake_github: FakeGitHub) -> None:
    project, base = _pull_request(tmp_path)
    env = _env(tmp_path, fake_github, base)
    result = run_ci(project, env, "--set", "new_tests.max_seconds=0.001")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout
    assert "re-run 0 of 5 time(s)" in result.stdout and "5 re-run(s) left out: the budget of" in result.stdout
    assert "selfheal ci: 2 new or changed test(s) unchecked (not re-run their count): the job fails" in result.stdout
    assert Path(env["RUNS_LOG"]).read_text().splitlines().count("flaky") == 1  # the job's own run only
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    # The test bound by assignment is found: pytest collects it on the pull request, not on the base.
    assert "**2 new or changed tests are unchecked** — not re-run their count, so not checked; this fails the job" \
        in summary
    assert f"- {NEW_UNCHECKED} `test_new.py::test_flaky` — re-run 0 of 5 time(s)" in summary
    [comment] = ours(fake_github)  # a passing run with unchecked tests comments
    assert f"{NEW_UNCHECKED} `test_new.py::test_stable`" in str(comment["body"])


@pytest.mark.slow  # a second `selfheal ci` run: the switch's rendering is checked in the default tier
def test_unchecked_new_tests_are_only_reported_when_switched_off(tmp_path: Path, fake_github: FakeGitHub) -> None:
    project, base = _pull_request(tmp_path)
    env = _env(tmp_path, fake_github, base)
    env["INPUT_FAIL_ON_NEW_UNCHECKED"] = "false"  # the action's input
    reported = run_ci(project, env, "--action-inputs", "--set", "new_tests.max_seconds=0.001", "--no-comment")
    assert reported.returncode == EXIT_OK, reported.stdout
    assert "reported only (`fail-on-new-unchecked: false`)" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()


@pytest.mark.slow  # two collections and a re-run
def test_a_base_that_does_not_collect_makes_every_test_of_a_changed_module_new(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"conftest.py": "raise RuntimeError('the base cannot collect')\n",
                                               "test_old.py": "def test_old():\n    pass\n"})
    base = git.Repo(project).head.commit.hexsha
    (project / "conftest.py").write_text("")
    (project / "test_new.py").write_text("def test_new():\n    pass\n")
    git_commit_all(project, "fix the conftest, add a test")
    env = actions_env(tmp_path, None, event={"pull_request": {"number": PR, "base": {"sha": base}}})
    result = run_ci(project, env, "--no-comment", "--set", "new_tests.reruns=1")
    assert result.returncode == EXIT_OK, result.stdout
    [line] = [ln for ln in result.stdout.splitlines() if "did not collect" in ln]
    assert line.startswith(f"selfheal ci: warning: the base revision {base[:12]} did not collect (pytest exited with")
    assert line.endswith("every test of a changed test module counts as new")
    assert "1 new or changed test(s) re-run 1 of 1 time(s)" in result.stdout  # test_new only: test_old is unchanged
    assert "Traceback" not in result.stdout


def test_a_shallow_clone_checks_nothing_and_says_so(tmp_path: Path, fake_github: FakeGitHub) -> None:
    project, _base = _pull_request(tmp_path)
    env = _env(tmp_path, fake_github, "ab" * 20)  # a base commit this clone does not have
    result = run_ci(project, env, "--no-comment")
    assert result.returncode == EXIT_OK, result.stdout
    assert f"new tests not checked: the base revision {'ab' * 6} is not in this clone" in result.stdout
    assert json.loads(outputs_of(env)["new-flaky-tests"]) == []
    assert Path(env["RUNS_LOG"]).read_text().splitlines().count("flaky") == 1


def test_a_push_event_checks_nothing(tmp_path: Path) -> None:
    project, _base = _pull_request(tmp_path)
    env = actions_env(tmp_path, None, event={}, event_name="push")
    env["RUNS_LOG"] = str(tmp_path / "runs.log")
    result = run_ci(project, env)
    assert result.returncode == EXIT_OK, result.stdout
    assert "new tests not checked: not a pull request event" in result.stdout
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "None: no incident, so no plan." in summary and "selfheal plan" not in summary
