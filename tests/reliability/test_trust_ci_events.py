"""Every CI event is judged by what the tested code can control (docs/history.md "CI events").

Through ``selfheal ci`` with a simulated Actions environment (tests/test_ci.py's
``actions_env``), real git repositories and the loopback GitHub:

- a change that breaks ``mul`` and quarantines its own test passes neither the merge queue
  (``merge_group.base_sha``), nor a push to another branch (the default branch's tip), nor a
  manual run elsewhere; where no base is found the run fails closed, said in one line; on
  the default branch the committed list applies (the control);
- "known on main" means seen on the base repository's ``main``: a fork's own ``main``
  runs never make its new failure known.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pytest
from fake_github import FakeGitHub
from helpers import git_commit_all, make_project
from test_ci import PR, actions_env, ours, outputs_of, run_ci

from pytest_selfheal.errors import EXIT_OK, EXIT_UNRESOLVED
from pytest_selfheal.gitrepo import run_git
from pytest_selfheal.history.sources import ActionsContext, judge_event, quarantine_in_force

CALC = "def mul(a, b):\n    return a * b\n"
BROKEN = "def mul(a, b):\n    return a + b\n"
TEST = "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n"
OWN_QUARANTINE = "quarantine:\n  - test: test_calc.py::test_mul\n    reason: the change says so\n"
REPO = "octo-org/hello-world"
FAST = ("--set", "max_iterations=1")


def head(project: Path) -> str:
    return run_git(project, ["rev-parse", "HEAD"]).decode().strip()


def broken_change(tmp_path: Path) -> tuple[Path, str]:
    """A project whose base commit is green, then a commit that breaks ``mul`` and
    quarantines its own test; ``(project, base sha)``."""
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST})
    base = head(project)
    (project / "calc.py").write_text(BROKEN)
    (project / ".selfheal-quarantine.yml").write_text(OWN_QUARANTINE)
    git_commit_all(project, "break mul, quarantine its test")
    return project, base


def event_env(tmp_path: Path, name: str, event: dict[str, object], ref: str,
              fake: Optional[FakeGitHub] = None) -> dict[str, str]:
    env = actions_env(tmp_path, fake, event=event, event_name=name)
    env.update({"GITHUB_REF": ref, "GITHUB_REF_NAME": ref.rsplit("/", 1)[-1]})
    if fake is None:
        env["GITHUB_REPOSITORY"] = REPO
    return env


def repository(default: str = "main") -> dict[str, object]:
    return {"full_name": REPO, "default_branch": default}


def test_the_merge_queue_reads_the_quarantine_at_its_base_sha(tmp_path: Path) -> None:
    """Before: ``merge_group`` had no ``pull_request.base.sha``, so the working tree's list (the
    change's own) applied and the broken ``mul`` passed the queue with exit 0."""
    project, base = broken_change(tmp_path)
    event = {"merge_group": {"base_sha": base, "head_sha": head(project), "base_ref": "refs/heads/main",
                             "head_ref": "refs/heads/gh-readonly-queue/main/pr-7-" + base},
             "repository": repository()}
    env = event_env(tmp_path, "merge_group", event, "refs/heads/gh-readonly-queue/main/pr-7-" + base)
    done = run_ci(project, env, "--no-comment", *FAST, "--", "-q")
    assert done.returncode == EXIT_UNRESOLVED, done.stdout + done.stderr
    assert "every failure left is quarantined" not in done.stdout


@pytest.mark.slow  # ~6 s; by default the same judgement without the tests run: test_each_event_that_tests_...
def test_an_event_without_its_base_fails_closed_in_one_line(tmp_path: Path) -> None:
    project, base = broken_change(tmp_path)
    event = {"merge_group": {"head_sha": head(project), "base_ref": "refs/heads/main"}, "repository": repository()}
    env = event_env(tmp_path, "merge_group", event, "refs/heads/gh-readonly-queue/main/pr-7")
    done = run_ci(project, env, "--no-comment", *FAST, "--", "-q")
    assert done.returncode == EXIT_UNRESOLVED, done.stdout + done.stderr
    line = ("::warning::the merge_group event tests code not merged yet and no base revision was found "
            "(merge_group.base_sha): the quarantine list is not applied")
    assert line in done.stdout.splitlines()


def _judged_quarantine(project: Path, name: str, event: dict[str, object], ref: str) -> tuple[list[str], list[str]]:
    ci = ActionsContext(in_actions=True, event_name=name, ref=ref, repository=REPO)
    entries, warnings = quarantine_in_force(project, ".selfheal-quarantine.yml", judge_event(ci, event, project))
    return [str(e.test) for e in entries], warnings


