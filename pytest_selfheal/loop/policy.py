"""The RALF-Lite loop policy: its vocabulary, config, observations and their predicates (pure,
so a replay of the recorded observations reaches the same decisions; rules in ``docs/loop.md``).

``observations[0]`` is the capture, the first sighting of its failure. A timed-out iteration
and one whose repair produced no diff carry no new evidence about the code: they are
transparent to the progress, repeat and no-progress counters.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

from pytest_selfheal.config.keys import Settings
from pytest_selfheal.errors import InputError
from pytest_selfheal.records.attempt import Attempt, Decision, RepairBlock
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.jsondoc import fields_of
from pytest_selfheal.records.models import (
    FAILING_OUTCOMES,
    OUTCOME_FAILED,
    OUTCOME_MISSING,
    OUTCOME_PASSED,
    OUTCOME_SKIPPED,
    TIMEOUT,
    TOOLING_ENV,
)
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.records.stops import stop_facts
from pytest_selfheal.records.vocab import FinalStatus, StopReason

# When several stop conditions hold in one iteration the first in this order wins
# (docs/loop.md "Precedence"): nothing runs when disabled; a green run is never reported
# as a failure; then the most specific diagnosis before generic exhaustion.
PRECEDENCE: tuple[StopReason, ...] = (
    StopReason.DISABLED,
    StopReason.HARNESS_CHANGED,
    StopReason.TESTS_EDITED,
    StopReason.UNVERIFIED_FAILURES,
    StopReason.SUCCESS,
    StopReason.CANCELLED,
    StopReason.TOOLING_ENV,
    StopReason.SCOPE_EXPANSION_DENIED,
    StopReason.PROVIDER_ESCAPED,
    StopReason.TIMEOUT,
    StopReason.REGRESSION,
    StopReason.REPLAN_REQUESTED,
    StopReason.REPEATED_FINGERPRINT,
    StopReason.NO_PROGRESS,
    StopReason.NO_FIX_FOUND,
    StopReason.RUNTIME_BUDGET,
    StopReason.MAX_ITERATIONS,
)

ACTION_CONTINUE = "continue"
ACTION_STOP = "stop"

# Observation.repair_result values.
REPAIR_DIFF = "diff"
REPAIR_NO_FIX_FOUND = "no_fix_found"
REPAIR_TIMEOUT = "timeout"
REPAIR_CRASHED = "crashed"
REPAIR_RESULTS: tuple[str, ...] = (REPAIR_DIFF, REPAIR_NO_FIX_FOUND, REPAIR_TIMEOUT, REPAIR_CRASHED)

# A timed-out iteration is retried once; the second consecutive timeout stops the loop.
TIMEOUT_LIMIT = 2
# A provider that produced no diff (or crashed) gets one more chance; the second in a row stops.
NO_FIX_FOUND_LIMIT = 2
# A "repeat" needs two sightings, whatever error_fingerprint_repeats says.
MIN_FINGERPRINT_REPEATS = 2

# Progress reasons, in the order they are listed.
PROGRESS_TESTS_FIXED = "tests_fixed"
PROGRESS_FINGERPRINT_CHANGED = "fingerprint_changed"
BASELINE = "baseline"  # a decision made before any run was compared (a stop before the first iteration)
FIRST_EVIDENCE = "first_evidence"  # nothing earlier was evidence: nothing to compare this run with
PROGRESS_DIFF_CHANGED = "diff_changed"
# Not progress: the fingerprints changed, the code and the failing tests did not (a message
# that depends on hash order, a timestamp the rules missed...). Judged as a repeat.
MESSAGE_UNSTABLE = "message_unstable"
# Not progress either: with the code known to be the same, a test passed or the failing tests
# changed. That is flakiness, never a fix; what still fails is seen again.
FLAKY = "flaky"
# Not progress: with the code the same, a failing test ran to no verdict (skipped, an xfail,
# not collected). Nothing was verified of it: neither fixed nor flaky.
NOT_VERIFIED = "not_verified"
# Not judged: what runs or judges the tests changed since the capture (harness_changed).
HARNESS_CHANGED = "harness_changed"


@dataclass(frozen=True)
class LoopPolicy:
    """The loop-relevant part of the effective ``ralf_lite`` config (``apply_to``: :func:`loop_selection`'s).
    The defaults are RALF Lite's; no time-based stop unless configured."""

    enabled: bool = True
    max_iterations: int = 3
    error_fingerprint_repeats: int = 2
    no_progress_repeats: int = 2
    auto_replan_on_no_progress: bool = False
    max_runtime_minutes: Optional[float] = None
    auto_tasks: bool = True
    autonomous_plans: bool = True
    tdd_tasks: bool = False

    @classmethod
    def from_settings(cls, settings: Settings) -> LoopPolicy:
        budget, apply_to = settings.max_runtime_minutes, settings.apply_to
        return cls(settings.enabled, settings.max_iterations, settings.error_fingerprint_repeats,
                   settings.no_progress_repeats, settings.auto_replan_on_no_progress,
                   None if budget is None else float(budget), apply_to.auto_tasks, apply_to.autonomous_plans,
                   apply_to.tdd_tasks)


@dataclass(frozen=True)
class LoopSelection:
    """Which failing tests the loop may verify, and whether it may run at all."""

    nodeids: tuple[str, ...]  # what the loop verifies
    excluded: tuple[str, ...]  # failing tests left out by apply_to
    refused: Optional[str]  # why the loop must not run (the driver stops with `disabled`); None = run


def loop_selection(policy: LoopPolicy, nodeids: Sequence[str], *, tdd_nodeids: Collection[str] = (),
                   unattended: bool = False, approved: bool = False) -> LoopSelection:
    """Apply ``enabled`` and ``apply_to`` to the incident's failing node ids (a ``tdd`` test
    is expected to fail until its feature exists)."""
    tdd = set(tdd_nodeids)
    allowed = [policy.tdd_tasks if nodeid in tdd else policy.auto_tasks for nodeid in nodeids]
    keep = [n for n, ok in zip(nodeids, allowed) if ok]
    excluded = [n for n, ok in zip(nodeids, allowed) if not ok]
    refused: Optional[str] = None
    if not policy.enabled:
        refused = "the loop is disabled (ralf_lite.enabled is false)"
    elif unattended and not approved and not policy.autonomous_plans:
        refused = "unattended loops are disabled (ralf_lite.apply_to.autonomous_plans is false); pass --approve"
    elif not keep:
        refused = "every failing test is excluded by ralf_lite.apply_to (auto_tasks/tdd_tasks)"
    return LoopSelection(tuple(keep), tuple(excluded), refused)


@dataclass(frozen=True)
class Observation:
    """What one iteration observed (0: the capture); ``fingerprints``, ``failure_types``: one per failure."""

    iteration: int
    outcomes: Mapping[str, str]  # nodeid -> passed|failed|error|skipped|missing
    fingerprints: tuple[str, ...]
    failure_types: tuple[str, ...]
    diff_hash: Optional[str]  # hash of the working-tree diff at verification time; None = unknown
    timed_out: bool = False  # the verification run hit its timeout
    repair_result: Optional[str] = None  # None (no provider) | diff | no_fix_found | timeout | crashed
    scope_denied: bool = False
    tests_edited: tuple[str, ...] = ()  # test files and data the verified code has edited since the capture
    provider_escaped: bool = False  # the provider changed the user's tree or .git (repair/worktree.py)
    harness_changed: tuple[str, ...] = ()  # what changed in the incident's seal since the capture
    # What the first TOOLING_ENV failure says ("message (test)"): the why of a tooling_env stop.
    environment: Optional[str] = None
    # Tests the change broke (the regression check, loop/regression.py): their failures are this run's.
    regressions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcomes", dict(self.outcomes))  # comparable, whatever mapping it came as
        if len(self.fingerprints) != len(self.failure_types):
            raise ValueError("fingerprints and failure_types must have the same length (one per failure)")
        if self.repair_result is not None and self.repair_result not in REPAIR_RESULTS:
            raise ValueError(f"unknown repair_result {self.repair_result!r}")

    @property
    def fingerprint_set(self) -> frozenset[str]:  # the unit of repetition
        return frozenset(self.fingerprints)

    @property
    def primary_fingerprint(self) -> Optional[str]:
        """The first failure's fingerprint, or None for a run without failures."""
        return self.fingerprints[0] if self.fingerprints else None


DECISION_KEYS = tuple(f.key for f in fields_of(Decision))  # a decision made here records every key


def progress_signal(progress: bool, reasons: tuple[str, ...], fingerprint_changed: bool,
                    tests_fixed: tuple[str, ...] = ()) -> Decision:
    """The progress of one iteration over the previous one: a decision not yet taken."""
    return Decision(progress=progress, progress_reasons=reasons, fingerprint_changed=fingerprint_changed,
                    tests_fixed=tests_fixed)


def decision(progress: Decision, stop_reason: Optional[str], message: str, iteration: int, same: int = 0,
             streak: int = 0, retry: bool = False, conditions: tuple[str, ...] = ()) -> Decision:
    """``progress`` decided: a stop for ``stop_reason``, else continue; ``message`` says why."""
    return replace(progress, action=ACTION_STOP if stop_reason else ACTION_CONTINUE, stop_reason=stop_reason,
                   final_status=final_status_of(stop_reason), same_error_repeats=same, no_progress_streak=streak,
                   retry_timeout=retry, message=message, iteration=iteration, conditions=conditions, keys=DECISION_KEYS)


def open_stop(reason: str, message: str, iteration: int) -> Decision:
    """A stop decided before any run was compared (cancelled, disabled), which leaves the incident open."""
    return decision(progress_signal(False, (BASELINE,), False), reason, message, iteration, conditions=(reason,))


def is_success(observation: Observation) -> bool:
    """Every selected test *passed* in time: a skip or an xfail verified nothing (an agent
    that adds ``@pytest.mark.skip`` has not fixed it)."""
    outcomes = list(observation.outcomes.values())
    return (
        not observation.timed_out
        and not observation.fingerprints
        and bool(outcomes)
        and all(o == OUTCOME_PASSED for o in outcomes)
    )


def is_timeout(observation: Observation) -> bool:
    """The verification or the repair timed out, or every failure is a TIMEOUT (beside other
    failures, a flaky timeout must not delay the repeat stop)."""
    return (
        observation.timed_out
        or observation.repair_result == REPAIR_TIMEOUT
        or (bool(observation.failure_types) and all(t == TIMEOUT for t in observation.failure_types))
    )


def is_no_fix(observation: Observation) -> bool:
    return observation.repair_result in (REPAIR_NO_FIX_FOUND, REPAIR_CRASHED) and not is_timeout(observation)


def is_evidence(observation: Observation) -> bool:
    return not is_timeout(observation) and not is_no_fix(observation)


def _code_changed(prev: Observation, cur: Observation) -> bool:
    # An unknown hash (no git) never counts as a change: no fake progress.
    return prev.diff_hash is not None and cur.diff_hash is not None and prev.diff_hash != cur.diff_hash


def code_unchanged(prev: Observation, cur: Observation) -> bool:
    """The code is known to be the same: two equal, known diff hashes and no repair diff."""
    return prev.diff_hash is not None and prev.diff_hash == cur.diff_hash and cur.repair_result != REPAIR_DIFF


def failing_tests(observation: Observation) -> frozenset[str]:
    return frozenset(n for n, outcome in observation.outcomes.items() if outcome in FAILING_OUTCOMES)


def message_unstable(prev: Observation, cur: Observation) -> bool:
    """The fingerprints changed while nothing else did: the code is known to be the same
    (equal diff hashes, no repair diff) and the same tests fail. A repeat, not progress."""
    return (
        prev.fingerprint_set != cur.fingerprint_set
        and code_unchanged(prev, cur)
        and bool(failing_tests(cur))
        and failing_tests(prev) == failing_tests(cur)
    )


def failure_changed(prev: Observation, cur: Observation) -> bool:
    """Is ``cur``'s failure another one than ``prev``'s (not a repeat)? The fingerprint sets
    differ, unless the code is known to be the same and something still fails: an unstable
    message, or a flaky test changing beside what still fails, is the same failure again."""
    return prev.fingerprint_set != cur.fingerprint_set and not (code_unchanged(prev, cur) and bool(cur.fingerprints))


def flaky_change(prev: Observation, cur: Observation) -> bool:
    """With the code known to be the same, a test changed outcome: flakiness, not progress."""
    if not code_unchanged(prev, cur):
        return False
    was, now = failing_tests(prev), failing_tests(cur)
    return was != now or any(cur.outcomes.get(n) != o for n, o in prev.outcomes.items() if n in cur.outcomes)


def progress_between(prev: Optional[Observation], cur: Observation) -> Decision:
    """The progress of ``cur`` over ``prev``: a test fixed, a new fingerprint (a downstream error), or the code
    changed. An iteration without new evidence is none."""
    if is_timeout(cur):
        return progress_signal(False, ("timeout",), False)
    if is_no_fix(cur):
        return progress_signal(False, (cur.repair_result or REPAIR_NO_FIX_FOUND,), False)
    if prev is None:
        # Nothing before it was evidence (the capture's failures were all timeouts): what
        # this run shows is new, and there is nothing to call progress against.
        return progress_signal(False, (FIRST_EVIDENCE,), True)
    was_failing = FAILING_OUTCOMES + (OUTCOME_MISSING,)
    fixed = tuple(
        nodeid
        for nodeid, outcome in prev.outcomes.items()
        if outcome in was_failing and cur.outcomes.get(nodeid) == OUTCOME_PASSED
    )
    prev_set = prev.fingerprint_set
    changed = failure_changed(prev, cur)
    if not fixed and message_unstable(prev, cur):
        return progress_signal(False, (MESSAGE_UNSTABLE,), changed)
    if flaky_change(prev, cur):
        # Nothing was changed, so nothing was fixed: a pass here is a flaky test's; a failing
        # test that only ran to no verdict is neither fixed nor flaky.
        return progress_signal(False, (NOT_VERIFIED if _only_no_verdict(prev, cur, fixed) else FLAKY,), changed)
    new_error = any(fp not in prev_set for fp in cur.fingerprints)
    reasons: list[str] = []
    if fixed:
        reasons.append(PROGRESS_TESTS_FIXED)
    if new_error:
        reasons.append(PROGRESS_FINGERPRINT_CHANGED)
    if _code_changed(prev, cur):
        reasons.append(PROGRESS_DIFF_CHANGED)
    return progress_signal(bool(reasons), tuple(reasons), changed, fixed)


def _only_no_verdict(prev: Observation, cur: Observation, fixed: Sequence[str]) -> bool:
    # What changed outcome is only failing tests that now ran to no verdict: none passed, none newly fails.
    no_verdict = [n for n in failing_tests(prev) if cur.outcomes.get(n, OUTCOME_MISSING) in (OUTCOME_SKIPPED, OUTCOME_MISSING)]
    return bool(no_verdict) and not fixed and failing_tests(cur) <= failing_tests(prev)


def same_error_repeats(observations: Sequence[Observation]) -> int:
    """Consecutive sightings of the latest evidence's fingerprint set, capture included (0: no failure)."""
    evidence = [o for o in observations if is_evidence(o)]
    if not evidence or not evidence[-1].fingerprints:
        return 0
    count = 1
    for i in range(len(evidence) - 1, 0, -1):
        prev, cur = evidence[i - 1], evidence[i]
        # An unstable message, or a flaky test changing beside what still fails, with the
        # code unchanged, is the same failure seen again (docs/loop.md "Progress").
        if failure_changed(prev, cur):
            break
        count += 1
    return count


def no_progress_streak(observations: Sequence[Observation]) -> int:
    """Consecutive no-progress iterations ending at the latest evidence (the first, nothing tried yet, counts)."""
    evidence = [o for o in observations if is_evidence(o)]
    if not evidence:
        return 0
    count = 0
    for i in range(len(evidence) - 1, 0, -1):
        if progress_between(evidence[i - 1], evidence[i]).progress:
            return count
        count += 1
    return count + 1


def flaky_tests(observations: Sequence[Observation]) -> list[str]:
    """Tests that failed and later passed with no code change in between (no repair diff, no hash change)."""
    flaky: list[str] = []
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


def fixed_tests(observations: Sequence[Observation]) -> list[str]:
    """Tests that failed at some iteration and pass at the latest one that ran them."""
    latest: dict[str, str] = {}
    ever_failed: list[str] = []
    for obs in observations:
        for nodeid, outcome in obs.outcomes.items():
            if outcome in FAILING_OUTCOMES and nodeid not in ever_failed:
                ever_failed.append(nodeid)
            if outcome != OUTCOME_MISSING:
                latest[nodeid] = outcome
    return [n for n in ever_failed if latest.get(n) == OUTCOME_PASSED]


def reopened_after(incident: Incident) -> Optional[int]:
    """The attempt after which ``selfheal reopen`` started a new loop run, or None."""
    value = incident.reopened_after_iteration
    return value if value is not None and value >= 0 else None


def stop_history_after(incident: Incident) -> Optional[int]:
    """The attempt up to which a recorded stop is history: the later of a reopen and a resume
    after a code change (which keeps the loop run going), or None."""
    values = [v for v in (incident.reopened_after_iteration, incident.resumed_after_iteration) if v is not None and v >= 0]
    return max(values) if values else None


def stop_is_history(reopened: Optional[int], last_iteration: int, status: Optional[str]) -> bool:
    """The incident was reopened after attempt ``reopened`` and has not stopped since: a stop
    recorded up to it is history, neither in force nor pending."""
    return reopened is not None and last_iteration <= reopened and status not in (FinalStatus.RESOLVED, FinalStatus.ESCALATED)


def result_in_force(result: Optional[RunResult], attempts: Sequence[Attempt], incident: Incident,
                    status: Optional[str]) -> Optional[RunResult]:
    """``run_result.json`` when it is the incident's verdict now, else None (a stop before a
    later attempt, a reopen or a continued run is history); every surface reads it here."""
    last = attempts[-1].iteration if attempts else 0
    stale = result is not None and result.iteration is not None and result.iteration != last
    if result is None or stale or stop_is_history(stop_history_after(incident), last, status):
        return None
    return result


def final_status_of(stop_reason: Optional[str]) -> Optional[FinalStatus]:
    """resolved / escalated / replan_requested for a stop reason; None when the incident stays open."""
    return None if stop_reason is None else stop_facts(stop_reason).final_status


def capture_observation(incident: Incident, *, diff_hash: Optional[str] = None) -> Observation:
    """Observation 0 from ``incident.json`` (``InputError``: a failure without test identity or fingerprint)."""
    outcomes: dict[str, str] = {}
    for index, failure in enumerate(incident.failures):
        nodeid = failure.nodeid or failure.test
        if not nodeid or not failure.fingerprint:
            raise InputError(f"incident.json: failures[{index}] needs a nodeid/test and a fingerprint")
        outcome = failure.outcome or OUTCOME_FAILED
        outcomes[nodeid] = outcome if outcome in FAILING_OUTCOMES else OUTCOME_FAILED
    return observed(0, outcomes, incident.failures, diff_hash)


def observed(iteration: int, outcomes: Mapping[str, str], failures: Sequence[Failure], diff_hash: Optional[str],
             repair: Optional[RepairBlock] = None, **more: Any) -> Observation:
    """What a run saw, with its repair call's verdict (None: no provider) and whether the provider escaped."""
    return Observation(iteration, outcomes, tuple(f.fingerprint for f in failures),
                       tuple(f.failure_type or "UNKNOWN" for f in failures), diff_hash,
                       environment=environment_of(failures),
                       repair_result=(repair.result or None) if repair is not None else None,
                       provider_escaped=repair is not None and bool(repair.get_extra(StopReason.PROVIDER_ESCAPED)), **more)


def environment_of(failures: Sequence[Failure]) -> Optional[str]:
    """``"message (test)"`` of the first TOOLING_ENV failure: what a ``tooling_env`` stop names as its cause."""
    for failure in failures:
        if failure.failure_type == TOOLING_ENV:
            message = " ".join((failure.message or "").split())[:300] or "no message recorded"
            test = failure.nodeid or failure.test
            return f"{message} ({test})" if test else message
    return None


def observation_from_attempt(attempt: Attempt) -> Observation:
    """The observation recorded in an ``attempt_XX.json`` (``InputError``: a failure without a fingerprint)."""
    for index, failure in enumerate(attempt.failures):
        if not failure.fingerprint:
            raise InputError(f"attempt_{attempt.iteration:02d}.json: failures[{index}] has no fingerprint")
    try:
        return observed(
            attempt.iteration, dict(attempt.outcomes), attempt.failures, attempt.diff_hash, attempt.repair,
            timed_out=bool(attempt.timed_out), scope_denied=bool(attempt.scope_denied),
            tests_edited=tuple(attempt.tests_edited), harness_changed=tuple(attempt.harness_changed),
            regressions=tuple(attempt.regressions))
    except ValueError as exc:  # an unknown repair result
        raise InputError(f"attempt_{attempt.iteration:02d}.json: not a valid attempt record ({exc})") from None
