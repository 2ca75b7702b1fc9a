"""``error_inbox/<id>/context.json`` as a record (docs/store.md): what the capture knew of the run.
Informative only (a missing or unreadable one never blocks the loop): every field optional. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from pytest_selfheal.records.jsondoc import JsonRecord, empty_map, every_key


@dataclass(frozen=True)
class GitContext(JsonRecord):
    """The repository's root, commit, branch and whether the tree had changes
    (``gitrepo.git_snapshot``), or only ``error`` when git could not say."""

    root: Optional[str] = None
    commit: Optional[str] = None  # None: a repository without commits
    branch: Optional[str] = None  # None: a detached HEAD
    dirty: Optional[bool] = None  # tracked changes or untracked files
    diff_stat: Optional[str] = None  # ``git diff HEAD --stat`` of the changes
    untracked: Optional[int] = None
    error: Optional[str] = None  # the git command that failed, and why

    @classmethod
    def failed(cls, error: str) -> GitContext:
        """The context of a git command that failed: ``{"error": ...}`` only."""
        return cls(error=error, keys=("error",))

    @property
    def clean_commit(self) -> Optional[str]:
        """The commit when the tree was known clean at it (its diff hash is the clean tree's), else None."""
        return self.commit if self.dirty is False else None


# The keys a snapshot writes, in this order (``commit``/``branch`` null when unknown).
SNAPSHOT_KEYS = every_key(GitContext, "error")


@dataclass(frozen=True)
class RunContext(JsonRecord):
    """``context.json``: the run a capture saw."""

    KIND: ClassVar[str] = "context"

    rootdir: Optional[str] = None
    git: Optional[GitContext] = None  # None: outside a git repository
    python: Optional[str] = None  # ``3.12.1``
    python_implementation: Optional[str] = None
    pytest: Optional[str] = None  # pytest's version
    platform: Optional[str] = None
    invocation_args: tuple[str, ...] = ()
    cwd: Optional[str] = None
    ci: Mapping[str, str] = field(default_factory=empty_map)  # the CI variables present (a fixed list, no secrets)
