"""Triage of a run's failures: new, known, flaky or quarantined (pure; docs/history.md).

One label per failure, the first that holds wins: ``quarantined`` (an entry of the quarantine
list names its test or fingerprint), ``flaky`` (it passed on re-run with no code change, or
its recorded flake rate is above ``history.flaky_rate``), ``known`` (its fingerprint already
failed on the base branch), else ``new`` (most likely caused by the change under test). In
the team's committed quarantine list, a malformed or expired entry is left out with a warning
naming its line; the rest still apply.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pytest_selfheal.history.records import FlakeRate, Sighting
from pytest_selfheal.records.incident import Triage
from pytest_selfheal.records.vocab import TriageLabel

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
        return (self.test is not None and self.test == nodeid) or (
            self.fingerprint is not None and self.fingerprint == fingerprint)

    def to_mapping(self) -> dict[str, str]:
        """The entry as written in the file (absent keys left out)."""
        return {key: value for key in ENTRY_KEYS if (value := getattr(self, key)) is not None}


def matching_entry(entries: Sequence[QuarantineEntry], *, nodeid: str, fingerprint: str) -> Optional[QuarantineEntry]:
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
    found = _entry_nodes(root)
    if found is None:
        return [], [f"{where}:{root.start_mark.line + 1}: expected `{ROOT_KEY}:` with a list of entries; quarantine ignored"]
    entries: list[QuarantineEntry] = []
    warnings: list[str] = []
    for node in found[2]:
        line = node.start_mark.line + 1
        try:
            data = _entry_mapping(node)
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


def _entry_nodes(root: Any) -> Optional[tuple[Any, Any, list[Any]]]:
    """``(the quarantine key, its value, its entries)`` of a document, None when it has no list there."""
    yaml = _yaml()
    if not isinstance(root, yaml.MappingNode):
        return None
    for key, value in root.value:
        if isinstance(key, yaml.ScalarNode) and key.value == ROOT_KEY:
            if isinstance(value, yaml.ScalarNode) and value.value in ("", "null", "~"):
                return key, value, []
            return (key, value, list(value.value)) if isinstance(value, yaml.SequenceNode) else None
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
    if isinstance(value, dt.date):
        return value.date() if isinstance(value, dt.datetime) else value
    try:
        return dt.date.fromisoformat(value.strip()) if isinstance(value, str) else None
    except ValueError:
        return None


HEADER = ("# Quarantined failures (pytest-selfheal): they still run and are reported, but do not fail\n"
          "# `selfheal ci`. On a pull request this file is read from the base revision.\n")


def _item_text(data: Any, indent: int) -> str:
    dumped = _yaml().safe_dump([data], sort_keys=False, allow_unicode=True, width=1000)
    return "".join(" " * indent + line + "\n" for line in dumped.splitlines())


def _entry_mapping(node: Any) -> Any:
    return _yaml().safe_load(_yaml().serialize(node))


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
    if text is None or not text.strip():
        return HEADER + f"{ROOT_KEY}:\n" + _item_text(entry.to_mapping(), 2)
    found = _entry_nodes(_compose(text))
    if found is None:
        raise ValueError(f"expected `{ROOT_KEY}:` with a list of entries")
    key, sequence, items = found
    key_line = key.start_mark.line
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
    items = found[2] if (found := _entry_nodes(_compose(text))) else []
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


TRIAGE_LABELS: tuple[TriageLabel, ...] = tuple(TriageLabel)

# A recorded rate needs a few failures behind it before it calls a test flaky.
MIN_FAILURES_FOR_RATE = 2
RERUN_DETAIL = "failed, then passed on re-run with no code change"


def triage_failure(nodeid: str, fingerprint: str, *, base_branch: str, sightings: Mapping[str, Sighting],
                   flake_rates: Mapping[str, FlakeRate], passed_on_rerun: Collection[str] = (),
                   quarantine: Sequence[QuarantineEntry] = (), flaky_rate: float = 0.1) -> Triage:
    """The triage of one failure (see the module docstring for the order)."""
    entry = matching_entry(quarantine, nodeid=nodeid, fingerprint=fingerprint)
    if entry is not None:
        owner = f", owner {entry.owner}" if entry.owner else ""
        expires = f", until {entry.expires}" if entry.expires else ""
        return Triage(TriageLabel.QUARANTINED, f"quarantined: {entry.reason}{owner}{expires}", quarantine_reason=entry.reason,
                      base_branch=base_branch)
    rate = flake_rates.get(nodeid)
    if nodeid in passed_on_rerun:
        return Triage(TriageLabel.FLAKY, RERUN_DETAIL, flake_rate=round(rate.rate, 3) if rate else None, base_branch=base_branch)
    if rate is not None and rate.failed >= MIN_FAILURES_FOR_RATE and rate.rate > flaky_rate:
        return Triage(TriageLabel.FLAKY, f"passed on re-run {rate.flaky} of {rate.failed} recorded failures "
                             f"({rate.rate:.0%} > {flaky_rate:.0%})", flake_rate=round(rate.rate, 3),
                      base_branch=base_branch)
    seen = sightings.get(fingerprint)
    if seen is not None:
        commit = f" at {seen.first_commit[:12]}" if seen.first_commit else ""
        times = "once" if seen.occurrences == 1 else f"{seen.occurrences} times"
        return Triage(TriageLabel.KNOWN, f"known on {base_branch}: first seen{commit} ({seen.first_seen_at[:10]}), {times}",
                      first_seen_commit=seen.first_commit, first_seen_at=seen.first_seen_at,
                      occurrences=seen.occurrences, base_branch=base_branch)
    return Triage(TriageLabel.NEW, f"new: never seen failing on {base_branch}", base_branch=base_branch)


def rerun_count(count: int) -> str:
    """``1 flaky (passed on re-run)``: how every surface counts tests that passed on a re-run."""
    return f"{count} {TriageLabel.FLAKY} (passed on re-run)"


def triage_headline(labels: Sequence[str], base_branch: str, passed_on_rerun: int = 0) -> str:
    """``2 new, 1 known on main, 1 flaky`` — the first line of the PR comment (zero counts left
    out). ``passed_on_rerun``: how many of the flaky ones passed on a re-run in this run."""
    parts: list[str] = []
    for label in TriageLabel:
        count = labels.count(label)
        if label == TriageLabel.FLAKY and passed_on_rerun and count:
            parts.append(rerun_count(count) if passed_on_rerun >= count
                         else f"{count} {label} ({passed_on_rerun} passed on re-run)")
        elif count:
            parts.append(f"{count} {label}" + (f" on {base_branch}" if label == TriageLabel.KNOWN else ""))
    return ", ".join(parts) if parts else "no failures"


def triage_summary(triages: Sequence[Triage]) -> Optional[dict[str, object]]:
    """``{"counts": {label: n}, "line": "2 new, 1 known on main"}`` of a report's triages; None without any."""
    labels = [str(t.label) for t in triages if t.label in TRIAGE_LABELS]
    if not labels:
        return None
    branches = [t.base_branch for t in triages if t.base_branch is not None]
    base = branches[0] if branches else "main"
    rerun = sum(1 for t in triages if t.label == TriageLabel.FLAKY and t.detail == RERUN_DETAIL)
    return {"counts": {label: labels.count(label) for label in TRIAGE_LABELS if label in labels},
            "line": triage_headline(labels, base, rerun)}
