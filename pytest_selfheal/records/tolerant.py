"""Tolerant readers of JSON values (pure): a report JSON read back (merge, render) is read
so that a field of the wrong type reads as the default, and one odd entry never stops a report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional


def as_str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def opt_str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def as_int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def dicts(value: Any) -> list[Mapping[str, object]]:
    """The mappings in a list ``value`` (others dropped); [] when it is no list."""
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, (list, tuple)) else []


def strs(value: Any) -> list[str]:
    """The strings in a list ``value`` (others dropped); [] when it is no list."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, (list, tuple)) else []


def unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
