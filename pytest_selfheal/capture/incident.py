"""Assemble an incident document from fingerprinted failures (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Optional

from pytest_selfheal.junit.nodeids import nodeid_by_identity
from pytest_selfheal.plan.build import STEP_COLLECTION
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.models import Failure

# pytest's failing reports with their node ids as the documents hold them (cut and redacted).
Reports = Sequence[tuple[str, Any]]


def attach_nodeids(
    failures: Sequence[Failure], reports: Reports, prefix: str = ""
) -> list[Failure]:
    by_identity = nodeid_by_identity([nodeid for nodeid, _ in reports], prefix)
    when = {nodeid: report.when for nodeid, report in reports}
    out = []
    for failure in failures:
        nodeid = failure.nodeid or by_identity.get(failure.test)
        collect = nodeid is not None and when.get(nodeid) == "collect"
        out.append(replace(failure, nodeid=nodeid, outcome="error" if collect else failure.outcome))
    return out


def build_incident(
    failures: Sequence[Failure],
    reports: Reports,
    *,
    counts: Mapping[str, int],
    rootdir: str,
    run_id: Optional[str] = None,
) -> Incident:
    """The incident the capture records (the store fills in its id, status and times); the first failure leads."""
    first = failures[0]
    collection = any(nodeid == first.nodeid and report.when == "collect" for nodeid, report in reports)
    return Incident(
        **{name: getattr(first, name) for name in ("failure_class", "failure_type", "message", "fingerprint")},
        step=STEP_COLLECTION if collection else first.nodeid or first.test,
        error_signature=first.signature,
        fingerprints=tuple(sorted({f.fingerprint for f in failures})),
        nodeids=tuple(f.nodeid or f.test for f in failures),
        failures=tuple(failures),
        counts=MappingProxyType(dict(counts)),
        rootdir=rootdir,
        run_id=run_id or "",
    )
