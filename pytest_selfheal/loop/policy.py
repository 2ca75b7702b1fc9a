"""The RALF-Lite loop decision as pure functions over recorded observations.

One iteration of the loop is *verify -> observe -> decide -> repair*. The driver
(``loop.py``) runs the verification selections, turns what it saw into an
:class:`Observation`, and asks :func:`decide` whether to continue. Everything here is
pure: no files, no clock, no subprocesses, so a replay of the recorded observations
reaches exactly the same decisions. The rules are written down in ``docs/loop.md``;
keep the two in step.

Conventions:

- ``observations[0]`` is the **capture** (iteration 0: the failing run that created the
  incident); ``observations[1:]`` are the verification iterations 1, 2, ...
- The capture counts as the first sighting of its failure, so a deterministic failure
  re-run once without a change is already "seen twice".
- A timed-out iteration and an iteration whose repair produced no diff carry no new
  evidence about the code: they are *transparent* to the progress, repeat and
  no-progress counters (they have counters of their own).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Collection, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from pytest_selfheal.errors import ConfigError, InputError
from pytest_selfheal.records.models import (
    FAILING_OUTCOMES,
    OUTCOME_ERROR,
    OUTCOME_FAILED,
    OUTCOME_MISSING,
    OUTCOME_PASSED,
    OUTCOME_SKIPPED,
    TIMEOUT,
    TOOLING_ENV,
)

# --------------------------------------------------------------------------- constants

SUCCESS = "success"
MAX_ITERATIONS = "max_iterations"
REPEATED_FINGERPRINT = "repeated_fingerprint"
NO_PROGRESS = "no_progress"
REPLAN_REQUESTED = "replan_requested"
RUNTIME_BUDGET = "runtime_budget"
TOOLING_ENV_STOP = "tooling_env"
TIMEOUT_STOP = "timeout"
NO_FIX_FOUND = "no_fix_found"
SCOPE_EXPANSION_DENIED = "scope_expansion_denied"
CANCELLED = "cancelled"
DISABLED = "disabled"

STOP_REASONS: Tuple[str, ...] = (
    SUCCESS,
    MAX_ITERATIONS,
    REPEATED_FINGERPRINT,
    NO_PROGRESS,
    REPLAN_REQUESTED,
    RUNTIME_BUDGET,
    TOOLING_ENV_STOP,
    TIMEOUT_STOP,
    NO_FIX_FOUND,
    SCOPE_EXPANSION_DENIED,
    CANCELLED,
    DISABLED,
)

# When several stop conditions hold in one iteration the first in this order wins
# (docs/loop.md "Precedence"): nothing runs when disabled; a green run is never reported
# as a failure; then the most specific diagnosis before generic exhaustion.
PRECEDENCE: Tuple[str, ...] = (
    DISABLED,
    SUCCESS,
    CANCELLED,
    TOOLING_ENV_STOP,
    SCOPE_EXPANSION_DENIED,
    TIMEOUT_STOP,
    REPLAN_REQUESTED,
    REPEATED_FINGERPRINT,
    NO_PROGRESS,
    NO_FIX_FOUND,
    RUNTIME_BUDGET,
    MAX_ITERATIONS,
)

ACTION_CONTINUE = "continue"
ACTION_STOP = "stop"

FINAL_RESOLVED = "resolved"
FINAL_ESCALATED = "escalated"
FINAL_REPLAN_REQUESTED = "replan_requested"

# Observation.repair_result values.
REPAIR_DIFF = "diff"
REPAIR_NO_FIX_FOUND = "no_fix_found"
REPAIR_TIMEOUT = "timeout"
REPAIR_CRASHED = "crashed"
REPAIR_RESULTS: Tuple[str, ...] = (REPAIR_DIFF, REPAIR_NO_FIX_FOUND, REPAIR_TIMEOUT, REPAIR_CRASHED)

OUTCOMES: Tuple[str, ...] = (OUTCOME_PASSED, OUTCOME_FAILED, OUTCOME_ERROR, OUTCOME_SKIPPED, OUTCOME_MISSING)

# A timed-out iteration is retried once; the second consecutive timeout stops the loop.
TIMEOUT_LIMIT = 2
# A provider that produced no diff (or crashed) gets one more chance; the second in a row stops.
NO_FIX_FOUND_LIMIT = 2
# A "repeat" needs two sightings, whatever error_fingerprint_repeats says.
MIN_FINGERPRINT_REPEATS = 2

# Seed defaults (RALF Lite "Default Settings"); no time-based stop unless configured.
DEFAULT_MAX_ITERATIONS = 3
DEFAULT_ERROR_FINGERPRINT_REPEATS = 2
DEFAULT_NO_PROGRESS_REPEATS = 2

# Progress reasons, in the order they are listed.
PROGRESS_TESTS_FIXED = "tests_fixed"
PROGRESS_FINGERPRINT_CHANGED = "fingerprint_changed"
PROGRESS_DIFF_CHANGED = "diff_changed"

# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class LoopPolicy:
    """The loop-relevant part of the effective ``ralf_lite`` config.

    The first six fields are the ones :func:`decide` uses; the ``apply_to`` flags are
    used by :func:`loop_selection` (which failing tests the loop may touch, and whether it
    may run unattended).
    """

    enabled: bool = True
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    error_fingerprint_repeats: int = DEFAULT_ERROR_FINGERPRINT_REPEATS
    no_progress_repeats: int = DEFAULT_NO_PROGRESS_REPEATS
    auto_replan_on_no_progress: bool = False
    max_runtime_minutes: Optional[float] = None
    auto_tasks: bool = True
    autonomous_plans: bool = True
    tdd_tasks: bool = False

    @classmethod
    def from_config(cls, ralf_lite: Mapping[str, Any]) -> "LoopPolicy":
        """Build the policy from the effective ``ralf_lite`` mapping.

        Missing keys take the seed defaults; keys that do not concern the loop decision
        (reports_dir, repair, ...) are ignored. A wrong type raises a one-line
        :class:`~pytest_selfheal.errors.ConfigError` (config.py validates the files
        first; this guard keeps a hand-built mapping from producing a nonsense policy).
        """
        if not isinstance(ralf_lite, Mapping):
            raise ConfigError(f"ralf_lite: expected an object, got {type(ralf_lite).__name__}")
        apply_to = ralf_lite.get("apply_to", {})
        if apply_to is None:
            apply_to = {}
        if not isinstance(apply_to, Mapping):
            raise ConfigError(f"ralf_lite.apply_to: expected an object, got {type(apply_to).__name__}")
        return cls(
            enabled=_bool(ralf_lite, "enabled", True),
            max_iterations=_int(ralf_lite, "max_iterations", DEFAULT_MAX_ITERATIONS, minimum=0),
            error_fingerprint_repeats=_int(
                ralf_lite, "error_fingerprint_repeats", DEFAULT_ERROR_FINGERPRINT_REPEATS, minimum=1
            ),
            no_progress_repeats=_int(ralf_lite, "no_progress_repeats", DEFAULT_NO_PROGRESS_REPEATS, minimum=1),
            auto_replan_on_no_progress=_bool(ralf_lite, "auto_replan_on_no_progress", False),
            max_runtime_minutes=_minutes(ralf_lite.get("max_runtime_minutes")),
            auto_tasks=_bool(apply_to, "auto_tasks", True, prefix="ralf_lite.apply_to"),
            autonomous_plans=_bool(apply_to, "autonomous_plans", True, prefix="ralf_lite.apply_to"),
            tdd_tasks=_bool(apply_to, "tdd_tasks", False, prefix="ralf_lite.apply_to"),
        )

    def summary(self) -> str:
        """``max_iterations=3, error_fingerprint_repeats=2, no_progress_repeats=2`` (report head)."""
        return (
            f"max_iterations={self.max_iterations}, "
            f"error_fingerprint_repeats={self.error_fingerprint_repeats}, "
            f"no_progress_repeats={self.no_progress_repeats}"
        )


def _bool(data: Mapping[str, Any], key: str, default: bool, *, prefix: str = "ralf_lite") -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"{prefix}.{key}: expected a boolean, got {value!r}")
    return value


def _int(data: Mapping[str, Any], key: str, default: int, *, minimum: int) -> int:
    value = data.get(key, default)
    if value is None:
        return default
    # bool is an int subclass: `true` is not a number of iterations.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"ralf_lite.{key}: expected an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"ralf_lite.{key}: expected an integer >= {minimum}, got {value}")
    return value


def _minutes(value: Any) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"ralf_lite.max_runtime_minutes: expected a number >= 0 or null, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Observation:
    """What one iteration observed; the driver records one per attempt.

    ``iteration`` 0 is the capture. ``fingerprints`` and ``failure_types`` describe the
    failing tests of this run in order (the first is the primary failure).
    """

    iteration: int
    outcomes: Mapping[str, str]  # nodeid -> passed|failed|error|skipped|missing
    fingerprints: Tuple[str, ...]
    failure_types: Tuple[str, ...]
    diff_hash: Optional[str]  # hash of the working-tree diff at verification time; None = unknown
    timed_out: bool = False  # the verification run hit its timeout
    repair_result: Optional[str] = None  # None (no provider) | diff | no_fix_found | timeout | crashed
    scope_denied: bool = False

    def __post_init__(self) -> None:
        # Accept lists from JSON; the dataclass stays immutable and comparable.
        object.__setattr__(self, "fingerprints", tuple(self.fingerprints))
        object.__setattr__(self, "failure_types", tuple(self.failure_types))
        object.__setattr__(self, "outcomes", dict(self.outcomes))
        if len(self.fingerprints) != len(self.failure_types):
            raise ValueError("fingerprints and failure_types must have the same length (one per failure)")
        if self.repair_result is not None and self.repair_result not in REPAIR_RESULTS:
            raise ValueError(f"unknown repair_result {self.repair_result!r}")

    @property
    def fingerprint_set(self) -> FrozenSet[str]:
        """The failing tests' fingerprints as a set (the unit of repetition)."""
        return frozenset(self.fingerprints)

    @property
    def primary_fingerprint(self) -> Optional[str]:
        """The first failure's fingerprint, or None for a run without failures."""
        return self.fingerprints[0] if self.fingerprints else None


