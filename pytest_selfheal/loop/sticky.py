"""A stop that sticks: a run whose failures an incident that already stopped holds (edge).

A verdict is about a failure set and a code state, not about a run: failures an incident
that stopped without success holds are no new incident with a fresh budget. With the code
unchanged since that stop the verdict is ``STOP already_stopped``; with it changed, the run
is that incident's next iteration. A green run can be the same verdict: an incident that
stopped green (``tests_edited``), or red with its test code changed since, stays attached to
its tests (:func:`match_green`).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Optional

from pytest_selfheal.analysis.testfiles import changed
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.loop.attempts import reopen_incident
from pytest_selfheal.loop.messages import iteration_prefix
from pytest_selfheal.loop.state import capture_hash_on_disk
from pytest_selfheal.records.models import FAILING_OUTCOMES, Failure
from pytest_selfheal.records.redacted import TRUNCATED, is_redacted
from pytest_selfheal.records.vocab import IncidentStatus, Line, Tone, first_few
from pytest_selfheal.store import events as ev
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


def stopped_incidents(store: Store, limit: int = STOPPED_LIMIT, *, unattempted: bool = True) -> list[StoppedIncident]:
    """The newest ``limit`` incidents that stopped without success (escalated, or waiting for
    a proposed plan), newest first. ``unattempted`` False (the green run's look): only those
    with an attempt, their ``incident.json`` not read."""
    found: list[tuple[str, str]] = []
    for bucket in (INBOX, IncidentStatus.ESCALATED):
        try:
            found += [(n, bucket) for n in os.listdir(store.bucket_dir(bucket)) if is_incident_id(n)]
        except OSError:
            continue
    out: list[StoppedIncident] = []
    for incident_id, bucket in sorted(found, reverse=True):
        if len(out) >= limit:
            break
        try:
            status = store.read_status(incident_id)
            if status not in (IncidentStatus.ESCALATED, IncidentStatus.PLAN_PROPOSED):
                continue
            attempts = store.read_attempts(incident_id)
            if not attempts and not unattempted:
                continue
            incident = None if attempts else store.read_incident(incident_id)
            run_result = store.read_run_result(incident_id)
        except SelfhealError:
            continue
        if incident is None:
            last = attempts[-1]
            fingerprints = frozenset(f.fingerprint for f in last.failures if f.fingerprint)
            diff_hash = last.diff_hash
            nodeids = frozenset(last.outcomes)
            green = bool(last.verification_passed) and bool(nodeids)
            failing = frozenset(n for n, outcome in last.outcomes.items() if outcome in FAILING_OUTCOMES)
        else:
            fingerprints = frozenset(f.fingerprint for f in incident.failures if f.fingerprint)
            diff_hash = capture_hash_on_disk(store, incident_id, incident)
            failing = nodeids = frozenset(f.nodeid for f in incident.failures if f.nodeid)
            green = False
        point = run_result.decision_point if run_result is not None else None
        context = point.context if point is not None else None
        if fingerprints or green:
            out.append(StoppedIncident(
                incident_id, bucket, status, (run_result.stop_reason if run_result is not None else None) or "archived",
                attempts[-1].iteration if attempts else 0, fingerprints, diff_hash, nodeids, green,
                context.remaining if context is not None else None,
                context.iteration + context.remaining if context is not None else None, failing))
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
    stopped = stopped_incidents(store, unattempted=False)
    return bool(stopped) and bool(match_green(stopped, as_known(stopped, passed, redact), (), None,
                                              tests_changed(store, rootdir)))


def match_stopped(
    stopped: Sequence[StoppedIncident], failures: Sequence[Failure], diff_hash: Optional[str]
) -> tuple[list[StickyMatch], list[Failure]]:
    """``(matches, failures no stopped incident holds)`` (pure). Each failure goes to the
    newest incident holding its fingerprint; it stays stopped with the code known to be the
    same, or while the incident waits for its proposed plan (a replan is a person's step)."""
    held: dict[str, list[Failure]] = {}
    rest: list[Failure] = []
    for failure in failures:
        owner = next((s for s in stopped if failure.fingerprint in s.fingerprints), None)
        if owner is None:
            rest.append(failure)
        else:
            held.setdefault(owner.incident_id, []).append(failure)
    matches = []
    for incident in stopped:
        if incident.incident_id not in held:
            continue
        unchanged = diff_hash is not None and diff_hash == incident.diff_hash
        # A loop run that used its whole budget has no iteration left to continue with: a
        # reopen (a person's act) gives a fresh one.
        stays = unchanged or incident.status == IncidentStatus.PLAN_PROPOSED or incident.exhausted
        attachment = Attachment.ALREADY_STOPPED if stays else Attachment.CONTINUED
        matches.append(StickyMatch(incident, tuple(held[incident.incident_id]), attachment, code_changed=not unchanged))
    return matches, rest


def already_stopped_line(match: StickyMatch, max_iterations: int) -> str:
    """The parseable line of an already-stopped run (``max_iterations``: when the run recorded none)."""
    stopped = match.incident
    if stopped.max_iterations is not None:
        max_iterations = stopped.max_iterations
    held = f"{len(match.failures)} failure(s)" if match.failures else f"{len(match.passed)} passing test(s)"
    # Each words only when true: the code changed, yet the stop stays for another reason.
    why = ("code unchanged" if not match.code_changed else "no iteration left" if stopped.exhausted
           else "its proposed plan waits")
    return Line(f"{iteration_prefix(stopped.incident_id, stopped.iteration, max_iterations)}: "
                f"{held} already stopped ({stopped.stop_reason}), {why} "
                f"-> STOP {ALREADY_STOPPED}", Tone.BAD)


NO_VERDICT = "this run reaches no verdict on it"


def not_collected_line(match: StickyMatch, skipped: Collection[str], options: Optional[Sequence[str]]) -> str:
    """A run that did not run the tests a stopped incident failed: no verdict, and why."""
    stopped = match.incident
    gone = [n for n in match.absent if n not in skipped]
    said = [f"{len(gone)} not collected by this run ({first_few(gone, 3)})"] if gone else []
    said += [f"{len(match.absent) - len(gone)} skipped by this run "
             f"({first_few([n for n in match.absent if n in skipped], 3)})"] if len(gone) < len(match.absent) else []
    how = f"pytest --selfheal {shlex.join(options)} runs them" if options else "a run that collects them judges it"
    return Line(f"selfheal: incident {stopped.incident_id} stopped ({stopped.stop_reason}); of the tests it failed, "
                f"{' and '.join(said)}: {NO_VERDICT} ({how})", Tone.WARN)


PASSED_AFTER_STOP = "pass in this run, which is no iteration of it"


def passed_after_stop_line(match: StickyMatch) -> str:
    """A run passing every test a stopped incident failed, its test code unchanged: it stays as it stopped."""
    stopped = match.incident
    failed = sorted(stopped.failing)
    loop = f"selfheal loop {stopped.incident_id}" + ("" if stopped.bucket == INBOX else " --reopen")
    return Line(f"selfheal: incident {stopped.incident_id} stopped ({stopped.stop_reason}); the {len(failed)} "
                f"test(s) it failed ({first_few(failed, 3)}) {PASSED_AFTER_STOP}: the run passes and the incident stays "
                f"{stopped.status} until `{loop}` judges the change", Tone.PLAIN)


def next_step(match: StickyMatch) -> str:
    """What to do about an already-stopped failure set: a command that works as printed."""
    stopped = match.incident
    if stopped.bucket == INBOX:
        return (f"selfheal: incident {stopped.incident_id} waits for its proposed plan: "
                f"selfheal loop {stopped.incident_id} (or change the code under test)")
    if match.code_changed and stopped.exhausted:
        return (f"selfheal: incident {stopped.incident_id} used its whole iteration budget: the code changed, but "
                f"only a reopen gives it new iterations: selfheal reopen {stopped.incident_id}")
    return (f"selfheal: incident {stopped.incident_id} stays stopped until the code under test changes, or: "
            f"selfheal reopen {stopped.incident_id}")


_LINE = re.compile(r"^selfheal: incident (\S+) iteration (\d+) of \d+: .* already stopped \((\w+)\), .* -> STOP "
                   + ALREADY_STOPPED + r"$")


def parse_already_stopped(lines: Sequence[str]) -> Optional[tuple[str, int, str]]:
    """``(incident id, its last iteration, why it stopped)`` of the first already-stopped line, or None."""
    for line in lines:
        found = _LINE.match(line.strip())
        if found:
            return found.group(1), int(found.group(2)), found.group(3)
    return None


def continue_stopped(store: Store, match: StickyMatch) -> None:
    """Bring a stopped incident whose code changed back to the inbox, its loop run going on."""
    if match.incident.bucket != INBOX:
        reopen_incident(store, match.incident.incident_id, continue_run=True)


def record_attached(store: Store, match: StickyMatch, diff_hash: Optional[str]) -> None:
    """The ``capture_attached`` event on the stopped incident: a run saw its failures again."""
    store.append_event(
        match.incident.incident_id, ev.CAPTURE_ATTACHED, attachment=match.attachment.value,
        failures=len(match.failures),
        nodeids=[f.nodeid or f.test for f in match.failures[:50]] or list(match.passed[:50]),
        diff_hash=diff_hash,
    )
