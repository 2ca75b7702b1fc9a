"""``error_runs/<id>/worktree.json`` as a record: ``WorktreeRecord``, the repair worktree a
killed run may leave behind (docs/repair.md). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_selfheal.records.jsondoc import JsonRecord


@dataclass(frozen=True)
class WorktreeRecord(JsonRecord):
    """Where a repair run's worktree lives, written while it exists so the next run can remove it."""

    repo: str = ""  # the repository's top level
    path: str = ""  # the worktree
    scratch: str = ""  # the temporary directory holding it
