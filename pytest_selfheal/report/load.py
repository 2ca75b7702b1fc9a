"""Reading a report's inputs (edge): one incident's files from the store, a report JSON file;
the report of chosen incidents (``selfheal report``, the MCP server's ``report`` tool)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional

from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import InputError, NotFoundError
from pytest_selfheal.loop.messages import plural
from pytest_selfheal.loop.policy import result_in_force
from pytest_selfheal.loop.state import LoopRun
from pytest_selfheal.records.report import Report
from pytest_selfheal.report.data import IncidentRun, build_report
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import incident_timestamp
from pytest_selfheal.store.reader import CORRUPTED
from pytest_selfheal.store.root import Store

# A report of thousands of incidents is a few MiB; anything far beyond is not a report.
MAX_REPORT_BYTES = 64 * 1024 * 1024


def load_incident_run(store: Store, incident_id: str) -> IncidentRun:
    """One incident's files as the report's input, its status from ``status.txt``."""
    bucket, _ = store.locate(incident_id)
    incident = dataclasses.replace(store.read_incident(incident_id), status=store.read_status(incident_id))
    plan = store.read_plan(incident_id) if store.has_plan(incident_id) else None
    attempts = store.read_attempts(incident_id)
    run_result = result_in_force(store.read_run_result(incident_id), attempts, incident, incident.status)
    return IncidentRun(incident=incident, plan=plan, attempts=tuple(attempts), run_result=run_result, bucket=bucket)


def incident_run_of(state: LoopRun) -> IncidentRun:
    """The report's input from a loop's state as the loop left it: no file read again."""
    return IncidentRun(incident=dataclasses.replace(state.incident, status=state.status), plan=state.plan,
                       attempts=tuple(state.attempts), run_result=state.run_result, bucket=state.bucket)


def read_report(path: Path) -> Report:
    """A report JSON file, parsed; NotFoundError (4) when missing, InputError (3) when bad."""
    if not path.exists():
        raise NotFoundError(f"{path}: no such report file")
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise fsio.io_error("read", path, exc) from None
    if size > MAX_REPORT_BYTES:
        raise InputError(f"{path}: too large for a report ({size} bytes, limit {MAX_REPORT_BYTES})")
    return Report.read(fsio.read_json(path), str(path))


def _id_order(incident_id: str) -> tuple[str, str]:
    moment = incident_timestamp(incident_id)  # UTC: its ISO text orders as the time does
    return (moment.isoformat() if moment else "", incident_id)


def latest_incident(store: Store) -> tuple[Optional[str], str]:
    """The newest readable incident by the time in its id (no copy changes it), and a line saying so."""
    rows = store.list_incidents()
    valid = [row for row in rows if row.status != CORRUPTED] or rows
    if not valid:
        return None, ""
    newest = max(valid, key=lambda row: _id_order(row.incident_id))
    skipped = len(rows) - len(valid)
    note = "" if len(rows) < 2 else (
        f"selfheal: reporting {newest.incident_id}, the newest of {plural(len(rows), 'incident')} by the time in "
        f"its id{f' ({skipped} unreadable skipped)' if skipped else ''}; give an ID for another")
    return newest.incident_id, note


def select_ids(store: Store, incident_id: Optional[str], every: bool) -> list[str]:
    """The ids to report: ``incident_id``, or all (``every``, oldest first), or the latest."""
    if incident_id is not None:
        return [store.resolve_id(incident_id)]
    if every:
        return [row.incident_id for row in store.list_incidents()]  # oldest first, by created_at then id
    latest, _ = latest_incident(store)
    return [latest] if latest else []


def build_from_store(store: Store, incident_ids: list[str], project_root: Path) -> Report:
    config = load_config(project_root)
    runs = [load_incident_run(store, incident_id) for incident_id in incident_ids]
    return build_report(incidents=runs, effective_config=config.values, origins=config.origins)
