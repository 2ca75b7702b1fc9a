"""A stop that sticks: a run whose failures an incident that already stopped holds (edge).

A verdict is about a failure set and a code state, not about a run. When the failures a
``pytest --selfheal`` run would capture are held (by fingerprint) by an incident that
stopped without success, they are not a new incident with a fresh budget:

- with the code under test unchanged since that stop (the same known diff hash), the
  verdict is ``STOP already_stopped``, naming the earlier incident and why it stopped;
  nothing new is captured, and the earlier incident gets a ``capture_attached`` event;
- with the code changed (or no git to tell), the run continues that incident — reopened
  in place, its loop run and budget going on — as its next iteration.

A run that *passes* a stopped incident's tests has no fingerprint to match, yet may be the
same verdict: an incident that stopped on a green run that was not a success (a test edited:
``tests_edited``; any later stop of that kind) stays attached to its selection's node ids.
Its tests passing again with the code unchanged is ``STOP already_stopped`` again; with the
code changed (a commit too), the run is its next iteration, judged by every rule (a test
still weakened stops ``tests_edited`` again). The same holds for an incident that stopped
red whose test code changed since its capture: a pass then is judged, never a plain green.

:func:`match_stopped` and :func:`match_green` are the pure rules; :func:`stopped_incidents`
reads the candidates.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Sequence
from enum import Enum
from pathlib import Path
from typing import Optional

from pytest_selfheal.analysis.testfiles import changed
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.records.frozen import Frozen, dataclass
from pytest_selfheal.records.models import Failure
from pytest_selfheal.records.redacted import TRUNCATED, is_redacted
from pytest_selfheal.records.vocab import IncidentStatus, Line, Tone
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


@dataclass(frozen=True, eq=False, repr=False)
class StoppedIncident(Frozen):
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


@dataclass(frozen=True, eq=False, repr=False)
class StickyMatch(Frozen):
    """This run's failures that one stopped incident holds, and what follows."""

    incident: StoppedIncident
    failures: tuple[Failure, ...]
    attachment: Attachment
    passed: tuple[str, ...] = ()  # a green match (match_green): its tests this run passed


def match_stopped(
    stopped: Sequence[StoppedIncident], failures: Sequence[Failure], diff_hash: Optional[str]
) -> tuple[list[StickyMatch], list[Failure]]:
    """``(matches, failures no stopped incident holds)`` (pure).

    Each failure goes to the newest stopped incident (``stopped`` is newest first) whose
    last failure set holds its fingerprint. A match is :attr:`Attachment.ALREADY_STOPPED`
    when the code is known to be the same as at that incident's last sighting (equal,
    known diff hashes) or the incident waits for its proposed plan (a replan is a person's
    step); otherwise it is :attr:`Attachment.CONTINUED`.
    """
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
        attachment = Attachment.ALREADY_STOPPED if unchanged or incident.status == IncidentStatus.PLAN_PROPOSED else Attachment.CONTINUED
        matches.append(StickyMatch(incident, tuple(held[incident.incident_id]), attachment))
    return matches, rest


def match_green(
    stopped: Sequence[StoppedIncident], passed: Collection[str], failing: Collection[str], diff_hash: Optional[str],
    tests_changed: Callable[[StoppedIncident], bool], taken: Collection[str] = (),
) -> list[StickyMatch]:
    """The stopped incidents whose tests this run passed and none failed (pure but for
    ``tests_changed``, asked only of a red stop: did its test code change since the capture?).

    Each test goes to the newest incident holding it; ``taken``: incidents already matched
    by their failures. An incident that stopped green is :attr:`Attachment.ALREADY_STOPPED`
    with the code known to be the same, else :attr:`Attachment.CONTINUED`; one that stopped
    red is :attr:`Attachment.CONTINUED` only when its test code changed (a pass then may be
    a weakened test), else not matched (a fix after the stop is a plain green run).
    """
    claimed: set[str] = set()
    matches = []
    for incident in stopped:
        mine = incident.nodeids - claimed
        claimed |= incident.nodeids
        ran = sorted(n for n in mine if n in passed)
        if not ran or incident.incident_id in taken or any(n in failing for n in incident.nodeids):
            continue
        unchanged = diff_hash is not None and diff_hash == incident.diff_hash
        if incident.green:
            attachment = Attachment.ALREADY_STOPPED if unchanged else Attachment.CONTINUED
        elif tests_changed(incident):
            attachment = Attachment.CONTINUED
        else:
            continue
        matches.append(StickyMatch(incident, (), attachment, tuple(ran)))
    return matches


def _candidate_ids(store: Store) -> list[tuple[str, str]]:
    """``(bucket, id)`` of the inbox and escalated-archive folders, newest first."""
    found: list[tuple[str, str]] = []
    for bucket in (INBOX, IncidentStatus.ESCALATED):
        try:
            names = os.listdir(store.bucket_dir(bucket))
        except OSError:
            continue
        found += [(bucket, n) for n in names if is_incident_id(n)]
    found.sort(key=lambda pair: pair[1], reverse=True)
    return found


