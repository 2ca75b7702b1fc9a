"""Merging shard reports (the jobs of a CI matrix) into one report (pure; docs/report.md "Merging")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Optional

from pytest_selfheal.errors import UsageError
from pytest_selfheal.records.jsondoc import plain_json
from pytest_selfheal.records.report import ConfigDifference, Report, ReportIncident, Shard
from pytest_selfheal.report.data import flatten_config
from pytest_selfheal.report.outcome import assemble_report


def _flat(config: Mapping[str, object]) -> dict[str, object]:
    """``flatten_config`` with plain JSON values: a built report's and a file's compare equal."""
    return {key: plain_json(value) for key, value in flatten_config(config).items()}


def merge_reports(reports: Sequence[Report], *, names: Optional[Sequence[str]] = None) -> Report:
    """One report from several shard reports; ``names`` label the shards (default ``shard 1``…)."""
    if not reports:
        raise UsageError("nothing to merge: give at least one report")
    labels = list(names) if names is not None else [f"shard {i}" for i in range(1, len(reports) + 1)]
    if len(labels) != len(reports):
        raise UsageError(f"{len(labels)} names for {len(reports)} reports: give one --name per report")
    first = reports[0]
    base = _flat(first.effective_config)
    differences: list[ConfigDifference] = []
    for label, shard in zip(labels, reports):
        # A merged report merged again keeps the differences it already knew about.
        differences += [replace(known, shard=f"{label} / {known.shard}") for known in shard.config_differences]
        if shard is first:
            continue
        other = _flat(shard.effective_config)
        keys = sorted(k for k in set(base) | set(other) if base.get(k, ...) != other.get(k, ...))
        values = {k: other.get(k) for k in keys}
        # "(enabled)": the report's own flag (selfheal off) when the config key agrees.
        if shard.enabled != first.enabled and "enabled" not in keys:
            keys = ["(enabled)"] + keys
            values["(enabled)"] = shard.enabled
        if keys:
            differences.append(ConfigDifference(label, tuple(keys), values))
    incidents: list[ReportIncident] = []
    seen: set[str] = set()
    shards: list[Shard] = []
    for label, shard in zip(labels, reports):
        ids: list[str] = []
        duplicates: list[str] = []
        for entry in shard.incidents:
            incident_id = entry.incident_id
            if incident_id in seen:
                duplicates.append(incident_id)
                continue
            seen.add(incident_id)
            ids.append(incident_id)
            incidents.append(entry)
        shards.append(Shard(label, tuple(ids), tuple(duplicates), shard.stop_reason, shard.final_status,
                            shard.total_retries))
    return assemble_report(enabled=first.enabled, effective_config=first.effective_config, origins=first.origins,
                           incidents=incidents, config_differences=differences, shards=shards)

