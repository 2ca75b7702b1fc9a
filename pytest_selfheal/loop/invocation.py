"""The directory a capture ran pytest from, where every verification starts again: tests that
read relative paths pass or fail depending on it (docs/loop.md "Verification fidelity")."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Optional


def start_dir(root: Path, recorded: Optional[str]) -> Optional[Path]:
    """``root / recorded`` when it is a directory inside ``root`` (a hand-edited value cannot
    move the run elsewhere), else None: the run starts at ``root``."""
    if not recorded:
        return None
    base = Path(root).resolve()
    try:
        where = (base / recorded).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if where != base and base in where.parents and where.is_dir():
        return where
    return None


def from_invocation_dir(argv: Sequence[str], rootdir: Path, start: Path, *, skip: int = 1) -> list[str]:
    """``argv`` with every word after the first ``skip`` naming a path under ``rootdir`` relative to ``start``."""
    out = list(argv)
    for index in range(skip, len(out)):
        word = out[index]
        path = word.split("::", 1)[0]
        if word.startswith("-") or not path or Path(path).is_absolute() or not (rootdir / path).exists():
            continue
        out[index] = Path(os.path.relpath(rootdir / path, start)).as_posix() + word[len(path):]
    return out
