"""Repair providers end to end: `pytest --selfheal` captures an injected bug, then
`selfheal loop ID` runs a real agent command (a small Python script) in an isolated
worktree, in a real git repository. Captures, verifications and agents
are real subprocesses; ``selfheal`` itself runs in process (``helpers.cli``) except where a
fresh interpreter or a signal is what is tested."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import git
import pytest
from helpers import CliResult, cli, fake_distribution

from pytest_selfheal.errors import EXIT_CANCELLED, EXIT_OK, EXIT_REFUSED, EXIT_UNRESOLVED
from pytest_selfheal.loop.codepath import finder_paths, redirect_to_worktree

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"

# The "agent": MODE COUNTER WORKTREE PROMPT_FILE. Counts its starts in COUNTER.
AGENT = textwrap.dedent(
    """
    import pathlib, sys, time
    mode, counter, worktree, prompt = sys.argv[1:5]
    count = pathlib.Path(counter)
    count.write_text(str(int(count.read_text() or 0) + 1) if count.exists() else "1")
    if not pathlib.Path(prompt).read_text().startswith("# Repair request"):
        sys.exit(9)
    calc = pathlib.Path(worktree, "calc.py")
    if mode in ("fix", "out_of_scope"):
        calc.write_text(calc.read_text().replace("a - b", "a + b"))
        print("fixed calc.py")
    if mode == "out_of_scope":
        pathlib.Path(worktree, "other.py").write_text("o = 2\\n")
    if mode == "weaken":
        tests = pathlib.Path(worktree, "test_calc.py")
        tests.write_text(tests.read_text().replace("assert add(2, 3) == 5", "assert True"))
    if mode == "hang":
        time.sleep(60)
    if mode == "crash":
        print("agent: model quota exceeded", file=sys.stderr)
        sys.exit(3)
    """
)


def job_env(pythonpath: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment with ``pythonpath`` first on PYTHONPATH, no verification flag."""
    env = dict(os.environ)
    paths = [*pythonpath, str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.pop("SELFHEAL_VERIFYING", None)
    return env


def run(argv: list[str], cwd: Path, pythonpath: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """``argv`` as a real subprocess in ``job_env(pythonpath)``; never a traceback."""
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, env=job_env(pythonpath))
    assert "Traceback" not in result.stderr, result.stderr
    return result


class Project:
    """A tiny project with an injected bug, committed with gitpython, and its captured incident."""

    def __init__(self, tmp_path: Path, *, use_git: bool = True, capture: bool = True) -> None:
        self.top = tmp_path / "proj"
        self.top.mkdir()
        (self.top / "calc.py").write_text(BUGGY)
        (self.top / "test_calc.py").write_text(TESTS)
        (self.top / "other.py").write_text("o = 1\n")
        # No .gitignore on purpose: the reports root and bytecode caches are untracked, not ignored.
        if use_git:
            repo = git.Repo.init(self.top)
            repo.git.add(A=True)
            repo.index.commit("calc with a bug")
            repo.close()
        self.agent = tmp_path / "fix_agent.py"
        self.agent.write_text(AGENT)
        self.counter = tmp_path / "starts"
        if capture:
            self.capture()

    def command(self, mode: str) -> str:
        return json.dumps([sys.executable, str(self.agent), mode, str(self.counter), "{worktree}", "{prompt_file}"])

    def capture(self, *extra: str) -> subprocess.CompletedProcess[str]:
        captured = run([sys.executable, "-m", "pytest", "-q", "--selfheal", "-p", "no:cacheprovider", *extra], self.top)
        assert captured.returncode == 1, captured.stdout  # the plugin never changes pytest's outcome
        incidents = [p for p in (self.top / ".selfheal").glob("error_*/**/incident_*") if p.is_dir()]
        self.incident_id = incidents[0].name
        return captured

    def loop(self, mode: str, *extra: str) -> CliResult:
        """``selfheal loop`` with the agent in ``mode`` (the console script's ``main``, in process)."""
        return cli("loop", self.incident_id, "--set", f"repair.command={self.command(mode)}", *extra, cwd=self.top,
                   env=job_env())

    @property
    def runs(self) -> Path:
        return self.top / ".selfheal" / "error_runs" / self.incident_id

    def run_result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.runs / "run_result.json").read_text())
        return data

    def attempts(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.runs.glob("attempt_*.json"))]

    def starts(self) -> int:
        return int(self.counter.read_text()) if self.counter.exists() else 0

    def archived(self, bucket: str) -> bool:
        return (self.top / ".selfheal" / "error_archive" / bucket / self.incident_id).is_dir()

    def events(self, bucket: str) -> list[str]:
        log = self.top / ".selfheal" / "error_archive" / bucket / self.incident_id / "audit_tail.jsonl"
        return [json.loads(line)["event"] for line in log.read_text().splitlines()]

    def only_main_worktree(self) -> bool:
        repo = git.Repo(self.top)
        try:
            return len(repo.git.worktree("list", "--porcelain").split("\n\n")) == 1
        finally:
            repo.close()


