"""Shared fixtures: every test runs isolated from the developer's own config and git identity."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

pytest_plugins = ["pytester", "fake_github"]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """No global config from the real home, a fixed git identity, no CI variables leaking in."""
    global_dir = tmp_path_factory.mktemp("opencode-config")
    monkeypatch.setenv("OPENCODE_CONFIG_DIR", str(global_dir))
    for key, value in {
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Author",
        "GIT_COMMITTER_EMAIL": "author@example.invalid",
        "GIT_PYTHON_REFRESH": "quiet",
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


@pytest.fixture
def global_config_dir() -> Path:
    """The (empty) directory OPENCODE_CONFIG_DIR points at for this test."""
    import os

    return Path(os.environ["OPENCODE_CONFIG_DIR"])
