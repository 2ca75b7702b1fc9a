"""An incident's tests and their re-runs, as the junit cases of ``selfheal junit`` (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from pytest_selfheal.history.triage import QuarantineEntry, matching_entry
from pytest_selfheal.junit.reruns import FailedRun, RerunCase
from pytest_selfheal.loop import policy
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.models import (
    FAILING_OUTCOMES,
    OUTCOME_FAILED,
    OUTCOME_MISSING,
    OUTCOME_PASSED,
    OUTCOME_SKIPPED,
)


def _failed_run(failure: Failure) -> FailedRun:
    # An attempt keeps the signature "TYPE | test | first line": the message is its last part.
    message = failure.message or failure.signature.split(" | ", 2)[-1]
    fingerprint = failure.fingerprint
    text = f"{message}\n(selfheal fingerprint {fingerprint})" if fingerprint else message
    return FailedRun(message.splitlines()[0] if message else "", failure.failure_type or "UNKNOWN", text)


def rerun_cases(
    incident: Incident,
    attempts: Sequence[Attempt],
    quarantine: Sequence[QuarantineEntry] = (),
) -> list[RerunCase]:
    observations = [policy.capture_observation(incident)] + [policy.observation_from_attempt(a) for a in attempts]
    flaky = set(policy.flaky_tests(observations))
    runs: dict[str, list[FailedRun]] = {}
    fingerprints: dict[str, str] = {}
    for failure in incident.failures:
        nodeid = failure.nodeid or failure.test
        fingerprints[nodeid] = failure.fingerprint
        runs.setdefault(nodeid, []).append(_failed_run(failure))
    for attempt in attempts:
        for recorded in attempt.failures:
            nodeid = recorded.nodeid or recorded.test
            if nodeid in runs:
                runs[nodeid].append(_failed_run(recorded))
    latest = {n: outcome for o in observations for n, outcome in o.outcomes.items() if outcome != OUTCOME_MISSING}
    cases = []
    for nodeid in list(runs):
        outcome = latest.get(nodeid, "failed")
        final = OUTCOME_FAILED if outcome in FAILING_OUTCOMES else OUTCOME_SKIPPED if outcome == OUTCOME_SKIPPED else OUTCOME_PASSED
        entry: Optional[QuarantineEntry] = matching_entry(quarantine, nodeid=nodeid, fingerprint=fingerprints[nodeid])
        cases.append(RerunCase(
            nodeid=nodeid, outcome=final, failed_runs=tuple(runs[nodeid]),
            flaky=nodeid in flaky and outcome == OUTCOME_PASSED,
            quarantine_reason=entry.reason if entry is not None and final == OUTCOME_FAILED else None,
        ))
    # The tests the captured run itself passed on a re-run (a re-run plugin): flaky from the start.
    cases += [RerunCase(nodeid=nodeid, outcome=OUTCOME_PASSED, failed_runs=(_failed_run(failure),), flaky=True)
              for failure in incident.passed_on_rerun if (nodeid := failure.nodeid or failure.test) not in runs]
    return cases
