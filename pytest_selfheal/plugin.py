"""The pytest plugin: ``pytest --selfheal`` (edge: pytest hooks only).

This module is what every pytest run of every user imports, so it holds only the options:
the recorder (recorder/) and everything it needs load only when ``--selfheal`` is on.
Recording is kept to the cheap minimum during the run (counters and the failing reports);
all the work happens once, at session end, on the controller: xdist workers never write.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable

import pytest


def unmark_own_package(meta_path: Iterable[object]) -> bool:
    """Take this package out of the modules pytest's assertion rewriting loads, and say
    whether it could (docs/decisions.md, "The plugin's modules are not assertion-rewritten").

    pytest marks every package of a ``pytest11`` plugin's distribution for rewriting, and
    its loader parses and compiles a marked module from source unless it wrote its own
    ``.pyc`` before, which ``PYTHONDONTWRITEBYTECODE`` or a read-only site-packages forbids:
    tens of milliseconds on every run. Without the mark the ordinary loader reads the
    installed ``.pyc``. The hook's mark set is private: guarded, and without it (another
    pytest) the modules are rewritten as before, which only costs time.
    """
    top = __name__.partition(".")[0]
    done = False
    for hook in meta_path:
        marked = getattr(hook, "_must_rewrite", None)
        cache = getattr(hook, "_marked_for_rewrite_cache", None)
        if type(hook).__name__ != "AssertionRewritingHook" or not isinstance(marked, set):
            continue
        marked.discard(top)
        if isinstance(cache, dict):
            for name in [n for n in cache if n == top or n.startswith(top + ".")]:
                del cache[name]
        done = True
    return done


# Before the package's other modules load: they then come from their installed .pyc files.
unmark_own_package(sys.meta_path)

from pytest_selfheal import hookspecs  # noqa: E402
from pytest_selfheal.config.ini import INI_KEYS, VERIFYING_ENV  # noqa: E402


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the plugin's own hookspecs (the extension API, see hookspecs.py)."""
    unmark_own_package(sys.meta_path)  # each config installs its own hook (pytester runs)
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--selfheal*`` flags and their ini twins."""
    group = parser.getgroup("selfheal", "self-healing: incidents and the RALF-Lite loop")
    group.addoption(
        "--selfheal",
        action="store_true",
        default=None,
        help="capture failing runs as incidents under the reports root (ini: selfheal)",
    )
    group.addoption(
        "--no-selfheal",
        action="store_false",
        dest="selfheal",
        help="do not capture this run, whatever the ini option selfheal says",
    )
    group.addoption(
        "--selfheal-spectrum",
        action="store_true",
        default=None,
        help="record which project functions each test runs, to rank the suspects of a capture's "
        "failures by that spectrum (Ochiai); slows the run (ini: selfheal_spectrum)",
    )
    group.addoption(
        "--selfheal-dir",
        metavar="DIR",
        default=None,
        help="reports root, relative to the invocation directory (ini: selfheal_dir; default .selfheal in the rootdir)",
    )
    group.addoption(
        "--selfheal-loop",
        action="store_true",
        default=None,
        help="after capturing, run the RALF-Lite loop on the new incident (ini: selfheal_loop)",
    )
    group.addoption(
        "--no-selfheal-loop",
        action="store_false",
        dest="selfheal_loop",
        help="do not run the loop after capturing, whatever the ini option selfheal_loop says",
    )
    group.addoption(
        "--selfheal-report",
        metavar="PATH",
        default=None,
        help="write the RALF Lite Loop Report (markdown) to PATH (ini: selfheal_report)",
    )
    group.addoption(
        "--selfheal-approve",
        action="store_true",
        default=None,
        help="approve applying a repair provider's patch to the working tree (ini: selfheal_approve)",
    )
    group.addoption(
        "--selfheal-max-iterations",
        metavar="N",
        default=None,
        help="override ralf_lite.max_iterations (ini: selfheal_max_iterations)",
    )
    group.addoption(
        "--selfheal-set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help="override any ralf_lite config key, e.g. --selfheal-set verification.timeout_seconds=60",
    )
    parser.addini("selfheal", type="bool", default=False, help="enable pytest-selfheal")
    parser.addini("selfheal_loop", type="bool", default=False, help="run the loop after capture")
    parser.addini("selfheal_spectrum", type="bool", default=False, help="record the coverage spectrum of the run")
    for ini_name in INI_KEYS:
        if ini_name == "selfheal_config":
            parser.addini(ini_name, type="linelist", default=[], help="ralf_lite KEY=VALUE overrides")
        else:
            parser.addini(ini_name, default=None, help=f"ralf_lite.{INI_KEYS[ini_name]}")


def _enabled(config: pytest.Config) -> bool:
    if os.environ.get(VERIFYING_ENV):
        return False
    flag = config.getoption("selfheal")
    return bool(flag) if flag is not None else bool(config.getini("selfheal"))


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; with ``--selfheal``, load the config and start the recorder."""
    config.addinivalue_line(
        "markers", "tdd: a red-first (TDD) test, kept out of the RALF-Lite loop unless ralf_lite.apply_to.tdd_tasks"
    )
    if not _enabled(config):
        return
    # Loaded here, not at the top: a run without --selfheal must not pay for the recorder's
    # imports (config, capture, loop, report: tens of milliseconds; docs/benchmarks.md).
    recorder = importlib.import_module("pytest_selfheal.recorder")
    recorder.start(config)
