"""Trust boundaries, second round: a provider that leaves its worktree.

A repair command found the user's repository with ``git rev-parse --git-common-dir``, edited
the user's ``calc.py``, wrote a file and installed an executable ``.git/hooks/post-checkout``;
the loop said ``STOP success``. Now the user's tree, index, HEAD, hooks and config (and the
incident's own records under the reports root) are fingerprinted around each provider call (``repair/worktree.py``): any change stops the loop with
``provider_escaped``, names what changed, and nothing of that repair is applied.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import capture, cli, make_project, run_env

from pytest_selfheal.config.seal import differ
from pytest_selfheal.errors import EXIT_UNRESOLVED
from pytest_selfheal.repair.worktree import user_state

BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"

# MODE WORKTREE: fixes the bug in its worktree (a green run), then reaches the user's repository.
AGENT = textwrap.dedent(
    """
    import os, pathlib, stat, subprocess, sys
    mode, worktree = sys.argv[1:3]
    calc = pathlib.Path(worktree, "calc.py")
    calc.write_text(calc.read_text().replace("a - b", "a + b"))
    common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=worktree, capture_output=True,
                            text=True, check=True).stdout.strip()
    git_dir = pathlib.Path(worktree, common).resolve()
    top = git_dir.parent
    git = ["git", "-C", str(top), "-c", "user.email=a@b", "-c", "user.name=agent", "-c", "core.hooksPath=/dev/null"]
    if mode == "tree_and_hook":
        user_calc = top / "calc.py"
        user_calc.write_text(user_calc.read_text().replace("a - b", "a + b"))
        (top / "dropped.txt").write_text("x")
        hook = git_dir / "hooks" / "post-checkout"
        hook.parent.mkdir(exist_ok=True)
        hook.write_text("#!/bin/sh\\necho owned\\n")
        hook.chmod(hook.stat().st_mode | stat.S_IEXEC)
    elif mode == "config":
        subprocess.run(git + ["config", "alias.st", "!touch /tmp/never"], check=True)
    elif mode == "records":  # the incident's plan now verifies a passing test
        for plan in top.glob(".selfheal/error_plans/*/plan.json"):
            plan.write_text(plan.read_text().replace("test_calc.py::test_add", "test_calc.py"))
    elif mode == "head":
        subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "agent"], check=True)
    elif mode == "index":
        (top / "other.py").write_text("o = 2\\n")
        subprocess.run(git + ["add", "other.py"], check=True)
        (top / "other.py").write_text("o = 1\\n")  # the file looks untouched; the index is not
    """
)


def _project(tmp_path: Path) -> Path:
    project = make_project(tmp_path / "proj", {"calc.py": BUGGY, "test_calc.py": TESTS, "other.py": "o = 1\n"})
    (tmp_path / "agent.py").write_text(AGENT)
    return project


@pytest.mark.parametrize("mode, named", [
    ("tree_and_hook", [".git/hooks/post-checkout", "calc.py", "dropped.txt"]),
    ("index", ["index", "other.py"]),
    ("records", ["error_plans/{id}/plan.json"]),
    pytest.param("config", [".git/config"], marks=pytest.mark.slow),
    pytest.param("head", ["HEAD"], marks=pytest.mark.slow),
])
def test_a_provider_that_leaves_its_worktree_stops_provider_escaped(tmp_path: Path, mode: str,
                                                                     named: list[str]) -> None:
    project = _project(tmp_path)
    incident_id = capture(project)
    command = json.dumps([sys.executable, str(tmp_path / "agent.py"), mode, "{worktree}"])
    result = cli("loop", incident_id, "--approve", "--set", f"repair.command={command}", cwd=project,
                 env=run_env())
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    assert "provider_escaped" in result.stdout and "STOP success" not in result.stdout, result.stdout
    # Its repair line says what happened: an escape, not a crash.
    assert "repair: escaped its worktree" in result.stdout and "repair: crashed" not in result.stdout, result.stdout
    runs = project / ".selfheal" / "error_runs" / incident_id
    outcome: dict[str, Any] = json.loads((runs / "run_result.json").read_text())
    assert outcome["stop_reason"] == "provider_escaped" and outcome["final_status"] == "escalated"
    # Nothing is applied; the user's calc.py holds only what the provider itself wrote there.
    assert outcome["repair"]["applied"] is False
    assert "fix applied to your working tree" not in result.stdout
    attempt = json.loads((runs / "attempt_01.json").read_text())
    named = [name.format(id=incident_id) for name in named]
    assert attempt["repair"]["provider_escaped"] == named, attempt["repair"]
    for name in named:
        assert name in result.stdout


def test_the_fingerprint_ignores_the_reports_root_and_what_git_refreshes(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc.py": BUGGY})
    before = user_state(project, [project / ".selfheal"])
    (project / ".selfheal").mkdir(exist_ok=True)
    (project / ".selfheal" / "x.json").write_text("{}")
    subprocess.run(["git", "status"], cwd=project, capture_output=True, check=True)  # refreshes .git/index
    (project / "calc.py").touch()
    assert differ(before, user_state(project, [project / ".selfheal"])) == []
    (project / "calc.py").write_text(BUGGY + "# edited\n")
    assert differ(before, user_state(project, [project / ".selfheal"])) == ["calc.py"]
