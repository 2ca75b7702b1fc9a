"""The words of the RALF-Lite loop (pure): the sentence of each decision, and the
artefacts written at every stop -- the decision point with its options, the handoff, the
recommended next action -- and the one-line terminal status.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping, Sequence
from typing import Optional

from pytest_selfheal.loop.policy import (
    REPAIR_CRASHED,
    REPAIR_NO_FIX_FOUND,
    REPAIR_TIMEOUT,
    LoopPolicy,
    Observation,
    fixed_tests,
    flaky_tests,
    is_evidence,
)
from pytest_selfheal.records.attempt import Decision, RepairBlock
from pytest_selfheal.records.jsondoc import every_key
from pytest_selfheal.records.models import OUTCOME_MISSING, OUTCOME_SKIPPED
from pytest_selfheal.records.run_result import DecisionContext, DecisionOption, DecisionPoint, Handoff, RunRepair
from pytest_selfheal.records.stops import progress_words, stop_facts, stop_tone
from pytest_selfheal.records.vocab import FIRST_FEW, FinalStatus, Line, StopReason, first_few


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def continue_message(policy: LoopPolicy, iteration: int, progress: Decision, retry: bool, no_fixes: int) -> str:
    left = policy.max_iterations - iteration
    if retry:
        return f"Iteration {iteration} timed out; retrying once ({plural(left, 'iteration')} left)."
    if no_fixes:
        return (
            f"No change to the code came at iteration {iteration}: nothing was tried; "
            f"a second such iteration in a row stops ({plural(left, 'iteration')} left)."
        )
    if iteration == 0:
        upto = plural(policy.max_iterations, "iteration")
        return f"Captured the failure; re-running the verification selection (up to {upto})."
    if progress.progress:
        reasons = ", ".join(progress.progress_reasons)
        return f"Iteration {iteration} made progress ({reasons}); continuing ({plural(left, 'iteration')} left)."
    return f"Iteration {iteration} made no progress yet; continuing ({plural(left, 'iteration')} left)."


def stop_message(reason: str, policy: LoopPolicy, observations: Sequence[Observation], iteration: int, same: int,
                 streak: int, timeouts: int, no_fixes: int, elapsed: float, unverified: int = 0) -> str:
    """The sentence of a stop for ``reason`` (its row's template), naming the counts that triggered it."""
    cur = observations[-1]
    flaky = flaky_tests(observations)
    # Name the repeated failure, not whatever a transparent (timed-out) run last saw.
    evidence = [o for o in observations if is_evidence(o)]
    fingerprint = (evidence[-1] if evidence else cur).primary_fingerprint
    left = max(0, policy.max_iterations - iteration)
    no_verdict = unverified_tests(cur.outcomes) if not cur.fingerprints else []
    values = {
        "iteration": iteration,
        "all_iterations": plural(policy.max_iterations, "iteration"),
        "same": same,
        "streak": streak,
        "timeouts": timeouts,
        "no_fixes": no_fixes,
        "elapsed": elapsed,
        "budget": policy.max_runtime_minutes or 0.0,
        "unverified": unverified,
        "fingerprint": fingerprint,
        "fingerprint_note": _fingerprint_note(fingerprint, evidence),
        "rest": f" without using the {plural(left, 'remaining iteration')}" if left else "",
        "flaky_note": f"; flaky (passed without a code change): {first_few(flaky)}" if flaky else "",
        "environment_note": f": {cur.environment}" if cur.environment else "",
        "seen": f"no verdict ({unverified_summary(no_verdict)})" if no_verdict else "same failure",
        "changes": first_few(cur.harness_changed),
        "edited": first_few(cur.tests_edited),
        "broken": first_few([n.rsplit("::", 1)[-1] for n in cur.regressions]),
    }
    return stop_facts(reason).message.format_map(values)


def _fingerprint_note(fingerprint: Optional[str], evidence: Sequence[Observation]) -> str:
    """What a repeat's fingerprint is, when it is not simply the capture's first failure's."""
    if fingerprint is None or len(evidence) < 2:
        return ""
    if fingerprint not in evidence[-2].fingerprint_set:
        return "; its message changes between runs"
    first = evidence[0].primary_fingerprint
    if first is None or first == fingerprint:
        return ""
    gone = first not in evidence[-1].fingerprint_set
    return f"; not the capture's first failure ({first}), which {'no longer fails' if gone else 'fails too'}"


def recommended_next_action(stop_reason: Optional[str], incident_id: Optional[str] = None) -> str:
    """What to do after this stop reason, with commands that work as printed."""
    if stop_reason is None:
        return "Continue the loop: run the next iteration."
    return stop_facts(stop_reason).next_action.format(id=incident_id or "ID")


def next_action_after_repair(stop_reason: Optional[str], incident_id: str, repair: Optional[RunRepair]) -> Optional[str]:
    """What to do once a repair changed something, or None: the stop reason's own action fits."""
    if repair is None or not repair.final_patch:
        return None
    files = first_few(repair.files_changed)
    if repair.applied:
        return (f"Review the fix the repair applied to your working tree ({files}), run the whole suite "
                "(python -m pytest), then commit it.")
    if stop_reason == StopReason.SUCCESS:
        command = repair.apply_command or f"selfheal apply {incident_id}"
        return (f"Review the proposed fix ({files}; selfheal show {incident_id}): it is not in your working tree "
                f"yet; apply it with: {command}")
    if stop_reason == StopReason.TESTS_EDITED:
        return (f"Review the test diff first (selfheal show {incident_id}): the selection passes only with tests "
                "changed, and approval never covers a test edit; only if the tests were wrong, allow the edits "
                f"deliberately (selfheal apply {incident_id} --allow-test-edits).")
    return recommended_next_action(stop_reason, incident_id) + (
        f" A partial patch ({files}) is proposed for review, not applied: selfheal show {incident_id}.")


def command_shown(argv: Sequence[str], limit: int = FIRST_FEW) -> str:
    """A command as its ``running`` line shows it: its first few test ids and a count of the rest."""
    ids = [i for i, arg in enumerate(argv) if "::" in arg and not arg.startswith("-")]
    hidden = set(ids[limit:])
    words = [shlex.quote(arg) for i, arg in enumerate(argv) if i not in hidden]
    if hidden:
        words.insert(ids[limit - 1] + 1 if limit else ids[0], f"(+{len(hidden):,} more test ids)")
    return " ".join(words)


def repair_line(result: RepairBlock) -> str:
    """What one repair call did, and why nothing is kept or what approval let in."""
    shown = f" ({first_few(result.files_changed)})" if result.files_changed else ""
    if result.get_extra(StopReason.PROVIDER_ESCAPED):  # recorded as a crash (rolled back), it is no crash
        return f"escaped its worktree{shown}: {result.message or 'no message'} — rolled back"
    if result.result in (REPAIR_CRASHED, REPAIR_TIMEOUT):
        return f"{result.result}{shown}: {result.message or 'no message'} — rolled back"
    if result.scope_denied or result.out_of_scope:
        return f"{result.result}{shown} — {result.message}"
    if result.result == REPAIR_NO_FIX_FOUND and result.message:
        return f"{result.result}: {result.message}"
    return f"{result.result}{shown}"


def _archived_option(oid: str, label: str, command: Optional[str]) -> tuple[str, str, Optional[str]]:
    """An option of a stop that archives the incident: the loop runs again only through a reopen."""
    if command == "selfheal archive {id} --as escalated":
        return oid, "Keep the incident escalated (it is archived already: nothing to run)", None
    if command == "selfheal loop {id}":
        return oid, f"{label} (reopens the archived incident first)", "selfheal loop {id} --reopen"
    return oid, label, command


def decision_point(decision: Decision, observations: Sequence[Observation], policy: LoopPolicy, *,
                   incident_id: Optional[str] = None, failure_signature: Optional[str] = None,
                   patch_proposed: bool = True) -> DecisionPoint:
    """The decision point written at every stop: its reason's options (applying a patch only if ``patch_proposed``)."""
    if decision.stop_reason is None:
        raise ValueError("a decision point is only written when the loop stops")
    ident = incident_id if incident_id is not None else "<incident_id>"
    table = tuple(option for option in stop_facts(decision.stop_reason).options
                  if patch_proposed or not (option[2] or "").startswith("selfheal apply"))
    if decision.final_status in (FinalStatus.RESOLVED, FinalStatus.ESCALATED):
        table = tuple(_archived_option(*option) for option in table)
    options = tuple(option_record(oid, label, command.format(id=ident) if command is not None else None)
                    for oid, label, command in table)
    context = DecisionContext(
        iteration=decision.iteration, remaining=max(0, policy.max_iterations - decision.iteration),
        failure_signature=failure_signature, keys=every_key(DecisionContext),
        fingerprint=next((o.primary_fingerprint for o in reversed(observations) if o.fingerprints), None))
    return DecisionPoint(reason=decision.stop_reason, message=decision.message, options=options, context=context,
                         keys=every_key(DecisionPoint))


def option_record(oid: str, label: str, command: Optional[str]) -> DecisionOption:
    return DecisionOption(id=oid, label=label, command=command, keys=every_key(DecisionOption))


def handoff(
    observations: Sequence[Observation],
    decision: Decision,
    incident_id: Optional[str] = None,
) -> Handoff:
    """The structured handoff written at every stop: what was tried and what is left."""
    return Handoff(
        iterations=max(0, len(observations) - 1),
        stop_reason=decision.stop_reason,
        fingerprints_per_iteration=tuple(tuple(o.fingerprints) for o in observations),
        fixed=tuple(fixed_tests(observations)),
        flaky_tests=tuple(flaky_tests(observations)),
        recommended_next_action=recommended_next_action(decision.stop_reason, incident_id),
        keys=every_key(Handoff),
    )


def iteration_prefix(incident_id: Optional[str], iteration: int, max_iterations: int) -> str:
    """``selfheal: incident <id> iteration 2 of 3``: how each line about one iteration begins."""
    who = f"incident {incident_id} " if incident_id else ""
    return f"selfheal: {who}iteration {iteration} of {max_iterations}"


def status_line(decision: Decision, policy: LoopPolicy, *, incident_id: Optional[str] = None) -> str:
    """ONE parseable line per iteration (grammar in docs/loop.md "Status line")."""
    verdict = f"STOP {decision.stop_reason}" if decision.stopped else "CONTINUE"
    words = progress_words(bool(decision.fingerprint_changed), bool(decision.progress), decision.progress_reasons)
    if decision.stop_reason in (StopReason.CANCELLED, StopReason.DISABLED):
        words = "no verification ran, no fingerprint"  # a stop before the run: nothing was compared
    text = f"{iteration_prefix(incident_id, decision.iteration, policy.max_iterations)}: {words} -> {verdict}"
    return Line(text, stop_tone(decision.stop_reason if decision.stopped else None))


def naming_changes(line: str, stop_reason: Optional[str], changed: Sequence[str], edited: Sequence[str] = ()) -> str:
    """The iteration line of a ``harness_changed`` or ``tests_edited`` stop with what changed at its end."""
    changed = changed if stop_reason == StopReason.HARNESS_CHANGED else edited if stop_reason == StopReason.TESTS_EDITED \
        else ()
    if not changed:
        return line
    return Line(f"{line} ({first_few(changed)} changed since the capture)", stop_tone(stop_reason))


# A selected test that ran to no verdict, by outcome: how every surface names it.
UNVERIFIED: tuple[tuple[str, str], ...] = (
    (OUTCOME_SKIPPED, "skipped"),
    (OUTCOME_MISSING, "not collected or deselected"),
)


def unverified_tests(outcomes: Mapping[str, str], not_run: Collection[str] = ()) -> list[tuple[str, list[str]]]:
    """``(label, node ids)`` of the selected tests that ran to no verdict (``not_run``: their last outcome kept)."""
    found: list[tuple[str, list[str]]] = []
    for outcome, label in UNVERIFIED:
        nodeids = [n for n, o in outcomes.items() if o == outcome and n not in not_run]
        if nodeids:
            found.append((label, nodeids))
    return found


def unverified_summary(groups: Sequence[tuple[str, Sequence[str]]], limit: int = FIRST_FEW) -> str:
    """``1 skipped (a.py::t), 2 not collected or deselected (b.py::u, b.py::v)``."""
    return ", ".join(f"{len(nodeids):,} {label} ({first_few(nodeids, limit)})" for label, nodeids in groups)


def unverified_line(incident_id: str, outcomes: Mapping[str, str], not_run: Collection[str] = ()) -> Optional[str]:
    groups = unverified_tests(outcomes, not_run)
    if not groups:
        return None
    return (f"selfheal: incident {incident_id}: {unverified_summary(groups)}: verified nothing for them "
            "(not fixed, not the same failure)")
