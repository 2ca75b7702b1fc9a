"""The ``selfheal`` entry points as real processes: ``python -m pytest_selfheal`` and the installed
console script. Every other CLI test calls ``main`` in process (``helpers.cli``); these check
the wiring around it: the exit status of the process, the streams, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import PY, run_env, selfheal_process

from pytest_selfheal import __version__
from pytest_selfheal.errors import EXIT_USAGE

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


def test_a_command_imports_only_itself_and_status_never_pytest(tmp_path: Path) -> None:
    """`selfheal status` costs its own imports: no pytest (it runs in children only), no other
    command's module (docs/benchmarks.md, CLI start)."""
    probe = ("import sys\nfrom pytest_selfheal.cli.main import main\ncode = main(['status'])\n"
             "loaded = sorted(m for m in sys.modules if m.startswith('pytest_selfheal.cli.commands.'))\n"
             "print(code, 'pytest' in sys.modules, ' '.join(loaded))\n")
    done = subprocess.run([PY, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=run_env(), stdin=subprocess.DEVNULL)
    code, has_pytest, loaded = done.stdout.split("\n")[-2].split(" ", 2)
    assert (code, has_pytest) == ("0", "False"), done.stdout + done.stderr
    assert loaded.split() == ["pytest_selfheal.cli.commands._common", "pytest_selfheal.cli.commands.status"]


def test_every_command_module_is_named_like_its_command() -> None:
    from pytest_selfheal.cli.main import command_module, command_names

    for name in command_names():
        assert command_module(name).NAME == name
