"""Did a repair provider leave its worktree? (edge: git, files; docs/repair.md "A provider is not a sandbox").

A provider runs with the user's permissions in a worktree that shares the user's repository:
``git rev-parse --git-common-dir`` finds the main ``.git`` and from there the user's files,
hooks and config. Nothing here stops that; it is detected. Before each provider call the
user's side is fingerprinted and compared after it:

- the working tree: ``git status`` (tracked changes and untracked, non-ignored files) and the
  content of every file it names, the reports root and the junk caches left out;
- the index (``git ls-files --stage``: modes, objects, paths — not the stat data git
  refreshes by itself) and ``HEAD`` (the ref it names and the commit);
- ``.git/hooks`` (every file, its content and executable bit), ``.git/config`` and
  ``config.worktree``;
- the incident's own records under the reports root (incident, plan, attempts, result);
- the user's side of every ignored file carried into the worktree (repair/carry.py): the
  file itself, or what its link points to (``git status`` shows no ignored file).

Any difference is named (``calc.py``, ``index``, ``HEAD``, ``.git/hooks/post-checkout``) and
stops the loop with ``provider_escaped``; nothing of that repair is kept or applied.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_selfheal.gitrepo import GitFailed, run_git
from pytest_selfheal.repair.carry import real_source
from pytest_selfheal.repair.worktree import exclude_pathspecs

# What git may write by itself while the loop runs, and the loop's own scratch.
_QUIET = {"GIT_OPTIONAL_LOCKS": "0"}  # `git status` must not rewrite the index it inspects
_CONFIG_FILES = ("config", "config.worktree")
_HEAD = "HEAD"
_INDEX = "index"


@dataclass(frozen=True)
class UserState:
    """A fingerprint of the user's side of the repository: name → digest."""

    entries: Mapping[str, str]


def _digest_file(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        if path.is_symlink():
            digest.update(b"link:" + os.fsencode(os.readlink(path)))
            return digest.hexdigest()
        mode = path.stat().st_mode
        digest.update(b"x" if mode & 0o111 else b"-")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:  # gone, unreadable, a directory: still a state
        digest.update(f"error:{type(exc).__name__}".encode())
    return digest.hexdigest()


def _git(top: Path, args: Sequence[str]) -> bytes:
    try:
        return run_git(top, args, env=_QUIET)
    except GitFailed as exc:
        return f"error: {exc.first_line}".encode()


def _common_dir(top: Path) -> Path:
    raw = _git(top, ["rev-parse", "--git-common-dir"]).decode("utf-8", "surrogateescape").strip()
    path = Path(raw)
    return path if path.is_absolute() else (top / path)


def user_state(top: Path, exclude: Sequence[Path] = (), records: Mapping[str, Path] | None = None,
               carried: Sequence[str] = ()) -> UserState:
    """The fingerprint of the working tree at ``top`` (the user's repository, not a repair
    worktree), its index, ``HEAD``, hooks and config; ``exclude``: paths left out (the
    reports root, which the loop itself writes); ``records``: name → file of the documents
    the verdict is read from (a plan rewritten to select a passing test is an escape too);
    ``carried``: the repository-relative ignored files copied into the worktree."""
    entries: dict[str, str] = {name: _digest_file(path) for name, path in (records or {}).items()}
    for rel in carried:
        # What the copy was made from, links resolved: a write reaching it is an escape.
        source = real_source(top, rel)
        entries[rel] = _digest_file(source) if source is not None else "outside"
    specs = exclude_pathspecs(top, exclude)
    status = _git(top, ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--", ".", *specs])
    for record in status.split(b"\0"):
        if len(record) > 3 and record[2:3] == b" ":
            name = record[3:].decode("utf-8", "surrogateescape")
            entries[name] = record[:2].decode("ascii", "replace") + _digest_file(top / name)
    entries[_INDEX] = hashlib.sha256(_git(top, ["ls-files", "--stage", "-z"])).hexdigest()
    git_dir = _common_dir(top)
    head = _git(top, ["rev-parse", "HEAD"]) + b"|" + _git(top, ["symbolic-ref", "-q", "HEAD"])
    entries[_HEAD] = hashlib.sha256(head).hexdigest()
    for name in _CONFIG_FILES:
        entries[f".git/{name}"] = _digest_file(git_dir / name)
    hooks = git_dir / "hooks"
    try:
        names = sorted(p.name for p in hooks.iterdir())
    except OSError:
        names = []
    for name in names:
        entries[f".git/hooks/{name}"] = _digest_file(hooks / name)
    return UserState(dict(entries))


def changes(before: UserState, after: UserState) -> list[str]:
    """What differs between two fingerprints, by name, in a stable order (created, changed
    and removed alike)."""
    names = sorted(set(before.entries) | set(after.entries))
    return [name for name in names if before.entries.get(name) != after.entries.get(name)]
