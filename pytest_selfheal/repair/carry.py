"""The ignored files a repair worktree carries (edge: git, files; docs/repair.md "Isolation").

A worktree holds only what git tracks, but a project may import or read files git ignores
(a generated ``_version.py``, ``.mo`` catalogues, test data): without them the worktree
stops on ``tooling_env`` or skips tests. So they are copied in, bounded (smallest first),
never environments, caches, build trees or install metadata (a second ``*.dist-info`` would
register entry points twice). They stay ignored there, so no patch holds them; and a link
is carried as a copy of what it points to inside the project, never as a live link (the
provider could write through it, to ``~/.ssh`` say).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pytest_selfheal.gitrepo import GitFailed, run_git
from pytest_selfheal.store.fsio import within

# Directory names never carried, at any depth: environments, VCS, caches, build trees.
SKIPPED_DIRS = frozenset({
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "node_modules", "__pycache__",
    ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".eggs", ".cache", ".idea",
    ".vscode", "htmlcov", "site-packages", "build", "dist",
})
SKIPPED_SUFFIXES = (".egg-info", ".dist-info")
SKIPPED_FILE_SUFFIXES = (".pyc", ".pyo")
MAX_FILES = 10_000
MAX_BYTES = 64 * 1024 * 1024
# How many ignored entries are looked at at most (a walk of a huge ignored tree stays bounded).
_MAX_SEEN = 100_000


@dataclass(frozen=True)
class Carried:
    """The repository-relative paths copied, and how much did not fit."""

    paths: tuple[str, ...]
    left_out: int
    left_out_bytes: int


def _skipped_dir(path: Path) -> bool:
    name = path.name
    return name in SKIPPED_DIRS or name.endswith(SKIPPED_SUFFIXES) or (path / "pyvenv.cfg").is_file()


def _inside(rel: str, prefixes: Sequence[str]) -> bool:
    return any(rel == p or rel.startswith(p + "/") for p in prefixes)


def _walk(top: Path, rel: str, prefixes: Sequence[str]) -> Iterator[str]:
    """Files under the ignored directory ``rel`` (repository-relative), skipped trees pruned."""
    for root, dirs, files in os.walk(top / rel):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not _skipped_dir(here / d)
                         and not _inside((here / d).relative_to(top).as_posix(), prefixes))
        for name in sorted(files):
            yield (here / name).relative_to(top).as_posix()


def real_source(top: Path, rel: str, exclude: Sequence[str] = ()) -> Optional[Path]:
    """What the ignored entry ``rel`` of ``top`` holds, with every link on the way resolved,
    when that is inside ``top`` and not in the ``exclude`` prefixes (or ``.git``); else None."""
    base = os.path.realpath(top)
    real = os.path.realpath(top / rel)
    if not within(real, base) or real == base:
        return None
    inner = Path(real).relative_to(base).as_posix()
    return None if _inside(inner, [*exclude, ".git"]) else Path(real)


def ignored_files(top: Path, exclude: Sequence[str] = ()) -> list[str]:
    """The ignored files of the working tree at ``top`` worth carrying (repository-relative,
    skipped trees and ``exclude`` prefixes left out); at most ``_MAX_SEEN`` are looked at."""
    try:
        out = run_git(top, ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"])
    except GitFailed:
        return []
    prefixes = [p.strip("/") for p in exclude if p.strip("/")]
    found: list[str] = []
    for entry in (os.fsdecode(e) for e in out.split(b"\0") if e):
        rel = entry.rstrip("/")
        parts = rel.split("/")
        if _inside(rel, prefixes) or any(_skipped_dir(top.joinpath(*parts[: i + 1])) for i in range(len(parts) - 1)):
            continue
        path = top / rel
        # A link to a folder inside the project is walked as that folder; one leading out, never.
        if path.is_dir() and (not path.is_symlink() or real_source(top, rel, prefixes) is not None):
            if not _skipped_dir(path):
                found.extend(_walk(top, rel, prefixes))
        elif not rel.endswith(SKIPPED_FILE_SUFFIXES):
            found.append(rel)
        if len(found) >= _MAX_SEEN:
            break
    return found[:_MAX_SEEN]


def _sized_source(top: Path, rel: str, prefixes: Sequence[str]) -> Optional[tuple[int, Path]]:
    """The size and path of the regular file ``rel`` is copied from (itself, or what its links
    point to inside the project); None for a link leading out, a dangling link, a FIFO."""
    source = real_source(top, rel, prefixes)
    try:
        info = source.stat() if source is not None else None
    except OSError:
        return None
    return (info.st_size, source) if source is not None and info is not None and stat.S_ISREG(info.st_mode) else None


def carry_ignored(top: Path, dest: Path, exclude: Sequence[str] = (), *,
                  max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES) -> Carried:
    """Copy the ignored files of ``top`` worth carrying into the same places under ``dest``,
    smallest first within the bounds; git's checkout wins over a carried file."""
    prefixes = [p.strip("/") for p in exclude if p.strip("/")]
    sized = [(found[0], rel, found[1]) for rel in ignored_files(top, exclude)
             if (found := _sized_source(top, rel, prefixes)) is not None]
    sized.sort()
    home = os.path.realpath(dest)
    copied: list[str] = []
    used = 0
    left_out = left_bytes = 0
    for size, rel, source in sized:
        if len(copied) >= max_files or used + size > max_bytes:
            left_out += 1
            left_bytes += size
            continue
        target = dest / rel
        if target.exists() or target.is_symlink():
            continue
        if not within(os.path.realpath(target.parent), home):
            continue  # a link of the worktree's own checkout on the way: the copy would land outside
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)  # the file's bytes, never a link
        except OSError:
            left_out += 1
            left_bytes += size
            continue
        copied.append(rel)
        used += size
    return Carried(tuple(sorted(copied)), left_out, left_bytes)
