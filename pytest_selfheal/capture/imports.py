"""Repo-local modules a test file imports (edge): a wrong return value leaves no frame of the
code under test in the traceback, so the plan's target paths take these instead.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

_MAX_SOURCE_BYTES = 2_000_000
# What a block of statements is a list of (a try's handlers, a match's cases hold blocks).
_BLOCK = (ast.stmt, ast.excepthandler, ast.match_case)


def _statements(tree: ast.AST) -> Iterator[ast.stmt]:
    """The statements of ``tree`` in ``ast.walk``'s order, without visiting every expression."""
    todo: deque[ast.AST] = deque([tree])
    while todo:
        node = todo.popleft()
        if isinstance(node, ast.stmt):
            yield node
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], _BLOCK):
                todo.extend(value)


def _module_names(tree: ast.AST) -> Iterable[str]:
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                yield f"{node.module}.{alias.name}"


def _parse(path: Path, root: Path) -> ast.AST | None:
    try:
        path.relative_to(root)
        if path.stat().st_size > _MAX_SOURCE_BYTES:
            return None
        return ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, ValueError, SyntaxError, RecursionError):
        return None


def _reexported(init: Path, root: Path) -> list[Path]:
    """The sibling modules a package ``__init__.py`` imports relatively, read once per file version."""
    try:
        stat = init.stat()
    except OSError:
        return []
    return list(_reexported_by_version(init, root, stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=64)
def _reexported_by_version(init: Path, root: Path, mtime_ns: int, size: int) -> tuple[Path, ...]:
    tree = _parse(init, root)
    found: list[Path] = []
    for node in _statements(tree) if tree is not None else []:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            base = init.parent.joinpath(*node.module.split("."))
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file() and candidate not in found:
                    found.append(candidate)
    return tuple(found)


def local_imports(test_file: str, rootdir: Path) -> list[str]:
    """Repo-relative paths of the repo modules ``test_file`` imports, and behind a package, its re-exports."""
    root = rootdir.resolve()
    path = (root / test_file).resolve()
    tree = _parse(path, root)
    if tree is None:
        return []
    bases = [path.parent, root, root / "src"]
    found: list[str] = []
    for name in _module_names(tree):
        parts = name.split(".")
        for base in bases:
            for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
                if not candidate.is_file():  # most names are not the repo's: one stat, no resolve
                    continue
                try:
                    rel = candidate.resolve().relative_to(root).as_posix()
                except ValueError:
                    continue
                if rel not in found and "site-packages" not in rel:
                    found.append(rel)
                    if candidate.name == "__init__.py":
                        for module in _reexported(candidate.resolve(), root):
                            extra = module.relative_to(root).as_posix()
                            if extra not in found:
                                found.append(extra)
    return found
