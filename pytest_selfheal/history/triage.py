"""Triage of a run's failures: new, known, flaky or quarantined (pure).

One label per failure, first that holds wins (docs/history.md):

1. ``quarantined`` — a quarantine entry (read from the base revision on a pull request)
   names its test or fingerprint: the team decided to let it fail for now;
2. ``flaky`` — it passed on re-run with no code change in this run, or its recorded flake
   rate (re-run passes among its recorded failures, over the window) is above
   ``history.flaky_rate``;
3. ``known`` — its fingerprint already failed on the base branch (first seen there, how
   often);
4. ``new`` — none of the above: most likely caused by the change under test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from pytest_selfheal.history.quarantine import QuarantineEntry, matching_entry
from pytest_selfheal.history.records import FlakeRate, Sighting

NEW = "new"
KNOWN = "known"
FLAKY = "flaky"
QUARANTINED = "quarantined"
TRIAGE_LABELS: Tuple[str, ...] = (NEW, KNOWN, FLAKY, QUARANTINED)

# A recorded rate needs a few failures behind it before it calls a test flaky.
MIN_FAILURES_FOR_RATE = 2


@dataclass(frozen=True)
class Triage:
    """The triage of one failure and the evidence behind it."""

    label: str
    detail: str  # one line a person reads: "first seen on main at abc1234 (2026-11-20), 3 times"
    first_seen_commit: Optional[str] = None
    first_seen_at: Optional[str] = None
    occurrences: Optional[int] = None
    flake_rate: Optional[float] = None
    quarantine_reason: Optional[str] = None

    def to_json(self) -> Dict[str, object]:
        """The ``triage`` object of incident.json and the report (absent fields left out)."""
        data: Dict[str, object] = {"label": self.label, "detail": self.detail}
        for key in ("first_seen_commit", "first_seen_at", "occurrences", "flake_rate", "quarantine_reason"):
            value = getattr(self, key)
            if value is not None:
                data[key] = value
        return data


def triage_failure(
    nodeid: str,
    fingerprint: str,
    *,
    base_branch: str,
    sightings: Mapping[str, Sighting],
    flake_rates: Mapping[str, FlakeRate],
    passed_on_rerun: Collection[str] = (),
    quarantine: Sequence[QuarantineEntry] = (),
    flaky_rate: float = 0.1,
) -> Triage:
    """The triage of one failure (see the module docstring for the order)."""
    entry = matching_entry(quarantine, nodeid=nodeid, fingerprint=fingerprint)
    if entry is not None:
        owner = f", owner {entry.owner}" if entry.owner else ""
        expires = f", until {entry.expires}" if entry.expires else ""
        return Triage(QUARANTINED, f"quarantined: {entry.reason}{owner}{expires}", quarantine_reason=entry.reason)
    rate = flake_rates.get(nodeid)
    if nodeid in passed_on_rerun:
        return Triage(FLAKY, "failed, then passed on re-run with no code change",
                      flake_rate=round(rate.rate, 3) if rate else None)
    if rate is not None and rate.failed >= MIN_FAILURES_FOR_RATE and rate.rate > flaky_rate:
        return Triage(FLAKY, f"passed on re-run {rate.flaky} of {rate.failed} recorded failures "
                             f"({rate.rate:.0%} > {flaky_rate:.0%})", flake_rate=round(rate.rate, 3))
    seen = sightings.get(fingerprint)
    if seen is not None:
        commit = f" at {seen.first_commit[:12]}" if seen.first_commit else ""
        times = "once" if seen.occurrences == 1 else f"{seen.occurrences} times"
        return Triage(KNOWN, f"known on {base_branch}: first seen{commit} ({seen.first_seen_at[:10]}), {times}",
                      first_seen_commit=seen.first_commit, first_seen_at=seen.first_seen_at,
                      occurrences=seen.occurrences)
    return Triage(NEW, f"new: never seen failing on {base_branch}")


def triage_headline(labels: Sequence[str], base_branch: str) -> str:
    """``2 new, 1 known on main, 1 flaky`` — the first line of the PR comment (zero counts left out)."""
    parts: List[str] = []
    for label in (NEW, KNOWN, FLAKY, QUARANTINED):
        count = labels.count(label)
        if count:
            parts.append(f"{count} {label}" + (f" on {base_branch}" if label == KNOWN else ""))
    return ", ".join(parts) if parts else "no failures"


__all__ = [
    "FLAKY",
    "KNOWN",
    "NEW",
    "QUARANTINED",
    "TRIAGE_LABELS",
    "Triage",
    "triage_failure",
    "triage_headline",
]
