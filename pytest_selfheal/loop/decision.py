"""The RALF-Lite decision: continue or stop after the latest observation (pure; the rules and
their precedence are in ``docs/loop.md``: keep the two in step)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from itertools import takewhile

from pytest_selfheal.loop.messages import continue_message, stop_message
from pytest_selfheal.loop.policy import (
    HARNESS_CHANGED,
    MIN_FINGERPRINT_REPEATS,
    NO_FIX_FOUND_LIMIT,
    PRECEDENCE,
    TIMEOUT_LIMIT,
    LoopPolicy,
    Observation,
    decision,
    failing_tests,
    is_evidence,
    is_no_fix,
    is_success,
    is_timeout,
    no_progress_streak,
    progress_between,
    progress_signal,
    same_error_repeats,
)
from pytest_selfheal.records.attempt import Decision
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.models import TOOLING_ENV
from pytest_selfheal.records.vocab import StopReason, TriageLabel, first_few

# Triage labels (history/triage.py) under which a failure is known not to be deterministic.
KNOWN_FLAKY_LABELS: tuple[TriageLabel, ...] = (TriageLabel.FLAKY, TriageLabel.QUARANTINED)


def known_flaky(incident: Incident) -> frozenset[str]:
    out = set()
    for failure in incident.failures:
        if failure.triage is not None and failure.triage.label in KNOWN_FLAKY_LABELS:
            out.add(failure.nodeid or failure.test)
    return frozenset(out)


def decide(policy: LoopPolicy, observations: Sequence[Observation], *, elapsed_minutes: float = 0.0,
           cancelled: bool = False, known_flaky: Collection[str] = (), unverified: int = 0) -> Decision:
    """Continue or stop after the latest observation (the capture's at least), with exactly one stop reason.

    ``known_flaky``: when only they still fail, a repeat is no evidence of a deterministic
    failure, so the repeat and no-progress stops wait. ``unverified``: failures the capture
    could not keep: a green selection then stops ``unverified_failures``, never ``success``.
    """
    cur = observations[-1]
    iteration = len(observations) - 1
    progress = progress_between(next((o for o in reversed(observations[:-1]) if is_evidence(o)), None), cur)
    same = same_error_repeats(observations)
    streak = no_progress_streak(observations)
    timeouts = _tail_count(observations, is_timeout)
    no_fixes = _tail_count(observations, is_no_fix)
    # Stops "by repetition" need something to have been repeated: never on the capture alone.
    verified = iteration >= 1
    flaky_only = bool(failing_tests(cur)) and failing_tests(cur) <= set(known_flaky)
    stuck = verified and streak >= policy.no_progress_repeats and not flaky_only
    green = is_success(cur) and not cur.provider_escaped
    stuck_or_spent: dict[str, bool] = {
        StopReason.REPLAN_REQUESTED: stuck and policy.auto_replan_on_no_progress,
        StopReason.REPEATED_FINGERPRINT: verified and not flaky_only
        and same >= max(MIN_FINGERPRINT_REPEATS, policy.error_fingerprint_repeats),
        StopReason.NO_PROGRESS: stuck and not policy.auto_replan_on_no_progress,
        StopReason.NO_FIX_FOUND: no_fixes >= NO_FIX_FOUND_LIMIT,
        StopReason.RUNTIME_BUDGET: policy.max_runtime_minutes is not None and elapsed_minutes >= policy.max_runtime_minutes,
        StopReason.MAX_ITERATIONS: iteration >= policy.max_iterations,
    }
    holds: dict[str, bool] = {
        StopReason.DISABLED: not policy.enabled,
        # The judge was changed: whatever this run saw, its verdict is not trusted.
        StopReason.HARNESS_CHANGED: bool(cur.harness_changed),
        # A green run after a provider escaped is no success: what it changed outside is unknown.
        StopReason.TESTS_EDITED: green and bool(cur.tests_edited),
        StopReason.UNVERIFIED_FAILURES: green and unverified > 0,
        StopReason.SUCCESS: green,
        StopReason.CANCELLED: cancelled,
        StopReason.TOOLING_ENV: TOOLING_ENV in cur.failure_types,
        StopReason.SCOPE_EXPANSION_DENIED: cur.scope_denied,
        StopReason.PROVIDER_ESCAPED: cur.provider_escaped,
        StopReason.TIMEOUT: timeouts >= TIMEOUT_LIMIT,
        # The selection passes but the change broke other tests: while the budget lasts the
        # repair goes on; when it ends (any stop of repetition or exhaustion), this names why.
        StopReason.REGRESSION: bool(cur.regressions) and any(stuck_or_spent.values()),
        **stuck_or_spent,
    }
    conditions = tuple(reason for reason in PRECEDENCE if holds[reason])
    if conditions:
        reason = conditions[0]
        message = stop_message(
            reason, policy, observations, iteration, same, streak, timeouts, no_fixes, elapsed_minutes,
            unverified=unverified,
        )
        if reason == StopReason.HARNESS_CHANGED:
            # The judge changed: nothing this run saw counts as progress (not judged).
            progress = progress_signal(False, (HARNESS_CHANGED,), bool(progress.fingerprint_changed))
        if flaky_only and reason != StopReason.SUCCESS:
            message += (" Every test still failing is known flaky in the failure history ("
                        + first_few(sorted(failing_tests(cur))) + "): it failed on every re-run, which the "
                        "history does not call deterministic.")
        return decision(progress, reason, message, iteration, same, streak, conditions=conditions)
    retry = timeouts == 1
    return decision(progress, None, continue_message(policy, iteration, progress, retry, no_fixes),
                    iteration, same, streak, retry)


def _tail_count(observations: Sequence[Observation], predicate: Callable[[Observation], bool]) -> int:
    return len(list(takewhile(predicate, reversed(observations))))