def test_each_event_that_tests_unmerged_code_reads_a_base_it_cannot_change(tmp_path: Path) -> None:
    project, base = broken_change(tmp_path)
    feature = "refs/heads/feature"
    on_main = {"ref": "refs/heads/main", "repository": repository()}
    # Merged code: the working tree's list is the team's.
    assert _judged_quarantine(project, "push", on_main, "refs/heads/main") == (["test_calc.py::test_mul"], [])
    assert _judged_quarantine(project, "schedule", {"repository": repository()}, "refs/heads/main")[0] == [
        "test_calc.py::test_mul"]
    # A push to another branch, a manual run there, an issue comment: the default branch's
    # tip as fetched -- none fetched yet: fail closed, one line.
    for name in ("push", "workflow_dispatch", "issue_comment"):
        entries, warnings = _judged_quarantine(project, name, {"ref": feature, "repository": repository()}, feature)
        assert entries == [] and len(warnings) == 1 and "refs/remotes/origin/main" in warnings[0], (name, warnings)
    run_git(project, ["update-ref", "refs/remotes/origin/main", base])
    for name in ("push", "workflow_dispatch", "issue_comment"):
        assert _judged_quarantine(project, name, {"ref": feature, "repository": repository()}, feature) == ([], []), name
    # The payload must name the default branch: the repository's config (the tested code's) never does.
    entries, warnings = _judged_quarantine(project, "push", {"ref": "refs/heads/main"}, "refs/heads/main")
    assert entries == [] and "names no default branch" in warnings[0]
    judged = judge_event(ActionsContext(in_actions=True, event_name="push", ref=feature), {"repository": repository()},
                         project)
    assert judged.revision == base and judged.unmerged
    # A replace ref the tested code planted over the base commit is not followed.
    run_git(project, ["replace", base, head(project)])
    pull = {"pull_request": {"base": {"sha": base}}}
    assert _judged_quarantine(project, "pull_request", pull, f"refs/pull/{PR}/merge") == ([], [])


@pytest.mark.slow  # ~8 s: the same verdict through selfheal ci for the push and dispatch events
@pytest.mark.parametrize("name", ["push", "workflow_dispatch"])
def test_a_run_on_another_branch_fails_with_its_own_quarantine(tmp_path: Path, name: str) -> None:
    project, base = broken_change(tmp_path)
    run_git(project, ["update-ref", "refs/remotes/origin/main", base])
    env = event_env(tmp_path, name, {"ref": "refs/heads/feature", "repository": repository()}, "refs/heads/feature")
    done = run_ci(project, env, "--no-comment", *FAST, "--", "-q")
    assert done.returncode == EXIT_UNRESOLVED, done.stdout + done.stderr
    # The control: the same commit as the default branch's tip -- the list is the team's own.
    main = event_env(tmp_path, "push", {"ref": "refs/heads/main", "repository": repository()}, "refs/heads/main")
    passed = run_ci(project, main, "--no-comment", *FAST, "--", "-q")
    assert passed.returncode == EXIT_OK, passed.stdout + passed.stderr
    assert "every failure left is quarantined (test_calc.py::test_mul)" in passed.stdout


def _fork_pull_request(tmp_path: Path, fake: FakeGitHub, base: str, sha: str, run: str) -> dict[str, str]:
    event = {"pull_request": {"number": PR, "base": {"sha": base, "ref": "main", "repo": {"full_name": fake.repository}},
                              "head": {"sha": sha, "ref": "main", "repo": {"full_name": "forker/hello-world"}}},
             "repository": {"full_name": fake.repository, "default_branch": "main"}}
    (tmp_path / run).mkdir()
    env = actions_env(tmp_path / run, fake, event=event)
    # A fork's pull request from its own `main`: GITHUB_HEAD_REF is the fork's branch name.
    env.update({"GITHUB_BASE_REF": "main", "GITHUB_HEAD_REF": "main", "GITHUB_SHA": sha, "GITHUB_RUN_ID": run,
                "GITHUB_REF": f"refs/pull/{PR}/merge"})
    return env


def _labels(env: dict[str, str]) -> dict[str, str]:
    report = json.loads(Path(outputs_of(env)["report-json-path"]).read_text())
    return {t["nodeid"]: t["label"] for entry in report["incidents"] for t in entry["triage"]}


@pytest.mark.slow  # ~8 s: two selfheal ci runs; by default tests/test_history.py -k fork
def test_a_forks_main_is_not_main(tmp_path: Path, fake_github: FakeGitHub) -> None:
    """Before: runs recorded their branch as GITHUB_HEAD_REF (the fork's ``main``), "known"
    matched the name alone, and from the fork PR's second run on its own new failure was
    "known on main" in the headline and the triage."""
    project, base = broken_change(tmp_path)
    (project / ".selfheal-quarantine.yml").unlink()
    git_commit_all(project, "no quarantine")
    sha = head(project)
    for run in ("1", "2"):  # one reports root: the pull request's own cache restored
        env = _fork_pull_request(tmp_path, fake_github, base, sha, run)
        done = run_ci(project, env, *FAST, "--", "-q")
        assert done.returncode == EXIT_UNRESOLVED, done.stdout + done.stderr
        assert _labels(env) == {"test_calc.py::test_mul": "new"}, run
    (comment,) = ours(fake_github)
    assert "known on main" not in str(comment["body"]) and "1 new" in str(comment["body"])
