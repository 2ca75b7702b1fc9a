"""Did a repair provider leave its worktree? (edge: git, files; docs/repair.md "A provider is not a sandbox").

A provider runs with the user's permissions, and its worktree shares the user's repository:
nothing here prevents an escape, it is detected. Before and after each call the user's side
is fingerprinted (working tree, index, ``HEAD``, ``.git`` hooks and config, the incident's
records, the sources of the carried ignored files); any difference is named and stops the
loop with ``provider_escaped``, and nothing of that repair is kept.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_selfheal.gitrepo import GitFailed, run_git
from pytest_selfheal.repair.carry import real_source
from pytest_selfheal.repair.worktree import exclude_pathspecs

_QUIET = {"GIT_OPTIONAL_LOCKS": "0"}  # `git status` must not rewrite the index it inspects


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


def user_state(top: Path, exclude: Sequence[Path] = (), records: Mapping[str, Path] | None = None,
               carried: Sequence[str] = ()) -> dict[str, str]:
    """The fingerprint of the user's repository at ``top``, ``exclude`` (the reports root the
    loop writes) left out; ``records``: name → file of the documents the verdict is read from
    (a plan rewritten to select a passing test is an escape too)."""
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
    entries["index"] = hashlib.sha256(_git(top, ["ls-files", "--stage", "-z"])).hexdigest()
    git_dir = top / _git(top, ["rev-parse", "--git-common-dir"]).decode("utf-8", "surrogateescape").strip()
    head = _git(top, ["rev-parse", "HEAD"]) + b"|" + _git(top, ["symbolic-ref", "-q", "HEAD"])
    entries["HEAD"] = hashlib.sha256(head).hexdigest()
    for name in ("config", "config.worktree"):
        entries[f".git/{name}"] = _digest_file(git_dir / name)
    hooks = git_dir / "hooks"
    try:
        names = sorted(p.name for p in hooks.iterdir())
    except OSError:
        names = []
    for name in names:
        entries[f".git/hooks/{name}"] = _digest_file(hooks / name)
    return entries


def changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The names whose entry differs between two fingerprints, sorted."""
    return [name for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]