def stopped_incidents(store: Store, limit: int = STOPPED_LIMIT, *, light: bool = False) -> list[StoppedIncident]:
    """The newest ``limit`` incidents that stopped without success, newest first: escalated
    (archived) ones and inbox ones waiting for a proposed plan. An unreadable one is skipped
    (``selfheal status`` shows it). ``light``: the look of a green run (:func:`holds_passed`):
    only incidents with an attempt, their ``incident.json`` not read (no capture hash)."""
    out: list[StoppedIncident] = []
    for bucket, incident_id in _candidate_ids(store):
        if len(out) >= limit:
            break
        try:
            status = store.read_status(incident_id)
            if status not in (IncidentStatus.ESCALATED, IncidentStatus.PLAN_PROPOSED):
                continue
            attempts = store.read_attempts(incident_id)
            if light and not attempts:
                continue
            incident = None if light else store.read_incident(incident_id)
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
        elif incident is not None:
            from pytest_selfheal.loop.resume import capture_hash_on_disk  # the loop side: only a red run's look

            fingerprints = frozenset(f.fingerprint for f in incident.failures if f.fingerprint)
            diff_hash = capture_hash_on_disk(store, incident_id, incident)
            nodeids = frozenset(f.nodeid for f in incident.failures if f.nodeid)
        reason = (run_result.stop_reason if run_result is not None else None) or "archived"
        if fingerprints or green:
            out.append(StoppedIncident(incident_id, bucket, status, reason, attempts[-1].iteration if attempts else 0,
                                       fingerprints, diff_hash, nodeids, green))
    return out


def tests_changed(store: Store, rootdir: Path) -> Callable[[StoppedIncident], bool]:
    """Whether a stopped incident's test code (its capture's digests) changed since."""
    def check(incident: StoppedIncident) -> bool:
        try:
            return bool(changed(rootdir, dict(store.read_incident(incident.incident_id).test_digests)))
        except SelfhealError:
            return False
    return check


def as_known(stopped: Sequence[StoppedIncident], passed: Collection[str],
             redact: Callable[[str], str]) -> Collection[str]:
    """``passed`` as the incidents know their tests: redacted (``redact``) only when one of
    them holds a redacted or cut id (a secret in a parametrize id; docs/redaction.md)."""
    if any(is_redacted(n) or TRUNCATED in n for s in stopped for n in s.nodeids):
        return {redact(n) for n in passed}
    return passed


def holds_passed(store: Store, rootdir: Path, passed: Collection[str], redact: Callable[[str], str]) -> bool:
    """A green run's cheap look: may a stopped incident hold tests it passed? (Then the run
    goes on to the session end's whole look, recorder/finish.py.)"""
    stopped = stopped_incidents(store, light=True)
    return bool(stopped) and bool(match_green(stopped, as_known(stopped, passed, redact), (), None,
                                              tests_changed(store, rootdir)))


def already_stopped_line(match: StickyMatch, max_iterations: int) -> str:
    """The parseable status line of an already-stopped run (the grammar of the iteration
    line, docs/loop.md "Status line"); :func:`parse_already_stopped` reads it back."""
    from pytest_selfheal.loop.messages import iteration_prefix  # the loop side: only once a run matched

    stopped = match.incident
    held = f"{len(match.failures)} failure(s)" if match.failures else f"{len(match.passed)} passing test(s)"
    return Line(f"{iteration_prefix(stopped.incident_id, stopped.iteration, max_iterations)}: "
                f"{held} already stopped ({stopped.stop_reason}), code unchanged "
                f"-> STOP {ALREADY_STOPPED}", Tone.BAD)



def next_step(match: StickyMatch) -> str:
    """What to do about an already-stopped failure set: a command that works as printed."""
    stopped = match.incident
    if stopped.bucket == INBOX:
        return (f"selfheal: incident {stopped.incident_id} waits for its proposed plan: "
                f"selfheal loop {stopped.incident_id} (or change the code under test)")
    return (f"selfheal: incident {stopped.incident_id} stays stopped until the code under test changes, or: "
            f"selfheal reopen {stopped.incident_id}")


_LINE = re.compile(r"^selfheal: incident (\S+) iteration (\d+) of \d+: .* already stopped \((\w+)\), .* -> STOP "
                   + ALREADY_STOPPED + r"$")


def parse_already_stopped(lines: Sequence[str]) -> Optional[tuple[str, int, str]]:
    """``(incident id, its last iteration, why it stopped)`` of the first already-stopped
    line among ``lines`` (the plugin's terminal section), or None."""
    for line in lines:
        found = _LINE.match(line.strip())
        if found:
            return found.group(1), int(found.group(2)), found.group(3)
    return None


def continue_stopped(store: Store, match: StickyMatch) -> None:
    """Bring a stopped incident whose code changed back to the inbox with its loop run going
    on (no fresh budget: ``resumed_after_iteration``); an inbox one is left as it is."""
    from pytest_selfheal.loop.attempts import reopen_incident  # the loop side: only once a run matched

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


__all__ = [
    "ALREADY_STOPPED", "Attachment", "as_known", "StickyMatch", "StoppedIncident", "already_stopped_line", "continue_stopped",
    "holds_passed", "match_green", "match_stopped",
    "next_step", "parse_already_stopped", "record_attached", "stopped_incidents", "tests_changed",
]
