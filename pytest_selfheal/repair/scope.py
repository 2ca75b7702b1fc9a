"""Which files a repair may touch without asking (pure; docs/repair.md "Scope").

Allowed = the plan's actions' ``target_paths`` (exact repo-relative paths: the traceback
frames inside the project and the failing tests' files) + the ``ralf_lite.repair.
allowed_paths`` globs. Everything is compared as project-relative POSIX paths.

Globs use :func:`fnmatch.fnmatchcase` on the whole path, so ``*`` also crosses ``/``
(``src/*`` allows everything below ``src/``); a pattern ending in ``/`` allows the whole
directory (``docs/`` = ``docs/*``). Matching is case-sensitive on every platform: the
same config must give the same answer on Linux and macOS.
"""

from __future__ import annotations

import fnmatch
import posixpath
from typing import Iterable, List, Sequence, Tuple

from pytest_selfheal.records.plan import Plan


def normalise(path: str) -> str:
    """A path as the scope compares it: POSIX separators, no ``./``, no trailing slash.

    ``..`` components are kept (after collapsing): a path escaping the project never
    matches a target path, and globs never match it unless they start with ``..``.
    """
    text = path.replace("\\", "/").strip()
    if not text:
        return ""
    norm = posixpath.normpath(text)
    return "" if norm == "." else norm


def plan_target_paths(plan: Plan) -> List[str]:
    """The union of every action's ``target_paths``, normalised, in order of first appearance."""
    seen: List[str] = []
    for action in plan.actions:
        for path in action.target_paths:
            norm = normalise(path)
            if norm and norm not in seen:
                seen.append(norm)
    return seen


def _glob_matches(path: str, pattern: str) -> bool:
    pat = pattern.replace("\\", "/").strip()
    if not pat:
        return False
    if pat.endswith("/"):
        pat += "*"  # a directory: everything below it
    if pat.startswith("./"):
        pat = pat[2:]
    return fnmatch.fnmatchcase(path, pat)


def is_allowed(path: str, target_paths: Sequence[str], globs: Sequence[str] = ()) -> bool:
    """True when ``path`` is one of ``target_paths`` or matches one of ``globs``."""
    norm = normalise(path)
    if not norm:
        return False
    if norm in {normalise(t) for t in target_paths}:
        return True
    return any(_glob_matches(norm, g) for g in globs)


_TEST_DIRS = frozenset({"test", "tests", "testing"})


def is_test_file(path: str) -> bool:
    """A test, a conftest or a fixture: ``test_*.py``, ``*_test.py``, ``conftest.py``, or any
    file below a ``test``/``tests``/``testing`` directory (fixtures and data live there)."""
    parts = normalise(path).split("/")
    name = parts[-1]
    if name == "conftest.py" or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))):
        return True
    return any(part in _TEST_DIRS for part in parts[:-1])


def out_of_scope(
    files: Iterable[str], target_paths: Sequence[str], globs: Sequence[str] = (), *, allow_test_edits: bool = False
) -> List[str]:
    """The files (normalised, in order, each once) that are neither target paths nor match a glob.

    Unless ``allow_test_edits``, a test file (:func:`is_test_file`) is out of scope even
    when the plan names it (the failing test's own file is a target path): a repair that
    weakens the test must ask. Only an explicit ``repair.allowed_paths`` glob lets it in.
    """
    targets = {normalise(t) for t in target_paths}
    out: List[str] = []
    for path in files:
        norm = normalise(path)
        if not norm or norm in out:
            continue
        if any(_glob_matches(norm, g) for g in globs):
            continue
        if norm in targets and (allow_test_edits or not is_test_file(norm)):
            continue
        out.append(norm)
    return out


def allowed_paths(plan: Plan, globs: Sequence[str] = ()) -> Tuple[List[str], List[str]]:
    """``(target_paths, globs)``: the scope of a repair, as the prompt shows it."""
    return plan_target_paths(plan), [g for g in globs if isinstance(g, str) and g.strip()]


__all__ = ["allowed_paths", "is_allowed", "is_test_file", "normalise", "out_of_scope", "plan_target_paths"]