@dataclass(frozen=True)
class Progress:
    """The progress signal of one iteration compared with the previous one."""

    progress: bool
    reasons: Tuple[str, ...]  # tests_fixed | fingerprint_changed | diff_changed, or why not judged
    fingerprint_changed: bool  # the set of failing fingerprints differs from the previous one
    tests_fixed: Tuple[str, ...]  # node ids failing (or missing) before and passing now


@dataclass(frozen=True)
class Decision:
    """What to do after the latest observation, and why."""

    action: str  # "continue" | "stop"
    stop_reason: Optional[str]
    final_status: Optional[str]  # resolved | escalated | replan_requested; None = leave the incident open
    progress: Progress
    same_error_repeats: int  # consecutive sightings (capture included) of the current fingerprint set
    no_progress_streak: int  # consecutive no-progress iterations (the capture counts as one)
    retry_timeout: bool  # this iteration timed out and its one retry is still allowed
    message: str  # one human sentence explaining the decision
    iteration: int = 0  # verification iterations so far (the capture is 0)
    conditions: Tuple[str, ...] = ()  # every stop condition that held, in precedence order

    @property
    def stopped(self) -> bool:
        """True when the loop must stop."""
        return self.action == ACTION_STOP

    def to_dict(self) -> Dict[str, Any]:
        """JSON-friendly form (for attempt_XX.json, run_result.json and events)."""
        return {
            "action": self.action,
            "stop_reason": self.stop_reason,
            "final_status": self.final_status,
            "progress": self.progress.progress,
            "progress_reasons": list(self.progress.reasons),
            "fingerprint_changed": self.progress.fingerprint_changed,
            "tests_fixed": list(self.progress.tests_fixed),
            "same_error_repeats": self.same_error_repeats,
            "no_progress_streak": self.no_progress_streak,
            "retry_timeout": self.retry_timeout,
            "message": self.message,
            "iteration": self.iteration,
            "conditions": list(self.conditions),
        }


