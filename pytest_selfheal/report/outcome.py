"""The plan-level rules of a report (pure, docs/report.md), in :func:`assemble_report`, the one
place a :class:`Report` is put together."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Optional

from pytest_selfheal.history.triage import triage_summary
from pytest_selfheal.loop import policy
from pytest_selfheal.records.report import ConfigDifference, Report, ReportIncident, Shard
from pytest_selfheal.records.tolerant import as_str, unique
from pytest_selfheal.records.vocab import FinalStatus, StopReason

# Plan-level "worst" rule (docs/report.md): first by outcome, then by stop reason.
_OUTCOME_RANK: dict[str, int] = {
    FinalStatus.ESCALATED: 0,
    FinalStatus.REPLAN_REQUESTED: 1,
    FinalStatus.RESOLVED: 3,
}
_UNFINISHED_RANK = 2
# Stop reasons in the loop's own precedence, then "no stop reason yet", then success.
REASON_ORDER: tuple[Optional[str], ...] = tuple(
    r for r in policy.PRECEDENCE if r != StopReason.SUCCESS
) + (None, StopReason.SUCCESS)


def _short_ids(incident_ids: Sequence[str]) -> dict[str, str]:
    """The shortest common suffix length (from 6) that tells the incidents apart."""
    ids = unique(incident_ids)
    longest = max((len(i) for i in ids), default=0)
    for size in range(6, longest + 1):
        suffixes = {i: (i if len(i) <= size else "…" + i[-size:]) for i in ids}
        if len(set(suffixes.values())) == len(ids):
            return suffixes
    return {i: i for i in ids}


def _task_labels(incidents: Sequence[ReportIncident]) -> tuple[tuple[str, ...], ...]:
    """Plain task ids, or ``A1 (…ab12cd)`` for every task when an id repeats across incidents."""
    owners: dict[str, set[str]] = {}
    for entry in incidents:
        for task in entry.tasks:
            owners.setdefault(str(task.task), set()).add(entry.incident_id)
    collide = any(len(ids) > 1 for ids in owners.values())
    short = _short_ids([e.incident_id for e in incidents])
    return tuple(tuple(f"{task.task} ({short[entry.incident_id]})" if collide else str(task.task) for task in entry.tasks)
                 for entry in incidents)


def _severity(entry: ReportIncident) -> tuple[int, int]:
    # A status that looks final with no run recorded is unfinished.
    outcome = _OUTCOME_RANK.get(str(entry.final_status), _UNFINISHED_RANK) if entry.finished else _UNFINISHED_RANK
    reason = entry.stop_reason
    # Even ranks for known reasons; an unknown one sits after the known failures and
    # before "no stop reason yet".
    rank = 2 * REASON_ORDER.index(reason) if reason in REASON_ORDER else 2 * REASON_ORDER.index(None) - 1
    return outcome, rank


def deciding_incident(incidents: Sequence[ReportIncident]) -> Optional[ReportIncident]:
    """The incident whose outcome is the plan's: the worst by outcome, then stop reason, then order."""
    return min(incidents, key=_severity, default=None)


def assemble_report(
    *,
    enabled: bool,
    effective_config: Mapping[str, object],
    origins: Mapping[str, str],
    incidents: Sequence[ReportIncident],
    config_differences: Sequence[ConfigDifference] = (),
    shards: Sequence[Shard] = (),
) -> Report:
    """The report of ``incidents`` (in report order): tasks labelled, plan-level fields derived."""
    labels = _task_labels(incidents)
    labelled = tuple(replace(e, tasks=tuple(replace(t, label=label) for t, label in zip(e.tasks, names)))
                     for e, names in zip(incidents, labels))
    worst = deciding_incident(labelled)
    action = as_str(worst.handoff.get("recommended_next_action")) if worst is not None else ""
    return Report(
        enabled=enabled, effective_config=effective_config, origins=origins, incidents=labelled,
        auto_tasks_looped=sum(1 for e in labelled for t in e.tasks if t.attempts > 0),
        total_retries=sum(e.loops_used for e in labelled),
        triage_summary=triage_summary([t.triage for e in labelled for t in e.triage]),
        stop_reason=worst.stop_reason if worst is not None else None,
        final_status=worst.final_status if worst is not None else "no_incidents",
        recommended_next_action="Nothing to do: no incident was captured." if worst is None
        else f"{worst.incident_id}: {action}" if len(labelled) > 1 else action,
        deciding_incident=worst.incident_id if worst is not None else None,
        config_differences=tuple(config_differences), shards=tuple(shards),
    )
