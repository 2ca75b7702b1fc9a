"""The project's source lines, read for the code excerpt of a plan's top suspects (edge: files).

The plan is pure (plan/build.py takes a reader of lines); this is the reader every plan
builder passes it. It reads only regular files below the run's ``rootdir`` (a symlink or
``..`` leading out of it reads nothing), each once.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional, Union

# What plan/suspects.py calls a ``Source``: path → the file's lines, or None.
Source = Callable[[str], Optional[Sequence[str]]]

# A larger file is generated or data, not code a suspect lives in.
MAX_SOURCE_BYTES = 2_000_000


def project_source(rootdir: Union[str, Path, None]) -> Optional[Source]:
    """A reader of the files below ``rootdir`` (None when there is no such directory)."""
    if not rootdir:
        return None
    root = os.path.realpath(str(rootdir))
    if not os.path.isdir(root):
        return None
    cache: dict[str, Optional[list[str]]] = {}

    def read(path: str) -> Optional[Sequence[str]]:
        if path not in cache:
            cache[path] = _read(root, path)
        return cache[path]

    return read


def _read(root: str, path: str) -> Optional[list[str]]:
    if not path or os.path.isabs(path) or "\0" in path:
        return None  # suspects name project-relative paths
    full = os.path.realpath(os.path.join(root, path))
    if not full.startswith(root.rstrip(os.sep) + os.sep) or not os.path.isfile(full):
        return None  # `..` or a symlink out of the project
    try:
        if os.path.getsize(full) > MAX_SOURCE_BYTES:
            return None
        with open(full, "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace").splitlines()