# --------------------------------------------------------------------------- observation helpers


def is_success(observation: Observation) -> bool:
    """True when the run is green: no failure, nothing missing, at least one test passed.

    Skipped tests are allowed beside passing ones, but an all-skipped selection verified
    nothing and is not a success; neither is a run that hit its timeout.
    """
    outcomes = list(observation.outcomes.values())
    return (
        not observation.timed_out
        and not observation.fingerprints
        and bool(outcomes)
        and all(o in (OUTCOME_PASSED, OUTCOME_SKIPPED) for o in outcomes)
        and OUTCOME_PASSED in outcomes
    )


def is_timeout(observation: Observation) -> bool:
    """True when the iteration timed out: the verification, the repair, or every failure is a TIMEOUT.

    A TIMEOUT failure beside other failures does not void the observation: the others are
    still evidence (a flaky timeout next to a real bug must not delay the repeat stop).
    """
    return (
        observation.timed_out
        or observation.repair_result == REPAIR_TIMEOUT
        or (bool(observation.failure_types) and all(t == TIMEOUT for t in observation.failure_types))
    )


def is_no_fix(observation: Observation) -> bool:
    """True when the repair provider produced no diff (or crashed) in this iteration."""
    return observation.repair_result in (REPAIR_NO_FIX_FOUND, REPAIR_CRASHED) and not is_timeout(observation)


def is_evidence(observation: Observation) -> bool:
    """True when the observation says something new about the code (see module docstring)."""
    return not is_timeout(observation) and not is_no_fix(observation)


def _code_changed(prev: Observation, cur: Observation) -> bool:
    # An unknown hash (no git) never counts as a change: no fake progress.
    return prev.diff_hash is not None and cur.diff_hash is not None and prev.diff_hash != cur.diff_hash


