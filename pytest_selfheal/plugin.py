"""The pytest plugin: ``pytest --selfheal`` (edge: pytest hooks only).

Every pytest run of every user imports this module, so it holds only the options: the recorder
loads only with ``--selfheal``, the rest of the package only when a run has something to
record, once, at session end, on the controller (xdist workers never write).
"""

from __future__ import annotations

import os
from typing import Optional

import pytest

from pytest_selfheal import hookspecs, names
from pytest_selfheal.names import CI_RUN_ENV, INI_KEYS, LOCALISE_ENV, RECORDER_PLUGIN, TAKEN_SIGNALS, VERIFYING_ENV

_SIGNALS = pytest.StashKey[dict[str, str]]()  # selfheal's own variables of this run (TAKEN_SIGNALS)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register the extension API (hookspecs.py)."""
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    """The ``--selfheal*`` flags and their ini twins."""
    pluginmanager.register(parser, names.OPTIONS_PLUGIN)
    group = parser.getgroup("selfheal", "self-healing: incidents and the RALF-Lite loop")
    group.addoption("--selfheal", action="store_true", default=None,
                    help="capture failing runs as incidents under the reports root (ini: selfheal)")
    group.addoption("--no-selfheal", action="store_false", dest="selfheal",
                    help="do not capture this run, whatever the ini option selfheal says")
    group.addoption("--selfheal-spectrum", action="store_true", default=None,
                    help="record which project functions each test runs, to rank the suspects of a capture's failures "
                         "by that spectrum (Ochiai); slows the run (ini: selfheal_spectrum)")
    group.addoption("--selfheal-dir", metavar="DIR", default=None,
                    help="reports root, relative to the invocation directory (ini: selfheal_dir; default .selfheal in "
                         "the rootdir)")
    group.addoption("--selfheal-loop", action="store_true", default=None,
                    help="after capturing, run the RALF-Lite loop on the new incident (ini: selfheal_loop)")
    group.addoption("--no-selfheal-loop", action="store_false", dest="selfheal_loop",
                    help="do not run the loop after capturing, whatever the ini option selfheal_loop says")
    group.addoption("--selfheal-report", metavar="PATH", default=None,
                    help="write the RALF Lite Loop Report (markdown) to PATH (ini: selfheal_report)")
    group.addoption("--selfheal-approve", action="store_true", default=None,
                    help="approve applying a repair provider's patch to the working tree (ini: selfheal_approve)")
    group.addoption("--selfheal-max-iterations", metavar="N", default=None,
                    help="override ralf_lite.max_iterations (ini: selfheal_max_iterations)")
    group.addoption("--selfheal-set", metavar="KEY=VALUE", action="append", default=[],
                    help="override any ralf_lite config key, e.g. --selfheal-set verification.timeout_seconds=60")
    parser.addini("selfheal", type="bool", default=False, help="enable pytest-selfheal")
    parser.addini("selfheal_loop", type="bool", default=False, help="run the loop after capture")
    parser.addini("selfheal_spectrum", type="bool", default=False, help="record the coverage spectrum of the run")
    for ini_name in INI_KEYS:
        if ini_name == "selfheal_config":
            parser.addini(ini_name, type="linelist", default=[], help="ralf_lite KEY=VALUE overrides")
        else:
            parser.addini(ini_name, default=None, help=f"ralf_lite.{INI_KEYS[ini_name]}")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Take selfheal's own variables out of the environment before the first conftest runs:
    the tests cannot tell a verification, or a run selfheal started, from an ordinary run."""
    early_config.stash[_SIGNALS] = {name: os.environ.pop(name) for name in TAKEN_SIGNALS if name in os.environ}


def _signal(config: pytest.Config, name: str) -> Optional[str]:
    """The value selfheal's variable ``name`` had for this run (taken out of the environment if
    still there: the plugin was registered after the initial conftests)."""
    value = os.environ.pop(name, None)
    return config.stash.get(_SIGNALS, {}).get(name, value)


def _enabled(config: pytest.Config) -> bool:
    if _signal(config, VERIFYING_ENV):
        return False
    flag = config.getoption("selfheal")
    return bool(flag) if flag is not None else bool(config.getini("selfheal"))


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; with ``--selfheal``, load the config and start the recorder."""
    config.addinivalue_line(
        "markers", "tdd: a red-first (TDD) test, kept out of the RALF-Lite loop unless ralf_lite.apply_to.tdd_tasks"
    )
    localise = os.environ.get(LOCALISE_ENV)
    if localise and _signal(config, VERIFYING_ENV):
        # The loop's localisation run (passive, like a verification run): its spectrum only.
        from pytest_selfheal.capture import localise as localisation

        localisation.start(config, localise)
    if not _enabled(config):
        return
    # Imported here: every pytest run imports this module, and one without --selfheal must
    # not parse and compile the recorder (pytest rewrites the package's modules it imports).
    from pytest_selfheal import recorder

    recorder.start(config, _signal(config, CI_RUN_ENV))


@pytest.hookimpl(trylast=True)  # after pytest's own junitxml has written --junitxml
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``--selfheal``, on the controller: the session end records what the run found."""
    recorder = session.config.pluginmanager.get_plugin(RECORDER_PLUGIN)
    if recorder is None or not recorder.has_work(session, int(exitstatus)):
        return
    # Imported here: only a run with a failure or an open incident's test loads the capture,
    # the loop and the report.
    from pytest_selfheal.recorder.finish import finish_session

    finish_session(recorder, int(exitstatus))
