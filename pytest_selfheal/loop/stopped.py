"""The incidents that stopped without success, as a run compares itself with them (edge:
reads the store; none of the loop side, so a green run can take this look cheaply)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Optional

from pytest_selfheal.analysis.testfiles import changed
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.models import FAILING_OUTCOMES, Failure
from pytest_selfheal.records.redacted import TRUNCATED, is_redacted
from pytest_selfheal.records.vocab import IncidentStatus
from pytest_selfheal.store.ids import is_incident_id
from pytest_selfheal.store.reader import INBOX
from pytest_selfheal.store.root import Store

ALREADY_STOPPED = "already_stopped"
# Stopped incidents compared with a run's failures: the newest ones (ids sort by time).
STOPPED_LIMIT = 50


class Attachment(str, Enum):
    """What a run's failures held by a stopped incident do to it."""

    ALREADY_STOPPED = ALREADY_STOPPED  # code unchanged: STOP again, nothing captured
    CONTINUED = "continued"  # code changed: the incident's next iteration
    NOT_COLLECTED = "not_collected"  # a test it failed did not run: no verdict, nothing changes
    # A red stop, its test code unchanged, every test it failed passing: a plain green run,
    # said, for the incident stays stopped (a fix after a stop is no iteration of it).
    PASSED_AFTER_STOP = "passed_after_stop"


@dataclass(frozen=True)
class StoppedIncident:
    """An incident whose loop stopped without success, as its last evidence left it."""

    incident_id: str
    bucket: str  # error_inbox (plan_proposed) or an archive bucket (escalated)
    status: str
    stop_reason: str  # the recorded stop reason; "archived" when a person archived it
    iteration: int  # the last attempt number (0: stopped before any verification)
    fingerprints: frozenset[str]
    diff_hash: Optional[str]  # the working-tree diff hash at its last sighting (None: unknown)
    nodeids: frozenset[str] = frozenset()  # its selection as last verified (the capture's failures before)
    green: bool = False  # its last run passed every selected test, and it still stopped (not a success)
    # Its loop run's iterations left under its max_iterations when it stopped (None: unknown).
    remaining: Optional[int] = None
    # Its loop run's max_iterations, the capture's judging key (None: unknown).
    max_iterations: Optional[int] = None
    failing: frozenset[str] = frozenset()  # the tests it last saw fail

    @property
    def exhausted(self) -> bool:
            return self.remaining == 0


@dataclass(frozen=True)
class StickyMatch:
    """This run's failures that one stopped incident holds, and what follows."""

    incident: StoppedIncident
    failures: tuple[Failure, ...]
    attachment: Attachment
    passed: tuple[str, ...] = ()  # a green match (match_green): its tests this run passed
    code_changed: bool = False  # already stopped although the code changed: its budget is used up
    absent: tuple[str, ...] = ()  # NOT_COLLECTED: the tests it failed that this run did not run


def match_green(
    stopped: Sequence[StoppedIncident], passed: Collection[str], failing: Collection[str], diff_hash: Optional[str],
    tests_changed: Callable[[StoppedIncident], Sequence[str]], taken: Collection[str] = (),
) -> list[StickyMatch]:
    """The stopped incidents whose tests this run passed and none failed, each test going to
    the newest holding it (``taken``: already matched by failures). One that stopped red
    matches only when its test code changed (a pass then may be a weakened test), else as
    passed after the stop when every test it failed passed (no iteration of it). A match whose
    failing tests this run did not run reaches no verdict (``NOT_COLLECTED``), unless their
    file ran or was edited: a test edit."""
    ran = {n.split("::", 1)[0] for n in itertools.chain(passed, failing)}
    claimed: set[str] = set()
    matches = []
    for incident in stopped:
        mine = incident.nodeids - claimed
        claimed |= incident.nodeids
        passed_now = sorted(n for n in mine if n in passed)
        if not passed_now or incident.incident_id in taken or any(n in failing for n in incident.nodeids):
            continue
        unchanged = diff_hash is not None and diff_hash == incident.diff_hash
        edited: Sequence[str] = ()
        if incident.green:
            attachment = Attachment.ALREADY_STOPPED if unchanged or incident.exhausted else Attachment.CONTINUED
        elif edited := tests_changed(incident):
            attachment = Attachment.ALREADY_STOPPED if incident.exhausted else Attachment.CONTINUED
        else:
            attachment = Attachment.PASSED_AFTER_STOP
        absent = tuple(sorted(n for n in incident.failing if n not in passed
                              and n.split("::", 1)[0] not in ran and n.split("::", 1)[0] not in edited))
        if absent:
            attachment = Attachment.NOT_COLLECTED
        elif attachment is Attachment.PASSED_AFTER_STOP and not incident.failing <= set(passed):
            continue  # some of its failing tests deselected: nothing to say of it
        matches.append(StickyMatch(incident, (), attachment, tuple(passed_now), code_changed=not unchanged,
                                   absent=absent))
    return matches


