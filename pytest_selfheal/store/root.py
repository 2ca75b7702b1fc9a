"""The write side of the incident store under the reports root (docs/store.md).

Ids are validated before touching a path; every file is written atomically, here, confined to
the root and through the redaction boundary; ``status.txt`` is the authoritative status and
changes only through ``records.vocab.TRANSITIONS``; an incident appears complete or not at all;
a move of an incident folder is one rename, so there are never two copies. Readers never take
the lock (``StoreReader``).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Union

from pytest_selfheal.errors import RefusedError, StoreIOError, UsageError
from pytest_selfheal.names import ARCHIVE_DIR, INBOX_DIR, SELECTION_FILE
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import FieldError, JsonRecord, R
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.records.schema_gen import DOCUMENTS, written_by_selfheal
from pytest_selfheal.records.vocab import ARCHIVE_BUCKETS, IncidentStatus, check_transition
from pytest_selfheal.redact import Redactor, default_redactor
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio, judging
from pytest_selfheal.store.events import Event
from pytest_selfheal.store.ids import (
    is_incident_id,
    new_incident_id,
    new_run_id,
    new_run_token,
    utc,
    validate_incident_id,
)
from pytest_selfheal.store.reader import (
    ATTEMPT_RE,
    AUDIT_TAIL_JSONL,
    BUCKETS,
    CONTEXT_JSON,
    INBOX,
    INCIDENT_JSON,
    LOG_TAIL_TXT,
    PLAN_JSON,
    PLAN_MD,
    RUN_FILE_RE,
    RUN_RESULT_JSON,
    STATUS_TXT,
    StoreReader,
    attempt_filename,
)

# Receives a new incident and its plan (or None) as records of the files written (create_incident).
Published = Callable[[Incident, Optional[Plan]], None]
# The plan a capture publishes with its incident, built from the incident with its final id
# (chosen under the lock): (the plan, plan.md's text).
PlanBuilder = Callable[[Incident], tuple[Plan, str]]

# An incident folder under construction: a dot name that no reader takes for an incident.
_BUILD_PREFIX = ".tmp_"
_PLAN_BUILD = ".tmp_plan"
_CREATE_RETRIES = 50
# A pruned incident's archive folder while its files are being removed (docs/store.md).
PRUNING_PREFIX = ".pruning_"


class Store(StoreReader):
    """The incident store under one reports root: its reads and every write. The one writer is
    also the redaction boundary: every document, event and text file goes through ``redactor`` on
    its way to disk; only patches are written raw (they must apply)."""

    def __init__(
        self,
        root: Union[str, os.PathLike[str]],
        *,
        lock_timeout: float = 30.0,
        clock: Optional[Callable[[], datetime]] = None,
        redactor: Optional[Redactor] = None,
    ) -> None:
        super().__init__(root)
        self.lock_timeout = lock_timeout
        self._clock: Callable[[], datetime] = clock or utc
        self.redactor: Redactor = redactor if redactor is not None else default_redactor()

    def _clean(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """``doc`` with secrets redacted from its keys and values (what is written)."""
        return dict(self.redactor.redact_obj(dict(doc), written_by_selfheal))

    def _clean_events(self, events: Sequence[Event]) -> list[Event]:
        return [ev.pending(event.event, self._clean(event.data)) for event in events]

    def _now(self) -> datetime:
        return utc(self._clock())

    def lock(self, timeout: Optional[float] = None) -> fsio.FileLock:
        """The store's inter-process lock, taken by every mutating method; re-entrant, so a
        caller may hold it around a read-modify-write sequence too."""
        fsio.ensure_dir(self.root)
        return fsio.FileLock(self.confined(self.lock_path), self.lock_timeout if timeout is None else timeout)

    @contextmanager
    def locked(self, incident_id: str) -> Iterator[tuple[str, str, Path]]:
        """Hold the lock over one incident: ``(validated id, bucket, folder)``, located again
        under the lock. An unknown or invalid id fails before the lock creates anything."""
        self.locate(incident_id)
        with self.lock():
            bucket, folder = self.locate(incident_id)
            yield incident_id, bucket, folder

    def confined(self, path: Path) -> Path:
        """``path``, checked before any write to stay under the reports root (``fsio.confine``)."""
        return fsio.confine(self.root, path)

    def create_incident(
        self,
        incident: Incident,
        *,
        log_tail: str,
        context: RunContext,
        run: Optional[str] = None,
        now: Optional[datetime] = None,
        events: Sequence[Event] = (),
        plan: Optional[PlanBuilder] = None,
        published: Optional[Published] = None,
    ) -> str:
        """Write a new incident into ``error_inbox/`` and return its id; its folder is built under a
        temporary name and renamed into place, so a half-made incident never appears. ``plan``: built
        from the incident with its final id and published with it (the incident then ``planned``).
        ``published``: given the records as a reader parses them back, so a capture need not read them.
        A record that does not fit its schema, or an unknown event name, is a bug (``ValueError``)."""
        moment = self._now() if now is None else utc(now)
        new, explicit_id = self._new_incident(incident, moment, run)
        log_tail = self.redactor.redact(log_tail)
        events = self._clean_events(events)
        # Serialised up front (_new_incident checked the incident): unserialisable data fails
        # before anything touches the disk.
        context_text = fsio.dumps_json(self._clean(context.to_json()))
        for event in events:
            ev.encode_event(event)

        with self.lock():
            inbox = fsio.ensure_dir(self.confined(self.inbox_dir))
            for build in inbox.glob(f"{_BUILD_PREFIX}*"):  # under the lock: a crash's leftover
                shutil.rmtree(build, ignore_errors=True)
            for _ in range(_CREATE_RETRIES):
                incident_id = new.incident_id
                # A plan folder without its incident (a capture killed between its two renames)
                # keeps its id: a new plan never lands in it.
                taken = any((self.bucket_dir(bucket) / incident_id).exists() for bucket in BUCKETS)
                free = not taken and not (plan is not None and self.plans_dir(incident_id).exists())
                log, final, plan_text = list(events), new, None
                if free and plan is not None:
                    plan_events, plan_text = self._publish_plan(new, plan)
                    final, log = replace(new, status=IncidentStatus.PLANNED), log + plan_events
                if free and self._build_and_publish(inbox, final, log_tail, context_text, log):
                    written_plan = Plan.from_json(json.loads(plan_text), "plan.json") if plan_text is not None else None
                    judging.remember(self.root, incident_id, incident=final, plan=written_plan,
                                     context=RunContext.from_json(json.loads(context_text), "context.json"))
                    if published is not None:
                        # ``final`` was parsed from its document with its keys sorted: a reader
                        # parses the same record back from incident.json.
                        published(final, written_plan)
                    return incident_id
                if explicit_id:
                    raise RefusedError(f"incident {incident_id} already exists")
                # Same second, new random token (kept within the 40-character limit of <run>).
                token = new_run_token() if run is None else f"{run[:33]}_{new_run_token()}"
                new = replace(new, incident_id=new_incident_id(moment, token))
        raise StoreIOError(f"could not find a free incident id in {self.inbox_dir} after {_CREATE_RETRIES} tries")

    def _new_incident(self, incident: Incident, moment: datetime, run: Optional[str]) -> tuple[Incident, bool]:
        """The new incident as published (redacted, the store's fields filled), and whether
        the caller gave its id."""
        doc = self._clean({key: value for key, value in incident.to_json().items()
                           if not (key in _STORE_FILLED and value in ("", 0))})
        stamp = ev.format_ts(moment)
        doc = {"status": IncidentStatus.NEW, "created_at": stamp, "updated_at": doc.get("created_at", stamp),
               "year": moment.year, "month": moment.month, "ym": f"{moment.year:04d}-{moment.month:02d}",
               "run_id": new_run_id(moment), **doc}
        if doc["status"] != IncidentStatus.NEW:
            raise ValueError(f"a new incident has status 'new', not {doc['status']!r}")
        explicit_id = "incident_id" in doc
        doc["incident_id"] = validate_incident_id(doc["incident_id"]) if explicit_id else new_incident_id(moment, run)
        # Keys sorted at every level, as incident.json has them: the record is then the one a
        # reader parses back from the file (``published``).
        return _fitting(Incident, json.loads(json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False)), "incident"), explicit_id

    def _build_and_publish(
        self,
        inbox: Path,
        incident: Incident,
        log_tail: str,
        context_text: str,
        events: Sequence[Event],
    ) -> bool:
        """Build the five files under a temp name and rename into place; False if the id got taken."""
        incident_id = incident.incident_id
        captured = ev.pending(ev.INCIDENT_CAPTURED, {
            "run_id": incident.run_id, "step": incident.step, "failure_class": incident.failure_class,
            "error_signature": incident.error_signature, "status": IncidentStatus.NEW})
        log = [ev.stamp(event, incident_id, ts=self._now()) for event in [captured, *events]]
        return fsio.publish_folder(inbox / f"{_BUILD_PREFIX}{incident_id}_{os.urandom(4).hex()}", inbox / incident_id, {
            INCIDENT_JSON: fsio.dumps_json(incident.to_json()),
            STATUS_TXT: f"{incident.status}\n",
            LOG_TAIL_TXT: log_tail,
            CONTEXT_JSON: context_text,
            AUDIT_TAIL_JSONL: "".join(ev.encode_event(record) + "\n" for record in log),
        }, "create incident")

    def _publish_plan(self, incident: Incident, plan: PlanBuilder) -> tuple[list[Event], str]:
        """Build ``error_plans/<id>/`` for the new ``incident`` (under the lock, its id free), so it
        appears already ``planned``; returns the plan's two events for its log and ``plan.json``'s text."""
        incident_id = incident.incident_id
        built, built_md = plan(incident)
        text = self._text("plan", built, incident_id)  # first: a bad plan fails before any write
        check_transition(incident_id, IncidentStatus.NEW, IncidentStatus.PLANNED)
        plans_root = fsio.ensure_dir(self.confined(self.plans_root))
        # One fixed build name: under the lock nobody else builds a plan, so one there is a crash's leftover.
        shutil.rmtree(plans_root / _PLAN_BUILD, ignore_errors=True)
        fsio.publish_folder(plans_root / _PLAN_BUILD, self.plans_dir(incident_id),
                            {PLAN_MD: self.redactor.redact(built_md), PLAN_JSON: text}, "write plan")
        # The action ids as plan.json has them (redacted as in the document).
        actions = [a.id if written_by_selfheal(a.id) else self.redactor.redact(a.id) for a in built.actions]
        return [ev.pending(ev.PLAN_GENERATED, {"actions": actions}),
                ev.pending(ev.STATUS_CHANGED, {"from": IncidentStatus.NEW, "to": IncidentStatus.PLANNED})], text

    def update_incident(self, incident_id: str, /, *, held: Optional[Incident] = None, **fields: Any) -> Incident:
        """Set top-level fields of ``incident.json``; returns the new record. ``held``: the
        record as the caller's state holds it, changed instead of the file read again."""
        fixed = sorted({"incident_id", "status", "created_at", "updated_at"} & set(fields))
        if fixed:
            raise ValueError(f"update_incident cannot set {', '.join(fixed)}")
        with self.locked(incident_id) as (incident_id, _, folder):
            before = held or self._read_incident_at(folder, incident_id)
            doc = before.to_json()
            doc.update(self._clean(fields))
            doc["updated_at"] = ev.format_ts(self._now())
            updated = _fitting(Incident, doc, "incident update")
            self._write_incident(folder, updated, before)
            return updated

    def set_status(self, incident_id: str, new: str, /, *, held: Optional[tuple[str, Incident]] = None,
                   **event_data: Any) -> Incident:
        """Move the incident to status ``new`` if the table allows it from ``status.txt``
        (``RefusedError`` otherwise, nothing changed); returns the record written. ``held``:
        ``(status.txt, record)`` as the caller's state holds them, not read again."""
        clash = sorted({"from", "to"} & set(event_data))
        if clash:
            raise ValueError(f"status_changed data must not set {', '.join(clash)}")
        ev.pending(ev.STATUS_CHANGED, event_data)  # a reserved key fails before anything is written
        with self.locked(incident_id) as (incident_id, bucket, folder):
            current, incident = held or (self._read_status_at(folder), self._read_incident_at(folder, incident_id))
            check_transition(incident_id, current, new)
            if bucket != INBOX:  # only reachable after a hand edit of status.txt
                raise RefusedError(f"incident {incident_id} is archived in {ARCHIVE_DIR}/{bucket}; its status is final")
            return self._write_status(folder, incident, current, new, event_data)

    def _write_status(self, folder: Path, incident: Incident, current: str, new: str, data: Mapping[str, object]) -> Incident:
        """``incident.json``, then ``status.txt`` (the commit point), then ``status_changed`` with ``data``."""
        written = replace(incident, status=new, updated_at=ev.format_ts(self._now()))
        self._write_incident(folder, written, incident)
        fsio.atomic_write_text(self.confined(folder / STATUS_TXT), new + "\n")
        self._append_event_at(folder, incident.incident_id, ev.STATUS_CHANGED, {"from": current, "to": new, **data})
        return written

    def _write_incident(self, folder: Path, incident: Incident, before: Incident) -> None:
        fsio.atomic_write_text(self.confined(folder / INCIDENT_JSON), fsio.dumps_json(incident.to_json()))
        judging.remember(self.root, incident.incident_id, incident=incident, before=before)

    def _append_event_at(self, folder: Path, incident_id: str, name: str, data: Mapping[str, object]) -> None:
        record = ev.stamp(ev.pending(name, self._clean(data)), incident_id, ts=self._now())
        fsio.append_lines(self.confined(folder / AUDIT_TAIL_JSONL), [ev.encode_event(record)])

    def append_event(self, incident_id: str, name: str, /, **data: Any) -> Event:
        """Append one event to the incident's ``audit_tail.jsonl``; returns the record."""
        return self.append_events(incident_id, [ev.pending(name, data)])[0]

    def append_events(self, incident_id: str, events: Sequence[Event]) -> list[Event]:
        """Append several events in order as one write and one fsync; returns the records."""
        incident_id = validate_incident_id(incident_id)
        events = self._clean_events(events)  # each checked again: before taking the lock
        with self.locked(incident_id) as (_, _, folder):
            records = [ev.stamp(event, incident_id, ts=self._now()) for event in events]
            fsio.append_lines(self.confined(folder / AUDIT_TAIL_JSONL), [ev.encode_event(r) for r in records])
            return records

    def write_plan(self, incident_id: str, plan: Plan, plan_md: str) -> Path:
        """Write ``plan.md`` then ``plan.json``; returns plan.json's path. The caller appends
        ``plan_generated`` and moves the status."""
        text = self._text("plan", plan, incident_id)
        plan_md = self.redactor.redact(plan_md)
        with self.locked(incident_id):
            folder = fsio.ensure_dir(self.confined(self.plans_dir(incident_id)))
            fsio.atomic_write_text(self.confined(folder / PLAN_MD), plan_md)
            before = self.read_plan(incident_id) if (folder / PLAN_JSON).exists() else None
            fsio.atomic_write_text(self.confined(folder / PLAN_JSON), text)
            judging.remember(self.root, incident_id, plan=Plan.from_json(json.loads(text), "plan.json"),
                             plan_before=before)
            return folder / PLAN_JSON

    def write_attempt(self, incident_id: str, attempt: Attempt) -> Path:
        """Write ``error_runs/<id>/attempt_XX.json``, never over an existing one
        (``RefusedError``): a resumed loop never rewrites history."""
        return self._write_run(incident_id, attempt_filename(attempt.iteration),
                               self._text("attempt", attempt, incident_id), new=True)

    def write_run_result(self, incident_id: str, result: RunResult) -> Path:
        """Write (or replace) ``error_runs/<id>/run_result.json``."""
        return self._write_run(incident_id, RUN_RESULT_JSON, self._text("run_result", result, incident_id))

    def write_run_file(self, incident_id: str, name: str, text: str, *, raw: bool = False) -> Path:
        """Write another file into ``error_runs/<id>/`` (``repair_01.log``), redacted unless
        ``raw`` (patches only: a redacted patch no longer applies)."""
        text = text if raw else self.redactor.redact(text)
        incident_id = validate_incident_id(incident_id)
        if RUN_FILE_RE.fullmatch(name) is None or ".." in name:
            raise ValueError(f"unsafe run file name {name!r}")
        if name == RUN_RESULT_JSON or ATTEMPT_RE.fullmatch(name):
            raise ValueError(f"{name} has its own writer")
        return self._write_run(incident_id, name, text)

    def _write_run(self, incident_id: str, name: str, text: str, *, new: bool = False) -> Path:
        with self.locked(incident_id):
            path = self.confined(fsio.ensure_dir(self.confined(self.runs_dir(incident_id))) / name)
            if new and path.exists():
                raise RefusedError(f"{self._relative(path)} already exists; the next attempt of {incident_id} "
                                   f"is {self.next_attempt_number(incident_id)}")
            fsio.atomic_write_text(path, text)
            return path

    def selection_file(self, incident_id: str, index: int = 0) -> Path:
        """Where verification command ``index`` hands a long selection to its pytest child:
        ``error_runs/<id>/selection.json``, ``selection_2.json``…"""
        folder = fsio.ensure_dir(self.confined(self.runs_dir(validate_incident_id(incident_id))))
        name = SELECTION_FILE if index == 0 else SELECTION_FILE.replace(".", f"_{index + 1}.", 1)
        return self.confined(folder / name)

    def redact_again(self, incident: Incident) -> tuple[Incident, Optional[Plan]]:
        """Apply this store's redactor to an incident another process wrote (the pytest child of
        ``selfheal ci`` never sees a ``*TOKEN*`` variable, so cannot redact its value): each
        file read once, rewritten only when it changes. Returns the incident and plan as written."""
        incident_id = incident.incident_id
        plan: Optional[Plan] = None
        with self.lock():
            _, folder = self.locate(incident_id)
            doc = incident.to_json()
            clean = self.redactor.redact_obj(doc, written_by_selfheal)
            if clean != doc:
                redacted = _fitting(Incident, clean, "incident redaction")
                self._write_incident(folder, redacted, incident)
                incident = redacted
            for path in [p for p in self.record_paths(incident_id) if p.name != INCIDENT_JSON] + [
                    folder / name for name in (CONTEXT_JSON, LOG_TAIL_TXT, AUDIT_TAIL_JSONL)] + [
                    self.plans_dir(incident_id) / PLAN_MD]:
                if not path.is_file():
                    continue
                text = fsio.read_text(path)
                if path.suffix == ".json":
                    doc = fsio.parse_json(text, path)
                    clean = self.redactor.redact_obj(doc, written_by_selfheal)
                    new = fsio.dumps_json(clean) if clean != doc else text
                    if path.name == PLAN_JSON:
                        plan = self._parsed(Plan, clean, path, incident_id)
                elif path.suffix == ".jsonl":  # event by event; a torn line as text
                    new = "".join(self._redacted_event_line(line) + "\n" for line in text.splitlines())
                else:
                    new = self.redactor.redact(text)
                if new != text:
                    fsio.atomic_write_text(self.confined(path), new)
        return incident, plan

    def _redacted_event_line(self, line: str) -> str:
        try:
            record = json.loads(line)
        except ValueError:
            return self.redactor.redact(line)
        clean = self.redactor.redact_obj(record, written_by_selfheal)
        return line if clean == record else ev.encode_line(clean)

    def _text(self, kind: str, record: JsonRecord, incident_id: str) -> str:
        """A record's text as written: redacted, checked to fit ``kind`` and name ``incident_id`` (else
        ``ValueError``, a bug; an invalid id: ``UsageError``), serialised before any file is touched."""
        incident_id = validate_incident_id(incident_id)
        doc = self._clean(record.to_json())
        _fitting(DOCUMENTS[kind][0], doc, f"{kind} for {incident_id}")
        if doc["incident_id"] != incident_id:
            raise ValueError(f"{kind} names incident {doc['incident_id']!r}, expected {incident_id}")
        return fsio.dumps_json(doc)

    def archive(self, incident_id: str, bucket: str, *, held: Optional[tuple[str, Incident]] = None) -> Path:
        """Move ``error_inbox/<id>/`` to ``error_archive/<bucket>/<id>/``: the status (through the table),
        ``incident_archived``, one rename; an archive killed before its rename is completed.
        ``held``: ``(status.txt, record)`` as the caller holds them."""
        if bucket not in ARCHIVE_BUCKETS:
            raise UsageError(f"cannot archive as {bucket!r} (expected one of {', '.join(ARCHIVE_BUCKETS)})")
        with self.locked(incident_id) as (incident_id, where, folder):
            if where != INBOX:
                raise RefusedError(f"incident {incident_id} is already archived in {ARCHIVE_DIR}/{where}")
            self.confined(folder)
            current = held[0] if held else self._read_status_at(folder)
            target_dir = self.confined(self.bucket_dir(bucket))
            destination = self.confined(target_dir / incident_id)
            archived_to = self._relative(destination)
            if current != bucket:
                check_transition(incident_id, current, bucket)
                fsio.ensure_dir(target_dir)
                incident = held[1] if held else self._read_incident_at(folder, incident_id)
                self._write_status(folder, incident, current, bucket, {"reason": "archive"})
                self._append_event_at(folder, incident_id, ev.INCIDENT_ARCHIVED, {"bucket": bucket, "archived_to": archived_to})
            else:
                # Resuming an interrupted archive: add what the crash may have lost.
                fsio.ensure_dir(target_dir)
                events = ev.since_last(self._read_events_at(folder)[0])
                if not any(e.event == ev.STATUS_CHANGED and e.get("to") == bucket for e in events):
                    self._append_event_at(folder, incident_id, ev.STATUS_CHANGED, {"from": None, "to": bucket, "reason": "archive", "recovered": True})
                if not any(e.event == ev.INCIDENT_ARCHIVED for e in events):
                    self._append_event_at(folder, incident_id, ev.INCIDENT_ARCHIVED, {"bucket": bucket, "archived_to": archived_to})
            fsio.move(folder, destination)
            return destination

    def reopen(self, incident_id: str, *, continue_run: bool = False) -> tuple[str, str, int]:
        """Move an archived incident back to ``error_inbox/`` as ``planned``, its next loop run
        starting after its last attempt (``reopened_after_iteration``; ``continue_run``: a run saw
        the failures again with the code changed, ``resumed_after_iteration``: the loop run goes on).
        A reopen killed before its rename is completed. Returns ``(bucket, status it had, last attempt)``."""
        with self.locked(incident_id) as (incident_id, bucket, folder):
            if bucket == INBOX:
                raise RefusedError(
                    f"incident {incident_id} is open ({INBOX_DIR}, status {self._read_status_at(folder)}); "
                    "only an archived incident can be reopened"
                )
            current = self._read_status_at(folder)
            after = self.next_attempt_number(incident_id) - 1
            data = {"bucket": bucket, "reopened_from": self._relative(folder), "after_iteration": after,
                    **({"continues_run": True} if continue_run else {})}
            # `selfheal reopen ID`: back to the inbox as planned (not a TRANSITIONS move).
            if current != IncidentStatus.PLANNED:
                before = self._read_incident_at(folder, incident_id)
                reopened = (replace(before, resumed_after_iteration=after) if continue_run
                            else replace(before, reopened_after_iteration=after))
                self._write_status(folder, reopened, current, IncidentStatus.PLANNED,
                                   {"reason": "code_changed" if continue_run else "reopen"})
                self._append_event_at(folder, incident_id, ev.INCIDENT_REOPENED, data)
            else:
                # Resuming an interrupted reopen: add what the crash may have lost.
                tail = ev.since_last(self._read_events_at(folder)[0], ev.INCIDENT_ARCHIVED)
                current = next((str(e.get("from")) for e in reversed(tail) if e.event == ev.STATUS_CHANGED), bucket)
                if not any(e.event == ev.INCIDENT_REOPENED for e in tail):
                    if not any(e.event == ev.STATUS_CHANGED for e in tail):
                        self._append_event_at(folder, incident_id, ev.STATUS_CHANGED,
                                              {"from": bucket, "to": IncidentStatus.PLANNED, "reason": "reopen", "recovered": True})
                    self._append_event_at(folder, incident_id, ev.INCIDENT_REOPENED, dict(data, recovered=True))
            fsio.move(folder, fsio.ensure_dir(self.inbox_dir) / incident_id)
            return bucket, current, after

    def prune(self, incident_id: str) -> None:
        """Delete an archived incident with its plan and run folders: its folder renamed first (gone in
        one step; the next prune completes a killed one); symbolic links removed, never followed."""
        with self.locked(incident_id) as (incident_id, bucket, folder):
            if bucket == INBOX:
                raise RefusedError(f"incident {incident_id} is open ({INBOX_DIR}); archive it before pruning")
            # Renaming a linked incident folder moves the link, never what it points at.
            fsio.move(folder, self.confined(self.archive_root / f"{PRUNING_PREFIX}{incident_id}"))
            self._finish_prune(incident_id)

    def finish_prunes(self) -> list[str]:
        """Complete prunes a kill interrupted (``error_archive/.pruning_<id>`` left behind); their ids."""
        names = fsio.list_names(self.archive_root)
        done = []
        with self.lock() if names else nullcontext():
            for name in sorted(names):
                incident_id = name[len(PRUNING_PREFIX):]
                if name.startswith(PRUNING_PREFIX) and is_incident_id(incident_id):
                    self._finish_prune(incident_id)
                    done.append(incident_id)
        return done

    def _finish_prune(self, incident_id: str) -> None:
        for path in (self.plans_dir(incident_id), self.runs_dir(incident_id),
                     self.archive_root / f"{PRUNING_PREFIX}{incident_id}"):
            try:
                if path.is_symlink():
                    path.unlink()
                elif path.exists():
                    shutil.rmtree(path)
            except OSError as exc:
                raise fsio.io_error("remove", path, exc) from None


# The fields of a new incident that the store fills (a record built by the capture leaves them empty).
_STORE_FILLED = ("incident_id", "created_at", "updated_at", "run_id", "year", "month", "ym")


def _fitting(record: type[R], doc: object, what: str) -> R:
    """The record of a document the store built (``ValueError`` when it does not fit: a bug of the caller)."""
    try:
        return record.parse(doc, "")
    except FieldError as exc:
        raise ValueError(f"{what} does not fit the schema: {exc}") from None


def project_store(project_root: Path, reports_dir: str, redactor: Redactor) -> Store:
    """The store of ``reports_dir``; ``RefusedError`` when it leads out of the project."""
    fsio.project_path(project_root, reports_dir, "reports_dir")
    return Store(Path(project_root, reports_dir), redactor=redactor)
