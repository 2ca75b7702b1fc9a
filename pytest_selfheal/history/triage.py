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

from collections.abc import Collection, Mapping, Sequence
from typing import Optional

from pytest_selfheal.history.quarantine import QuarantineEntry, matching_entry
from pytest_selfheal.history.records import FlakeRate, Sighting
from pytest_selfheal.records.incident import Triage
from pytest_selfheal.records.vocab import TriageLabel

TRIAGE_LABELS: tuple[TriageLabel, ...] = tuple(TriageLabel)

# A recorded rate needs a few failures behind it before it calls a test flaky.
MIN_FAILURES_FOR_RATE = 2
RERUN_DETAIL = "failed, then passed on re-run with no code change"


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
    """``{"counts": {label: n}, "line": "2 new, 1 known on main"}`` of a report's triages
    (its ``triage_summary``); None when there are none."""
    labels = [str(t.label) for t in triages if t.label in TRIAGE_LABELS]
    if not labels:
        return None
    branches = [t.base_branch for t in triages if t.base_branch is not None]
    base = branches[0] if branches else "main"
    rerun = sum(1 for t in triages if t.label == TriageLabel.FLAKY and t.detail == RERUN_DETAIL)
    return {"counts": {label: labels.count(label) for label in TRIAGE_LABELS if label in labels},
            "line": triage_headline(labels, base, rerun)}