def progress_between(prev: Optional[Observation], cur: Observation) -> Progress:
    """The progress signal of ``cur`` compared with ``prev`` (SPEC §8).

    Progress = a test failing (or missing) in ``prev`` passes in ``cur``, or ``cur`` has a
    failure fingerprint that ``prev`` did not have (a different, downstream error), or the
    working-tree diff hash changed. ``prev`` None (the baseline) is never progress. An
    iteration that timed out or whose repair produced no diff is never progress either:
    it carries no new evidence.
    """
    if is_timeout(cur):
        return Progress(False, ("timeout",), False, ())
    if is_no_fix(cur):
        return Progress(False, (cur.repair_result or REPAIR_NO_FIX_FOUND,), False, ())
    if prev is None:
        return Progress(False, ("baseline",), False, ())
    was_failing = FAILING_OUTCOMES + (OUTCOME_MISSING,)
    fixed = tuple(
        nodeid
        for nodeid, outcome in prev.outcomes.items()
        if outcome in was_failing and cur.outcomes.get(nodeid) == OUTCOME_PASSED
    )
    prev_set = prev.fingerprint_set
    new_error = any(fp not in prev_set for fp in cur.fingerprints)
    reasons: List[str] = []
    if fixed:
        reasons.append(PROGRESS_TESTS_FIXED)
    if new_error:
        reasons.append(PROGRESS_FINGERPRINT_CHANGED)
    if _code_changed(prev, cur):
        reasons.append(PROGRESS_DIFF_CHANGED)
    return Progress(bool(reasons), tuple(reasons), prev_set != cur.fingerprint_set, fixed)


def _previous_evidence(observations: Sequence[Observation]) -> Optional[Observation]:
    for obs in reversed(observations[:-1]):
        if is_evidence(obs):
            return obs
    return None


def same_error_repeats(observations: Sequence[Observation]) -> int:
    """Consecutive sightings of the latest evidence's fingerprint set, capture included.

    0 when the latest evidence has no failure. Transparent observations (timeouts, empty
    repairs) neither extend nor break the run of sightings.
    """
    evidence = [o for o in observations if is_evidence(o)]
    if not evidence or not evidence[-1].fingerprints:
        return 0
    current = evidence[-1].fingerprint_set
    count = 0
    for obs in reversed(evidence):
        if obs.fingerprint_set != current:
            break
        count += 1
    return count


def no_progress_streak(observations: Sequence[Observation]) -> int:
    """Consecutive no-progress iterations ending at the latest evidence.

    The first evidence (normally the capture: nothing has been tried yet) counts as one
    no-progress iteration, so a failure re-run unchanged once has a streak of 2.
    """
    evidence = [o for o in observations if is_evidence(o)]
    if not evidence:
        return 0
    count = 0
    for i in range(len(evidence) - 1, 0, -1):
        if progress_between(evidence[i - 1], evidence[i]).progress:
            return count
        count += 1
    return count + 1


def _tail_count(observations: Sequence[Observation], predicate: Callable[[Observation], bool]) -> int:
    count = 0
    for obs in reversed(observations):
        if not predicate(obs):
            break
        count += 1
    return count


def flaky_tests(observations: Sequence[Observation]) -> List[str]:
    """Tests that failed and later passed with no code change in between.

    "No code change" = no repair produced a diff in between and no two consecutive
    known diff hashes differ. Order of first failure; each node id once.
    """
    flaky: List[str] = []
    for i, first in enumerate(observations):
        for nodeid, outcome in first.outcomes.items():
            if outcome not in FAILING_OUTCOMES or nodeid in flaky:
                continue
            for j in range(i + 1, len(observations)):
                later = observations[j]
                if later.repair_result == REPAIR_DIFF or _code_changed(observations[j - 1], later):
                    break
                if later.outcomes.get(nodeid) == OUTCOME_PASSED:
                    flaky.append(nodeid)
                    break
    return flaky


def fixed_tests(observations: Sequence[Observation]) -> List[str]:
    """Tests that failed at some iteration and pass at the latest one that ran them."""
    latest: Dict[str, str] = {}
    ever_failed: List[str] = []
    for obs in observations:
        for nodeid, outcome in obs.outcomes.items():
            if outcome in FAILING_OUTCOMES and nodeid not in ever_failed:
                ever_failed.append(nodeid)
            if outcome != OUTCOME_MISSING:
                latest[nodeid] = outcome
    return [n for n in ever_failed if latest.get(n) == OUTCOME_PASSED]


def retry_eligible(observation: Observation, classification_transient: bool) -> bool:
    """May the verification be re-run after ``observation`` *without* a new diff? (seed 004)

    A re-run without new evidence is allowed only when it can teach something: after
    the capture (iteration 0: the one re-run that tells flaky from deterministic), after a
    timeout (the retry-once rule; :func:`decide` enforces the once), or when the failures
    are classified transient. Otherwise the driver must get a diff from the repair
    provider first, or stop.
    """
    return observation.iteration == 0 or is_timeout(observation) or classification_transient


# --------------------------------------------------------------------------- decide


