"""The quarantine list: a committed YAML file the team controls (pure: text in, entries out).

``.selfheal-quarantine.yml`` (``quarantine.path``)::

    quarantine:
      - test: tests/test_api.py::test_upstream
        reason: upstream sandbox flaps, ticket OPS-12
        expires: 2026-12-31
        owner: "@payments"
      - fingerprint: 1a2b3c4d5e6f
        reason: known on main since the 3.2 bump

Each entry names a ``test`` (node id) or a ``fingerprint``, with a ``reason``; ``expires``
(YYYY-MM-DD, inclusive) and ``owner`` are optional. A malformed or expired entry is left
out with a warning naming its line; the rest still apply.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

ROOT_KEY = "quarantine"


def _yaml() -> Any:
    # Imported on first use: pyyaml is slow to import, and most runs have no quarantine file.
    import yaml  # type: ignore[import-untyped,unused-ignore]

    return yaml
ENTRY_KEYS = ("test", "fingerprint", "reason", "expires", "owner")


@dataclass(frozen=True)
class QuarantineEntry:
    """One entry: what it covers (a test or a fingerprint), why, until when, whose."""

    reason: str
    test: Optional[str] = None
    fingerprint: Optional[str] = None
    expires: Optional[str] = None  # YYYY-MM-DD
    owner: Optional[str] = None
    line: int = 0  # 1-based line in the file (0: built in code)

    def covers(self, *, nodeid: str, fingerprint: str) -> bool:
        """True when the entry names this test or this fingerprint."""
        return (self.test is not None and self.test == nodeid) or (
            self.fingerprint is not None and self.fingerprint == fingerprint)

    def to_mapping(self) -> dict[str, str]:
        """The entry as written in the file (absent keys left out)."""
        data = {"test": self.test, "fingerprint": self.fingerprint, "reason": self.reason,
                "expires": self.expires, "owner": self.owner}
        return {key: value for key, value in data.items() if value is not None}


def matching_entry(entries: Sequence[QuarantineEntry], *, nodeid: str, fingerprint: str) -> Optional[QuarantineEntry]:
    """The first entry that covers the failure, or None."""
    return next((e for e in entries if e.covers(nodeid=nodeid, fingerprint=fingerprint)), None)


def parse_quarantine(text: str, where: str, today: dt.date) -> tuple[list[QuarantineEntry], list[str]]:
    """``(entries in force, warnings)`` from the file's text. Never raises: a file that is
    not YAML, or not the expected shape, is one warning and no entries."""
    yaml = _yaml()
    try:
        root = yaml.compose(text)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        return [], [f"{where}{at}: not valid YAML; quarantine ignored"]
    if root is None:
        return [], []
    items = _entry_nodes(root)
    if items is None:
        return [], [f"{where}:{root.start_mark.line + 1}: expected `{ROOT_KEY}:` with a list of entries; quarantine ignored"]
    entries: list[QuarantineEntry] = []
    warnings: list[str] = []
    for node in items:
        line = node.start_mark.line + 1
        try:
            data = yaml.safe_load(yaml.serialize(node))
        except Exception as exc:
            # A tag (`!!python/object`), a complex key, an impossible date (`2026-02-30`)...
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            warnings.append(f"{where}:{line}: not a plain entry ({_shown(why)}); entry ignored")
            continue
        entry, problem = _entry(data, line, today)
        if problem is not None:
            warnings.append(f"{where}:{line}: {problem}; entry ignored")
        elif entry is not None:
            entries.append(entry)
    return entries, warnings


def _entry_nodes(root: Any) -> Optional[list[Any]]:
    yaml = _yaml()
    if not isinstance(root, yaml.MappingNode):
        return None
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == ROOT_KEY:
            if isinstance(value, yaml.ScalarNode) and value.value in ("", "null", "~"):
                return []
            return list(value.value) if isinstance(value, yaml.SequenceNode) else None
    return None


def _entry(data: Any, line: int, today: dt.date) -> tuple[Optional[QuarantineEntry], Optional[str]]:
    if not isinstance(data, dict):
        return None, "expected an entry with `test` or `fingerprint` and `reason`"
    unknown = sorted(_shown(k) for k in data if k not in ENTRY_KEYS)
    if unknown:
        return None, f"unknown key {unknown[0]} (expected {', '.join(ENTRY_KEYS)})"
    test, fingerprint = data.get("test"), data.get("fingerprint")
    if (test is None) == (fingerprint is None):
        return None, "give exactly one of `test` or `fingerprint`"
    for key in ("test", "fingerprint", "reason", "owner"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            return None, f"`{key}` must be a non-empty string"
    if not data.get("reason"):
        return None, "`reason` is required"
    expires = data.get("expires")
    if expires is not None:
        day = _date(expires)
        if day is None:
            return None, f"`expires` must be a date YYYY-MM-DD, got {_shown(expires)}"
        if day < today:
            return None, f"expired on {day.isoformat()}"
        expires = day.isoformat()
    return QuarantineEntry(reason=str(data["reason"]).strip(), test=test, fingerprint=fingerprint,
                           expires=expires, owner=data.get("owner"), line=line), None


def _shown(value: Any, limit: int = 80) -> str:
    """A value for a warning, bounded: never the repr of a container, whose aliases a
    475-byte YAML file can make cost gigabytes to print."""
    if isinstance(value, str):
        text = value if len(value) <= limit else value[:limit] + "..."
        return repr(text)
    if isinstance(value, (int, float, bool, dt.date)) or value is None:
        return repr(value)[:limit]
    return f"a {type(value).__name__}"


def _date(value: Any) -> Optional[dt.date]:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


HEADER = ("# Quarantined failures (pytest-selfheal): they still run and are reported, but do not fail\n"
          "# `selfheal ci`. On a pull request this file is read from the base revision.\n")


def _item_text(data: Any, indent: int) -> str:
    yaml = _yaml()
    dumped = yaml.safe_dump([data], sort_keys=False, allow_unicode=True, width=1000)
    return "".join(" " * indent + line + "\n" for line in dumped.splitlines())


def _entry_mapping(node: Any) -> Any:
    yaml = _yaml()
    return yaml.safe_load(yaml.serialize(node))


def _compose(text: str) -> Any:
    yaml = _yaml()
    try:
        return yaml.compose(text)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ValueError(f"not valid YAML{f' at line {mark.line + 1}' if mark is not None else ''}") from None


def add_entry(text: Optional[str], entry: QuarantineEntry) -> str:
    """``text`` (None: no file yet) with ``entry`` appended; every other line, comments
    included, stays as it was. ``ValueError`` when the text is not a quarantine list."""
    yaml = _yaml()
    if text is None or not text.strip():
        return HEADER + f"{ROOT_KEY}:\n" + _item_text(entry.to_mapping(), 2)
    root = _compose(text)
    items = _entry_nodes(root)
    if items is None:
        raise ValueError(f"expected `{ROOT_KEY}:` with a list of entries")
    key_line, sequence = next((k.start_mark.line, v) for k, v in root.value
                              if isinstance(k, yaml.ScalarNode) and k.value == ROOT_KEY)
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    end = sequence.end_mark.line + (1 if sequence.end_mark.column else 0)
    if not items or getattr(sequence, "flow_style", False):
        # `quarantine:` with nothing (or a flow list): rewrite that key as a block list.
        kept = "".join(_item_text(_entry_mapping(n), 2) for n in items)
        block = f"{ROOT_KEY}:\n" + kept + _item_text(entry.to_mapping(), 2)
        return "".join(lines[:key_line]) + block + "".join(lines[max(end, key_line + 1):])
    indent = max(items[0].start_mark.column - 2, 0)  # the column of the "- " before the first key
    return "".join(lines[:end]) + _item_text(entry.to_mapping(), indent) + "".join(lines[end:])


def remove_entries(text: str, *, test: Optional[str] = None, fingerprint: Optional[str] = None) -> tuple[str, int]:
    """``(text without the entries naming test/fingerprint, how many were removed)``; the
    lines of every other entry and comment stay as they were. ``ValueError`` on bad YAML."""
    root = _compose(text)
    items = _entry_nodes(root) or []
    doomed: list[tuple[int, int]] = []
    for index, node in enumerate(items):
        data = _entry_mapping(node)
        if isinstance(data, dict) and ((test is not None and data.get("test") == test) or (
                fingerprint is not None and data.get("fingerprint") == fingerprint)):
            start = node.start_mark.line
            end = items[index + 1].start_mark.line if index + 1 < len(items) else (
                node.end_mark.line + (1 if node.end_mark.column else 0))
            doomed.append((start, end))
    lines = text.splitlines(keepends=True)
    for start, end in reversed(doomed):
        del lines[start:end]
    return "".join(lines), len(doomed)
