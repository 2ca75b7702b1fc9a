"""The test code a failure depends on, and its digests (edge): when a failing test's file or
the conftests above it change, a later pass may be a weakened test (``tests_edited``). A code
module's digest (``doctests:``) covers only its docstrings: fixing the code is no test edit.
"""

from __future__ import annotations

import ast
import hashlib
import posixpath
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from pytest_selfheal.analysis.frames import is_test_file

MISSING = "missing"
DOCTESTS = "doctests:"  # the digest of a code module's docstrings (its doctests), not of its bytes


def test_code_paths(nodeids: Iterable[str]) -> list[str]:
    """Rootdir-relative POSIX paths of the tests' files and the conftests above them, sorted."""
    paths = set()
    for nodeid in nodeids:
        test_file = posixpath.normpath(nodeid.split("::", 1)[0]) if nodeid else ""
        if not test_file.endswith(".py") or test_file.startswith(("../", "/")):
            continue
        folders = test_file.split("/")[:-1]
        paths.update([test_file, *(posixpath.join(*folders[:i], "conftest.py") for i in range(len(folders) + 1))])
    return sorted(paths)


def _docstrings(source: bytes) -> bytes:
    """A module's docstrings, in order; the whole source when it does not parse (then any edit counts)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docs = (ast.get_docstring(node, clean=False) for node in ast.walk(tree) if isinstance(node, kinds))
    return "\0".join(d for d in docs if d).encode("utf-8", "surrogatepass")


def _digest(rootdir: Path, path: str, doctests: bool) -> str:
    try:
        data = (rootdir / path).read_bytes()
    except OSError:
        return MISSING
    return _of(data, doctests)


def _of(data: bytes, doctests: bool) -> str:
    if doctests:
        return DOCTESTS + hashlib.sha256(_docstrings(data)).hexdigest()
    return hashlib.sha256(data).hexdigest()


def is_recorded(data: bytes, recorded: str) -> bool:
    return _of(data, recorded.startswith(DOCTESTS)) == recorded


def digests(rootdir: Path, paths: Iterable[str]) -> dict[str, str]:
    """``{path: digest}`` of a file's bytes or a code module's docstrings; ``missing`` if unreadable."""
    return {path: _digest(rootdir, path, path.endswith(".py") and not is_test_file(path)) for path in paths}


def changed(rootdir: Path, recorded: Mapping[str, str]) -> list[str]:
    """The recorded paths whose content differs now, each compared as it was recorded."""
    return [path for path in sorted(recorded)
            if _digest(rootdir, path, recorded[path].startswith(DOCTESTS)) != recorded[path]]


_SECTION = re.compile(r"(?m)^(?=diff --git )")
_HEADER = re.compile(r"diff --git a/(\S+) b/(\S+)")


def _section_paths(chunk: str) -> tuple[str, ...]:
    found = _HEADER.match(chunk)
    return tuple(dict.fromkeys(found.groups())) if found is not None else ()


def patch_sections(patch: str) -> tuple[str, list[str]]:
    """``(head, sections)``: the text before the first ``diff --git`` line, then one section per file."""
    chunks = _SECTION.split(patch)
    if chunks and not chunks[0].startswith("diff --git "):
        return chunks[0], chunks[1:]
    return "", chunks


def patch_test_files(patch: str) -> list[str]:
    """The tests, conftests and fixtures a git patch names (either side of a rename), each once."""
    _, sections = patch_sections(patch)
    return list(dict.fromkeys(path for chunk in sections for path in _section_paths(chunk) if is_test_file(path)))


def tests_first(patch: str) -> str:
    """The patch with the test files' sections first: a reviewer must see a test edit before the fix."""
    head, sections = patch_sections(patch)
    return head + "".join(sorted(sections, key=lambda chunk: not any(map(is_test_file, _section_paths(chunk)))))


__all__ = ["DOCTESTS", "MISSING", "changed", "digests", "is_recorded", "patch_sections", "patch_test_files", "test_code_paths", "tests_first"]
