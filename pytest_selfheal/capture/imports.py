"""Repo-local modules a test file imports (edge: reads the test file).

A wrong return value leaves no frame of the code under test in the traceback, so the
plan's target paths (and a repair provider's scope) also take the repo modules the
failing test file imports.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterable, List

_MAX_SOURCE_BYTES = 2_000_000


def _module_names(tree: ast.AST) -> Iterable[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            for alias in node.names:
                yield f"{node.module}.{alias.name}"


def local_imports(test_file: str, rootdir: Path) -> List[str]:
    """Repo-relative POSIX paths of modules imported by ``test_file`` that exist under ``rootdir``."""
    root = rootdir.resolve()
    path = (root / test_file).resolve()
    try:
        path.relative_to(root)
        if path.stat().st_size > _MAX_SOURCE_BYTES:
            return []
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, ValueError, SyntaxError, RecursionError):
        return []
    bases = [path.parent, root, root / "src"]
    found: List[str] = []
    for name in _module_names(tree):
        parts = name.split(".")
        for base in bases:
            for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
                try:
                    rel = candidate.resolve().relative_to(root).as_posix()
                except ValueError:
                    continue
                if candidate.is_file() and rel not in found and "site-packages" not in rel:
                    found.append(rel)
    return found
