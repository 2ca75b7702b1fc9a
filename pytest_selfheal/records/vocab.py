"""The closed vocabularies of the records, each declared once as a string-valued ``Enum``: a
member *is* its string, in JSON and in comparisons with a value read back. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Optional

from pytest_selfheal.errors import RefusedError


class TextEnum(str, Enum):
    """A string-valued enum whose ``str()``/``format()`` is its value on Python 3.10 to 3.13."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class FinalStatus(TextEnum):
    """How a run ended: the loop's own three, then ``selfheal ci``'s without a loop."""

    RESOLVED = "resolved"
    ESCALATED = "escalated"
    REPLAN_REQUESTED = "replan_requested"
    PASSED = "passed"  # pytest passed: nothing failed, nothing to loop
    FAILED = "failed"  # tests failed but no incident was captured
    ERROR = "error"  # pytest could not run the tests (usage error, internal error, no tests)
    # The loop resolved the failure with a repair provider's patch: the fix is proposed, the
    # code that was checked out (and is tested by the CI job) still fails.
    FIX_PROPOSED = "fix_proposed"


class EvidenceKind(TextEnum):
    """Why failures were grouped, or why a function is a suspect: the most direct first
    (plan/groups.py, plan/suspects.py)."""

    FRAME = "frame"  # the innermost project frame of a failure's traceback: where it raised
    STACK = "stack"  # a project frame the traceback passed through on its way there
    CALLS = "calls"  # a function the failing test calls
    CLASS = "class"  # a method of a class (or of its base) the failing test uses, seen failing elsewhere
    SPECTRUM = "spectrum"  # run by the failing tests more than by the passing ones (--selfheal-spectrum)
    FINGERPRINT = "fingerprint"  # no evidence: failures with the same type and normalised message (groups only)


# The kinds a suspect (a function) can have: all but the fingerprint.
SUSPECT_EVIDENCE: tuple[EvidenceKind, ...] = tuple(k for k in EvidenceKind if k is not EvidenceKind.FINGERPRINT)


class IncidentStatus(TextEnum):
    """``status.txt`` of an incident (:data:`TRANSITIONS` holds the moves); the terminal two are final statuses."""

    NEW = "new"
    PLANNED = "planned"
    RUNNING = "running"
    RESOLVED = FinalStatus.RESOLVED.value
    ESCALATED = FinalStatus.ESCALATED.value
    PLAN_PROPOSED = "plan_proposed"


STATUSES: tuple[IncidentStatus, ...] = tuple(IncidentStatus)
# Terminal statuses are also the archive buckets: error_archive/<status>/<incident_id>/.
TERMINAL: tuple[IncidentStatus, ...] = (IncidentStatus.RESOLVED, IncidentStatus.ESCALATED)
ARCHIVE_BUCKETS: tuple[IncidentStatus, ...] = TERMINAL

# Every allowed move of an incident's status (docs/store.md); anything else, a move to the
# same status included, is refused.
TRANSITIONS: dict[str, frozenset[IncidentStatus]] = {
    # A plan is generated; or a human gives up before planning (archive --as escalated).
    IncidentStatus.NEW: frozenset({IncidentStatus.PLANNED, IncidentStatus.ESCALATED}),
    # The loop starts; or a human gives up before any run.
    IncidentStatus.PLANNED: frozenset({IncidentStatus.RUNNING, IncidentStatus.ESCALATED}),
    # Only a run that verified can resolve; it may also escalate or request a replan.
    IncidentStatus.RUNNING: frozenset({IncidentStatus.RESOLVED, IncidentStatus.ESCALATED, IncidentStatus.PLAN_PROPOSED}),
    # The regenerated plan is written; or a human gives up instead of replanning.
    IncidentStatus.PLAN_PROPOSED: frozenset({IncidentStatus.PLANNED, IncidentStatus.ESCALATED}),
    IncidentStatus.RESOLVED: frozenset(),
    IncidentStatus.ESCALATED: frozenset(),
}


def allowed_targets(status: str) -> tuple[str, ...]:
    """Statuses reachable from ``status`` in one move, in ``STATUSES`` order (``ValueError``: an unknown status)."""
    if status not in TRANSITIONS:
        raise ValueError(f"unknown incident status {status!r} (expected one of {', '.join(STATUSES)})")
    return tuple(s for s in STATUSES if s in TRANSITIONS[status])


