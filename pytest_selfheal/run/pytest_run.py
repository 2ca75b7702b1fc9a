"""``pytest --selfheal`` as a child process (edge): its argv, what its exit code means, and
what it recorded, read as the reports root before and after the run.

``selfheal ci`` and the MCP server's ``run_tests`` tool both run pytest this way, through the
one process runner (:func:`pytest_selfheal.process.run`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.store.root import Store

CANNOT_START = 127  # run_pytest's exit code when the interpreter cannot start
PYTEST_EXIT_MEANINGS: dict[int, str] = {
    0: "all tests passed",
    1: "tests failed",
    2: "the run was interrupted",
    3: "pytest hit an internal error",
    4: "pytest usage error (check the pytest arguments)",
    5: "no tests were collected",
    CANNOT_START: "pytest could not start",
}


def pytest_argv(root: Optional[Path], overrides: Sequence[tuple[str, str]], pytest_args: Sequence[str]) -> list[str]:
    """``python -m pytest --selfheal`` with the same config overrides as ours and, given a
    ``root``, the same reports root (when ours may differ from what the project's config says)."""
    argv = [sys.executable, "-m", "pytest", "--selfheal"]
    for text, _origin in overrides:
        argv += ["--selfheal-set", text]
    if root is not None:
        # Last, so it wins: the run writes exactly where this process looks.
        argv += ["--selfheal-set", f"reports_dir={root}"]
    return argv + list(pytest_args)


def describe_pytest_exit(code: Optional[int]) -> str:
    """A short phrase for pytest's exit code (``no tests were collected``)."""
    if code is None:
        return "pytest did not run"
    if code < 0:
        return f"pytest was killed by signal {-code}"
    return PYTEST_EXIT_MEANINGS.get(code, f"pytest exited with code {code}")


Snapshot = dict[str, tuple[Any, ...]]


def snapshot(store: Store) -> Snapshot:
    """``{incident id: (bucket, status, attempts)}`` of every incident of the root."""
    return {r.incident_id: (r.bucket, r.status, r.attempts) for r in store.list_incidents()}
