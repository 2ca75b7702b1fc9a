"""The incidents' judging records, kept tamper-evident (edge: the user's state directory).

What judges an incident (its seal, test digests, capture's node ids and options, the plan's
selection, the capture's context) lives in the project tree, where anything running there can
edit it. So each time the store writes one, the digest of its judging part is kept outside the
project (``$XDG_STATE_HOME/pytest-selfheal/records/``, keyed by reports root and incident), and
:func:`edited` compares them before a verdict. An edit is remembered until a person takes a
new seal (:func:`accept`): a later write of selfheal never makes the records good again.

A stop that says the tests pass but is not a fix (:data:`NOT_A_FIX`) is kept there too, keyed
by the project root, until a success over its tests or a new seal: a green run whose reports
root no longer holds that incident stopped is that stop again, never a pass (:func:`forgotten_stops`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.errors import StoreIOError
from pytest_selfheal.names import INBOX_DIR, archive_dir, remembered_stops, state_dir
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import plain_json
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.vocab import IncidentStatus, StopReason
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import is_incident_id

RECORDS_EDITED = "the incident's records were edited outside selfheal"
_INCIDENT_KEYS = ("seal", "test_digests", "nodeids", "tdd_nodeids", "pytest_options", "invocation_dir", "rootdir")
_ACTION_KEYS = ("nodeids", "verification", "test_paths")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(plain_json(value), sort_keys=True).encode("utf-8")).hexdigest()


def _digests(incident: Optional[Incident] = None, plan: Optional[Plan] = None,
             context: Optional[RunContext] = None) -> dict[str, str]:
    """The digest of the judging part of each record given: the incident's judging fields, each
    plan action's selection, the whole context (its commit and command judge the regression check)."""
    out = {}
    if incident is not None:
        doc = incident.to_json()
        out["incident"] = _digest({key: doc.get(key) for key in _INCIDENT_KEYS})
    if plan is not None:
        out["plan"] = _digest([{key: action.get(key) for key in _ACTION_KEYS} for action in plan.to_json().get("actions", [])])
    if context is not None:
        out["context"] = _digest(context.to_json())
    return out


def _record_path(reports_root: Path, incident_id: str) -> Optional[Path]:
    state = state_dir(os.environ)
    if state is None:
        return None
    root = hashlib.sha256(os.fsencode(os.path.realpath(reports_root))).hexdigest()[:24]
    return state / "records" / root / f"{incident_id}.json"


def _read(path: Path) -> Optional[dict[str, Any]]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _write(path: Path, doc: dict[str, Any]) -> None:
    try:
        fsio.ensure_dir(path.parent)
        fsio.atomic_write_text(path, fsio.dumps_json(doc))
    except (OSError, StoreIOError):
        return  # best effort: a state directory that cannot be written leaves the records unchecked


def remember(reports_root: Path, incident_id: str, *, incident: Optional[Incident] = None, plan: Optional[Plan] = None,
             before: Optional[Incident] = None, plan_before: Optional[Plan] = None,
             context: Optional[RunContext] = None) -> None:
    """Keep the digests of what the store just wrote (``before``/``plan_before``: what it
    replaced). Replacing records that differ from the kept digests keeps them edited."""
    path = _record_path(reports_root, incident_id)
    if path is None:
        return
    doc = _read(path) or {}
    if any(doc.get(key) not in (None, digest) for key, digest in _digests(before, plan_before).items()):
        doc["edited"] = True
    doc.update(_digests(incident, plan, context))
    _write(path, doc)


def accept(reports_root: Path, incident: Incident, plan: Optional[Plan], context: Optional[RunContext]) -> None:
    """A person took a new seal: the records as they are now are the incident's."""
    path = _record_path(reports_root, incident.incident_id)
    if path is not None:
        _write(path, _digests(incident, plan, context))


