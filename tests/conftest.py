"""Shared fixtures: every test runs isolated from the developer's own config and git identity.

The test tiers: ``pytest`` runs the default tier (everything not marked ``slow``, a bounded
sample of every check); ``pytest -m slow`` runs the long variants (every fault-injection
point, benchmarks at size). ``.ci/run`` runs both, one after the other. Any ``-m`` expression
is taken as given; ``SELFHEAL_RELIABILITY_FULL=1`` runs both tiers at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest
from helpers import CHILD_ADDOPTS, FULL
from hypothesis import settings

# No wall-clock threshold in a unit test (these machines are shared and noisy): hypothesis's
# per-example deadline is one, so every property test runs without it.
settings.register_profile("selfheal", deadline=None)
settings.load_profile("selfheal")

pytest_plugins = ["pytester", "fake_github"]



@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No global config from the real home, a fixed git identity, no CI variables leaking in."""
    global_dir = tmp_path_factory.mktemp("opencode-config")
    monkeypatch.setenv("OPENCODE_CONFIG_DIR", str(global_dir))
    # selfheal's state (record digests, installed code's bytecode): one per test session,
    # never the developer's; incidents are told apart by their project's path.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.getbasetemp() / "state"))
    for key, value in {
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Author",
        "GIT_COMMITTER_EMAIL": "author@example.invalid",
        "GIT_PYTHON_REFRESH": "quiet",
        # Every pytest the tests start (captures, verifications) runs a tiny project that uses
        # neither hypothesis nor the re-run plugins (only tests/test_passed_on_rerun.py does,
        # and it clears this); the seal compares it, so the children get it too (helpers.run_env).
        "PYTEST_ADDOPTS": CHILD_ADDOPTS,
    }.items():
        monkeypatch.setenv(key, value)
    for key in (
        "GITHUB_ACTIONS",
        "GITHUB_STEP_SUMMARY",
        "GITHUB_OUTPUT",
        "GITHUB_EVENT_PATH",
        "GITHUB_EVENT_NAME",
        "GITHUB_TOKEN",
        "GITHUB_API_URL",
        "GITHUB_REPOSITORY",
        "GITHUB_RUN_ID",
        "GITHUB_SHA",
        "CI",
    ):
        monkeypatch.delenv(key, raising=False)
    yield


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> Optional[int]:
    """``-n auto``: one worker per core this process may use. The tests' own pytest, git and
    agent children keep the cores busy: on the 2-core machine the default tier took 200 s with
    2 workers and 220 s with 4 (idle, same commit). PYTEST_XDIST_AUTO_NUM_WORKERS still wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cores


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the package once per test session (in the controller, before the workers
    start): where ``PYTHONDONTWRITEBYTECODE`` is set, as on these machines and in CI, no
    import writes a ``.pyc``, so every child interpreter the tests start (the CLI, the loop's
    parent, the MCP server) would compile the package's modules from source again. This is
    the test harness's set-up only; no test reads or asserts bytecode."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    import pytest_selfheal

    compileall.compile_dir(str(Path(pytest_selfheal.__file__).parent), quiet=1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default tier: without ``-m`` the ``slow`` tests are deselected (not skipped)."""
    if config.getoption("markexpr") or FULL:
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's own, its runs without the re-run plugins installed for
    tests/test_passed_on_rerun.py (pytester drops PYTEST_ADDOPTS: it is set again). flaky
    wraps every test in its own protocol, and rerunfailures serves a socket wherever xdist
    is installed: each costs every run its share, and flaky breaks a run inside a run."""
    monkeypatch.setenv("PYTEST_ADDOPTS", CHILD_ADDOPTS)
    return pytester


@pytest.fixture
def global_config_dir() -> Path:
    """The (empty) directory OPENCODE_CONFIG_DIR points at for this test."""
    return Path(os.environ["OPENCODE_CONFIG_DIR"])
