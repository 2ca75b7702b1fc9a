"""The ``selfheal`` entry points as real processes: ``python -m pytest_selfheal`` and the installed
console script. Every other CLI test calls ``main`` in process (``helpers.cli``); these check
the wiring around it: the exit status of the process, the streams, no traceback. And what
each start costs, structurally (timings are in benchmarks/): a green ``pytest --selfheal``
imports no capture machinery, ``selfheal status`` no pytest, ``selfheal loop`` no unrelated
pytest plugin."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    PY,
    PYTEST_SELFHEAL,
    broken_pytest_plugin,
    capture,
    deterministic_project,
    make_project,
    run_env,
    selfheal,
    selfheal_process,
)

from pytest_selfheal import __version__
from pytest_selfheal.errors import EXIT_UNRESOLVED, EXIT_USAGE

GOLDEN = Path(__file__).resolve().parent / "golden"


def test_python_m_pytest_selfheal_version_and_usage_error(tmp_path: Path) -> None:
    version = selfheal_process(tmp_path, "--version")
    assert (version.returncode, version.stdout, version.stderr) == (0, f"selfheal {__version__}\n", "")
    usage = selfheal_process(tmp_path)  # no command
    assert usage.returncode == EXIT_USAGE and usage.stdout == ""
    assert usage.stderr.startswith("selfheal: error: ") and usage.stderr.count("\n") == 1, usage.stderr


def test_the_installed_console_script_runs_a_command() -> None:
    script = Path(PY).parent / ("selfheal.exe" if sys.platform == "win32" else "selfheal")
    assert script.is_file(), f"no console script beside {PY}: is the package installed (pip install -e .)?"
    done = subprocess.run([str(script), "fingerprint", "mocha.xml"], cwd=GOLDEN, capture_output=True, text=True,
                          timeout=60, env=run_env(), stdin=subprocess.DEVNULL)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert len(done.stdout.splitlines()) == 3
    assert "TOOLING_ENV | charges the card::Checkout charges the card" in done.stdout


def test_selfheal_status_never_imports_pytest(tmp_path: Path) -> None:
    """pytest runs in the children only: `selfheal status` does not import it (docs/benchmarks.md, CLI start)."""
    probe = "import sys\nfrom pytest_selfheal.cli.main import main\ncode = main(['status'])\nprint(code, 'pytest' in sys.modules)\n"
    done = subprocess.run([PY, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=run_env(), stdin=subprocess.DEVNULL)
    assert done.stdout.split("\n")[-2] == "0 False", done.stdout + done.stderr


# Runs one verify-only `selfheal loop ID` to its stop in a fresh interpreter and prints what it imported.
LOOP_PROBE = """
import sys
from pytest_selfheal.cli.main import main
code = main(["loop", sys.argv[1]])
print(code, " ".join(sorted(sys.modules)))
"""
# What a verify-only loop's parent has no use for: the child runs pytest and the capture.
NOT_IN_A_LOOP_PARENT = ("pytest", "_pytest", "pkgutil", "pytest_selfheal.capture", "pytest_selfheal.recorder",
                        "pytest_selfheal.plugin")


def test_a_verify_only_selfheal_loop_parent_imports_what_its_iteration_and_stop_need(tmp_path: Path) -> None:
    """The parent of a verify-only ``selfheal loop`` run, through one iteration, the stop and
    the archive, imports its command, the loop, the store and the entry points
    (``importlib.metadata``): not pytest (its child runs pytest) nor the capture. Finding the
    command imports no pkgutil."""
    project = deterministic_project(tmp_path)
    incident_id = capture(project)  # its one failure repeats: the first iteration stops
    done = subprocess.run([PY, "-c", LOOP_PROBE, incident_id], cwd=project, capture_output=True, text=True,
                          timeout=120, env=run_env(), stdin=subprocess.DEVNULL)
    code, loaded = done.stdout.splitlines()[-1].split(" ", 1)
    assert code == str(EXIT_UNRESOLVED) and "STOP repeated_fingerprint" in done.stdout, done.stdout + done.stderr
    modules = loaded.split()
    assert "importlib.metadata" in modules and "pytest_selfheal.loop.driver" in modules
    assert [m for m in modules if m in NOT_IN_A_LOOP_PARENT or m.startswith(tuple(f"{n}." for n in NOT_IN_A_LOOP_PARENT))] == []
    assert list((project / ".selfheal" / "error_archive" / "escalated").iterdir())  # the stop ran


def test_every_command_is_listed_and_found_by_its_name() -> None:
    from pytest_selfheal.cli import ci, table
    from pytest_selfheal.cli.main import CI_COMMANDS, command_names, find_command
    from pytest_selfheal.cli.options import commands_of

    assert sorted(commands_of(ci)) == sorted(CI_COMMANDS)
    assert sorted([*table.COMMANDS, *commands_of(ci), "mcp"]) == command_names()  # a new command is listed, none is left out
    for name in command_names():
        assert find_command(name).name == name
    with pytest.raises(ValueError, match="no selfheal command 'nope'"):
        find_command("nope")


# Writes the package's modules loaded by the end of the run (after the recorder's session end).
LOADED_PROBE = """
import sys

def pytest_unconfigure(config):
    loaded = sorted(m for m in sys.modules if m.startswith("pytest_selfheal"))
    (config.rootpath / "loaded.txt").write_text("\\n".join(loaded))
