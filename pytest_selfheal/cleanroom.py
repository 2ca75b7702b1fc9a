"""The clean room (edge: temp folders): the bytecode a test run that may be a verdict may not
read (docs/loop.md "The seal"). selfheal's own variables leave its environment in the
plugin (``pytest_load_initial_conftests``).

A run that may be a verdict compiles everything it imports afresh (:func:`fresh_bytecode`
for a child, :func:`fresh_pycache` for this process), installed code too: a ``.pyc`` is
never what runs unless that run wrote it. A cache kept between runs would be one anything
running as the user can write to.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Optional


@contextlib.contextmanager
def fresh_bytecode(env: Mapping[str, str], inside: Optional[Path] = None) -> Iterator[dict[str, str]]:
    """``env`` for a test run that reads no bytecode it did not compile itself: a fresh
    bytecode cache (``PYTHONPYCACHEPREFIX``; pytest's assertion rewriting honours it too),
    removed afterwards. ``inside``: the folder to make it in (a verification's own, which the
    next loop removes if a SIGKILL left it behind)."""
    cache = fresh_pycache(inside)
    try:
        yield {**env, "PYTHONPYCACHEPREFIX": cache}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def fresh_pycache(inside: Optional[Path] = None) -> str:
    """A new empty bytecode cache folder (the caller removes it)."""
    return tempfile.mkdtemp(prefix="pycache-", dir=inside)


__all__ = ["fresh_bytecode", "fresh_pycache"]
