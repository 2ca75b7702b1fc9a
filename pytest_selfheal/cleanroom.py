"""The clean room (edge: temp folders): the bytecode a test run that may be a verdict may
read (docs/loop.md "The seal"). selfheal's own variables leave its environment in the
plugin (``pytest_load_initial_conftests``).

A run that may be a verdict gets a fresh bytecode cache (:func:`fresh_bytecode` for a
child, :func:`fresh_pycache` for this process): a ``.pyc`` left in a ``__pycache__``
folder is never what runs. Installed code (the standard library, site-packages) would be
compiled again by every run, so its bytecode is kept in the state directory — but only
bytecode selfheal compiled there itself from the source, each file with its digest
(:func:`keep_installed`); a file whose digest differs, or that none was recorded for, is
removed before a run reads the cache (:func:`_trusted`). Whatever a run itself wrote into its
cache is thrown away with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import py_compile
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Optional

from pytest_selfheal.names import state_dir

_MANIFEST = "trusted.json"  # {path inside the cache: sha256}, what selfheal compiled itself
_TAG = f".{sys.implementation.cache_tag}.pyc"  # another interpreter's (or pytest's rewritten) bytecode is never kept


def _installed_roots() -> list[str]:
    """The folders of installed code, as paths inside a bytecode cache (no leading ``/``)."""
    folders = {sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib")}
    return sorted(os.path.join(*Path(f).parts[1:], "") for f in folders if f and os.path.isabs(f))


def _shared(env: Mapping[str, str]) -> Optional[Path]:
    state = state_dir(env)
    return state / "bytecode" if state is not None else None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _trusted(shared: Path) -> dict[str, str]:
    """The shared cache's files whose digest is the one recorded when selfheal compiled them;
    every other file in it is removed."""
    try:
        recorded = json.loads((shared / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = {}
    if not isinstance(recorded, dict):
        recorded = {}
    kept: dict[str, str] = {}
    for path in shared.rglob("*.pyc"):
        rel = path.relative_to(shared).as_posix()
        try:
            if recorded.get(rel) == _digest(path):
                kept[rel] = recorded[rel]
                continue
            path.unlink()
        except OSError:
            continue
    return kept


def _write_manifest(shared: Path, kept: Mapping[str, str]) -> None:
    handle, temp = tempfile.mkstemp(dir=shared, prefix=".trusted-")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        json.dump(dict(kept), out)
    os.replace(temp, shared / _MANIFEST)


def fresh_pycache(inside: Optional[Path] = None, env: Mapping[str, str] = os.environ) -> str:
    """A new bytecode cache folder (the caller removes it) holding a copy of the installed
    code's bytecode selfheal compiled itself (the state directory of ``env``)."""
    cache = Path(tempfile.mkdtemp(prefix="pycache-", dir=inside))
    shared = _shared(env)
    if shared is None or not shared.is_dir():
        return str(cache)
    for rel in _trusted(shared):
        try:
            target = cache / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shared / rel, target)  # a copy: what the run writes never reaches the shared cache
        except OSError:
            continue  # compiled afresh: slower, never wrong
    return str(cache)


def keep_installed(cache: Path, env: Mapping[str, str] = os.environ) -> None:
    """After a run: compile, into the shared cache, the installed modules the run compiled
    that the shared cache lacks — from their source, by selfheal, never the run's own files."""
    shared = _shared(env)
    if shared is None:
        return
    roots = _installed_roots()
    try:
        shared.mkdir(parents=True, exist_ok=True)
        kept = _trusted(shared)
        added = False
        for path in cache.rglob(f"*{_TAG}"):
            rel = path.relative_to(cache).as_posix()
            if rel in kept or not rel.startswith(tuple(r.replace(os.sep, "/") for r in roots)):
                continue
            source = Path("/", *Path(rel).parent.parts, path.name[: -len(_TAG)] + ".py")
            try:
                py_compile.compile(str(source), cfile=str(shared / rel), doraise=True)
                kept[rel] = _digest(shared / rel)
            except (OSError, py_compile.PyCompileError, ValueError):
                continue  # compiled afresh by each run: slower, never wrong
            added = True
        if added:
            _write_manifest(shared, kept)
    except OSError:
        return  # the next run compiles afresh: slower, never wrong


@contextlib.contextmanager
def fresh_bytecode(env: Mapping[str, str], inside: Optional[Path] = None) -> Iterator[dict[str, str]]:
    """``env`` for a test run that reads no bytecode selfheal did not compile itself: a fresh
    bytecode cache (``PYTHONPYCACHEPREFIX``; pytest's assertion rewriting honours it too)
    holding the trusted installed code's, removed afterwards once what the run compiled of
    installed code was compiled again into the shared cache. ``inside``: the folder to make it
    in (a verification's own, which the next loop removes if a SIGKILL left it behind)."""
    cache = fresh_pycache(inside, env)
    try:
        # Written into the fresh cache alone, and needed there: what the run compiled of
        # installed code is what keep_installed compiles again for the next run.
        yield {**{k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPYCACHEPREFIX": cache}
    finally:
        keep_installed(Path(cache), env)
        shutil.rmtree(cache, ignore_errors=True)
