"""The loop state ``selfheal replay`` compares (docs/loop.md "Replay"), built in code; values of
the event log stay as read (``Any``): a hand-edited log may hold anything. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional

from pytest_selfheal.records.jsondoc import REQUIRED, JsonRecord, every_key


@dataclass(frozen=True)
class ReplayIteration(JsonRecord):
    """One iteration of the compared state, from its ``verification_finished`` data."""

    # Every key written (REQUIRED), whatever its value.
    iteration: Annotated[Any, REQUIRED] = None  # an int, as recorded
    verification_passed: Annotated[bool, REQUIRED] = False
    fingerprints: Annotated[tuple[str, ...], REQUIRED] = ()
    result: Annotated[Any, REQUIRED] = None  # continue | stop, as recorded
    stop_reason: Annotated[Any, REQUIRED] = None


@dataclass(frozen=True)
class ReplayStop(JsonRecord):
    """A ``loop_stopped`` event (or ``run_result.json``): the stop and its final status."""

    iteration: Annotated[Any, REQUIRED] = None
    stop_reason: Annotated[Any, REQUIRED] = None
    final_status: Annotated[Any, REQUIRED] = None


@dataclass(frozen=True)
class LoopState(JsonRecord):
    """The loop state rebuilt from the events or from the files; ``loop_stops`` (every
    ``loop_stopped`` of the log) only in the replay's, and not compared."""

    incident_id: Optional[str] = None
    status: Optional[str] = None
    bucket: str = ""
    iterations: tuple[ReplayIteration, ...] = ()
    stop_reason: Optional[str] = None  # the stop in force
    final_status: Optional[str] = None
    archived_to: Optional[str] = None
    loop_stops: tuple[ReplayStop, ...] = ()


# The keys ``selfheal replay`` compares, in the order the state is written.
COMPARED_KEYS = every_key(LoopState, "loop_stops")
