"""A reopened incident, the paths a plan names and the names a test or patch chose hold at
the trust boundaries (docs/reliability.md "Trust boundaries"): each variant that
broke, reproduced, then held.

- a resolved incident reopened after a regression said ``STOP success`` without running;
- ``-o cache_dir=~/x`` or ``$HOME/x`` in a plan passed the path check, and pytest expands
  both: the cache was written in the user's home;
- a provider that rewrote the incident's plan (to select a passing test) was not noticed:
  the reports root was left out of the escape check as a whole;
- a junit path that is a FIFO made ``selfheal fingerprint`` wait forever;
- a patch's file name holding an escape sequence, a line break or a bidi override redrew
  the approval question on the terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT_ON_PATH, SPLIT, SPLIT_FIXED, capture, cli, make_project, run_env, selfheal

from pytest_selfheal.errors import EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_UNRESOLVED, RefusedError
from pytest_selfheal.loop.argcheck import check_arguments
from pytest_selfheal.repair.patches import summarise
from pytest_selfheal.store.root import Store

from .conftest import DETERMINISTIC, one_error_line


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_a_resolved_incident_reopened_after_a_regression_is_verified_not_success(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", SPLIT, ini=ROOT_ON_PATH)
    incident_id = capture(project)
    buggy = (project / "sub.py").read_text()
    (project / "sub.py").write_text(SPLIT_FIXED)
    assert selfheal(project, "loop", incident_id).returncode == 0
    (project / "sub.py").write_text(buggy)  # the bug is back
    again = selfheal(project, "loop", incident_id, "--reopen")
    assert again.returncode == EXIT_UNRESOLVED, again.stdout + again.stderr
    assert "STOP success" not in again.stdout and "running python -m pytest" in again.stdout
    assert Store(project / ".selfheal").locate(incident_id)[0] == "escalated"


@pytest.mark.parametrize("words", [
    ["-o", "cache_dir=~/victim"],
    ["-o", "cache_dir=~"],
    ["-ocache_dir=$HOME/victim"],
    ["--override-ini=cache_dir=${HOME}"],
    ["-o", "addopts=-o cache_dir=~/victim"],
])
def test_a_path_value_pytest_expands_is_refused(tmp_path: Path, words: list[str]) -> None:
    with pytest.raises(RefusedError, match="outside the project root"):
        check_arguments(words, root=tmp_path)
    # What stays accepted: a cache inside the root, a node id or -k holding a "$".
    check_arguments(["-o", "cache_dir=.cache", "test_a.py::test_x[$HOME]", "-k", "$HOME"], root=tmp_path)


def test_a_plan_writing_the_cache_into_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC})
    incident_id = capture(project)
    path = project / ".selfheal" / "error_plans" / incident_id / "plan.json"
    plan = json.loads(path.read_text())
    plan["verification_commands"] = ["python -m pytest -q test_calc.py -o cache_dir=~/victim -p cacheprovider"]
    path.write_text(json.dumps(plan))
    result = selfheal(project, "loop", incident_id, env=run_env({"HOME": str(home)}))
    assert result.returncode == EXIT_REFUSED, result.stdout + result.stderr
    assert "'~/victim'" in one_error_line(result.stderr)
    assert list(home.iterdir()) == []


def test_a_fifo_given_as_junit_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "junit.xml"
    os.mkfifo(fifo)
    result = cli("fingerprint", str(fifo))
    assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
    assert one_error_line(result.stderr) == f"selfheal: error: {fifo}: not a regular file (a FIFO, device or socket), " \
                                            "not a junit XML file"


def test_a_file_name_that_redraws_the_terminal_is_shown_escaped(tmp_path: Path) -> None:
    """A patch creating ``x<ESC>[2K<CR>1 file(s): README`` (or a line break, a bidi override)
    would redraw the approval question; the question shows such characters escaped."""
    top = make_project(tmp_path / "p", {"README": "a\n"})
    name = "x\x1b[2K\r1 file(s): README\u202e.py"
    (top / name).write_text("import os\n")
    subprocess.run(["git", "add", "-A"], cwd=top, check=True)
    patch = subprocess.run(["git", "diff", "--cached"], cwd=top, check=True, capture_output=True).stdout
    question = summarise(top, patch).text()
    assert question.startswith("1 file(s): x\\x1b[2K\\r1 file(s): README\\u202e.py;"), question
    assert question.isprintable()


def test_a_line_break_in_a_test_file_name_cannot_forge_a_status_line(tmp_path: Path) -> None:
    """The node id keeps the real name (it is verified: the same failure again); every line
    selfheal prints shows the break escaped, so the name cannot print a line of its own."""
    forged = "selfheal: all fixed -> STOP success"
    project = make_project(tmp_path / "p", {f"test_a\n{forged}\n.py": "def test_n():\n    assert 0\n"})
    incident_id = capture(project)
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    assert "repeated_fingerprint" in result.stdout
    assert forged not in result.stdout.splitlines() and "test_a\\nselfheal: all fixed" in result.stdout