def final_status_of(stop_reason: Optional[str]) -> Optional[str]:
    """resolved / escalated / replan_requested for a stop reason; None when the incident stays open.

    The one home of this mapping: :func:`decide`, the driver's run result and the event
    replay all call it.
    """
    if stop_reason is None or stop_reason in (CANCELLED, DISABLED):
        # Nothing was decided about the failure: the incident stays open and resumable.
        return None
    if stop_reason == SUCCESS:
        return FINAL_RESOLVED
    if stop_reason == REPLAN_REQUESTED:
        return FINAL_REPLAN_REQUESTED
    return FINAL_ESCALATED


def decide(
    policy: LoopPolicy,
    observations: Sequence[Observation],
    *,
    elapsed_minutes: float = 0.0,
    cancelled: bool = False,
) -> Decision:
    """Continue or stop after the latest observation, with exactly one stop reason.

    ``observations[0]`` is the capture, ``observations[1:]`` the verification iterations
    so far. ``elapsed_minutes`` is the loop's runtime so far; ``cancelled`` is True when a
    Ctrl-C/SIGTERM arrived (the interrupted iteration is not in ``observations``). Every
    rule and the precedence between them are in docs/loop.md.
    """
    if not observations:
        # Only "nothing may run" answers are possible before the capture exists.
        if policy.enabled and not cancelled:
            raise ValueError("decide() needs at least the capture observation")
        reason = DISABLED if not policy.enabled else CANCELLED
        message = _stop_message(reason, policy, [], 0, 0, 0, 0, 0, elapsed_minutes)
        baseline = Progress(False, ("baseline",), False, ())
        return Decision(ACTION_STOP, reason, None, baseline, 0, 0, False, message, 0, (reason,))

    cur = observations[-1]
    iteration = len(observations) - 1
    progress = progress_between(_previous_evidence(observations), cur)
    same = same_error_repeats(observations)
    streak = no_progress_streak(observations)
    timeouts = _tail_count(observations, is_timeout)
    no_fixes = _tail_count(observations, is_no_fix)
    # Stops "by repetition" need something to have been repeated: never on the capture alone.
    verified = iteration >= 1
    stuck = verified and streak >= policy.no_progress_repeats
    holds: Dict[str, bool] = {
        DISABLED: not policy.enabled,
        SUCCESS: is_success(cur),
        CANCELLED: cancelled,
        TOOLING_ENV_STOP: TOOLING_ENV in cur.failure_types,
        SCOPE_EXPANSION_DENIED: cur.scope_denied,
        TIMEOUT_STOP: timeouts >= TIMEOUT_LIMIT,
        REPLAN_REQUESTED: stuck and policy.auto_replan_on_no_progress,
        REPEATED_FINGERPRINT: verified and same >= max(MIN_FINGERPRINT_REPEATS, policy.error_fingerprint_repeats),
        NO_PROGRESS: stuck and not policy.auto_replan_on_no_progress,
        NO_FIX_FOUND: no_fixes >= NO_FIX_FOUND_LIMIT,
        RUNTIME_BUDGET: policy.max_runtime_minutes is not None and elapsed_minutes >= policy.max_runtime_minutes,
        MAX_ITERATIONS: iteration >= policy.max_iterations,
    }
    conditions = tuple(reason for reason in PRECEDENCE if holds[reason])
    if conditions:
        reason = conditions[0]
        message = _stop_message(
            reason, policy, observations, iteration, same, streak, timeouts, no_fixes, elapsed_minutes
        )
        return Decision(
            ACTION_STOP, reason, final_status_of(reason), progress, same, streak, False, message, iteration, conditions
        )
    retry = timeouts == 1
    return Decision(
        ACTION_CONTINUE,
        None,
        None,
        progress,
        same,
        streak,
        retry,
        _continue_message(policy, observations, iteration, progress, retry, no_fixes),
        iteration,
        (),
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _continue_message(
    policy: LoopPolicy,
    observations: Sequence[Observation],
    iteration: int,
    progress: Progress,
    retry: bool,
    no_fixes: int,
) -> str:
    left = policy.max_iterations - iteration
    if retry:
        return f"Iteration {iteration} timed out; retrying once ({_plural(left, 'iteration')} left)."
    if no_fixes:
        return (
            f"The repair provider produced no fix at iteration {iteration}; "
            f"it gets one more chance ({_plural(left, 'iteration')} left)."
        )
    if iteration == 0:
        upto = _plural(policy.max_iterations, "iteration")
        return f"Captured the failure; re-running the verification selection (up to {upto})."
    if progress.progress:
        reasons = ", ".join(progress.reasons)
        return f"Iteration {iteration} made progress ({reasons}); continuing ({_plural(left, 'iteration')} left)."
    return f"Iteration {iteration} made no progress yet; continuing ({_plural(left, 'iteration')} left)."


def _stop_message(
    reason: str,
    policy: LoopPolicy,
    observations: Sequence[Observation],
    iteration: int,
    same: int,
    streak: int,
    timeouts: int,
    no_fixes: int,
    elapsed: float,
) -> str:
    cur = observations[-1] if observations else None
    fingerprint = cur.primary_fingerprint if cur is not None else None
    if reason == DISABLED:
        return "The RALF-Lite loop is disabled (ralf_lite.enabled is false); nothing was re-run."
    if reason == SUCCESS:
        flaky = flaky_tests(observations)
        note = f"; flaky (passed without a code change): {', '.join(flaky)}" if flaky else ""
        return f"All selected tests pass at iteration {iteration}; the incident is resolved{note}."
    if reason == CANCELLED:
        return (
            f"Cancelled after iteration {iteration}; recorded attempts are saved "
            "and `selfheal loop` resumes the incident."
        )
    if reason == TOOLING_ENV_STOP:
        return (
            "A failure is classified TOOLING_ENV (the environment, not the code): "
            "stopping at once; fix the environment and resume."
        )
    if reason == SCOPE_EXPANSION_DENIED:
        return (
            f"The repair at iteration {iteration} touched files outside the plan's scope "
            "and the expansion was not approved."
        )
    if reason == TIMEOUT_STOP:
        return f"Iteration {iteration} timed out again ({timeouts} timeouts in a row, one retry allowed); stopping."
    if reason == REPLAN_REQUESTED:
        return f"No progress for {streak} consecutive iterations (the capture counts as one); a new plan is requested."
    if reason == REPEATED_FINGERPRINT:
        # Name the repeated failure, not whatever a transparent (timed-out) run last saw.
        evidence = [o for o in observations if is_evidence(o)]
        fingerprint = evidence[-1].primary_fingerprint if evidence else fingerprint
        left = max(0, policy.max_iterations - iteration)
        rest = f" without using the {_plural(left, 'remaining iteration')}" if left else ""
        return (
            f"The same failure (fingerprint {fingerprint}) was seen {same} times in a row, "
            f"the capture included; stopping{rest}."
        )
    if reason == NO_PROGRESS:
        return (
            f"No progress for {streak} consecutive iterations (the capture counts as one): "
            "no test fixed, same failure, no code change."
        )
    if reason == NO_FIX_FOUND:
        return f"The repair provider produced no fix {no_fixes} times in a row."
    if reason == RUNTIME_BUDGET:
        budget = policy.max_runtime_minutes or 0.0
        return f"The runtime budget of {budget:g} minutes is used up ({elapsed:.1f} minutes elapsed)."
    # MAX_ITERATIONS
    return f"All {_plural(policy.max_iterations, 'iteration')} are used and the failure persists."


# --------------------------------------------------------------------------- stop artefacts

# Context-aware options per stop reason (seed: self-correction loop decision points).
# (id, label, command template or None); {id} is the incident id.
_OPTIONS: Dict[str, Tuple[Tuple[str, str, Optional[str]], ...]] = {
    SUCCESS: (
        ("accept", "Accept the result: the incident is archived as resolved", None),
        ("run_full_suite", "Run the whole test suite to check for regressions", "python -m pytest"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    MAX_ITERATIONS: (
        ("one_more", "Raise ralf_lite.max_iterations and try more iterations", "selfheal loop {id}"),
        ("retry_tests", "Re-run the verification tests", "selfheal loop {id}"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    REPEATED_FINGERPRINT: (
        ("investigate", "Investigate the repeated failure manually", "selfheal show {id}"),
        ("replan", "Regenerate the plan", "selfheal plan {id} --force"),
        ("change_and_retry", "Change the code, then re-run the verification tests", "selfheal loop {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    NO_PROGRESS: (
        ("replan", "Regenerate the plan", "selfheal plan {id} --force"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    REPLAN_REQUESTED: (
        ("review_plan", "Review the regenerated plan", "selfheal show {id}"),
        ("resume", "Run the loop on the new plan", "selfheal loop {id}"),
        ("stop", "Give up and archive as escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    RUNTIME_BUDGET: (
        ("more_time", "Raise ralf_lite.max_runtime_minutes and resume", "selfheal loop {id}"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    TOOLING_ENV_STOP: (
        ("change_test_command", "Change the test command or the verification allowlist", None),
        ("retry_after_env_fix", "Fix the environment, then retry the tests", "selfheal loop {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    TIMEOUT_STOP: (
        ("raise_timeout", "Raise the verification/repair timeout and resume", "selfheal loop {id}"),
        ("investigate", "Investigate the hang manually", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    NO_FIX_FOUND: (
        ("change_provider", "Try another repair provider or give it more context", "selfheal loop {id}"),
        ("fix_manually", "Fix the code manually, then re-run the verification tests", "selfheal loop {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    SCOPE_EXPANSION_DENIED: (
        (
            "approve_scope",
            "Allow the files (ralf_lite.repair.allowed_paths or approval) and resume",
            "selfheal loop {id}",
        ),
        ("fix_manually", "Fix the code manually within the plan's scope", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    CANCELLED: (
        ("resume", "Resume the loop where it stopped", "selfheal loop {id}"),
        ("stop", "Give up and archive as escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    DISABLED: (
        ("enable", "Set ralf_lite.enabled to true and run the loop", "selfheal loop {id}"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("export", "Export the report", "selfheal report {id}"),
    ),
}

_NEXT_ACTION: Dict[str, str] = {
    SUCCESS: "Nothing to do: the verification passes; review any proposed patch and run the full suite.",
    MAX_ITERATIONS: "Investigate manually with the plan, or raise max_iterations if the last iterations made progress.",
    REPEATED_FINGERPRINT: (
        "Investigate manually: the same failure keeps coming back; check the plan's target paths and hypotheses."
    ),
    NO_PROGRESS: (
        "Regenerate the plan (selfheal plan ID --force) or investigate manually: nothing changed between iterations."
    ),
    REPLAN_REQUESTED: "Review the regenerated plan, then resume the loop on it.",
    RUNTIME_BUDGET: "Raise max_runtime_minutes or investigate manually; the loop ran out of time.",
    TOOLING_ENV_STOP: "Fix the environment (missing module, command, credentials or service), then resume the loop.",
    TIMEOUT_STOP: "Find out why the run hangs (or raise the timeout), then resume the loop.",
    NO_FIX_FOUND: "Fix the code manually or give the repair provider more context; it found no change to make.",
    SCOPE_EXPANSION_DENIED: (
        "Decide whether the repair may touch the extra files; allow them and resume, or fix within scope."
    ),
    CANCELLED: "Resume the loop with `selfheal loop ID` when ready; nothing was lost.",
    DISABLED: "Enable ralf_lite (enabled: true) to loop, or fix the failure manually using the plan.",
}


def recommended_next_action(stop_reason: Optional[str]) -> str:
    """One sentence telling a human (or agent) what to do after this stop reason."""
    if stop_reason is None:
        return "Continue the loop: run the next iteration."
    try:
        return _NEXT_ACTION[stop_reason]
    except KeyError:
        raise ValueError(f"unknown stop reason {stop_reason!r}") from None


def decision_point(
    decision: Decision,
    observations: Sequence[Observation],
    policy: LoopPolicy,
    *,
    incident_id: Optional[str] = None,
    failure_signature: Optional[str] = None,
    pending_scope_files: Sequence[str] = (),
) -> Dict[str, Any]:
    """The decision point written at every stop: ``{reason, message, options, context}``.

    ``options`` are context-aware per stop reason: ``{id, label, command}`` (``command``
    is a suggested shell line for a human, None when there is none). Raises
    ``ValueError`` for a decision that continues.
    """
    if decision.stop_reason is None:
        raise ValueError("a decision point is only written when the loop stops")
    ident = incident_id if incident_id is not None else "<incident_id>"
    options = [
        {"id": oid, "label": label, "command": command.format(id=ident) if command is not None else None}
        for oid, label, command in _OPTIONS[decision.stop_reason]
    ]
    fingerprint = next((o.primary_fingerprint for o in reversed(observations) if o.fingerprints), None)
    return {
        "reason": decision.stop_reason,
        "message": decision.message,
        "options": options,
        "context": {
            "iteration": decision.iteration,
            "remaining": max(0, policy.max_iterations - decision.iteration),
            "failureSignature": failure_signature,
            "fingerprint": fingerprint,
            "pendingScopeFiles": list(pending_scope_files),
        },
    }


def handoff(
    observations: Sequence[Observation],
    decision: Decision,
) -> Dict[str, Any]:
    """The structured handoff written at every stop (seed: "Handoff on Exhaustion").

    ``fingerprints_per_iteration[i]`` lists the failing fingerprints of iteration ``i``
    (0 = the capture). ``fixed`` lists the tests that failed and now pass.
    """
    return {
        "iterations": max(0, len(observations) - 1),
        "stop_reason": decision.stop_reason,
        "fingerprints_per_iteration": [list(o.fingerprints) for o in observations],
        "fixed": fixed_tests(observations),
        "flaky_tests": flaky_tests(observations),
        "recommended_next_action": recommended_next_action(decision.stop_reason),
    }


def status_line(decision: Decision, policy: LoopPolicy, *, incident_id: Optional[str] = None) -> str:
    """One machine-parseable line for the terminal (the agent-in-the-loop mode).

    ``selfheal: incident <id> iteration 2 of 3: fingerprint same, progress no -> STOP repeated_fingerprint``
    """
    who = f"incident {incident_id} " if incident_id else ""
    fp = "changed" if decision.progress.fingerprint_changed else "same"
    prog = "yes" if decision.progress.progress else "no"
    verdict = f"STOP {decision.stop_reason}" if decision.stopped else "CONTINUE"
    return (
        f"selfheal: {who}iteration {decision.iteration} of {policy.max_iterations}: "
        f"fingerprint {fp}, progress {prog} -> {verdict}"
    )


# --------------------------------------------------------------------------- apply_to


@dataclass(frozen=True)
class LoopSelection:
    """Which failing tests the loop may verify, and whether it may run at all."""

    nodeids: Tuple[str, ...]  # what the loop verifies
    excluded: Tuple[str, ...]  # failing tests left out by apply_to
    refused: Optional[str]  # why the loop must not run (the driver stops with `disabled`); None = run


def loop_selection(
    policy: LoopPolicy,
    nodeids: Sequence[str],
    *,
    tdd_nodeids: Collection[str] = (),
    unattended: bool = False,
    approved: bool = False,
) -> LoopSelection:
    """Apply ``enabled`` and ``apply_to`` to the incident's failing node ids.

    - ``tdd_tasks``: tests marked ``@pytest.mark.tdd`` (``tdd_nodeids``) are looped only
      when true (a red-first test is expected to fail until the feature exists).
    - ``auto_tasks``: every other failing test is looped only when true.
    - ``autonomous_plans``: when false, the loop refuses to run ``unattended`` (``selfheal
      loop``/``selfheal ci`` without a TTY) unless ``approved`` (``--approve``).
    """
    tdd = set(tdd_nodeids)
    keep: List[str] = []
    excluded: List[str] = []
    for nodeid in nodeids:
        allowed = policy.tdd_tasks if nodeid in tdd else policy.auto_tasks
        (keep if allowed else excluded).append(nodeid)
    refused: Optional[str] = None
    if not policy.enabled:
        refused = "the loop is disabled (ralf_lite.enabled is false)"
    elif unattended and not approved and not policy.autonomous_plans:
        refused = "unattended loops are disabled (ralf_lite.apply_to.autonomous_plans is false); pass --approve"
    elif not keep:
        refused = "every failing test is excluded by ralf_lite.apply_to (auto_tasks/tdd_tasks)"
    return LoopSelection(tuple(keep), tuple(excluded), refused)


# --------------------------------------------------------------------------- from disk


def capture_observation(incident: Mapping[str, Any], *, diff_hash: Optional[str] = None) -> Observation:
    """Observation 0 from ``incident.json``: its failures, as the first sighting.

    ``diff_hash`` is the working-tree diff hash at capture time (None when unknown).
    """
    failures = incident.get("failures")
    if not isinstance(failures, list):
        raise InputError("incident.json: 'failures' must be a list")
    outcomes: Dict[str, str] = {}
    fingerprints: List[str] = []
    types: List[str] = []
    for i, failure in enumerate(failures):
        if not isinstance(failure, Mapping):
            raise InputError(f"incident.json: failures[{i}] must be an object")
        nodeid = failure.get("nodeid") or failure.get("test")
        fp = failure.get("fingerprint")
        if not isinstance(nodeid, str) or not isinstance(fp, str):
            raise InputError(f"incident.json: failures[{i}] needs a string nodeid/test and fingerprint")
        outcome = failure.get("outcome", OUTCOME_FAILED)
        outcomes[nodeid] = outcome if outcome in FAILING_OUTCOMES else OUTCOME_FAILED
        fingerprints.append(fp)
        types.append(str(failure.get("failure_type", "UNKNOWN")))
    return Observation(0, outcomes, tuple(fingerprints), tuple(types), diff_hash)


def observation_from_attempt(attempt: Mapping[str, Any]) -> Observation:
    """Rebuild the observation recorded in an ``attempt_XX.json`` (for resume and replay)."""
    try:
        iteration = attempt["iteration"]
        if isinstance(iteration, bool) or not isinstance(iteration, int):
            raise TypeError("iteration")
        raw_outcomes = attempt.get("outcomes") or {}
        outcomes = {str(k): str(v) for k, v in dict(raw_outcomes).items()}
        failures = attempt.get("failures") or []
        fingerprints = tuple(str(f["fingerprint"]) for f in failures)
        types = tuple(str(f.get("failure_type", "UNKNOWN")) for f in failures)
        repair = attempt.get("repair")
        repair_result = repair.get("result") if isinstance(repair, Mapping) else None
        return Observation(
            iteration=iteration,
            outcomes=outcomes,
            fingerprints=fingerprints,
            failure_types=types,
            diff_hash=attempt.get("diff_hash"),
            timed_out=bool(attempt.get("timed_out", False)),
            repair_result=repair_result,
            scope_denied=bool(attempt.get("scope_denied", False)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"attempt_XX.json: not a valid attempt record ({exc})") from None