@pytest.mark.slow  # by default: test_fix_with_approve_lands_in_the_working_tree, test_ci.py -k only_proposed
def test_fix_without_approval_proposes_a_correct_patch(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("fix")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    # The user's tree is untouched; the fix is proposed with the exact command to apply it.
    assert (project.top / "calc.py").read_text() == BUGGY
    assert f"selfheal apply {project.incident_id}" in result.stdout
    outcome = project.run_result()
    assert outcome["final_status"] == "resolved" and outcome["stop_reason"] == "success"
    assert outcome["repair"]["applied"] is False
    assert outcome["repair"]["apply_command"] == f"selfheal apply {project.incident_id}"
    assert project.archived("resolved") and project.starts() == 1
    (attempt,) = project.attempts()
    assert attempt["repair"]["result"] == "diff" and attempt["repair"]["files_changed"] == ["calc.py"]
    assert attempt["repair"]["patch"] == "attempt_01.patch" and attempt["mode"] == "repair"
    for name in ("prompt_01.md", "repair_01.log", "attempt_01.patch", "final.patch"):
        assert (project.runs / name).is_file(), name
    events = project.events("resolved")
    for name in ("repair_attempt_started", "diff_proposed", "repair_attempt_completed", "verification_finished"):
        assert name in events
    assert project.only_main_worktree()
    # The proposed patch is correct: applied to the user's tree, the test passes.
    patch = (project.runs / "final.patch").read_text()
    assert "-    return a - b\n+    return a + b\n" in patch and ".selfheal" not in patch and "__pycache__" not in patch
    applied = cli("apply", project.incident_id, "--yes", cwd=project.top, env=job_env())
    assert applied.returncode == EXIT_OK, applied.stderr
    assert (project.top / "calc.py").read_text() == FIXED  # exactly the fix the verification saw pass


def test_fix_with_approve_lands_in_the_working_tree(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("fix", "--approve", "--json")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert (project.top / "calc.py").read_text() == FIXED
    assert project.archived("resolved")
    data = json.loads(result.stdout)  # --json: the run result on stdout, progress on stderr
    assert data["final_status"] == "resolved" and data["repair"]["applied"] is True
    assert data["repair"]["final_patch"] == "final.patch" and data["repair"]["apply_command"] is None
    assert project.run_result()["repair"]["applied"] is True
    assert "fix applied to your working tree" in result.stderr
    assert project.only_main_worktree()


@pytest.mark.slow  # ~5 s; by default: test_fix_with_approve_lands_in_the_working_tree
def test_pytest_selfheal_loop_with_selfheal_approve(tmp_path: Path) -> None:
    project = Project(tmp_path, capture=False)
    result = project.capture("--selfheal-loop", "--selfheal-approve",
                             "--selfheal-set", f"repair.command={project.command('fix')}")
    assert "fix applied to your working tree" in result.stdout
    assert (project.top / "calc.py").read_text() == FIXED
    assert project.archived("resolved") and project.run_result()["repair"]["applied"] is True
    assert project.only_main_worktree()


@pytest.mark.slow  # ~6 s; by default: test_repair.py -k out_of_scope
def test_out_of_scope_edit_stops_scope_expansion_denied(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("out_of_scope")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    outcome = project.run_result()
    assert outcome["stop_reason"] == "scope_expansion_denied" and project.archived("escalated")
    (attempt,) = project.attempts()
    assert attempt["repair"]["scope_denied"] is True and attempt["repair"]["out_of_scope"] == ["other.py"]
    assert attempt["scope_denied"] is True
    assert "scope_expansion_requested" in project.events("escalated")
    # Nothing reached the user, and the denied change was not kept as a proposal.
    assert (project.top / "other.py").read_text() == "o = 1\n" and (project.top / "calc.py").read_text() == BUGGY
    assert outcome["repair"]["final_patch"] is None


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_after_a_reopen_the_repair_lines_carry_the_iteration_not_the_attempt_number(tmp_path: Path) -> None:
    project = Project(tmp_path)
    verify_only = cli("loop", project.incident_id, cwd=project.top, env=job_env())  # attempt 1: the same failure
    assert verify_only.returncode == EXIT_UNRESOLVED, verify_only.stdout + verify_only.stderr
    assert cli("reopen", project.incident_id, cwd=project.top, env=job_env()).returncode == EXIT_OK
    result = project.loop("fix")  # attempt 2, the first iteration of the new loop run
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("selfheal: incident ")]
    prefix = f"selfheal: incident {project.incident_id} iteration 1 of 3: "
    assert prefix + "repair: asking command:" in "\n".join(lines)
    assert prefix + "repair: diff (calc.py)" in lines
    assert any(line.startswith(prefix + "running ") for line in lines)
    assert not any(" repair 2" in line for line in lines)
    assert (project.runs / "prompt_02.md").is_file()  # files keep the attempt number


@pytest.mark.slow  # ~9 s; by default: test_repair.py -k timeout_kills, test_policy.py -k timeout
def test_hanging_agent_stops_timeout_after_one_retry(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("hang", "--set", "repair.timeout_seconds=1")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    assert project.run_result()["stop_reason"] == "timeout"
    assert project.starts() == 2  # the first call and exactly one retry
    assert [a["repair"]["result"] for a in project.attempts()] == ["timeout", "timeout"]
    assert "timed out after 1 s" in (project.runs / "repair_01.log").read_text()
    assert project.only_main_worktree()


@pytest.mark.slow  # ~7 s; by default: test_repair.py -k empty_diff
def test_agent_that_changes_nothing_stops_no_fix_found(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("nothing")
    assert result.returncode == EXIT_UNRESOLVED
    assert project.run_result()["stop_reason"] == "no_fix_found"
    assert [a["repair"]["result"] for a in project.attempts()] == ["no_fix_found", "no_fix_found"]
    assert project.starts() == 2 and not (project.runs / "final.patch").exists()


@pytest.mark.slow  # ~7 s; by default: test_repair.py -k "exit_code or hook_exception"
def test_crashing_agent_is_recorded_as_crashed(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("crash")
    assert result.returncode == EXIT_UNRESOLVED
    attempts = project.attempts()
    assert [a["repair"]["result"] for a in attempts] == ["crashed", "crashed"]
    assert attempts[0]["repair"]["exit_code"] == 3
    assert "model quota exceeded" in attempts[0]["repair"]["message"]
    assert project.run_result()["stop_reason"] == "no_fix_found"  # two provider failures in a row
    assert "agent: model quota exceeded" in (project.runs / "repair_01.log").read_text()


def test_not_a_git_repository_is_refused(tmp_path: Path) -> None:
    project = Project(tmp_path, use_git=False)
    result = project.loop("fix")
    assert result.returncode == EXIT_REFUSED
    assert result.stderr.startswith("selfheal: error: repair providers need a git repository")
    assert result.stderr.count("\n") == 1
    assert project.starts() == 0 and (project.top / "calc.py").read_text() == BUGGY


@pytest.mark.slow  # ~6 s; by default: test_repair.py -k cli_loads_entry_point_hooks
def test_cli_hook_provider_from_an_entry_point(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    fake_distribution(site, "e2e_fixer", """
        import pathlib, pluggy
        hookimpl = pluggy.HookimplMarker("pytest")

        @hookimpl
        def pytest_selfheal_repair(request):
            calc = pathlib.Path(request["worktree"], "calc.py")
            calc.write_text(calc.read_text().replace("a - b", "a + b"))
            return {"result": "done", "message": "swapped the operator"}
        """)
    project = Project(tmp_path)
    # A real process: the entry point is found on the PYTHONPATH of a fresh interpreter.
    result = run([sys.executable, "-m", "pytest_selfheal", "loop", project.incident_id, "--approve"], project.top,
                 pythonpath=[str(site)])
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    (attempt,) = project.attempts()
    assert attempt["repair"]["provider"] == "hook:e2e_fixer" and attempt["repair"]["message"] == "swapped the operator"
    assert (project.top / "calc.py").read_text() == FIXED


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_during_a_repair_cleans_up_and_stays_resumable(tmp_path: Path) -> None:
    project = Project(tmp_path)
    env = job_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest_selfheal", "loop", project.incident_id, "--set",
         f"repair.command={project.command('hang')}"],
        cwd=project.top, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    deadline = time.monotonic() + 60
    while not project.counter.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert project.counter.exists(), "the agent never started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_CANCELLED, out + err
    assert "Traceback" not in err and err.startswith("selfheal: error: cancelled")
    status = project.top / ".selfheal" / "error_inbox" / project.incident_id / "status.txt"
    assert status.read_text().strip() == "running"  # open and resumable
    assert project.attempts() == []  # the interrupted iteration is not recorded
    assert project.only_main_worktree() and not (project.runs / "worktree.json").exists()
    assert (project.top / "calc.py").read_text() == BUGGY


@pytest.mark.slow  # ~5 s; by default: test_approval_never_covers_a_weakened_test, test_agent_mode.py -k weakens
def test_an_agent_that_weakens_the_test_does_not_resolve(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("weaken")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    outcome = project.run_result()
    assert outcome["stop_reason"] == "scope_expansion_denied" and project.archived("escalated")
    (attempt,) = project.attempts()
    assert attempt["repair"]["out_of_scope"] == ["test_calc.py"] and attempt["scope_denied"] is True
    assert (project.top / "test_calc.py").read_text() == TESTS and outcome["tests_fixed"] == []
    # The prompt did not offer the test file as editable.
    prompt = (project.runs / "prompt_01.md").read_text()
    assert "Only edit these files (globs allowed): `calc.py`." in prompt


def test_approval_never_covers_a_weakened_test(tmp_path: Path) -> None:
    """--approve applies a verified fix; it is not permission to edit tests: nobody is asked,
    the edit is rolled back, the user's tests are untouched, and the stop is no success."""
    project = Project(tmp_path)
    result = project.loop("weaken", "--approve")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    outcome = project.run_result()
    assert outcome["stop_reason"] == "scope_expansion_denied" and outcome["final_status"] == "escalated"
    (attempt,) = project.attempts()
    assert attempt["repair"]["scope_denied"] is True and "allow_test_edits" in attempt["repair"]["message"]
    assert (project.top / "test_calc.py").read_text() == TESTS
    assert not (project.runs / "final.patch").exists()


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_test_edits_allowed_by_the_config_end_tests_edited_not_success(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("weaken", "--approve", "--allow-test-edits")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    outcome = project.run_result()
    assert (outcome["stop_reason"], outcome["final_status"]) == ("tests_edited", "escalated")
    assert project.archived("escalated")
    (attempt,) = project.attempts()
    assert attempt["repair"]["tests_edited"] == ["test_calc.py"]
    # Proposed for review, never applied, even with --approve.
    assert (project.top / "test_calc.py").read_text() == TESTS
    assert "test_calc.py" in (project.runs / "final.patch").read_text()
    assert "tests_edited" in result.stdout + result.stderr


SRC_AGENT = textwrap.dedent(
    """
    import pathlib, sys
    calc = pathlib.Path(sys.argv[1], "src", "calc", "__init__.py")
    calc.write_text(calc.read_text().replace("a - b", "a + b"))
    """
)


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_a_fix_in_the_worktree_is_judged_there_when_the_package_is_importable_from_the_user_tree(
    tmp_path: Path,
) -> None:
    # src layout whose package the user's environment imports from the working tree, as an
    # editable install (or PYTHONPATH=src) does: the verification must import the worktree's.
    top = tmp_path / "srcproj"
    (top / "src" / "calc").mkdir(parents=True)
    (top / "src" / "calc" / "__init__.py").write_text(BUGGY)
    (top / "tests").mkdir()
    (top / "tests" / "test_calc.py").write_text(TESTS)
    (top / "pytest.ini").write_text("[pytest]\n")
    repo = git.Repo.init(top)
    repo.git.add(A=True)
    repo.index.commit("calc with a bug")
    repo.close()
    user_env = job_env([str(top / "src")])
    captured = subprocess.run([sys.executable, "-m", "pytest", "-q", "--selfheal", "-p", "no:cacheprovider"], cwd=top,
                              capture_output=True, text=True, timeout=120, env=user_env)
    assert captured.returncode == 1, captured.stdout + captured.stderr
    (incident_id,) = [p.name for p in (top / ".selfheal" / "error_inbox").iterdir()]
    agent = tmp_path / "src_agent.py"
    agent.write_text(SRC_AGENT)
    command = json.dumps([sys.executable, str(agent), "{worktree}"])
    result = cli("loop", incident_id, "--set", f"repair.command={command}", "--set", 'repair.allowed_paths=["src/*"]',
                 cwd=top, env=user_env)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    run_result = json.loads((top / ".selfheal" / "error_runs" / incident_id / "run_result.json").read_text())
    assert run_result["stop_reason"] == "success" and run_result["repair"]["applied"] is False
    assert (top / "src" / "calc" / "__init__.py").read_text() == BUGGY  # proposed, not applied


def test_editable_finders_and_path_entries_map_to_the_worktree(tmp_path: Path) -> None:
    project, worktree = tmp_path / "p", tmp_path / "wt"
    for root in (project, worktree):
        (root / "src" / "pkg").mkdir(parents=True)
    (project / "lib").mkdir()  # untracked: no twin in the worktree
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "__editable___pkg_1_0_finder.py").write_text(
        f"MAPPING: dict[str, str] = {{'pkg': {str(project / 'src' / 'pkg')!r}}}\nNAMESPACES = {{}}\n")
    finders = finder_paths([str(site_dir)])
    assert finders == [str(project / "src")]
    redirect = redirect_to_worktree({"PYTHONPATH": str(project / "lib")}, project, worktree,
                                    path_entries=["/usr/lib/python3", str(project)], finders=finders)
    assert redirect.redirected == [str(worktree), str(worktree / "src")]
    assert redirect.missing == [str(project / "lib")]
    assert redirect.env["PYTHONPATH"].split(os.pathsep) == [str(worktree), str(worktree / "src"), str(project / "lib")]