def can_transition(current: str, new: str) -> bool:
    allowed_targets(new)
    return new in allowed_targets(current)


def check_transition(incident_id: str, current: str, new: str) -> None:
    """Raise a one-line ``RefusedError`` unless ``current -> new`` is allowed."""
    if not can_transition(current, new):
        allowed = ", ".join(allowed_targets(current)) or "none, it is final"
        raise RefusedError(f"cannot move incident {incident_id} from {current} to {new} (allowed from {current}: {allowed})")


class StopReason(TextEnum):
    """Why the loop stopped (loop/policy.py decides; docs/loop.md lists them)."""

    SUCCESS = "success"
    # What decides what runs and how a result is judged changed since the capture (the seal).
    HARNESS_CHANGED = "harness_changed"
    TESTS_EDITED = "tests_edited"  # the selection passes, but only with test files edited: a person looks
    # The selection passes, but the capture counted failures it could not keep (its cap): never verified.
    UNVERIFIED_FAILURES = "unverified_failures"
    MAX_ITERATIONS = "max_iterations"
    REPEATED_FINGERPRINT = "repeated_fingerprint"
    NO_PROGRESS = "no_progress"
    REPLAN_REQUESTED = "replan_requested"
    RUNTIME_BUDGET = "runtime_budget"
    TOOLING_ENV = "tooling_env"
    TIMEOUT = "timeout"
    NO_FIX_FOUND = "no_fix_found"
    SCOPE_EXPANSION_DENIED = "scope_expansion_denied"
    PROVIDER_ESCAPED = "provider_escaped"
    # The selection passes, but the change broke tests that passed on the captured code.
    REGRESSION = "regression"
    CANCELLED = "cancelled"
    DISABLED = "disabled"


class TriageLabel(TextEnum):
    """The triage of one failure against the history (history/triage.py)."""

    NEW = "new"
    KNOWN = "known"
    FLAKY = "flaky"
    QUARANTINED = "quarantined"


class FailureClass(TextEnum):
    """The contract's ``failure_class`` of a failure (analysis/classify.py)."""

    DETERMINISTIC = "deterministic"
    TRANSIENT = "transient"
    ENVIRONMENT = "environment"


class Tone(TextEnum):
    """How a terminal line is shown: the colour follows the record the line speaks of."""

    PLAIN = "plain"
    GOOD = "good"  # green: resolved, a STOP success
    BAD = "bad"  # red, bold: any other stop, escalated, an error
    WARN = "warn"  # yellow: CONTINUE, a warning


class Line(str):
    """A line of text that carries its :class:`Tone`; otherwise the plain string."""

    tone: Tone

    def __new__(cls, text: str, tone: Tone) -> Line:
        line = super().__new__(cls, text)
        line.tone = tone
        return line


# The least pytest verbosity at which a line of the plugin's summary shows: -qq shows only what
# a script or an agent must see (the incident, each iteration's verdict, the next command), -q
# adds the headlines, the default adds the details.
ESSENTIAL = -2
SUMMARY = -1
DETAIL = 0


# How many names a one-line list shows before it counts the rest.
FIRST_FEW = 5


def first_few(names: Sequence[str], limit: int = FIRST_FEW) -> str:
    """``a, b, c, d, e and 9,995 more``: a list of names (node ids, files) bounded for one
    line; the records keep them all."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit:,} more" if len(names) > limit else "")


def tone_of(line: str) -> Tone:
    return line.tone if isinstance(line, Line) else Tone.PLAIN


def final_tone(final_status: Optional[str]) -> Tone:
    """Green for resolved (or passed), red for escalated, plain otherwise (open, replan requested)."""
    if final_status in (FinalStatus.RESOLVED, FinalStatus.PASSED):
        return Tone.GOOD
    return Tone.BAD if final_status == FinalStatus.ESCALATED else Tone.PLAIN


# Outcomes of one testcase, as read from junit XML (records/models.py names each), and the
# failure types the classifier gives (the same): declared here, where the record parsers
# that check them can import them.
OUTCOMES: tuple[str, ...] = ("passed", "failed", "error", "skipped", "missing")
FAILURE_TYPES: tuple[str, ...] = ("TEST_ASSERTION", "DOCTEST_MISMATCH", "TYPECHECK", "LINT", "BUILD_COMPILE",
                                  "TOOLING_ENV", "TIMEOUT", "UNKNOWN")
