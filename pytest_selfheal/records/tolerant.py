"""Tolerant readers of loose JSON values (pure): a value of the wrong type reads as empty."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional


def as_str(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default


def opt_str(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def strs(value: Any) -> list[str]:
    """The strings in a list ``value`` (others dropped); [] when it is no list."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, (list, tuple)) else []


def unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