def _candidate_ids(store: Store) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for bucket in (INBOX, IncidentStatus.ESCALATED):
        try:
            names = os.listdir(store.bucket_dir(bucket))
        except OSError:
            continue
        found += [(bucket, n) for n in names if is_incident_id(n)]
    found.sort(key=lambda pair: pair[1], reverse=True)
    return found


def stopped_incidents(store: Store, limit: int = STOPPED_LIMIT, *,
                      capture_hash: Optional[Callable[[Store, str, Incident], Optional[str]]] = None,
                      ) -> list[StoppedIncident]:
    """The newest ``limit`` incidents that stopped without success (escalated, or waiting for
    a proposed plan), newest first. Without ``capture_hash`` (the green run's look) only those
    with an attempt, their ``incident.json`` not read."""
    out: list[StoppedIncident] = []
    for bucket, incident_id in _candidate_ids(store):
        if len(out) >= limit:
            break
        try:
            status = store.read_status(incident_id)
            if status not in (IncidentStatus.ESCALATED, IncidentStatus.PLAN_PROPOSED):
                continue
            attempts = store.read_attempts(incident_id)
            if capture_hash is None and not attempts:
                continue
            incident = None if capture_hash is None else store.read_incident(incident_id)
            run_result = store.read_run_result(incident_id)
        except SelfhealError:
            continue
        green = False
        if attempts:
            last = attempts[-1]
            fingerprints = frozenset(f.fingerprint for f in last.failures if f.fingerprint)
            diff_hash = last.diff_hash
            nodeids = frozenset(last.outcomes)
            green = bool(last.verification_passed) and bool(nodeids)
            failing = frozenset(n for n, outcome in last.outcomes.items() if outcome in FAILING_OUTCOMES)
        elif incident is not None and capture_hash is not None:
            fingerprints = frozenset(f.fingerprint for f in incident.failures if f.fingerprint)
            diff_hash = capture_hash(store, incident_id, incident)
            nodeids = frozenset(f.nodeid for f in incident.failures if f.nodeid)
            failing = nodeids
        reason = (run_result.stop_reason if run_result is not None else None) or "archived"
        point = run_result.decision_point if run_result is not None else None
        context = point.context if point is not None else None
        if fingerprints or green:
            out.append(StoppedIncident(incident_id, bucket, status, reason, attempts[-1].iteration if attempts else 0,
                                       fingerprints, diff_hash, nodeids, green,
                                       context.remaining if context is not None else None,
                                       context.iteration + context.remaining if context is not None else None,
                                       failing))
    return out


def tests_changed(store: Store, rootdir: Path) -> Callable[[StoppedIncident], Sequence[str]]:
    """A stopped incident's test files (its capture's digests) that changed since."""
    def check(incident: StoppedIncident) -> Sequence[str]:
        try:
            return changed(rootdir, dict(store.read_incident(incident.incident_id).test_digests))
        except SelfhealError:
            return ()
    return check


def as_known(stopped: Sequence[StoppedIncident], passed: Collection[str],
             redact: Callable[[str], str]) -> Collection[str]:
    """``passed`` as the incidents know their tests: redacted only when one holds a redacted or cut id."""
    if any(is_redacted(n) or TRUNCATED in n for s in stopped for n in s.nodeids):
        return {redact(n) for n in passed}
    return passed


def holds_passed(store: Store, rootdir: Path, passed: Collection[str], redact: Callable[[str], str]) -> bool:
    """A green run's cheap look: may a stopped incident hold tests it passed?"""
    stopped = stopped_incidents(store)
    return bool(stopped) and bool(match_green(stopped, as_known(stopped, passed, redact), (), None,
                                              tests_changed(store, rootdir)))
