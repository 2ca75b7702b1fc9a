"""Which files a repair may touch without asking (pure; docs/repair.md "Scope").

The plan's ``target_paths`` plus the ``repair.allowed_paths`` globs; the failing tests'
files join only with ``repair.allow_test_edits``. Globs match the whole project-relative
POSIX path with :func:`fnmatch.fnmatchcase` (``*`` crosses ``/``; ``docs/`` means
``docs/*``), case-sensitive everywhere: one config gives one answer on Linux and macOS.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Iterable, Sequence

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.records.plan import Plan


def normalise(path: str) -> str:
    """A path as the scope compares it: POSIX, no ``./``, no trailing slash; ``..`` kept, so a
    path escaping the project matches no target path."""
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
    """The union of every action's ``target_paths``, normalised, in order."""
    return _normalised(path for action in plan.actions for path in action.target_paths)


def plan_test_paths(plan: Plan) -> list[str]:
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
    """The files (normalised, each once) that are neither target paths nor match a glob. Unless
    ``allow_test_edits``, a test file named by the plan is out of scope too: only an explicit
    glob lets a repair that could weaken the test in without asking."""
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
    """``(target_paths, globs)``: the scope of a repair, the ``test_paths`` only when ``allow_test_edits``."""
    targets = plan_target_paths(plan)
    if allow_test_edits:
        targets += [t for t in plan_test_paths(plan) if t not in targets]
    return targets, [g for g in globs if isinstance(g, str) and g.strip()]
