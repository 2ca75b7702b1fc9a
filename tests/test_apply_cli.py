"""``selfheal apply ID``: the proposed final.patch onto the working tree, only after a yes.

The console script's ``main`` in process (stdin never a terminal), real git repositories.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import git
import pytest
from helpers import CliResult, cli

from pytest_selfheal.cli.main import main
from pytest_selfheal.errors import EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED, EXIT_UNRESOLVED, EXIT_USAGE
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.repair import approval
from pytest_selfheal.store.root import Store

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def one_line_error(result: CliResult) -> str:
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("selfheal: error: "), result.stderr
    return result.stderr.strip()


def setup(tmp_path: Path, *, with_patch: bool = True) -> tuple[Path, Store, str]:
    """A project with the bug committed, an incident whose final.patch fixes it."""
    top = tmp_path / "proj"
    top.mkdir()
    (top / "calc.py").write_text(BUGGY)
    (top / ".gitignore").write_text(".selfheal/\n")
    repo = git.Repo.init(top)
    repo.git.add(A=True)
    repo.index.commit("init")
    (top / "calc.py").write_text(FIXED)
    (top / "added.py").write_text("new = 1\n")
    repo.git.add("-N", "added.py")
    patch = repo.git.diff("--binary") + "\n"
    repo.git.reset("-q")
    (top / "calc.py").write_text(BUGGY)
    (top / "added.py").unlink()
    repo.close()
    store = Store(top / ".selfheal")
    incident_id = store.create_incident(
        Incident(step="test_calc.py::test_add", failure_class="deterministic", message="m",
                 error_signature="TEST_ASSERTION | t | m", rootdir=str(top)),
        log_tail="", context=RunContext(),
    )
    if with_patch:
        store.write_run_file(incident_id, "final.patch", patch)
    return top, store, incident_id


def test_apply_with_yes(tmp_path: Path) -> None:
    top, store, incident_id = setup(tmp_path)
    store.write_run_result(incident_id, RunResult.from_json({
        "incident_id": incident_id, "final_status": "resolved", "loops_used": 1, "runtime_minutes": 0.1,
        "same_error_repeats": 0, "archived_to": None, "stop_reason": "success",
        "repair": {"final_patch": "final.patch", "applied": False, "apply_command": f"selfheal apply {incident_id}"},
    }, "test run result"))
    result = cli("apply", incident_id, "--yes", cwd=top)
    assert result.returncode == EXIT_OK, result.stderr
    assert f"applied final.patch of {incident_id}" in result.stdout and "calc.py" in result.stdout
    assert (top / "calc.py").read_text() == FIXED and (top / "added.py").read_text() == "new = 1\n"
    block = json.loads((store.runs_dir(incident_id) / "run_result.json").read_text())["repair"]
    assert block["applied"] is True and block["apply_command"] is None and block["applied_to"] == str(top.resolve())
    # A second time: nothing to do, success.
    again = cli("apply", incident_id, "--yes", "--json", cwd=top)
    assert again.returncode == EXIT_OK
    assert json.loads(again.stdout)["already_applied"] is True


def test_apply_needs_a_yes_without_terminal(tmp_path: Path) -> None:
    top, _, incident_id = setup(tmp_path)
    result = cli("apply", incident_id, cwd=top, stdin="y\n")  # piped stdin is not a terminal
    assert result.returncode == EXIT_REFUSED
    assert f"re-run with --yes: selfheal apply {incident_id} --yes" in one_line_error(result)
    assert (top / "calc.py").read_text() == BUGGY


def test_apply_interactive_yes_and_no(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    top, _, incident_id = setup(tmp_path)
    monkeypatch.chdir(top)
    monkeypatch.setattr(approval, "is_interactive", lambda stdin=None, stdout=None: True)
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert main(["apply", incident_id]) == EXIT_UNRESOLVED
    out, err = capsys.readouterr()
    assert "not applied" in out and (top / "calc.py").read_text() == BUGGY
    assert err.startswith(f"Apply final.patch of {incident_id} (2 file(s): added.py, calc.py; create mode 100644 added.py)") and "[y/N]" in err
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))
    assert main(["apply", incident_id]) == EXIT_OK
    assert (top / "calc.py").read_text() == FIXED


def test_conflict_is_refused_in_one_line_and_changes_nothing(tmp_path: Path) -> None:
    top, _, incident_id = setup(tmp_path)
    (top / "calc.py").write_text("def add(a, b):\n    return b - a  # moved on\n")
    result = cli("apply", incident_id, "--yes", cwd=top)
    assert result.returncode == EXIT_REFUSED
    message = one_line_error(result)
    assert "does not apply cleanly" in message and "nothing was changed" in message
    assert (top / "calc.py").read_text() == "def add(a, b):\n    return b - a  # moved on\n"
    assert not (top / "added.py").exists()


def test_missing_patch_unknown_and_invalid_ids(tmp_path: Path) -> None:
    top, _, incident_id = setup(tmp_path, with_patch=False)
    result = cli("apply", incident_id, "--yes", cwd=top)
    assert result.returncode == EXIT_NOT_FOUND and "no proposed patch" in one_line_error(result)
    ghost = cli("apply", "incident_20990101_000000_zz", "--yes", cwd=top)
    assert ghost.returncode == EXIT_NOT_FOUND
    one_line_error(ghost)
    bad = cli("apply", "../etc", "--yes", cwd=top)
    assert bad.returncode == EXIT_USAGE
    one_line_error(bad)


def test_dir_option_and_not_a_repository(tmp_path: Path) -> None:
    top, store, incident_id = setup(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # --dir finds the store from anywhere; the patch goes to the capture's rootdir.
    result = cli("apply", incident_id, "--yes", "--dir", str(store.root), cwd=elsewhere)
    assert result.returncode == EXIT_OK, result.stderr
    assert (top / "calc.py").read_text() == FIXED
    # A reports root whose incident points at a folder that is not a repository.
    plain = tmp_path / "plain"
    plain.mkdir()
    other = Store(plain / ".selfheal")
    loose = other.create_incident(Incident(step="s", failure_class="deterministic", message="m",
                                           error_signature="x", rootdir=str(plain)), log_tail="", context=RunContext())
    other.write_run_file(loose, "final.patch", "diff --git a/x b/x\n")
    refused = cli("apply", loose, "--yes", cwd=plain)
    assert refused.returncode == EXIT_REFUSED and "need a git repository" in one_line_error(refused)


@pytest.mark.parametrize("change", ["rename", "delete"])
def test_a_patch_moving_or_deleting_a_test_file_is_refused_without_allow_test_edits(tmp_path: Path, change: str) -> None:
    """A test renamed out of tests/ or a conftest deleted is a test edit too: approval never covers it."""
    top = tmp_path / "proj"
    (top / "tests").mkdir(parents=True)
    (top / "tests" / "test_calc.py").write_text("def test_add():\n    assert 1 + 1 == 2\n")
    (top / "tests" / "conftest.py").write_text("import pytest\n")
    (top / ".gitignore").write_text(".selfheal/\n")
    repo = git.Repo.init(top)
    repo.git.add(A=True)
    repo.index.commit("init")
    if change == "rename":
        repo.git.mv("tests/test_calc.py", "calc_check.py")
    else:
        repo.git.rm("-q", "tests/conftest.py")
    patch = repo.git.diff("--cached", "-M", "--binary") + "\n"
    repo.git.reset("-q", "--hard")
    repo.close()
    store = Store(top / ".selfheal")
    incident_id = store.create_incident(
        Incident(step="tests/test_calc.py::test_add", failure_class="deterministic", message="m",
                 error_signature="TEST_ASSERTION | t | m", rootdir=str(top)),
        log_tail="", context=RunContext(),
    )
    store.write_run_file(incident_id, "final.patch", patch)
    refused = cli("apply", incident_id, "--yes", cwd=top)
    assert refused.returncode == EXIT_REFUSED
    named = "tests/test_calc.py" if change == "rename" else "tests/conftest.py"
    assert f"edits test files ({named})" in one_line_error(refused)
    assert (top / "tests" / "test_calc.py").is_file() and (top / "tests" / "conftest.py").is_file()
    assert cli("apply", incident_id, "--yes", "--allow-test-edits", cwd=top).returncode == EXIT_OK
