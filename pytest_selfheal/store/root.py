"""The on-disk incident store under the reports root (SPEC §3, docs/store.md).

```
error_inbox/<id>/            incident.json status.txt log_tail.txt audit_tail.jsonl context.json
error_plans/<id>/            plan.json plan.md
error_runs/<id>/             attempt_01.json attempt_02.json … run_result.json (+ other run files)
error_archive/resolved/<id>/ error_archive/escalated/<id>/   (the moved inbox folder)
.lock                        serialises every mutating operation of concurrent processes
```

Rules kept here: ids are validated before touching a path; every JSON file is written
atomically; ``status.txt`` is the authoritative status and changes only through the table
in ``states.py``; an incident appears in the inbox complete or not at all; archiving moves
the inbox folder with one rename, so there are never two copies. Readers never take the
lock and never see a partial file: the read side (paths, reading, listing) is
:class:`~pytest_selfheal.store.reader.StoreReader`, which :class:`Store` extends with the
writes and the status transitions.
"""


from __future__ import annotations

import errno
import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from pytest_selfheal.errors import RefusedError, StoreIOError, UsageError
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.redact import Redactor, default_redactor
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import is_incident_id, new_incident_id, new_run_id, new_run_token, validate_incident_id
from pytest_selfheal.store.reader import (
    ARCHIVE_DIR,
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
from pytest_selfheal.store.schema import validate
from pytest_selfheal.store.states import ARCHIVE_BUCKETS, NEW, REOPENED, STATUSES, check_transition

# A pruned incident's archive folder while its files are being removed (docs/store.md).
PRUNING_PREFIX = ".pruning_"

# An incident folder under construction: a dot name that no reader takes for an incident.
_BUILD_PREFIX = ".tmp_"
_CREATE_RETRIES = 50



class Store(StoreReader):
    """The incident store under one reports root (``.selfheal/`` by default): reads, writes
    and status transitions.

    The one writer of the reports root is also the redaction boundary (SPEC §12): every
    document (keys and values), event and text file goes through ``redactor`` on its way
    to disk; only patches are written raw (they must apply). ``redactor`` defaults to the
    built-in kinds and the environment's secret-named variables; callers holding the
    settings pass theirs (``redaction.patterns``, ``env_names``).
    """

    def __init__(
        self,
        root: Union[str, "os.PathLike[str]"],
        *,
        lock_timeout: float = 30.0,
        clock: Optional[Callable[[], datetime]] = None,
        redactor: Optional[Redactor] = None,
    ) -> None:
        super().__init__(root)
        self.lock_timeout = lock_timeout
        self._clock: Callable[[], datetime] = clock or (lambda: datetime.now(timezone.utc))
        self.redactor: Redactor = redactor if redactor is not None else default_redactor()

    def _clean(self, doc: Mapping[str, Any]) -> Dict[str, Any]:
        """``doc`` with secrets redacted from its keys and values (what is written)."""
        return dict(self.redactor.redact_obj(dict(doc)))

    def _clean_events(self, events: Sequence[Tuple[str, Mapping[str, Any]]]) -> List[Tuple[str, Mapping[str, Any]]]:
        return [(name, self._clean(data)) for name, data in events]

    # ------------------------------------------------------------------ time, lock

    def _now(self) -> datetime:
        moment = self._clock()
        return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)

    def lock(self, timeout: Optional[float] = None) -> fsio.FileLock:
        """The store's inter-process lock (``root/.lock``), as a context manager.

        Every mutating method takes it; callers may hold it around a read-modify-write
        sequence too (it is re-entrant within a process). Creates the root if missing.
        """
        fsio.ensure_dir(self._root)
        return fsio.FileLock(self.confined(self.lock_path), self.lock_timeout if timeout is None else timeout)

    def confined(self, path: Path) -> Path:
        """``path`` once checked to be a write that stays under the reports root: no symbolic
        link between the root and it (``fsio.confine``; ``RefusedError``, exit 5). Every
        writer of the store calls it before touching a file or folder."""
        return fsio.confine(self._root, path)

    # ------------------------------------------------------------------ create

    def create_incident(
        self,
        incident: Mapping[str, Any],
        *,
        log_tail: str,
        context: Mapping[str, Any],
        run: Optional[str] = None,
        now: Optional[datetime] = None,
        events: Sequence[Tuple[str, Mapping[str, Any]]] = (),
    ) -> str:
        """Write a new incident into ``error_inbox/`` and return its id.

        Fills ``incident_id``, ``status`` (always ``new``), ``created_at``, ``updated_at``,
        ``year``, ``month``, ``ym`` and ``run_id`` when missing. The folder is built under
        a temporary name (with the ``incident_captured`` event already in its log) and
        renamed into place, so a half-made incident never appears. ``events``: more
        ``(name, data)`` events of the capture (its ``failure_classified`` lines), logged
        after ``incident_captured`` in the same build, not as a later append and fsync.
        Data that does not fit the incident schema, or an unknown event name, is a
        programming error (``ValueError``). Everything is redacted on the way (the class doc).
        """
        moment = self._now() if now is None else (now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now.astimezone(timezone.utc))
        doc: Dict[str, Any] = self._clean(incident)
        log_tail = self.redactor.redact(log_tail)
        events = self._clean_events(events)
        if doc.setdefault("status", NEW) != NEW:
            raise ValueError(f"a new incident has status 'new', not {doc['status']!r}")
        stamp = ev.format_ts(moment)
        doc.setdefault("created_at", stamp)
        doc.setdefault("updated_at", doc["created_at"])
        doc.setdefault("year", moment.year)
        doc.setdefault("month", moment.month)
        doc.setdefault("ym", f"{moment.year:04d}-{moment.month:02d}")
        doc.setdefault("run_id", new_run_id(moment))
        explicit_id = "incident_id" in doc
        if explicit_id:
            doc["incident_id"] = validate_incident_id(doc["incident_id"])
        else:
            doc["incident_id"] = new_incident_id(moment, run)
        problems = validate("incident", doc)
        if problems:
            raise ValueError(f"incident does not fit the schema: {problems[0]}")
        context_doc = self._clean(context)
        # Serialise up front: unserialisable data fails before anything touches the disk.
        fsio.dumps_json(doc)
        fsio.dumps_json(context_doc)
        for name, data in events:
            ev.encode_event(ev.build_event(name, str(doc["incident_id"]), dict(data)))

        with self.lock():
            inbox = fsio.ensure_dir(self.confined(self.inbox_dir))
            self._remove_stale_builds(inbox)
            for _ in range(_CREATE_RETRIES):
                incident_id = str(doc["incident_id"])
                if self._taken(incident_id):
                    if explicit_id:
                        raise RefusedError(f"incident {incident_id} already exists")
                    doc["incident_id"] = self._next_candidate(moment, run)
                    continue
                if self._build_and_publish(inbox, doc, log_tail, context_doc, events):
                    return incident_id
                if explicit_id:
                    raise RefusedError(f"incident {incident_id} already exists")
                doc["incident_id"] = self._next_candidate(moment, run)
        raise StoreIOError(f"could not find a free incident id in {self.inbox_dir} after {_CREATE_RETRIES} tries")

    @staticmethod
    def _next_candidate(moment: datetime, run: Optional[str]) -> str:
        # Same second, new random token (kept within the 40-character limit of <run>).
        token = new_run_token() if run is None else f"{run[:33]}_{new_run_token()}"
        return new_incident_id(moment, token)

    def _taken(self, incident_id: str) -> bool:
        return any((self.bucket_dir(bucket) / incident_id).exists() for bucket in BUCKETS)

    @staticmethod
    def _remove_stale_builds(inbox: Path) -> None:
        # Under the lock nobody else is building, so any build folder is a crash leftover.
        try:
            names = os.listdir(inbox)
        except OSError as exc:
            raise fsio.io_error("list", inbox, exc) from None
        for name in names:
            if name.startswith(_BUILD_PREFIX):
                shutil.rmtree(inbox / name, ignore_errors=True)

    def _build_and_publish(
        self,
        inbox: Path,
        doc: Dict[str, Any],
        log_tail: str,
        context: Dict[str, Any],
        events: Sequence[Tuple[str, Mapping[str, Any]]] = (),
    ) -> bool:
        """Build the five files under a temp name and rename into place; False if the id got taken."""
        incident_id = str(doc["incident_id"])
        build = inbox / f"{_BUILD_PREFIX}{incident_id}_{os.urandom(4).hex()}"
        try:
            build.mkdir()
        except OSError as exc:
            raise fsio.io_error("create directory", build, exc) from None
        try:
            captured = ev.build_event(
                ev.INCIDENT_CAPTURED,
                incident_id,
                {
                    "run_id": doc["run_id"],
                    "step": doc["step"],
                    "failure_class": doc["failure_class"],
                    "error_signature": doc["error_signature"],
                    "status": NEW,
                },
                ts=self._now(),
            )
            log = [captured] + [ev.build_event(name, incident_id, dict(data), ts=self._now()) for name, data in events]
            # Nobody reads a build folder: each file is written in place and fsynced, and
            # the folder is fsynced once before the rename publishes it (not once per file).
            for name, text in (
                (INCIDENT_JSON, fsio.dumps_json(doc)),
                (STATUS_TXT, NEW + "\n"),
                (LOG_TAIL_TXT, log_tail),
                (CONTEXT_JSON, fsio.dumps_json(context)),
                (AUDIT_TAIL_JSONL, "".join(ev.encode_event(record) + "\n" for record in log)),
            ):
                fsio.write_new_bytes(build / name, text.encode("utf-8"))
            fsio.fsync_dir(build)
            final = inbox / incident_id
            try:
                # On POSIX rename() replaces an *empty* directory: never let it.
                if final.exists():
                    shutil.rmtree(build, ignore_errors=True)
                    return False
                os.rename(build, final)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    shutil.rmtree(build, ignore_errors=True)
                    return False
                raise fsio.io_error("create incident", final, exc) from None
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
        fsio.fsync_dir(inbox)
        return True

    # ------------------------------------------------------------------ status

    def update_incident(self, incident_id: str, /, **fields: Any) -> Dict[str, Any]:
        """Set top-level fields of ``incident.json`` (e.g. more ``failures``); returns the new doc.

        ``incident_id``, ``status`` (use ``set_status``) and ``created_at`` cannot be changed
        this way; ``updated_at`` is refreshed. The result must fit the schema (``ValueError``).
        """
        fixed = sorted({"incident_id", "status", "created_at", "updated_at"} & set(fields))
        if fixed:
            raise ValueError(f"update_incident cannot set {', '.join(fixed)}")
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            incident_id = validate_incident_id(incident_id)
            _, folder = self.locate(incident_id)
            doc = self._read_incident_doc(folder, incident_id)
            doc.update(self._clean(fields))
            doc["updated_at"] = ev.format_ts(self._now())
            problems = validate("incident", doc)
            if problems:
                raise ValueError(f"incident update does not fit the schema: {problems[0]}")
            fsio.atomic_write_json(self.confined(folder / INCIDENT_JSON), doc)
            return doc

    def set_status(self, incident_id: str, new: str, /, **event_data: Any) -> None:
        """Move the incident to status ``new`` if the table allows it from ``status.txt``.

        Writes ``incident.json`` (status, updated_at) and then ``status.txt`` — each
        atomically; ``status.txt`` is the commit point — and appends ``status_changed``
        ``{from, to, ...event_data}``. A refused move raises ``RefusedError`` and changes
        nothing; an archived incident's status is final.
        """
        if new not in STATUSES:
            raise ValueError(f"unknown incident status {new!r} (expected one of {', '.join(STATUSES)})")
        clash = sorted({"from", "to"} & set(event_data))
        if clash:
            raise ValueError(f"status_changed data must not set {', '.join(clash)}")
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            incident_id = validate_incident_id(incident_id)
            bucket, folder = self.locate(incident_id)
            current = self._read_status_at(folder)
            check_transition(incident_id, current, new)
            if bucket != INBOX:  # only reachable after a hand edit of status.txt
                raise RefusedError(f"incident {incident_id} is archived in {ARCHIVE_DIR}/{bucket}; its status is final")
            self._write_status(folder, incident_id, current, new, event_data)

    def _write_status(self, folder: Path, incident_id: str, current: str, new: str, event_data: Mapping[str, Any]) -> None:
        doc = self._read_incident_doc(folder, incident_id)
        doc["status"] = new
        doc["updated_at"] = ev.format_ts(self._now())
        fsio.atomic_write_json(self.confined(folder / INCIDENT_JSON), doc)
        fsio.atomic_write_text(self.confined(folder / STATUS_TXT), new + "\n")
        data = {"from": current, "to": new}
        data.update(event_data)
        self._append_event_at(folder, incident_id, ev.STATUS_CHANGED, data)

    # ------------------------------------------------------------------ events

    def _append_event_at(self, folder: Path, incident_id: str, name: str, data: Mapping[str, Any]) -> Dict[str, Any]:
        record = ev.build_event(name, incident_id, self._clean(data), ts=self._now())
        fsio.append_line(self.confined(folder / AUDIT_TAIL_JSONL), ev.encode_event(record))
        return record

    def append_event(self, incident_id: str, name: str, /, **data: Any) -> Dict[str, Any]:
        """Append one event to the incident's ``audit_tail.jsonl`` (wherever the incident is).

        Unknown event names are a programming error (``ValueError``). Returns the record.
        """
        return self.append_events(incident_id, [(name, data)])[0]

    def append_events(self, incident_id: str, events: Sequence[Tuple[str, Mapping[str, Any]]]) -> List[Dict[str, Any]]:
        """Append several ``(name, data)`` events in order, as one write and one fsync.

        For a burst of events of one step (a capture's ``failure_classified`` lines): the
        same records as one ``append_event`` each, at one fsync. Unknown names are a
        ``ValueError`` before anything is written. Returns the records.
        """
        incident_id = validate_incident_id(incident_id)
        events = self._clean_events(events)
        for name, data in events:
            ev.build_event(name, incident_id, dict(data))  # validate before taking the lock
        self.locate(incident_id)
        with self.lock():
            _, folder = self.locate(incident_id)
            records = [ev.build_event(name, incident_id, dict(data), ts=self._now()) for name, data in events]
            fsio.append_lines(self.confined(folder / AUDIT_TAIL_JSONL), [ev.encode_event(r) for r in records])
            return records

    # ------------------------------------------------------------------ plans

    def write_plan(self, incident_id: str, plan: Mapping[str, Any], plan_md: str) -> Path:
        """Write ``error_plans/<id>/plan.md`` then ``plan.json`` (both atomic); returns plan.json's path.

        The plan must fit the schema and name this incident (``ValueError``). The caller
        appends ``plan_generated`` and moves the status.
        """
        incident_id = validate_incident_id(incident_id)
        doc = self._clean(plan)
        plan_md = self.redactor.redact(plan_md)
        self._check_doc("plan", doc, incident_id)
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            self.locate(incident_id)
            folder = fsio.ensure_dir(self.confined(self.plans_dir(incident_id)))
            fsio.atomic_write_text(self.confined(folder / PLAN_MD), plan_md)
            fsio.atomic_write_json(self.confined(folder / PLAN_JSON), doc)
            return folder / PLAN_JSON

    # ------------------------------------------------------------------ runs

    def write_attempt(self, incident_id: str, attempt: Attempt) -> Path:
        """Write ``error_runs/<id>/attempt_XX.json`` (XX from ``attempt.iteration``).

        Refuses (``RefusedError``) to overwrite an existing attempt, so a resumed loop
        never duplicates or rewrites history. Must fit the schema (``ValueError``).
        """
        incident_id = validate_incident_id(incident_id)
        doc = self._clean(attempt.to_json())
        self._check_doc("attempt", doc, incident_id)
        iteration = attempt.iteration
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            self.locate(incident_id)
            folder = fsio.ensure_dir(self.confined(self.runs_dir(incident_id)))
            path = self.confined(folder / attempt_filename(iteration))
            if path.exists():
                raise RefusedError(
                    f"{self._relative(path)} already exists; the next attempt of {incident_id} "
                    f"is {self.next_attempt_number(incident_id)}"
                )
            fsio.atomic_write_json(path, doc)
            return path

    def write_run_result(self, incident_id: str, result: RunResult) -> Path:
        """Write (or replace) ``error_runs/<id>/run_result.json``; must fit the schema (``ValueError``)."""
        incident_id = validate_incident_id(incident_id)
        doc = self._clean(result.to_json())
        self._check_doc("run_result", doc, incident_id)
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            self.locate(incident_id)
            folder = fsio.ensure_dir(self.confined(self.runs_dir(incident_id)))
            fsio.atomic_write_json(self.confined(folder / RUN_RESULT_JSON), doc)
            return folder / RUN_RESULT_JSON

    def write_run_file(self, incident_id: str, name: str, text: str, *, raw: bool = False) -> Path:
        """Atomically write another file into ``error_runs/<id>/`` (e.g. ``repair_01.log``).

        ``name`` is a plain file name (no separators, not starting with a dot); the
        contract's JSON files have their own writers and are refused here. ``text`` is
        redacted unless ``raw`` (patches only: a redacted patch no longer applies).
        """
        text = text if raw else self.redactor.redact(text)
        incident_id = validate_incident_id(incident_id)
        if RUN_FILE_RE.fullmatch(name) is None or ".." in name:
            raise ValueError(f"unsafe run file name {name!r}")
        if name == RUN_RESULT_JSON or ATTEMPT_RE.fullmatch(name):
            raise ValueError(f"{name} has its own writer")
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            self.locate(incident_id)
            folder = fsio.ensure_dir(self.confined(self.runs_dir(incident_id)))
            fsio.atomic_write_text(self.confined(folder / name), text)
            return folder / name

    def redact_again(self, incident_id: str) -> List[str]:
        """Apply this store's redactor to an incident written by another process (the
        pytest child of ``selfheal ci``, which never sees a ``*TOKEN*`` variable and so
        cannot redact its value): the inbox files, the plan and the attempts (the agent
        mode records one), each rewritten atomically only when it changes. Returns the
        names of the files rewritten."""
        incident_id = validate_incident_id(incident_id)
        self.locate(incident_id)
        rewritten: List[str] = []
        with self.lock():
            _, folder = self.locate(incident_id)
            runs = self.runs_dir(incident_id)
            attempts = sorted(runs.glob("attempt_*.json")) + [runs / RUN_RESULT_JSON] if runs.is_dir() else []
            for path in [folder / name for name in (INCIDENT_JSON, CONTEXT_JSON, LOG_TAIL_TXT, AUDIT_TAIL_JSONL)] + [
                    self.plans_dir(incident_id) / PLAN_JSON, self.plans_dir(incident_id) / PLAN_MD] + attempts:
                if not path.is_file():
                    continue
                text = fsio.read_text(path)
                if path.suffix == ".json":
                    doc = fsio.read_json(path)
                    clean = self.redactor.redact_obj(doc)
                    new = fsio.dumps_json(clean) if clean != doc else text
                elif path.suffix == ".jsonl":  # event by event; a torn line as text
                    new = "".join(self._redacted_event_line(line) + "\n" for line in text.splitlines())
                else:
                    new = self.redactor.redact(text)
                if new != text:
                    fsio.atomic_write_text(self.confined(path), new)
                    rewritten.append(path.name)
        return rewritten

    def _redacted_event_line(self, line: str) -> str:
        try:
            record = json.loads(line)
        except ValueError:
            return self.redactor.redact(line)
        clean = self.redactor.redact_obj(record)
        return line if clean == record else ev.encode_event(clean)

    # ------------------------------------------------------------------ archive

    def archive(self, incident_id: str, bucket: str) -> Path:
        """Move ``error_inbox/<id>/`` to ``error_archive/<bucket>/<id>/`` (one rename).

        First the status moves to ``bucket`` through the table (``RefusedError`` and no
        change if not allowed), then ``incident_archived`` is appended, then the folder is
        renamed. An already archived incident is refused. An inbox incident whose status
        already equals ``bucket`` (a previous archive interrupted before its rename) is
        simply moved, adding only the events that are missing. ``error_plans/<id>`` and
        ``error_runs/<id>`` stay where they are. Returns the new folder.
        """
        if bucket not in ARCHIVE_BUCKETS:
            raise UsageError(f"cannot archive as {bucket!r} (expected one of {', '.join(ARCHIVE_BUCKETS)})")
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            incident_id = validate_incident_id(incident_id)
            where, folder = self.locate(incident_id)
            if where != INBOX:
                raise RefusedError(f"incident {incident_id} is already archived in {ARCHIVE_DIR}/{where}")
            self.confined(folder)
            current = self._read_status_at(folder)
            target_dir = self.confined(self.bucket_dir(bucket))
            destination = self.confined(target_dir / incident_id)
            archived_to = self._relative(destination)
            if current != bucket:
                check_transition(incident_id, current, bucket)
                fsio.ensure_dir(target_dir)
                self._write_status(folder, incident_id, current, bucket, {"reason": "archive"})
                self._append_event_at(folder, incident_id, ev.INCIDENT_ARCHIVED, {"bucket": bucket, "archived_to": archived_to})
            else:
                # Resuming an interrupted archive: add what the crash may have lost.
                fsio.ensure_dir(target_dir)
                events = ev.since_last_reopen(self._read_events_at(folder)[0])
                if not any(e.event == ev.STATUS_CHANGED and e.get("to") == bucket for e in events):
                    self._append_event_at(folder, incident_id, ev.STATUS_CHANGED, {"from": None, "to": bucket, "reason": "archive", "recovered": True})
                if not any(e.event == ev.INCIDENT_ARCHIVED for e in events):
                    self._append_event_at(folder, incident_id, ev.INCIDENT_ARCHIVED, {"bucket": bucket, "archived_to": archived_to})
            fsio.move(folder, destination)
            return destination

    # ------------------------------------------------------------------ reopen

    def reopen(self, incident_id: str) -> Tuple[str, str, int]:
        """Move an archived incident back to ``error_inbox/`` with status ``planned`` (SPEC §8).

        In the archive folder: ``incident.json`` gets ``status: planned`` and
        ``reopened_after_iteration`` (the last attempt number: the next loop run starts
        after it, docs/loop.md "Reopen"), ``status.txt`` becomes ``planned``, then
        ``status_changed`` and ``incident_reopened`` are appended; then one rename moves the
        folder into the inbox. An archived incident whose status is already ``planned`` (a
        reopen killed before its rename) is simply moved, adding only the missing events.
        An inbox incident is refused (``RefusedError``). Returns ``(bucket it came from,
        status it had, reopened_after_iteration)``.
        """
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            incident_id = validate_incident_id(incident_id)
            bucket, folder = self.locate(incident_id)
            if bucket == INBOX:
                raise RefusedError(
                    f"incident {incident_id} is open (error_inbox, status {self._read_status_at(folder)}); "
                    "only an archived incident can be reopened"
                )
            current = self._read_status_at(folder)
            after = self.next_attempt_number(incident_id) - 1
            data = {"bucket": bucket, "reopened_from": self._relative(folder), "after_iteration": after}
            if current != REOPENED:
                doc = self._read_incident_doc(folder, incident_id)
                doc["status"] = REOPENED
                doc["reopened_after_iteration"] = after
                doc["updated_at"] = ev.format_ts(self._now())
                fsio.atomic_write_json(folder / INCIDENT_JSON, doc)
                fsio.atomic_write_text(folder / STATUS_TXT, REOPENED + "\n")
                self._append_event_at(folder, incident_id, ev.STATUS_CHANGED, {"from": current, "to": REOPENED, "reason": "reopen"})
                self._append_event_at(folder, incident_id, ev.INCIDENT_REOPENED, data)
            else:
                # Resuming an interrupted reopen: add what the crash may have lost.
                events = self._read_events_at(folder)[0]
                tail = events[max((i for i, e in enumerate(events) if e.event == ev.INCIDENT_ARCHIVED), default=-1) + 1:]
                current = next((str(e.get("from")) for e in reversed(tail) if e.event == ev.STATUS_CHANGED), bucket)
                if not any(e.event == ev.INCIDENT_REOPENED for e in tail):
                    if not any(e.event == ev.STATUS_CHANGED for e in tail):
                        self._append_event_at(folder, incident_id, ev.STATUS_CHANGED,
                                              {"from": bucket, "to": REOPENED, "reason": "reopen", "recovered": True})
                    self._append_event_at(folder, incident_id, ev.INCIDENT_REOPENED, dict(data, recovered=True))
            fsio.move(folder, fsio.ensure_dir(self.inbox_dir) / incident_id)
            return bucket, current, after

    # ------------------------------------------------------------------ prune

    def prune(self, incident_id: str) -> None:
        """Delete an archived incident: its folder, ``error_plans/<id>/`` and ``error_runs/<id>/``.

        An incident in the inbox is refused (``RefusedError``): only closed work is removed.
        The archive folder is first renamed to ``error_archive/.pruning_<id>`` (the incident
        disappears in one step), then the plan and run folders and that folder are removed;
        a prune killed half-way is completed by the next one. Symlinks are removed, never
        followed.
        """
        self.locate(incident_id)  # unknown ids fail before the lock creates anything
        with self.lock():
            incident_id = validate_incident_id(incident_id)
            bucket, folder = self.locate(incident_id)
            if bucket == INBOX:
                raise RefusedError(f"incident {incident_id} is open (error_inbox); archive it before pruning")
            # Renaming a linked incident folder moves the link, never what it points at.
            fsio.move(folder, self.confined(self.archive_root / f"{PRUNING_PREFIX}{incident_id}"))
            self._finish_prune(incident_id)

    def finish_prunes(self) -> List[str]:
        """Complete prunes a kill interrupted (``error_archive/.pruning_<id>`` left behind); their ids."""
        try:
            names = os.listdir(self.archive_root)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise fsio.io_error("list", self.archive_root, exc) from None
        done = []
        with self.lock():
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

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _check_doc(kind: str, doc: Mapping[str, Any], incident_id: str) -> None:
        problems = validate(kind, doc)
        if problems:
            raise ValueError(f"{kind} for {incident_id} does not fit the schema: {problems[0]}")
        if doc["incident_id"] != incident_id:
            raise ValueError(f"{kind} names incident {doc['incident_id']!r}, expected {incident_id}")
        fsio.dumps_json(doc)  # unserialisable values fail here, before any file is touched


__all__ = ["Store"]
