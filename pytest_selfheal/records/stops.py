"""The facts of each stop reason, in one table (pure): adding a stop reason is one row here
(and its place in the loop's precedence). The sentence is a ``str.format`` template over the
values ``loop/messages.stop_message`` computes; ``{id}`` in a command is the incident id.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

from pytest_selfheal.records.vocab import FinalStatus, StopReason, Tone

# (id, label, command template or None) of one option of a decision point.
Option = tuple[str, str, Optional[str]]


@dataclass(frozen=True)
class StopFacts:
    """Everything fixed about one stop reason."""

    final_status: Optional[FinalStatus]  # None: the incident stays open and resumable
    message: str  # a template over stop_message's values
    options: tuple[Option, ...]
    next_action: str
    tone: Tone = Tone.BAD


_ESCALATED = FinalStatus.ESCALATED
_KEEP = ("stop", "Stop and keep the incident escalated", "selfheal archive {id} --as escalated")
_EXPORT = ("export", "Export the loop report", "selfheal report {id}")
_INVESTIGATE = ("investigate", "Investigate manually with the plan", "selfheal show {id}")

STOPS: Mapping[str, StopFacts] = {
    StopReason.SUCCESS: StopFacts(
        FinalStatus.RESOLVED,
        "All selected tests pass at iteration {iteration}; the incident is resolved{flaky_note}.",
        (
            ("accept", "Accept the result: the incident is archived as resolved", None),
            ("run_full_suite", "Run the whole test suite to check for regressions", "python -m pytest"),
            _EXPORT,
        ),
        "Nothing to do: the verification passes; review any proposed patch and run the full suite.",
        tone=Tone.GOOD,
    ),
    StopReason.UNVERIFIED_FAILURES: StopFacts(
        _ESCALATED,
        "All selected tests pass at iteration {iteration}, but {unverified:,} more failure(s) of the "
        "capture were over its cap and never verified: not resolved.",
        (
            ("rerun", "Run the whole suite with pytest --selfheal: what still fails is captured",
             "python -m pytest --selfheal"),
            _INVESTIGATE,
            _EXPORT,
        ),
        "Run the whole suite again (python -m pytest --selfheal): the failures over the capture's cap were never "
        "verified, and what still fails is captured as its own incident.",
    ),
    StopReason.TESTS_EDITED: StopFacts(
        _ESCALATED,
        "All selected tests pass at iteration {iteration}, but only with test files edited ({edited}): "
        "a person must review the test diff (selfheal show lists it); not resolved.",
        (
            ("review", "Review the test diff first, then the fix", "selfheal show {id}"),
            ("allow_test_edits", "Only if the tests were wrong: allow the test edits deliberately and apply the patch",
             "selfheal apply {id} --allow-test-edits"),
            _EXPORT,
        ),
        # A repair's proposed patch gets its own action (loop/messages.next_action_after_repair).
        "Review the test edit in your working tree first (git diff): the selection passes only with tests changed, "
        "which is no fix; undo the edit and fix the code, or, only if the tests were wrong, commit it deliberately.",
    ),
    StopReason.HARNESS_CHANGED: StopFacts(
        _ESCALATED,
        "What decides what runs and how a result is judged changed since the capture ({changes}): "
        "the verdict of this run is not trusted; not resolved.",
        (
            ("review", "Review what changed since the capture (tests' packages, pytest configuration, "
             "start-up customisation, judging keys) and undo it: a reopen keeps the seal", "selfheal show {id}"),
            ("plan", "Read the plan: the fix belongs in the code under repair", "selfheal plan {id}"),
            _EXPORT,
        ),
        "Review what changed since the capture (the decision point names it) and undo it; the capture's seal "
        "judges every later run, a reopen too; only a person at a terminal can accept a change "
        "(docs/loop.md, \"The seal\").",
    ),
    StopReason.MAX_ITERATIONS: StopFacts(
        _ESCALATED,
        "All {all_iterations} are used and the failure persists.",
        (
            ("one_more", "Raise ralf_lite.max_iterations and try more iterations", "selfheal loop {id}"),
            ("retry_tests", "Re-run the verification tests", "selfheal loop {id}"),
            _INVESTIGATE,
            _KEEP,
            _EXPORT,
        ),
        "Investigate manually with the plan, or raise max_iterations and loop again "
        "(selfheal loop {id} --reopen) if the last iterations made progress.",
    ),
    StopReason.REPEATED_FINGERPRINT: StopFacts(
        _ESCALATED,
        "The same failure (fingerprint {fingerprint}{fingerprint_note}) was seen {same} times in a row, the capture included; "
        "stopping{rest}.",
        (
            ("investigate", "Investigate the repeated failure manually", "selfheal show {id}"),
            ("replan", "Regenerate the plan", "selfheal plan {id} --force"),
            ("change_and_retry", "Change the code, then re-run the verification tests", "selfheal loop {id}"),
            _KEEP,
            _EXPORT,
        ),
        "Investigate manually: the same failure keeps coming back; check the plan's target paths and hypotheses, "
        "change the code, then loop again (selfheal loop {id} --reopen).",
    ),
    StopReason.NO_PROGRESS: StopFacts(
        _ESCALATED,
        "No progress for {streak} consecutive iterations (the capture counts as one): "
        "no test fixed, {seen}, no code change.",
        (("replan", "Regenerate the plan", "selfheal plan {id} --force"), _INVESTIGATE, _KEEP, _EXPORT),
        "Regenerate the plan (selfheal plan {id} --force) or investigate manually: nothing changed between "
        "iterations; then loop again (selfheal loop {id} --reopen).",
    ),
    StopReason.REPLAN_REQUESTED: StopFacts(
        FinalStatus.REPLAN_REQUESTED,
        "No progress for {streak} consecutive iterations (the capture counts as one); a new plan is requested.",
        (
            ("review_plan", "Review the regenerated plan", "selfheal show {id}"),
            ("resume", "Run the loop on the new plan", "selfheal loop {id}"),
            ("stop", "Give up and archive as escalated", "selfheal archive {id} --as escalated"),
            _EXPORT,
        ),
        "Review the regenerated plan, then resume the loop on it (selfheal loop {id}).",
    ),
    StopReason.RUNTIME_BUDGET: StopFacts(
        _ESCALATED,
        "The runtime budget of {budget:g} minutes is used up ({elapsed:.1f} minutes elapsed).",
        (
            ("more_time", "Raise ralf_lite.max_runtime_minutes and resume", "selfheal loop {id}"),
            _INVESTIGATE,
            _KEEP,
            _EXPORT,
        ),
        "Raise max_runtime_minutes and loop again (selfheal loop {id} --reopen), or investigate manually; "
        "the loop ran out of time.",
    ),
    StopReason.TOOLING_ENV: StopFacts(
        _ESCALATED,
        "A failure is classified TOOLING_ENV (the environment, not the code){environment_note}; "
        "stopping at once; fix the environment and loop again.",
        (
            ("change_test_command", "Change the test command or the verification allowlist", None),
            ("retry_after_env_fix", "Fix the environment, then retry the tests", "selfheal loop {id}"),
            _KEEP,
            _EXPORT,
        ),
        "Fix the environment (missing module, command, credentials or service), then loop again "
        "(selfheal loop {id} --reopen).",
    ),
    StopReason.TIMEOUT: StopFacts(
        _ESCALATED,
        "Iteration {iteration} timed out again ({timeouts} timeouts in a row, one retry allowed); stopping.",
        (
            ("raise_timeout", "Raise the verification/repair timeout and resume", "selfheal loop {id}"),
            ("investigate", "Investigate the hang manually", "selfheal show {id}"),
            _KEEP,
            _EXPORT,
        ),
        "Find out why the run hangs (or raise the timeout), then loop again (selfheal loop {id} --reopen).",
    ),
    StopReason.NO_FIX_FOUND: StopFacts(
        _ESCALATED,
        # Said of whoever repairs: a repair provider, a coding agent's runs, or none at all.
        "No change to the code came in {no_fixes} iterations in a row: nothing was tried.",
        (
            ("fix_manually", "Fix the code manually, then re-run the verification tests", "selfheal loop {id}"),
            ("more_context", "Give whoever repairs it (a repair provider, a coding agent) more context",
             "selfheal show {id}"),
            _KEEP,
            _EXPORT,
        ),
        "Fix the code manually (nothing was changed between the last runs), then loop again "
        "(selfheal loop {id} --reopen).",
    ),
    StopReason.SCOPE_EXPANSION_DENIED: StopFacts(
        _ESCALATED,
        "The repair at iteration {iteration} touched files outside the plan's scope "
        "and the expansion was not approved.",
        (
            ("approve_scope", "Allow the files (ralf_lite.repair.allowed_paths or approval) and resume",
             "selfheal loop {id}"),
            ("fix_manually", "Fix the code manually within the plan's scope", "selfheal show {id}"),
            _KEEP,
            _EXPORT,
        ),
        "Decide whether the repair may touch the extra files; allow them and loop again "
        "(selfheal loop {id} --reopen), or fix within scope.",
    ),
    StopReason.PROVIDER_ESCAPED: StopFacts(
        _ESCALATED,
        "The repair provider at iteration {iteration} changed your working tree, index, HEAD or .git "
        "outside its worktree; nothing of that repair is applied — review what it changed.",
        (
            ("review", "Review what the provider changed outside its worktree (git status, .git/hooks, .git/config)",
             "git status"),
            ("sandbox", "Run the provider in a container (docs/repair.md) and resume", "selfheal loop {id} --reopen"),
            _KEEP,
        ),
        "Review what the repair provider changed in your working tree and .git (hooks, config), undo what you "
        "did not want, and run the provider in a container before looping again (selfheal loop {id} --reopen).",
    ),
    StopReason.REGRESSION: StopFacts(
        _ESCALATED,
        "The selected tests pass at iteration {iteration}, but the change broke {broken}, which passed on the "
        "captured code (the regression check); no iteration fixed both: not resolved.",
        (
            ("investigate", "Investigate the broken tests with the plan", "selfheal show {id}"),
            ("one_more", "Raise ralf_lite.max_iterations and let the repair try again", "selfheal loop {id} --reopen"),
            _KEEP,
            _EXPORT,
        ),
        "Fix the code so that the failing tests pass without breaking the tests the regression check names "
        "(selfheal show {id}), then loop again (selfheal loop {id} --reopen).",
    ),
    # Cancelled and disabled decide nothing about the failure: the incident stays open.
    StopReason.CANCELLED: StopFacts(
        None,
        "Cancelled after iteration {iteration}; recorded attempts are saved and `selfheal loop` resumes the incident.",
        (
            ("resume", "Resume the loop where it stopped", "selfheal loop {id}"),
            ("stop", "Give up and archive as escalated", "selfheal archive {id} --as escalated"),
            _EXPORT,
        ),
        "Resume the loop with `selfheal loop {id}` when ready; nothing was lost.",
    ),
    StopReason.DISABLED: StopFacts(
        None,
        "The RALF-Lite loop is disabled (ralf_lite.enabled is false); nothing was re-run.",
        (
            ("enable", "Set ralf_lite.enabled to true and run the loop", "selfheal loop {id}"),
            _INVESTIGATE,
            ("export", "Export the report", "selfheal report {id}"),
        ),
        "Enable ralf_lite (enabled: true) to loop, or fix the failure manually using the plan.",
    ),
}


# The progress labels that qualify a "progress no", by progress reason: how every surface
# (the iteration line, the report, MCP) says why a changed run is no progress.
PROGRESS_NOTES: Mapping[str, str] = {
    "message_unstable": "message unstable",  # new messages, same tests, same code: a repeat
    "flaky": "flaky",  # a test changed outcome with the code unchanged: never a fix
    "not_verified": "not verified",  # a failing test ran to no verdict (skipped, not collected)
    "harness_changed": "not judged",  # the judge changed: nothing of this run is trusted
    "first_evidence": "first evidence",  # nothing earlier was evidence (a capture of timeouts only)
}


def progress_words(fingerprint_changed: Optional[bool], progress: Optional[bool], reasons: tuple[str, ...] = ()) -> str:
    """``fingerprint same, progress no (flaky)``: the one wording of an iteration's progress
    ("same" is the loop's judgement, not a byte comparison: docs/loop.md "Progress")."""
    note = next((f" ({PROGRESS_NOTES[r]})" for r in reasons if r in PROGRESS_NOTES), "") if not progress else ""
    return (f"fingerprint {'changed' if fingerprint_changed else 'same'}, "
            f"progress {'yes' if progress else 'no'}{note}")


def stop_facts(stop_reason: str) -> StopFacts:
    try:
        return STOPS[stop_reason]
    except KeyError:
        raise ValueError(f"unknown stop reason {stop_reason!r}") from None


def stop_tone(stop_reason: Optional[str]) -> Tone:
    """Green for a STOP success, red for any other STOP, yellow for CONTINUE (None)."""
    if stop_reason is None:
        return Tone.WARN
    facts = STOPS.get(stop_reason)
    return facts.tone if facts is not None else Tone.BAD