"""
# What only a failure needs: a green run imports none of it.
CAPTURE_SIDE = ("capture", "junit", "plan", "report", "store", "history", "loop", "repair", "run", "redact", "gitrepo")


def loaded_subpackages(project: Path, test_body: str, answer: bool = True) -> set[str]:
    """The package's subpackages and top-level modules a ``pytest --selfheal`` run of a test
    whose body is ``test_body`` imported (a real process); ``answer``: what the code under
    test, ``mod.answer()``, returns."""
    make_project(project, {"conftest.py": LOADED_PROBE, "mod.py": f"def answer():\n    return {answer}\n",
                           "test_one.py": f"from mod import answer\n\n\ndef test_one():\n    {test_body}\n"})
    subprocess.run([PY, "-m", "pytest", *PYTEST_SELFHEAL], cwd=project, capture_output=True, timeout=120,
                   env=run_env(), stdin=subprocess.DEVNULL)
    names = (project / "loaded.txt").read_text().split()
    return {name.split(".")[1] for name in names if name.count(".")}


def test_a_green_selfheal_run_imports_no_capture_machinery(tmp_path: Path) -> None:
    """Every green run of a user with ``selfheal = true`` pays for the recorder only (without a
    config to read, not even the config): the capture side loads on the first failure
    (docs/benchmarks.md, green run)."""
    green = loaded_subpackages(tmp_path / "green", "assert True")
    assert {"plugin", "recorder"} <= green and "config" not in green
    assert sorted(green.intersection(CAPTURE_SIDE)) == []
    # The probe sees them when a test fails.
    red = loaded_subpackages(tmp_path / "red", "assert answer()", answer=False)
    assert {"capture", "junit", "plan", "report", "store"} <= red
    # Once the incident is resolved (the fix's run records it), the inbox is empty again: the
    # next green run loads no more than the first did. (A fix by a test edit would not be
    # closed: an escalated incident's tests are looked at on every run, loop/sticky.py.)
    assert "loop" in loaded_subpackages(tmp_path / "red", "assert answer()", answer=True)
    assert not list((tmp_path / "red" / ".selfheal" / "error_inbox").iterdir())
    assert list((tmp_path / "red" / ".selfheal" / "error_archive" / "resolved").iterdir())
    after = loaded_subpackages(tmp_path / "red", "assert answer()", answer=True)
    assert sorted(after.intersection(CAPTURE_SIDE)) == []


def test_a_broken_unrelated_pytest_plugin_does_not_break_selfheal_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``selfheal loop`` loads the ``pytest_selfheal`` entry-point group only, never every
    ``pytest11`` plugin installed: one that cannot be imported is pytest's business."""
    project = deterministic_project(tmp_path)
    incident_id = capture(project)
    site = tmp_path / "site"
    site.mkdir()
    broken_pytest_plugin(site)
    monkeypatch.syspath_prepend(str(site))
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    assert "STOP repeated_fingerprint" in result.stdout and "unrelated_broken" not in sys.modules


def test_a_green_selfheal_run_imports_at_most_five_modules_of_the_package(tmp_path: Path) -> None:
    """pytest parses and compiles every module of the package a run imports where bytecode is
    not written (it rewrites a plugin distribution's modules): a green run of a project without
    a config imports the package, the plugin, its hookspecs, the names and the recorder only;
    with a re-run plugin armed (``--reruns``) and nothing re-run, no more."""
    make_project(tmp_path, {"conftest.py": LOADED_PROBE, "test_one.py": "def test_one():\n    assert True\n"})
    done = subprocess.run([PY, "-m", "pytest", *PYTEST_SELFHEAL, "-p", "pytest_rerunfailures", "--reruns", "1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=run_env(),
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = (tmp_path / "loaded.txt").read_text().split()
    assert loaded == ["pytest_selfheal", "pytest_selfheal.hookspecs", "pytest_selfheal.names",
                      "pytest_selfheal.plugin", "pytest_selfheal.recorder"]


def test_a_green_run_with_a_config_to_read_loads_the_config_alone(tmp_path: Path) -> None:
    """A config to read (here a flag that sets a key) adds the config's modules and the errors
    only: the classification rules and the failure records under them wait for a config that
    sets patterns or rules, or for a failure."""
    make_project(tmp_path, {"conftest.py": LOADED_PROBE, "test_one.py": "def test_one():\n    assert True\n"})
    done = subprocess.run([PY, "-m", "pytest", *PYTEST_SELFHEAL, "--selfheal-dir=reports"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env=run_env(), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    loaded = (tmp_path / "loaded.txt").read_text().split()
    assert loaded == ["pytest_selfheal", "pytest_selfheal.config", "pytest_selfheal.config.files",
                      "pytest_selfheal.config.keys", "pytest_selfheal.config.settings", "pytest_selfheal.errors",
                      "pytest_selfheal.hookspecs", "pytest_selfheal.names", "pytest_selfheal.plugin",
                      "pytest_selfheal.recorder", "pytest_selfheal.recorder.run_config"]


# What the MCP server's operations load at its first tool call (tests/test_mcp.py: not before).
MCP_START_PROBE = """
import sys
from pathlib import Path
from pytest_selfheal.mcp_server.tools import Project
Project(Path.cwd())
print(" ".join(sorted(sys.modules)))
"""
ONLY_FOR_A_TOOL_CALL = ("pytest", "_pytest")


def test_the_mcp_servers_operations_load_without_pytest(tmp_path: Path) -> None:
    """The MCP server's first tool call loads its operations, not pytest, which only its
    ``run_tests`` runs, in a child (docs/benchmarks.md, "MCP start")."""
    done = subprocess.run([PY, "-c", MCP_START_PROBE], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=run_env(), stdin=subprocess.DEVNULL)
    modules = done.stdout.split()
    assert "pytest_selfheal.mcp_server.tools" in modules, done.stdout + done.stderr
    loaded = [m for m in modules if m in ONLY_FOR_A_TOOL_CALL or m.startswith(tuple(f"{n}." for n in ONLY_FOR_A_TOOL_CALL))]
    assert loaded == []
