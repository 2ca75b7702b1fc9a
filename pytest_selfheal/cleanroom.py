"""The clean room (edge: temp folders): the bytecode a test run that may be a verdict may not
read (docs/loop.md "The seal"). selfheal's own variables leave its environment in the
plugin (``pytest_load_initial_conftests``).

- a run that may be a verdict compiles what it imports afresh (:func:`fresh_bytecode` for a
  child, :func:`fresh_pycache` for this process): a ``.pyc`` left in a ``__pycache__``
  folder is never what runs. Installed code's bytecode (the standard library,
  site-packages: sealed by content) is kept in the user's state directory between runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Optional

from pytest_selfheal.names import installed_bytecode


@contextlib.contextmanager
def fresh_bytecode(env: Mapping[str, str], inside: Optional[Path] = None) -> Iterator[dict[str, str]]:
    """``env`` for a test run that reads no bytecode it did not compile itself: a fresh
    bytecode cache (``PYTHONPYCACHEPREFIX``; pytest's assertion rewriting honours it too),
    removed afterwards. ``inside``: the folder to make it in (a verification's own, which the
    next loop removes if a SIGKILL left it behind)."""
    cache = fresh_pycache(env, inside)
    try:
        yield {**env, "PYTHONPYCACHEPREFIX": cache}
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def fresh_pycache(env: Mapping[str, str], inside: Optional[Path] = None) -> str:
    """A new empty bytecode cache folder (the caller removes it), this interpreter's installed
    code's folders in it linked to the state directory's bytecode (``env``'s)."""
    cache = Path(tempfile.mkdtemp(prefix="pycache-", dir=inside))
    installed = installed_bytecode(env)
    if installed is None:
        return str(cache)
    for folder in sorted({p for p in (sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib"))
                          if p and os.path.isabs(p)}):
        parts = Path(folder).parts[1:]
        if any(cache.joinpath(*parts[:i]).is_symlink() for i in range(1, len(parts) + 1)):
            continue  # inside a folder already linked (site-packages within the standard library)
        try:
            target = installed.joinpath(*parts)
            target.mkdir(parents=True, exist_ok=True)
            cache.joinpath(*parts[:-1]).mkdir(parents=True, exist_ok=True)
            cache.joinpath(*parts).symlink_to(target, target_is_directory=True)
        except OSError:
            continue  # compiled afresh: slower, never wrong
    return str(cache)


__all__ = ["fresh_bytecode", "fresh_pycache"]
