"""``error_inbox/<id>/context.json`` as a record: ``RunContext`` with its ``GitContext`` (docs/store.md). Pure.

What the capture knew about the run. Informative only (a missing or unreadable one never
blocks the loop), so every field is optional.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from pytest_selfheal.records.git import GitContext
from pytest_selfheal.records.jsondoc import JsonRecord, empty_map


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