def edited(reports_root: Path, incident: Incident, plan: Optional[Plan], context: Optional[RunContext]) -> bool:
    """Whether the judging records differ from what the store last wrote, or ever did since the
    capture (``context`` None: it cannot be read). Without kept digests (a copy or a move of
    the project) there is nothing to compare."""
    path = _record_path(reports_root, incident.incident_id)
    kept = _read(path) if path is not None else None
    if kept is None:
        return False
    now = _digests(incident, plan, context)
    if kept.get("edited") or kept.get("incident") not in (None, now["incident"]):
        return True
    if "context" in kept and kept["context"] != now.get("context"):
        return True
    return plan is not None and kept.get("plan") not in (None, now["plan"])


# The stops whose selection may pass: the judge said it is not a fix.
NOT_A_FIX = (StopReason.HARNESS_CHANGED, StopReason.TESTS_EDITED, StopReason.UNVERIFIED_FAILURES,
             StopReason.REGRESSION)
RECORDS_GONE = "its records are gone from the reports root (deleted or moved outside selfheal)"


@dataclass(frozen=True)
class RememberedStop:
    """A not-a-fix stop as kept outside the project."""

    incident_id: str
    stop_reason: str
    detail: str  # what the stop named (the changed files, the edited tests…)
    iteration: int
    max_iterations: int
    nodeids: tuple[str, ...] = ()  # its selection: a later incident's success over all of it forgets it too


def _stops_file(project_root: Path) -> Optional[Path]:
    return remembered_stops(os.environ, os.path.realpath(project_root))


def remembered(project_root: Path) -> list[RememberedStop]:
    path = _stops_file(project_root)
    doc = (_read(path) if path is not None else None) or {}
    out = []
    for incident_id, entry in sorted(doc.items()):
        try:
            out.append(RememberedStop(incident_id, str(entry["stop_reason"]), str(entry.get("detail", "")),
                                      int(entry["iteration"]), int(entry["max_iterations"]),
                                      tuple(str(n) for n in entry.get("nodeids", ()))))
        except (KeyError, TypeError, ValueError):
            continue  # an entry not of selfheal's writing is no stop
    return out


def remember_stop(project_root: Path, stop: RememberedStop) -> None:
    """Keep ``stop`` when it is not a fix. A success forgets the incident's stop, and any other
    whose whole selection it verified under its own seal (a new capture after the old one was deleted)."""
    path = _stops_file(project_root)
    if path is None or (stop.stop_reason not in NOT_A_FIX and stop.stop_reason != StopReason.SUCCESS):
        return
    doc = _read(path) or {}
    if stop.stop_reason == StopReason.SUCCESS:
        verified = set(stop.nodeids)
        kept = {key: entry for key, entry in doc.items() if key != stop.incident_id and not (
            isinstance(entry, dict) and entry.get("nodeids") and verified.issuperset(entry["nodeids"]))}
        if kept == doc:
            return
        doc = kept
    else:
        doc[stop.incident_id] = {"stop_reason": stop.stop_reason, "detail": stop.detail[:300],
                                 "iteration": stop.iteration, "max_iterations": stop.max_iterations,
                                 "nodeids": list(stop.nodeids[:1000])}
    _write(path, doc)


def forget_stop(project_root: Path, incident_id: str) -> None:
    """A person took a new seal: the incident's stop is judged again from its records."""
    remember_stop(project_root, RememberedStop(incident_id, StopReason.SUCCESS, "", 0, 0))


def forgotten_stops(project_root: Path, reports_root: Path) -> list[RememberedStop]:
    """The kept not-a-fix stops of ``project_root`` whose incident ``reports_root`` no longer
    holds as stopped or open (in ``error_inbox/`` or the escalated archive): a green run then is
    that stop, never a pass."""
    stops = [stop for stop in remembered(project_root) if is_incident_id(stop.incident_id)]
    held = [reports_root / INBOX_DIR, reports_root / archive_dir(IncidentStatus.ESCALATED)]
    return [stop for stop in stops if not any((folder / stop.incident_id).is_dir() for folder in held)]


def forgotten_line(stop: RememberedStop) -> str:
    """The status line of a green run that is a forgotten stop (the already-stopped grammar,
    loop/sticky.py ``parse_already_stopped``)."""
    return (f"selfheal: incident {stop.incident_id} iteration {stop.iteration} of {stop.max_iterations}: "
            f"this run's tests already stopped ({stop.stop_reason}), {RECORDS_GONE} -> STOP already_stopped")

