"""The ``selfheal`` commands find the reports root ``pytest --selfheal`` wrote, from any
subdirectory of the project (pytest's rootdir rules), and accept ``latest`` and unique
prefixes where they take an incident id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ROOT_ON_PATH, SPLIT, SPLIT_FIXED, cli, make_project, run_pytest_selfheal

from pytest_selfheal.config.files import find_project_root
from pytest_selfheal.errors import EXIT_NOT_FOUND, EXIT_OK


def test_project_root_follows_pytest_rootdir_rules(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"tests/unit/test_a.py": "def test_a():\n    pass\n"})
    assert find_project_root(project / "tests" / "unit") == project.resolve()  # pytest.ini above
    bare = make_project(tmp_path / "bare", {"tests/test_a.py": "def test_a():\n    pass\n"}, ini=None)
    (bare / "setup.py").write_text("")
    assert find_project_root(bare / "tests") == bare.resolve()  # no ini file: setup.py
    (bare / "tests" / "tox.ini").write_text("[pytest]\n")
    assert find_project_root(bare / "tests") == (bare / "tests").resolve()  # the nearest ini file wins
    lone = tmp_path / "lone" / "sub"
    lone.mkdir(parents=True)
    (tmp_path / "lone" / "tox.ini").write_text("[tox]\n")  # no pytest section: not a pytest config
    assert find_project_root(lone) == lone.resolve()


@pytest.mark.slow
def test_commands_run_from_a_subdirectory_find_the_incident(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"sub.py": SPLIT["sub.py"], "tests/test_calc.py": SPLIT["test_calc.py"]},
                           ini=ROOT_ON_PATH)
    tests = project / "tests"
    captured = run_pytest_selfheal(tests, "test_calc.py")
    assert captured.returncode == 1, captured.stdout + captured.stderr
    inbox = project / ".selfheal" / "error_inbox"
    (incident_id,) = [p.name for p in inbox.iterdir()]  # at the rootdir, not in tests/
    assert not (tests / ".selfheal").exists()
    # The commands the terminal summary prints work as printed, from where pytest ran.
    assert f"selfheal loop {incident_id}" in captured.stdout
    code, out, err = cli("status", "--json", cwd=tests)
    assert code == EXIT_OK, err
    assert [row["incident_id"] for row in json.loads(out)] == [incident_id]
    code, out, err = cli("show", "latest", "--json", cwd=tests)
    assert code == EXIT_OK and json.loads(out)["incident_id"] == incident_id, err
    (project / "sub.py").write_text(SPLIT_FIXED)
    code, out, err = cli("loop", incident_id[:-2], cwd=tests)  # a unique prefix
    assert code == EXIT_OK, out + err
    assert (project / ".selfheal" / "error_archive" / "resolved" / incident_id).is_dir()


def test_an_unknown_prefix_is_exit_4_and_latest_of_nothing_too(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_ok.py": "def test_ok():\n    pass\n"})
    code, out, err = cli("show", "incident_2027", cwd=project)
    assert (code, out) == (EXIT_NOT_FOUND, "")
    assert err.strip().endswith("no incident id starts with 'incident_2027'")
    code, _, err = cli("loop", "latest", cwd=project)
    assert code == EXIT_NOT_FOUND and "no incident yet" in err
