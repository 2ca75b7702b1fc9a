"""The words of the RALF-Lite loop (pure): the sentence of each decision, and the
artefacts written at every stop -- the decision point with its options, the handoff, the
recommended next action -- and the one-line terminal status.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Optional

from pytest_selfheal.loop.policy import (
    FLAKY,
    MESSAGE_UNSTABLE,
    REPAIR_CRASHED,
    REPAIR_NO_FIX_FOUND,
    REPAIR_TIMEOUT,
    Decision,
    LoopPolicy,
    Observation,
    Progress,
    fixed_tests,
    flaky_tests,
    is_evidence,
)
from pytest_selfheal.records.attempt import RepairBlock
from pytest_selfheal.records.models import OUTCOME_MISSING, OUTCOME_SKIPPED
from pytest_selfheal.records.run_result import DecisionContext, DecisionOption, DecisionPoint, Handoff, RunRepair
from pytest_selfheal.records.vocab import FinalStatus, Line, StopReason, stop_tone

# --------------------------------------------------------------------------- decision sentences


def plural(n: int, word: str) -> str:
    """``1 iteration``, ``2 iterations``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def continue_message(
    policy: LoopPolicy,
    observations: Sequence[Observation],
    iteration: int,
    progress: Progress,
    retry: bool,
    no_fixes: int,
) -> str:
    """The sentence of a decision that continues (``Iteration 2 made progress ...``)."""
    left = policy.max_iterations - iteration
    if retry:
        return f"Iteration {iteration} timed out; retrying once ({plural(left, 'iteration')} left)."
    if no_fixes:
        return (
            f"The repair provider produced no fix at iteration {iteration}; "
            f"it gets one more chance ({plural(left, 'iteration')} left)."
        )
    if iteration == 0:
        upto = plural(policy.max_iterations, "iteration")
        return f"Captured the failure; re-running the verification selection (up to {upto})."
    if progress.progress:
        reasons = ", ".join(progress.reasons)
        return f"Iteration {iteration} made progress ({reasons}); continuing ({plural(left, 'iteration')} left)."
    return f"Iteration {iteration} made no progress yet; continuing ({plural(left, 'iteration')} left)."


def stop_message(
    reason: str,
    policy: LoopPolicy,
    observations: Sequence[Observation],
    iteration: int,
    same: int,
    streak: int,
    timeouts: int,
    no_fixes: int,
    elapsed: float,
    unverified: int = 0,
) -> str:
    """The sentence of a stop for ``reason``, naming the counts that triggered it."""
    cur = observations[-1] if observations else None
    fingerprint = cur.primary_fingerprint if cur is not None else None
    if reason == StopReason.DISABLED:
        return "The RALF-Lite loop is disabled (ralf_lite.enabled is false); nothing was re-run."
    if reason == StopReason.SUCCESS:
        flaky = flaky_tests(observations)
        note = f"; flaky (passed without a code change): {', '.join(flaky)}" if flaky else ""
        return f"All selected tests pass at iteration {iteration}; the incident is resolved{note}."
    if reason == StopReason.UNVERIFIED_FAILURES:
        return (f"All selected tests pass at iteration {iteration}, but {unverified:,} more failure(s) of the "
                "capture were over its cap and never verified: not resolved.")
    if reason == StopReason.TESTS_EDITED:
        return (f"All selected tests pass at iteration {iteration}, but only with test files edited "
                "(ralf_lite.repair.allow_test_edits): a person must review the test diff; not resolved.")
    if reason == StopReason.CANCELLED:
        return (
            f"Cancelled after iteration {iteration}; recorded attempts are saved "
            "and `selfheal loop` resumes the incident."
        )
    if reason == StopReason.TOOLING_ENV:
        why = f": {cur.environment}" if cur is not None and cur.environment else ""
        return (
            f"A failure is classified TOOLING_ENV (the environment, not the code){why}; "
            "stopping at once; fix the environment and loop again."
        )
    if reason == StopReason.SCOPE_EXPANSION_DENIED:
        return (
            f"The repair at iteration {iteration} touched files outside the plan's scope "
            "and the expansion was not approved."
        )
    if reason == StopReason.PROVIDER_ESCAPED:
        return (
            f"The repair provider at iteration {iteration} changed your working tree, index, HEAD or .git "
            "outside its worktree; nothing of that repair is applied — review what it changed."
        )
    if reason == StopReason.TIMEOUT:
        return f"Iteration {iteration} timed out again ({timeouts} timeouts in a row, one retry allowed); stopping."
    if reason == StopReason.REPLAN_REQUESTED:
        return f"No progress for {streak} consecutive iterations (the capture counts as one); a new plan is requested."
    if reason == StopReason.REPEATED_FINGERPRINT:
        # Name the repeated failure, not whatever a transparent (timed-out) run last saw.
        evidence = [o for o in observations if is_evidence(o)]
        fingerprint = evidence[-1].primary_fingerprint if evidence else fingerprint
        left = max(0, policy.max_iterations - iteration)
        rest = f" without using the {plural(left, 'remaining iteration')}" if left else ""
        return (
            f"The same failure (fingerprint {fingerprint}) was seen {same} times in a row, "
            f"the capture included; stopping{rest}."
        )
    if reason == StopReason.NO_PROGRESS:
        no_verdict = unverified_tests(cur.outcomes) if cur is not None and not cur.fingerprints else []
        seen = f"no verdict ({unverified_summary(no_verdict)})" if no_verdict else "same failure"
        return (
            f"No progress for {streak} consecutive iterations (the capture counts as one): "
            f"no test fixed, {seen}, no code change."
        )
    if reason == StopReason.NO_FIX_FOUND:
        return f"The repair provider produced no fix {no_fixes} times in a row."
    if reason == StopReason.RUNTIME_BUDGET:
        budget = policy.max_runtime_minutes or 0.0
        return f"The runtime budget of {budget:g} minutes is used up ({elapsed:.1f} minutes elapsed)."
    # StopReason.MAX_ITERATIONS
    return f"All {plural(policy.max_iterations, 'iteration')} are used and the failure persists."


