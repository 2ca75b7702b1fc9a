"""The on-disk incident store under the reports root (docs/store.md).

```
error_inbox/<id>/            incident.json status.txt log_tail.txt audit_tail.jsonl context.json
error_plans/<id>/            plan.json plan.md
error_runs/<id>/             attempt_01.json attempt_02.json … run_result.json (+ other run files)
error_archive/resolved/<id>/ error_archive/escalated/<id>/   (the moved inbox folder)
.lock                        serialises every mutating operation of concurrent processes
```

Ids are validated before touching a path; every file is written atomically; ``status.txt``
is the authoritative status and changes only through the table in ``states.py``; an incident
appears complete or not at all; a move of an incident folder is one rename, so there are
never two copies. Readers never take the lock (``StoreReader``); ``StoreWriter`` writes;
:class:`Store` adds the moves of whole incident folders (archive, reopen, prune).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Optional

from pytest_selfheal.errors import RefusedError, UsageError
from pytest_selfheal.names import ARCHIVE_DIR, INBOX_DIR
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.vocab import IncidentStatus
from pytest_selfheal.redact import Redactor
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import is_incident_id
from pytest_selfheal.store.reader import INBOX, STATUS_TXT
from pytest_selfheal.store.states import ARCHIVE_BUCKETS, check_transition
from pytest_selfheal.store.writer import StoreWriter

# A pruned incident's archive folder while its files are being removed (docs/store.md).
PRUNING_PREFIX = ".pruning_"


class Store(StoreWriter):
    """The incident store under one reports root (``.selfheal/`` by default)."""

    # ------------------------------------------------------------------ archive

    def archive(self, incident_id: str, bucket: str, *, held: Optional[tuple[str, Incident]] = None) -> Path:
        """Move ``error_inbox/<id>/`` to ``error_archive/<bucket>/<id>/``: the status first
        (through the table), then ``incident_archived``, then one rename. An incident whose
        status already is ``bucket`` (an archive killed before its rename) is moved, adding
        only the missing events. ``held``: ``(status.txt, record)`` as the caller holds them."""
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
                self._write_status(folder, incident, current, bucket, ev.pending(ev.STATUS_CHANGED, {"reason": "archive"}))
                self._append_event_at(folder, incident_id, ev.pending(ev.INCIDENT_ARCHIVED, {"bucket": bucket, "archived_to": archived_to}))
            else:
                # Resuming an interrupted archive: add what the crash may have lost.
                fsio.ensure_dir(target_dir)
                events = ev.since_last_reopen(self._read_events_at(folder)[0])
                if not any(e.event == ev.STATUS_CHANGED and e.get("to") == bucket for e in events):
                    self._append_event_at(folder, incident_id, ev.pending(ev.STATUS_CHANGED, {"from": None, "to": bucket, "reason": "archive", "recovered": True}))
                if not any(e.event == ev.INCIDENT_ARCHIVED for e in events):
                    self._append_event_at(folder, incident_id, ev.pending(ev.INCIDENT_ARCHIVED, {"bucket": bucket, "archived_to": archived_to}))
            fsio.move(folder, destination)
            return destination

    # ------------------------------------------------------------------ reopen

    def reopen(self, incident_id: str, *, continue_run: bool = False) -> tuple[str, str, int]:
        """Move an archived incident back to ``error_inbox/`` as ``planned``, its next loop run
        starting after its last attempt (``reopened_after_iteration``); the files change in the
        archive folder, then one rename. A reopen killed before its rename is completed.
        Returns ``(bucket it came from, status it had, the last attempt)``.

        ``continue_run``: a run saw the stopped failures again with the code changed:
        ``resumed_after_iteration`` instead, so the old stop is history but the loop run (its
        budget and counters) goes on.
        """
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
                incident = replace(before, status=IncidentStatus.PLANNED, updated_at=ev.format_ts(self._now()))
                if continue_run:
                    incident = replace(incident, resumed_after_iteration=after)
                else:
                    incident = replace(incident, reopened_after_iteration=after)
                self._write_incident(folder, incident, before)
                fsio.atomic_write_text(folder / STATUS_TXT, IncidentStatus.PLANNED.value + "\n")
                self._append_event_at(folder, incident_id, ev.pending(ev.STATUS_CHANGED,
                                      {"from": current, "to": IncidentStatus.PLANNED, "reason": "code_changed" if continue_run else "reopen"}))
                self._append_event_at(folder, incident_id, ev.pending(ev.INCIDENT_REOPENED, data))
            else:
                # Resuming an interrupted reopen: add what the crash may have lost.
                events = self._read_events_at(folder)[0]
                tail = events[max((i for i, e in enumerate(events) if e.event == ev.INCIDENT_ARCHIVED), default=-1) + 1:]
                current = next((str(e.get("from")) for e in reversed(tail) if e.event == ev.STATUS_CHANGED), bucket)
                if not any(e.event == ev.INCIDENT_REOPENED for e in tail):
                    if not any(e.event == ev.STATUS_CHANGED for e in tail):
                        self._append_event_at(folder, incident_id, ev.pending(ev.STATUS_CHANGED,
                                              {"from": bucket, "to": IncidentStatus.PLANNED, "reason": "reopen", "recovered": True}))
                    self._append_event_at(folder, incident_id, ev.pending(ev.INCIDENT_REOPENED, dict(data, recovered=True)))
            fsio.move(folder, fsio.ensure_dir(self.inbox_dir) / incident_id)
            return bucket, current, after

    # ------------------------------------------------------------------ prune

    def prune(self, incident_id: str) -> None:
        """Delete an archived incident with its plan and run folders. Its folder is first
        renamed (the incident disappears in one step); a prune killed half-way is completed
        by the next one. Symbolic links are removed, never followed."""
        with self.locked(incident_id) as (incident_id, bucket, folder):
            if bucket == INBOX:
                raise RefusedError(f"incident {incident_id} is open ({INBOX_DIR}); archive it before pruning")
            # Renaming a linked incident folder moves the link, never what it points at.
            fsio.move(folder, self.confined(self.archive_root / f"{PRUNING_PREFIX}{incident_id}"))
            self._finish_prune(incident_id)

    def finish_prunes(self) -> list[str]:
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


def project_store(project_root: Path, reports_dir: str, redactor: Redactor) -> Store:
    """The store of ``reports_dir``; ``RefusedError`` when it leads out of the project."""
    fsio.project_path(project_root, reports_dir, "reports_dir")
    return Store(Path(project_root, reports_dir), redactor=redactor)
