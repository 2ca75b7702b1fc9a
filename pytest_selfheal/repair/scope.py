"""Which files a repair may touch without asking (pure; docs/repair.md "Scope").

Allowed = the plan's actions' ``target_paths`` (exact repo-relative paths: the source files
the failures' root-cause evidence points at, plan/groups.py) + the ``ralf_lite.repair.
allowed_paths`` globs. The failing tests' files (``test_paths``) join only with
``repair.allow_test_edits``. Everything is compared as project-relative POSIX paths.

Globs use :func:`fnmatch.fnmatchcase` on the whole path, so ``*`` also crosses ``/``
(``src/*`` allows everything below ``src/``); a pattern ending in ``/`` allows the whole
directory (``docs/`` = ``docs/*``). Matching is case-sensitive on every platform: the
same config must give the same answer on Linux and macOS.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Sequence

from pytest_selfheal.analysis.frames import is_test_file
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


def _normalised(paths: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        norm = normalise(path)
        if norm and norm not in seen:
            seen.append(norm)
    return seen


def plan_target_paths(plan: Plan) -> list[str]:
    """The union of every action's ``target_paths``, normalised, in order of first appearance."""
    return _normalised(path for action in plan.actions for path in action.target_paths)


def plan_test_paths(plan: Plan) -> list[str]:
    """The union of every action's ``test_paths`` (the failing tests' files), normalised."""
    return _normalised(path for action in plan.actions for path in action.test_paths)


def _glob_matches(path: str, pattern: str) -> bool:
    pat = pattern.replace("\\", "/").strip()
    if not pat:
        return False
    if pat.endswith("/"):
        pat += "*"  # a directory: everything below it
    if pat.startswith("./"):
        pat = pat[2:]
    return fnmatch.fnmatchcase(path, pat)


def out_of_scope(
    files: Iterable[str], target_paths: Sequence[str], globs: Sequence[str] = (), *, allow_test_edits: bool = False
) -> list[str]:
    """The files (normalised, in order, each once) that are neither target paths nor match a glob.

    Unless ``allow_test_edits``, a test file (:func:`is_test_file`) is out of scope even
    when the plan names it (the failing test's own file is a target path): a repair that
    weakens the test must ask. Only an explicit ``repair.allowed_paths`` glob lets it in.
    """
    targets = {normalise(t) for t in target_paths}
    out: list[str] = []
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


def allowed_paths(plan: Plan, globs: Sequence[str] = (), *, allow_test_edits: bool = False) -> tuple[list[str], list[str]]:
    """``(target_paths, globs)``: the scope of a repair, as the prompt shows it. The plan's
    ``test_paths`` join the target paths only when ``allow_test_edits``."""
    targets = plan_target_paths(plan)
    if allow_test_edits:
        targets += [t for t in plan_test_paths(plan) if t not in targets]
    return targets, [g for g in globs if isinstance(g, str) and g.strip()]
