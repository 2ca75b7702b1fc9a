"""A stop that sticks: a run whose failures an incident that already stopped holds (edge).

A verdict is about a failure set and a code state, not about a run: failures an incident
that stopped without success holds are no new incident with a fresh budget. With the code
unchanged since that stop the verdict is ``STOP already_stopped``; with it changed, the run
is that incident's next iteration. A green run can be the same verdict: an incident that
stopped green (``tests_edited``), or red with its test code changed since, stays attached to
its tests (:func:`match_green`, in loop/stopped.py with the green run's cheap look).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Sequence
from typing import Optional

from pytest_selfheal.loop.attempts import reopen_incident
from pytest_selfheal.loop.messages import iteration_prefix
from pytest_selfheal.loop.resume import capture_hash_on_disk
from pytest_selfheal.loop.stopped import (
    ALREADY_STOPPED,
    STOPPED_LIMIT,
    Attachment,
    StickyMatch,
    StoppedIncident,
    as_known,
    match_green,
    tests_changed,
)
from pytest_selfheal.loop.stopped import stopped_incidents as _stopped_incidents
from pytest_selfheal.records.models import Failure
from pytest_selfheal.records.vocab import IncidentStatus, Line, Tone
from pytest_selfheal.store import events as ev
from pytest_selfheal.store.reader import INBOX
from pytest_selfheal.store.root import Store


def stopped_incidents(store: Store, limit: int = STOPPED_LIMIT) -> list[StoppedIncident]:
    """The newest ``limit`` incidents that stopped without success, newest first, with the
    capture's diff hash of one stopped before any attempt (loop/stopped.py)."""
    return _stopped_incidents(store, limit, capture_hash=capture_hash_on_disk)


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
    """The parseable status line of an already-stopped run (:func:`parse_already_stopped`
    reads it back); ``max_iterations``: today's, when the stopped run did not record its own."""
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
    said = [f"{len(gone)} not collected by this run ({_some(gone)})"] if gone else []
    said += [f"{len(match.absent) - len(gone)} skipped by this run "
             f"({_some([n for n in match.absent if n in skipped])})"] if len(gone) < len(match.absent) else []
    how = f"pytest --selfheal {shlex.join(options)} runs them" if options else "a run that collects them judges it"
    return Line(f"selfheal: incident {stopped.incident_id} stopped ({stopped.stop_reason}); of the tests it failed, "
                f"{' and '.join(said)}: {NO_VERDICT} ({how})", Tone.WARN)


PASSED_AFTER_STOP = "pass in this run, which is no iteration of it"


def passed_after_stop_line(match: StickyMatch) -> str:
    """A run that passed every test a stopped incident failed, its test code unchanged: a
    plain green run, and the incident stays as its stop left it."""
    stopped = match.incident
    failed = sorted(stopped.failing)
    return Line(f"selfheal: incident {stopped.incident_id} stopped ({stopped.stop_reason}); the {len(failed)} "
                f"test(s) it failed ({_some(failed)}) {PASSED_AFTER_STOP}: the run passes and the incident stays "
                f"{stopped.status}", Tone.PLAIN)


def _some(nodeids: Sequence[str]) -> str:
    return ", ".join(nodeids[:3]) + (f" and {len(nodeids) - 3} more" if len(nodeids) > 3 else "")


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


__all__ = [
    "ALREADY_STOPPED", "NO_VERDICT", "Attachment", "StickyMatch", "StoppedIncident", "already_stopped_line", "as_known",
    "continue_stopped", "match_green", "match_stopped", "next_step", "not_collected_line", "parse_already_stopped",
    "PASSED_AFTER_STOP", "passed_after_stop_line", "record_attached",
    "stopped_incidents", "tests_changed",
]
