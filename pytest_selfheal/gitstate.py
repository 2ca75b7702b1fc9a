"""The working-tree diff hash: has the code changed between two iterations? (edge: git)

SPEC §8: progress includes "the code diff (gitpython, hashed) changed". The hash covers
everything a code change can touch in the repository containing the project:

- ``git diff HEAD --no-ext-diff --binary`` — staged and unstaged changes of tracked
  files, binary-safe, never through a user's external diff driver;
- the paths and contents of untracked, non-ignored files (``git ls-files --others
  --exclude-standard -z``) — a new module an agent wrote counts as a change;
- the commit HEAD points at — an agent that *commits* its fix between two iterations
  leaves ``git diff HEAD`` empty both times, and that is a code change too.

The reports root (``.selfheal/`` by default) usually lives inside the tree and changes
at every iteration: it is excluded explicitly by pathspec (and should be in .gitignore).
Two git calls, no shell.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

HASH_LENGTH = 16  # hex characters of sha256 kept
_CHUNK = 1024 * 1024


# Build and cache litter: never a code change (projects without a .gitignore have it untracked).
JUNK_PATHSPECS: Tuple[str, ...] = (
    ":(exclude,glob)**/__pycache__/**",
    ":(exclude,glob)**/*.py[co]",
    ":(exclude,glob)**/.pytest_cache/**",
)


def _exclude_specs(top: Path, exclude: Sequence[Path]) -> List[str]:
    specs = []
    for path in exclude:
        try:
            rel = Path(os.path.realpath(path)).relative_to(Path(os.path.realpath(top)))
        except ValueError:
            continue  # outside the repository: nothing to exclude
        if rel.parts:
            specs.append(f":(exclude){rel.as_posix()}")
    return specs


def _hash_file(digest: "hashlib._Hash", path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            while True:
                block = handle.read(_CHUNK)
                if not block:
                    break
                digest.update(block)
    except OSError as exc:  # vanished or unreadable between listing and reading
        digest.update(f"<unreadable: {exc.errno}>".encode())


def _start(head: Optional[str], diff: bytes) -> "hashlib._Hash":
    digest = hashlib.sha256()
    digest.update(b"head\0" + (head or "").encode() + b"\0diff\0")
    digest.update(diff)
    return digest


def clean_tree_hash(commit: str) -> str:
    """The :func:`diff_hash` of a clean working tree (no diff, no untracked file) at ``commit``.

    Lets the loop know the capture's hash when the capture recorded only ``context.json``'s
    git state (commit + ``dirty: false``) and not the hash itself.
    """
    return _start(commit, b"").hexdigest()[:HASH_LENGTH]


def diff_hash(project_root: Path, exclude: Sequence[Path] = ()) -> Optional[str]:
    """sha256 (first 16 hex) of the repository's working-tree changes against HEAD.

    ``exclude``: absolute paths (the reports root) left out of the hash. Returns None
    outside a git repository, when git is unavailable, or on any git error (an unknown
    hash never counts as progress, see docs/loop.md). An unborn HEAD (no commit yet)
    hashes the staged files instead of ``git diff HEAD``.
    """
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    try:
        import git  # gitpython: lazily, it is slow to import and needs a git binary
    except Exception:
        return None
    try:
        repo = git.Repo(project_root, search_parent_directories=True)
    except Exception:
        return None
    try:
        if repo.working_tree_dir is None:  # a bare repository
            return None
        top = Path(repo.working_tree_dir)
        specs = [".", *_exclude_specs(top, exclude), *JUNK_PATHSPECS]
        runner: Any = git.Git(str(top))
        base = ["HEAD"] if repo.head.is_valid() else ["--cached"]
        diff = runner.diff(*base, "--no-ext-diff", "--no-color", "--binary", "--", *specs, stdout_as_string=False)
        listed = runner.ls_files("--others", "--exclude-standard", "-z", "--", *specs, stdout_as_string=False)
        head = repo.head.commit.hexsha if repo.head.is_valid() else None
        digest = _start(head, diff if isinstance(diff, bytes) else str(diff).encode())
        names = sorted(n for n in (listed if isinstance(listed, bytes) else str(listed).encode()).split(b"\0") if n)
        for name in names:
            digest.update(b"\0untracked\0" + name + b"\0")
            _hash_file(digest, top / os.fsdecode(name))
        return digest.hexdigest()[:HASH_LENGTH]
    except Exception:  # a broken repository must not stop the loop
        return None
    finally:
        repo.close()


__all__ = ["HASH_LENGTH", "clean_tree_hash", "diff_hash"]
