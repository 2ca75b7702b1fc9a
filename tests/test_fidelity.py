"""Verification reproduces the project: the repair worktree carries the ignored
files the code under test needs — a generated ``_version.py`` imported by the package (as
setuptools-scm / hatch-vcs write it), a compiled catalogue the tests read — and the final
patch holds only the provider's change, so ``selfheal apply`` keeps ignored files the user
staged. Real git repositories, real captures and verifications (subprocesses), ``selfheal``
in process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import git
import pytest
from helpers import PYTEST_SELFHEAL, capture, cli, make_project, run_env, selfheal

from pytest_selfheal.errors import EXIT_OK, EXIT_UNRESOLVED
from pytest_selfheal.repair.prompt import build_prompt
from pytest_selfheal.store.root import Store

BUGGY = "def double(n):\n    return n + 1\n"
FIXED = "def double(n):\n    return n * 2\n"
FILES = {
    "pytest.ini": "[pytest]\npythonpath = src\ntestpaths = tests\n",
    ".gitignore": ".selfheal/\n__pycache__/\n_version.py\n*.mo\n",
    "src/pkg/__init__.py": "from ._version import version\n",
    "src/pkg/number.py": BUGGY,
    "tests/test_number.py": textwrap.dedent(
        """
        import pathlib
        import pytest
        import pkg
        from pkg.number import double

        def test_double():
            catalogue = pathlib.Path(pkg.__file__).parent / "locale" / "fr.mo"
            if not catalogue.exists():
                pytest.skip("catalogues not compiled")
            assert double(2) == 4
        """
    ),
}
GENERATED = {"src/pkg/_version.py": b"version = '1.2.3.dev4'\n", "src/pkg/locale/fr.mo": b"\xde\x12\x04\x95catalogue"}
AGENT = textwrap.dedent(
    """
    import pathlib, sys
    number = pathlib.Path(sys.argv[1], "src", "pkg", "number.py")
    number.write_text(number.read_text().replace("n + 1", "n * 2"))
    """
)


def _project(top: Path, *, staged: bool) -> None:
    for rel, text in FILES.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text)
    repo = git.Repo.init(top)
    repo.git.add(A=True)
    repo.index.commit("pkg with a bug")
    for rel, data in GENERATED.items():  # what the install / build step writes
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_bytes(data)
    if staged:  # the natural workaround a user tries: `git add -f` without a commit
        repo.git.add("-f", *GENERATED)
    repo.close()


def _pytest(top: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=top,
                          capture_output=True, text=True, timeout=120, env=run_env(), stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("staged", [False, True], ids=["ignored", "staged-ignored"])
def test_generated_and_ignored_files_reach_the_worktree_and_survive_apply(tmp_path: Path, staged: bool) -> None:
    top = tmp_path / "proj"
    _project(top, staged=staged)
    captured = _pytest(top, *PYTEST_SELFHEAL)
    assert captured.returncode == 1 and "FAILED tests/test_number.py::test_double" in captured.stdout, captured.stdout + captured.stderr
    (incident_id,) = [p.name for p in (top / ".selfheal" / "error_inbox").iterdir()]
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    command = json.dumps([sys.executable, str(agent), "{worktree}"])
    looped = cli("loop", incident_id, "--set", f"repair.command={command}", cwd=top, env=run_env())
    assert looped.returncode == EXIT_OK, looped.stdout + looped.stderr
    runs = top / ".selfheal" / "error_runs" / incident_id
    result = json.loads((runs / "run_result.json").read_text())
    assert result["stop_reason"] == "success", looped.stdout
    assert result["repair"]["files_changed"] == ["src/pkg/number.py"]
    patch = (runs / "final.patch").read_text()
    assert "deleted file" not in patch and "_version.py" not in patch and ".mo" not in patch
    status_before = git.Repo(top).git.status("--porcelain")
    applied = cli("apply", incident_id, "--yes", cwd=top, env=run_env())
    assert applied.returncode == EXIT_OK, applied.stdout + applied.stderr
    assert (top / "src/pkg/number.py").read_text() == FIXED
    for rel, data in GENERATED.items():
        assert (top / rel).read_bytes() == data, rel
    # Exactly one change more: the fix; what the user had staged is still staged.
    status_after = git.Repo(top).git.status("--porcelain").splitlines()
    assert sorted(status_after) == sorted([*status_before.splitlines(), " M src/pkg/number.py"])
    assert ("A  src/pkg/_version.py" in status_after) is staged
    green = _pytest(top)
    assert green.returncode == 0 and "1 passed" in green.stdout, green.stdout + green.stderr


SKIPPING = textwrap.dedent(
    """
    import os
    import pytest

    def test_needs_flag():
        if not os.environ.get("SELFHEAL_TEST_FLAG"):
            pytest.skip("flag not set")
        assert 1 == 2
    """
)


def test_a_test_that_skips_in_verification_is_reported_skipped(tmp_path: Path) -> None:
    top = make_project(tmp_path / "skip", {"test_flag.py": SKIPPING})
    incident_id = capture(top, env={"SELFHEAL_TEST_FLAG": "1"})
    looped = selfheal(top, "loop", incident_id)  # the flag is gone: the test skips
    assert looped.returncode == EXIT_UNRESOLVED, looped.stdout + looped.stderr
    skipped = "1 skipped (test_flag.py::test_needs_flag)"
    assert f"{skipped}: verified nothing for them (not fixed, not the same failure)" in looped.stdout
    assert "STOP success" not in looped.stdout and "fingerprint same" not in looped.stdout
    store = Store(top / ".selfheal")
    (attempt,) = store.read_attempts(incident_id)
    assert dict(attempt.outcomes) == {"test_flag.py::test_needs_flag": "skipped"} and not attempt.verification_passed
    assert f"no verdict ({skipped})" in (attempt.decision.message or "")
    report = selfheal(top, "report", incident_id).stdout
    assert f"| 1 | verify | ⚠️ | {skipped} |" in report
    # The next repair prompt says the test verified nothing, not "no failure … still failing: none".
    prompt = build_prompt(incident=store.read_incident(incident_id), plan=store.read_plan(incident_id),
                          attempts=[attempt], iteration=2, max_iterations=3, log_tail="", allowed_paths=[],
                          remaining_budget=1)
    assert f"Selected tests that ran to no verdict in attempt 1: {skipped}" in prompt
    assert f"- ran to no verdict (not fixed): {skipped}" in prompt


CWD_TEST = textwrap.dedent(
    """
    from calc import double

    def test_reads_from_the_working_directory():
        # input.txt is in test/: found only when pytest runs from there.
        n = int(open("input.txt").read())
        assert double(n) == 2 * n
    """
)


def _cwd_project(tmp_path: Path) -> Path:
    top = make_project(tmp_path / "flat", {"calc.py": BUGGY, "test/test_cli.py": CWD_TEST,
                                           "test/input.txt": "3\n"}, ini="pythonpath = .\n")
    return top


def test_a_cwd_dependent_test_captured_in_a_subdirectory_is_verified_there(tmp_path: Path) -> None:
    top = _cwd_project(tmp_path)
    captured = _pytest(top / "test", *PYTEST_SELFHEAL, "test_cli.py")
    assert captured.returncode == 1, captured.stdout + captured.stderr
    (incident_id,) = [p.name for p in (top / ".selfheal" / "error_inbox").iterdir()]
    store = Store(top / ".selfheal")
    incident = store.read_incident(incident_id)
    assert incident.invocation_dir == "test"
    # One spelling per file: the traceback's `test_cli.py` (relative to test/) is test/test_cli.py.
    assert "test/test_cli.py" in incident.failures[0].target_paths
    assert "test_cli.py" not in incident.failures[0].target_paths
    plan = store.read_plan(incident_id)
    assert [list(a.test_paths) for a in plan.actions] == [["test/test_cli.py"]]
    # A no-op loop re-runs from test/: the same failure, never "fixed".
    looped = selfheal(top, "loop", incident_id)
    assert looped.returncode == EXIT_UNRESOLVED and "(from test/)" in looped.stdout, looped.stdout
    assert "STOP success" not in looped.stdout
    (attempt,) = store.read_attempts(incident_id)
    assert dict(attempt.outcomes) == {"test/test_cli.py::test_reads_from_the_working_directory": "failed"}
    assert attempt.failures[0].fingerprint == incident.failures[0].fingerprint


def test_an_agent_fix_is_verified_from_the_captures_directory_in_the_worktree(tmp_path: Path) -> None:
    top = _cwd_project(tmp_path)
    assert _pytest(top / "test", *PYTEST_SELFHEAL).returncode == 1
    (incident_id,) = [p.name for p in (top / ".selfheal" / "error_inbox").iterdir()]
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT.replace('"src", "pkg", "number.py"', '"calc.py"'))
    command = json.dumps([sys.executable, str(agent), "{worktree}"])
    looped = cli("loop", incident_id, "--set", f"repair.command={command}", cwd=top / "test", env=run_env())
    assert looped.returncode == EXIT_OK, looped.stdout + looped.stderr
    result = json.loads((top / ".selfheal" / "error_runs" / incident_id / "run_result.json").read_text())
    assert result["stop_reason"] == "success" and result["repair"]["files_changed"] == ["calc.py"]


@pytest.mark.slow
def test_an_agent_mode_run_from_another_directory_is_not_an_iteration(tmp_path: Path) -> None:
    top = _cwd_project(tmp_path)
    assert _pytest(top / "test", *PYTEST_SELFHEAL).returncode == 1
    (incident_id,) = [p.name for p in (top / ".selfheal" / "error_inbox").iterdir()]
    store = Store(top / ".selfheal")
    # From the root the test cannot find input.txt: that says nothing about the incident.
    elsewhere = _pytest(top, *PYTEST_SELFHEAL)
    assert (f"selfheal: incident {incident_id}: this run is not counted as an iteration: it ran from ./, the "
            "capture from test/") in elsewhere.stdout, elsewhere.stdout
    assert store.count_attempts(incident_id) == 0
    again = _pytest(top / "test", *PYTEST_SELFHEAL)
    assert f"selfheal: incident {incident_id} iteration 1 of 3" in again.stdout, again.stdout
    assert store.count_attempts(incident_id) == 1