# --------------------------------------------------------------------------- stop artefacts

# Context-aware options per stop reason (seed: self-correction loop decision points).
# (id, label, command template or None); {id} is the incident id.
_OPTIONS: dict[str, tuple[tuple[str, str, Optional[str]], ...]] = {
    StopReason.SUCCESS: (
        ("accept", "Accept the result: the incident is archived as resolved", None),
        ("run_full_suite", "Run the whole test suite to check for regressions", "python -m pytest"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.UNVERIFIED_FAILURES: (
        ("rerun", "Run the whole suite with pytest --selfheal: what still fails is captured", "python -m pytest --selfheal"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.TESTS_EDITED: (
        ("review", "Review the test diff first, then the fix", "selfheal show {id}"),
        ("allow_test_edits", "Only if the tests were wrong: allow the test edits deliberately and apply the patch",
         "selfheal apply {id} --allow-test-edits"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.MAX_ITERATIONS: (
        ("one_more", "Raise ralf_lite.max_iterations and try more iterations", "selfheal loop {id}"),
        ("retry_tests", "Re-run the verification tests", "selfheal loop {id}"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.REPEATED_FINGERPRINT: (
        ("investigate", "Investigate the repeated failure manually", "selfheal show {id}"),
        ("replan", "Regenerate the plan", "selfheal plan {id} --force"),
        ("change_and_retry", "Change the code, then re-run the verification tests", "selfheal loop {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.NO_PROGRESS: (
        ("replan", "Regenerate the plan", "selfheal plan {id} --force"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.REPLAN_REQUESTED: (
        ("review_plan", "Review the regenerated plan", "selfheal show {id}"),
        ("resume", "Run the loop on the new plan", "selfheal loop {id}"),
        ("stop", "Give up and archive as escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.RUNTIME_BUDGET: (
        ("more_time", "Raise ralf_lite.max_runtime_minutes and resume", "selfheal loop {id}"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.TOOLING_ENV: (
        ("change_test_command", "Change the test command or the verification allowlist", None),
        ("retry_after_env_fix", "Fix the environment, then retry the tests", "selfheal loop {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.TIMEOUT: (
        ("raise_timeout", "Raise the verification/repair timeout and resume", "selfheal loop {id}"),
        ("investigate", "Investigate the hang manually", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.NO_FIX_FOUND: (
        ("change_provider", "Try another repair provider or give it more context", "selfheal loop {id}"),
        ("fix_manually", "Fix the code manually, then re-run the verification tests", "selfheal loop {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.SCOPE_EXPANSION_DENIED: (
        (
            "approve_scope",
            "Allow the files (ralf_lite.repair.allowed_paths or approval) and resume",
            "selfheal loop {id}",
        ),
        ("fix_manually", "Fix the code manually within the plan's scope", "selfheal show {id}"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.PROVIDER_ESCAPED: (
        ("review", "Review what the provider changed outside its worktree (git status, .git/hooks, .git/config)",
         "git status"),
        ("sandbox", "Run the provider in a container (docs/repair.md) and resume", "selfheal loop {id} --reopen"),
        ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated"),
    ),
    StopReason.CANCELLED: (
        ("resume", "Resume the loop where it stopped", "selfheal loop {id}"),
        ("stop", "Give up and archive as escalated", "selfheal archive {id} --as escalated"),
        ("export", "Export the loop report", "selfheal report {id}"),
    ),
    StopReason.DISABLED: (
        ("enable", "Set ralf_lite.enabled to true and run the loop", "selfheal loop {id}"),
        ("investigate", "Investigate manually with the plan", "selfheal show {id}"),
        ("export", "Export the report", "selfheal report {id}"),
    ),
}

# {id} is the incident id ("ID" when unknown). A stop that escalates has archived the
# incident: looping again goes through a reopen (`selfheal loop ID --reopen`, docs/loop.md).
_NEXT_ACTION: dict[str, str] = {
    StopReason.SUCCESS: "Nothing to do: the verification passes; review any proposed patch and run the full suite.",
    StopReason.UNVERIFIED_FAILURES: (
        "Run the whole suite again (python -m pytest --selfheal): the failures over the capture's cap were never "
        "verified, and what still fails is captured as its own incident."
    ),
    StopReason.TESTS_EDITED: (
        "Review the test diff first (selfheal show {id}): the selection passes only with tests changed, and "
        "approval never covers a test edit; only if the tests were wrong, allow the edits deliberately "
        "(selfheal apply {id} --allow-test-edits)."
    ),
    StopReason.MAX_ITERATIONS: (
        "Investigate manually with the plan, or raise max_iterations and loop again "
        "(selfheal loop {id} --reopen) if the last iterations made progress."
    ),
    StopReason.REPEATED_FINGERPRINT: (
        "Investigate manually: the same failure keeps coming back; check the plan's target paths and hypotheses, "
        "change the code, then loop again (selfheal loop {id} --reopen)."
    ),
    StopReason.NO_PROGRESS: (
        "Regenerate the plan (selfheal plan {id} --force) or investigate manually: nothing changed between "
        "iterations; then loop again (selfheal loop {id} --reopen)."
    ),
    StopReason.REPLAN_REQUESTED: "Review the regenerated plan, then resume the loop on it (selfheal loop {id}).",
    StopReason.RUNTIME_BUDGET: (
        "Raise max_runtime_minutes and loop again (selfheal loop {id} --reopen), or investigate manually; "
        "the loop ran out of time."
    ),
    StopReason.TOOLING_ENV: (
        "Fix the environment (missing module, command, credentials or service), then loop again "
        "(selfheal loop {id} --reopen)."
    ),
    StopReason.TIMEOUT: "Find out why the run hangs (or raise the timeout), then loop again (selfheal loop {id} --reopen).",
    StopReason.NO_FIX_FOUND: (
        "Fix the code manually or give the repair provider more context (it found no change to make), "
        "then loop again (selfheal loop {id} --reopen)."
    ),
    StopReason.SCOPE_EXPANSION_DENIED: (
        "Decide whether the repair may touch the extra files; allow them and loop again "
        "(selfheal loop {id} --reopen), or fix within scope."
    ),
    StopReason.PROVIDER_ESCAPED: (
        "Review what the repair provider changed in your working tree and .git (hooks, config), undo what you "
        "did not want, and run the provider in a container before looping again (selfheal loop {id} --reopen)."
    ),
    StopReason.CANCELLED: "Resume the loop with `selfheal loop {id}` when ready; nothing was lost.",
    StopReason.DISABLED: "Enable ralf_lite (enabled: true) to loop, or fix the failure manually using the plan.",
}


def recommended_next_action(stop_reason: Optional[str], incident_id: Optional[str] = None) -> str:
    """One sentence telling a human (or agent) what to do after this stop reason; the
    commands in it name ``incident_id`` (``ID`` when None) and work as printed."""
    if stop_reason is None:
        return "Continue the loop: run the next iteration."
    try:
        return _NEXT_ACTION[stop_reason].format(id=incident_id or "ID")
    except KeyError:
        raise ValueError(f"unknown stop reason {stop_reason!r}") from None


def next_action_after_repair(stop_reason: Optional[str], incident_id: str, repair: Optional[RunRepair]) -> Optional[str]:
    """What to do once a repair changed something, or None (the stop reason's own action
    fits): a fix applied is reviewed, tested and committed; a fix proposed is reviewed and
    applied; a partial patch is there to review. Never "nothing to do" after a repair."""
    if repair is None or not repair.final_patch:
        return None
    files = ", ".join(repair.files_changed[:5]) + (f" (+{len(repair.files_changed) - 5} more)"
                                                   if len(repair.files_changed) > 5 else "")
    if repair.applied:
        return (f"Review the fix the repair applied to your working tree ({files}), run the whole suite "
                "(python -m pytest), then commit it.")
    if stop_reason == StopReason.SUCCESS:
        command = repair.apply_command or f"selfheal apply {incident_id}"
        return (f"Review the proposed fix ({files}; selfheal show {incident_id}): it is not in your working tree "
                f"yet; apply it with: {command}")
    if stop_reason == StopReason.TESTS_EDITED:
        return None  # its own action already says review the test diff first
    return recommended_next_action(stop_reason, incident_id) + (
        f" A partial patch ({files}) is proposed for review, not applied: selfheal show {incident_id}.")


def repair_line(result: RepairBlock) -> str:
    """What one repair call did, for its progress line and the report: the result, the files,
    and why nothing is kept (a crash's exit code and last line, a timeout, a scope denial) or
    which out-of-scope files approval let in."""
    shown = f" ({', '.join(result.files_changed)})" if result.files_changed else ""
    if result.result in (REPAIR_CRASHED, REPAIR_TIMEOUT):
        return f"{result.result}{shown}: {result.message or 'no message'} — rolled back"
    if result.scope_denied or result.out_of_scope:
        return f"{result.result}{shown} — {result.message}"
    if result.result == REPAIR_NO_FIX_FOUND and result.message:
        return f"{result.result}: {result.message}"
    return f"{result.result}{shown}"


def _archived_option(oid: str, label: str, command: Optional[str]) -> tuple[str, str, Optional[str]]:
    """An option of a stop that archives the incident (resolved/escalated): the loop runs
    again only through a reopen, and "keep it escalated" has nothing left to run."""
    if command == "selfheal archive {id} --as escalated":
        return oid, "Keep the incident escalated (it is archived already: nothing to run)", None
    if command == "selfheal loop {id}":
        return oid, f"{label} (reopens the archived incident first)", "selfheal loop {id} --reopen"
    return oid, label, command


def decision_point(
    decision: Decision,
    observations: Sequence[Observation],
    policy: LoopPolicy,
    *,
    incident_id: Optional[str] = None,
    failure_signature: Optional[str] = None,
    pending_scope_files: Sequence[str] = (),
) -> DecisionPoint:
    """The decision point written at every stop: ``{reason, message, options, context}``.

    ``options`` are context-aware per stop reason: ``{id, label, command}`` (``command``
    is a suggested shell line for a human, None when there is none; after a stop that
    archives the incident, a loop command reopens it first). Raises
    ``ValueError`` for a decision that continues.
    """
    if decision.stop_reason is None:
        raise ValueError("a decision point is only written when the loop stops")
    ident = incident_id if incident_id is not None else "<incident_id>"
    table = _OPTIONS[decision.stop_reason]
    if decision.final_status in (FinalStatus.RESOLVED, FinalStatus.ESCALATED):
        table = tuple(_archived_option(*option) for option in table)
    options = tuple(
        option_record(oid, label, command.format(id=ident) if command is not None else None)
        for oid, label, command in table
    )
    fingerprint = next((o.primary_fingerprint for o in reversed(observations) if o.fingerprints), None)
    context = DecisionContext(
        iteration=decision.iteration,
        remaining=max(0, policy.max_iterations - decision.iteration),
        failure_signature=failure_signature,
        fingerprint=fingerprint,
        pending_scope_files=tuple(pending_scope_files),
        keys=_CONTEXT_KEYS,
    )
    return DecisionPoint(
        reason=decision.stop_reason, message=decision.message, options=options, context=context, keys=_POINT_KEYS
    )


def option_record(oid: str, label: str, command: Optional[str]) -> DecisionOption:
    """One option of a decision point, written with all three keys (``command`` null when none)."""
    return DecisionOption(id=oid, label=label, command=command, keys=_OPTION_KEYS)


# Every key of each record written, in its order (a null stays null).
_POINT_KEYS = ("reason", "message", "options", "context")
_OPTION_KEYS = ("id", "label", "command")
_CONTEXT_KEYS = ("iteration", "remaining", "failureSignature", "fingerprint", "pendingScopeFiles")
_HANDOFF_KEYS = tuple(f.key for f in Handoff.FIELDS)


def handoff(
    observations: Sequence[Observation],
    decision: Decision,
    incident_id: Optional[str] = None,
) -> Handoff:
    """The structured handoff written at every stop (seed: "Handoff on Exhaustion").

    ``fingerprints_per_iteration[i]`` lists the failing fingerprints of iteration ``i``
    (0 = the capture). ``fixed`` lists the tests that failed and now pass.
    """
    return Handoff(
        iterations=max(0, len(observations) - 1),
        stop_reason=decision.stop_reason,
        fingerprints_per_iteration=tuple(tuple(o.fingerprints) for o in observations),
        fixed=tuple(fixed_tests(observations)),
        flaky_tests=tuple(flaky_tests(observations)),
        recommended_next_action=recommended_next_action(decision.stop_reason, incident_id),
        keys=_HANDOFF_KEYS,
    )


def iteration_prefix(incident_id: Optional[str], iteration: int, max_iterations: int) -> str:
    """``selfheal: incident <id> iteration 2 of 3`` — how each line about one iteration of a
    loop run begins: its repair, its verification command, its status line."""
    who = f"incident {incident_id} " if incident_id else ""
    return f"selfheal: {who}iteration {iteration} of {max_iterations}"


def status_line(decision: Decision, policy: LoopPolicy, *, incident_id: Optional[str] = None) -> str:
    """One machine-parseable line for the terminal (the agent-in-the-loop mode).

    ``selfheal: incident <id> iteration 2 of 3: fingerprint same, progress no -> STOP repeated_fingerprint``
    """
    fp = "changed" if decision.progress.fingerprint_changed else "same"
    prog = "yes" if decision.progress.progress else "no"
    verdict = f"STOP {decision.stop_reason}" if decision.stopped else "CONTINUE"
    reasons = decision.progress.reasons
    unstable = " (message unstable)" if MESSAGE_UNSTABLE in reasons else " (flaky)" if FLAKY in reasons else ""
    text = (f"{iteration_prefix(incident_id, decision.iteration, policy.max_iterations)}: "
            f"fingerprint {fp}, progress {prog}{unstable} -> {verdict}")
    return Line(text, stop_tone(decision.stop_reason if decision.stopped else None))


# --------------------------------------------------------------------------- tests without a verdict

# A selected test that ran to no verdict, by outcome: how every surface names it.
UNVERIFIED: tuple[tuple[str, str], ...] = (
    (OUTCOME_SKIPPED, "skipped"),
    (OUTCOME_MISSING, "not collected or deselected"),
)


def unverified_tests(outcomes: Mapping[str, str], not_run: Collection[str] = ()) -> list[tuple[str, list[str]]]:
    """``(label, node ids)`` of the selected tests a verification ran to no verdict: skipped
    (an xfail too), or absent from its results (deselected, not collected). ``not_run``
    (the agent mode's tests that a subset or ``-x`` left out) are not counted: they keep
    their last outcome."""
    found: list[tuple[str, list[str]]] = []
    for outcome, label in UNVERIFIED:
        nodeids = [n for n, o in outcomes.items() if o == outcome and n not in not_run]
        if nodeids:
            found.append((label, nodeids))
    return found


def unverified_summary(groups: Sequence[tuple[str, Sequence[str]]], limit: int = 5) -> str:
    """``1 skipped (a.py::t), 2 not collected or deselected (b.py::u, b.py::v)``."""
    parts = []
    for label, nodeids in groups:
        shown = ", ".join(nodeids[:limit]) + (f" (+{len(nodeids) - limit} more)" if len(nodeids) > limit else "")
        parts.append(f"{len(nodeids)} {label} ({shown})")
    return ", ".join(parts)


def unverified_line(incident_id: str, outcomes: Mapping[str, str], not_run: Collection[str] = ()) -> Optional[str]:
    """The line printed after the status line when selected tests ran to no verdict, or None."""
    groups = unverified_tests(outcomes, not_run)
    if not groups:
        return None
    return (f"selfheal: incident {incident_id}: {unverified_summary(groups)}: verified nothing for them "
            "(not fixed, not the same failure)")


__all__ = [
    "continue_message",
    "decision_point",
    "handoff",
    "plural",
    "recommended_next_action",
    "iteration_prefix",
    "next_action_after_repair",
    "repair_line",
    "status_line",
    "stop_message",
    "UNVERIFIED",
    "unverified_line",
    "unverified_summary",
    "unverified_tests",
]
