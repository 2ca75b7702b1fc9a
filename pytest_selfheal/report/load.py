"""Reading a report's inputs (edge): one incident's files from the store, a report JSON file."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Dict

from pytest_selfheal.errors import InputError, NotFoundError
from pytest_selfheal.report.data import IncidentRun, validate_report
from pytest_selfheal.store import fsio
from pytest_selfheal.store.root import Store

# A report of thousands of incidents is a few MiB; anything far beyond is not a report.
MAX_REPORT_BYTES = 64 * 1024 * 1024



def load_incident_run(store: Store, incident_id: str) -> IncidentRun:
    """One incident's files as the report's input; store errors (2/3/4) propagate.

    The status comes from ``status.txt`` (the authoritative one), not ``incident.json``.
    """
    bucket, _ = store.locate(incident_id)
    incident = dataclasses.replace(store.read_incident(incident_id), status=store.read_status(incident_id))
    plan = store.read_plan(incident_id).to_json() if store.has_plan(incident_id) else None
    run_result = store.read_run_result(incident_id)
    # The report data reads JSON documents tolerantly (a report file holds them too).
    return IncidentRun(
        incident=incident.to_json(),
        plan=plan,
        attempts=[a.to_json() for a in store.read_attempts(incident_id)],
        run_result=run_result.to_json() if run_result is not None else None,
        bucket=bucket,
    )


def read_report(path: Path) -> Dict[str, Any]:
    """A report JSON file, validated; NotFoundError (4) when missing, InputError (3) when bad."""
    if not path.exists():
        raise NotFoundError(f"{path}: no such report file")
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise fsio.io_error("read", path, exc) from None
    if size > MAX_REPORT_BYTES:
        raise InputError(f"{path}: too large for a report ({size} bytes, limit {MAX_REPORT_BYTES})")
    return validate_report(fsio.read_json(path), str(path))
