"""The test code a failure depends on, and its digests (edge: reads files).

A failing test's own file and every ``conftest.py`` between it and the rootdir: when they
change, a later pass may be a weakened test rather than a fix. The capture records their
digests (``incident.json`` ``test_digests``); the agent-in-the-loop mode compares, so a run
that passes only because those files changed stops with ``tests_edited``, never ``success``.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterable, Mapping
from pathlib import Path

MISSING = "missing"


def test_code_paths(nodeids: Iterable[str]) -> list[str]:
    """Rootdir-relative POSIX paths of the tests' files and the conftests above them, sorted."""
    paths = set()
    for nodeid in nodeids:
        test_file = posixpath.normpath(nodeid.split("::", 1)[0]) if nodeid else ""
        if not test_file.endswith(".py") or test_file.startswith(("../", "/")):
            continue
        paths.add(test_file)
        folder = posixpath.dirname(test_file)
        while True:
            paths.add(posixpath.join(folder, "conftest.py") if folder else "conftest.py")
            if not folder:
                break
            folder = posixpath.dirname(folder)
    return sorted(paths)


def digests(rootdir: Path, paths: Iterable[str]) -> dict[str, str]:
    """``{path: sha256 of its bytes}``; a file that does not exist (or cannot be read) is ``missing``."""
    out: dict[str, str] = {}
    for path in paths:
        try:
            out[path] = hashlib.sha256((rootdir / path).read_bytes()).hexdigest()
        except OSError:
            out[path] = MISSING
    return out


def changed(rootdir: Path, recorded: Mapping[str, str]) -> list[str]:
    """The recorded paths whose content differs now (created, edited or deleted)."""
    now = digests(rootdir, recorded)
    return [path for path in sorted(recorded) if now[path] != recorded[path]]


__all__ = ["MISSING", "changed", "digests", "test_code_paths"]
