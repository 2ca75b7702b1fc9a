"""The read side of the incident store (docs/store.md): it never writes and never takes the
lock, since every file it reads was written atomically.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional, TypeVar, Union

from pytest_selfheal.errors import InputError, NotFoundError, SelfhealError, UsageError, one_line
from pytest_selfheal.names import ARCHIVE_DIR, INBOX_DIR, PLANS_DIR, RUNS_DIR
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import REQUIRED, JsonRecord
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.records.vocab import ARCHIVE_BUCKETS, STATUSES
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.events import Event
from pytest_selfheal.store.ids import incident_timestamp, is_incident_id, resolve_incident_ref, validate_incident_id

INBOX = "inbox"
BUCKETS: tuple[str, ...] = (INBOX,) + ARCHIVE_BUCKETS

LOCK_FILE = ".lock"

INCIDENT_JSON = "incident.json"
STATUS_TXT = "status.txt"
LOG_TAIL_TXT = "log_tail.txt"
AUDIT_TAIL_JSONL = "audit_tail.jsonl"
CONTEXT_JSON = "context.json"
INCIDENT_FILES: tuple[str, ...] = (INCIDENT_JSON, STATUS_TXT, LOG_TAIL_TXT, AUDIT_TAIL_JSONL, CONTEXT_JSON)

PLAN_JSON = "plan.json"
PLAN_MD = "plan.md"
RUN_RESULT_JSON = "run_result.json"
ATTEMPT_RE = re.compile(r"attempt_([0-9]{2,})\.json", re.ASCII)
RUN_FILE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}", re.ASCII)

R = TypeVar("R", bound=JsonRecord)


# The status of a listed incident whose files cannot be read (``error`` says why).
CORRUPTED = "corrupted"


@dataclass(frozen=True, kw_only=True)
class IncidentSummary(JsonRecord):
    """An incident as listed: where it is, its status and what its files say of it."""

    incident_id: str
    status: str  # status.txt (an IncidentStatus), or CORRUPTED
    bucket: str  # inbox, resolved or escalated
    error_signature: Annotated[Optional[str], REQUIRED] = None
    created_at: Annotated[Optional[str], REQUIRED] = None
    updated_at: Annotated[Optional[str], REQUIRED] = None
    step: Annotated[Optional[str], REQUIRED] = None
    attempts: Annotated[int, REQUIRED] = 0  # attempt files on disk
    path: str  # the incident's folder, relative to the reports root
    error: Optional[str] = None  # a corrupted incident: what is wrong with it

    @property
    def corrupted(self) -> bool:
        return self.status == CORRUPTED


def attempt_filename(iteration: int) -> str:
    return f"attempt_{iteration:02d}.json"  # three digits from iteration 100 on


class StoreReader:
    """Reads the incident store under one reports root (``.selfheal/`` by default)."""

    def __init__(self, root: Union[str, os.PathLike[str]]) -> None:
        self.root = Path(root)
        self.inbox_dir = self.root / INBOX_DIR  # unresolved incidents
        self.plans_root = self.root / PLANS_DIR
        self.runs_root = self.root / RUNS_DIR
        self.archive_root = self.root / ARCHIVE_DIR
        self.resolved_dir = self.archive_root / "resolved"
        self.escalated_dir = self.archive_root / "escalated"
        self.lock_path = self.root / LOCK_FILE  # taken by every mutating operation

    def bucket_dir(self, bucket: str) -> Path:
        if bucket == INBOX:
            return self.inbox_dir
        if bucket in ARCHIVE_BUCKETS:
            return self.archive_root / bucket
        raise UsageError(f"unknown bucket {bucket!r} (expected one of {', '.join(BUCKETS)})")

    # error_plans/<id>/ and error_runs/<id>/ (not created) stay where they are when the incident is archived.
    def plans_dir(self, incident_id: str) -> Path:
        return self.plans_root / validate_incident_id(incident_id)

    def runs_dir(self, incident_id: str) -> Path:
        return self.runs_root / validate_incident_id(incident_id)

    def record_paths(self, incident_id: str) -> list[Path]:
        """The documents a verdict is read from: ``incident.json``, ``plan.json``, every
        attempt and ``run_result.json`` (only those that exist)."""
        runs = self.runs_dir(incident_id)
        attempts = sorted(runs.glob("attempt_*.json")) + [runs / RUN_RESULT_JSON] if runs.is_dir() else []
        paths = [self.incident_dir(incident_id) / INCIDENT_JSON, self.plans_dir(incident_id) / PLAN_JSON, *attempts]
        return [path for path in paths if path.is_file()]

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def locate(self, incident_id: str) -> tuple[str, Path]:
        """``(bucket, folder)`` of an incident (``InputError`` when two buckets hold it: a hand-made copy)."""
        incident_id = validate_incident_id(incident_id)
        found = [(bucket, path) for bucket in BUCKETS if (path := self.bucket_dir(bucket) / incident_id).is_dir()]
        if not found:
            raise NotFoundError(f"no incident {incident_id} in {self.root}")
        if len(found) > 1:
            places = " and ".join(self._relative(path) for _, path in found)
            raise InputError(f"incident {incident_id} exists twice ({places}); remove the stale copy")
        return found[0]

    def exists(self, incident_id: str) -> bool:
        with suppress(NotFoundError):
            return bool(self.locate(incident_id))
        return False

    def incident_dir(self, incident_id: str) -> Path:
        return self.locate(incident_id)[1]

    def _listed(self) -> Iterator[tuple[str, Path, str]]:
        """``(bucket, folder, id)`` of each name in a bucket that is an incident id (build
        folders ``.tmp_*`` and temp files are not); a missing bucket has none."""
        for bucket in BUCKETS:
            base = self.bucket_dir(bucket)
            yield from ((bucket, base / name, name) for name in sorted(fsio.list_names(base)) if is_incident_id(name))

    def incident_ids(self) -> list[str]:
        return sorted({incident_id for _, _, incident_id in self._listed()})

    def resolve_id(self, reference: str) -> str:
        """The full id of a user's reference: an id, ``latest`` or a unique prefix."""
        if is_incident_id(reference) and self.exists(reference):
            return reference
        return resolve_incident_ref(reference, self.incident_ids())

    def _read_incident_at(self, folder: Path, incident_id: str) -> Incident:
        return self._read_record(Incident, folder / INCIDENT_JSON, incident_id)

    @staticmethod
    def _read_status_at(folder: Path) -> str:
        path = folder / STATUS_TXT
        status = fsio.read_text(path).strip()
        if status not in STATUSES:
            shown = one_line(repr(status), 60)
            raise InputError(f"{path}: unknown status {shown} (expected one of {', '.join(STATUSES)})")
        return status

    def read_incident(self, incident_id: str) -> Incident:
        """``incident.json``, parsed (``InputError`` naming file and field otherwise); its
        status is a copy, ``status.txt``'s is authoritative."""
        return self._read_incident_at(self.locate(incident_id)[1], incident_id)

    def read_status(self, incident_id: str) -> str:
        return self._read_status_at(self.locate(incident_id)[1])

    def read_log_tail(self, incident_id: str) -> str:
        return fsio.read_text(self.incident_dir(incident_id) / LOG_TAIL_TXT)

    def read_context(self, incident_id: str) -> RunContext:
        path = self.incident_dir(incident_id) / CONTEXT_JSON
        return RunContext.from_json(fsio.read_json(path), str(path))

    def read_events(self, incident_id: str) -> tuple[list[Event], list[str]]:
        return self._read_events_at(self.locate(incident_id)[1])

    @staticmethod
    def _read_events_at(folder: Path) -> tuple[list[Event], list[str]]:
        """``(events, warnings)`` from ``audit_tail.jsonl``: torn or corrupted lines are
        skipped and reported, never raised."""
        path = folder / AUDIT_TAIL_JSONL
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return [], [f"{path}: missing, no events"]
        except OSError as exc:
            raise fsio.io_error("read", path, exc) from None
        return ev.parse_events(raw.decode("utf-8", errors="replace"), str(path))

    def has_plan(self, incident_id: str) -> bool:
        return (self.plans_dir(incident_id) / PLAN_JSON).is_file()

    def _plan_file(self, incident_id: str, name: str) -> Path:
        path = self.plans_dir(incident_id) / name
        if not path.exists():
            raise NotFoundError(f"no plan for incident {incident_id} (expected {self._relative(path)})")
        return path

    def read_plan(self, incident_id: str) -> Plan:
        return self._read_record(Plan, self._plan_file(incident_id, PLAN_JSON), incident_id)

    def read_plan_md(self, incident_id: str) -> str:
        return fsio.read_text(self._plan_file(incident_id, PLAN_MD))

    def _attempt_files(self, incident_id: str) -> list[tuple[int, Path]]:
        folder = self.runs_dir(incident_id)
        matches = (ATTEMPT_RE.fullmatch(name) for name in fsio.list_names(folder))
        return sorted((int(m.group(1)), folder / m.group(0)) for m in matches if m)

    def next_attempt_number(self, incident_id: str) -> int:
        files = self._attempt_files(incident_id)
        return files[-1][0] + 1 if files else 1

    def read_attempts(self, incident_id: str) -> list[Attempt]:
        """Every ``attempt_XX.json``, parsed, sorted by iteration (``InputError`` naming a bad file)."""
        result = []
        for number, path in self._attempt_files(incident_id):
            attempt = self._read_record(Attempt, path, incident_id)
            if attempt.iteration != number:
                raise InputError(f"{path}: iteration {attempt.iteration} does not match the file name")
            result.append(attempt)
        return result

    def count_attempts(self, incident_id: str) -> int:
        return len(self._attempt_files(incident_id))

    def read_run_result(self, incident_id: str) -> Optional[RunResult]:
        """None when the loop has not finished yet."""
        path = self.runs_dir(incident_id) / RUN_RESULT_JSON
        return self._read_record(RunResult, path, incident_id) if path.exists() else None

    def list_incidents(self) -> list[IncidentSummary]:
        """Summaries of every incident, oldest first; an unreadable one is listed ``corrupted``
        with its ``error`` instead of failing the whole listing."""
        if self.root.exists() and not self.root.is_dir():
            raise InputError(f"{self.root}: the reports root is not a directory")
        rows = [self._summary(bucket, folder, name) for bucket, folder, name in self._listed() if folder.is_dir()]
        rows.sort(key=lambda row: (row.created_at or _id_time(row.incident_id), row.incident_id))
        return rows

    def _summary(self, bucket: str, folder: Path, incident_id: str) -> IncidentSummary:
        path, attempts = self._relative(folder), 0
        try:
            attempts = self.count_attempts(incident_id)
            incident = self._read_incident_at(folder, incident_id)
            status = self._read_status_at(folder)
        except SelfhealError as exc:
            return IncidentSummary(incident_id=incident_id, status=CORRUPTED, bucket=bucket, path=path, attempts=attempts, error=exc.message)
        return IncidentSummary(incident_id=incident_id, status=status, bucket=bucket, path=path, error_signature=incident.error_signature,
                               created_at=incident.created_at, updated_at=incident.updated_at, step=incident.step,
                               attempts=attempts)

    def _read_record(self, record: type[R], path: Path, incident_id: str) -> R:
        """The one place a store document becomes a record (``from_json`` checks it once)."""
        return self._parsed(record, fsio.read_json(path), path, incident_id)

    @staticmethod
    def _parsed(record: type[R], doc: object, path: Path, incident_id: str) -> R:
        parsed = record.from_json(doc, str(path))
        found = getattr(parsed, "incident_id", incident_id)
        if found != incident_id:
            raise InputError(one_line(f"{path}: incident_id {found!r} does not match its folder {incident_id}"))
        return parsed


def _id_time(incident_id: str) -> str:
    moment = incident_timestamp(incident_id)
    return ev.format_ts(moment) if moment else ""
