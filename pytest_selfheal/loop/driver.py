"""The RALF-Lite loop driver: run (or resume) the loop of one incident until it stops (docs/loop.md).

One iteration = *(repair) → verify → observe → record → decide*. The loop state is read
once when a run starts and updated in memory as each attempt is written. It is resumable
because the state is the files': an iteration killed before its attempt was written simply
runs again; a recorded stop is completed, never re-decided.
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Protocol

from pytest_selfheal.analysis.rules import Rule, rules_for_run
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import Cancelled, InputError, RefusedError, printable
from pytest_selfheal.gitrepo import PendingSnapshot, diff_hash
from pytest_selfheal.loop import localise as localisation
from pytest_selfheal.loop import policy
from pytest_selfheal.loop.attempts import (
    IterationOutcome,
    ensure_plan,
    finalize,
    record_iteration,
    require_inbox,
    start_running,
)
from pytest_selfheal.loop.control import CancelState, Interrupted, kill_point, loop_lock, signal_handlers
from pytest_selfheal.loop.decision import decide, known_flaky
from pytest_selfheal.loop.messages import command_shown, iteration_prefix, option_record, status_line
from pytest_selfheal.loop.policy import loop_selection
from pytest_selfheal.loop.regression import check_incident, still_success
from pytest_selfheal.loop.seal_check import harness_changed, judged_config
from pytest_selfheal.loop.state import LoopRun, minutes_between, read_context, stamp, utcnow
from pytest_selfheal.loop.verify import (
    COLLECTION_KEY,
    Verifier,
    check_command,
    observe,
    remove_stale_verify_dirs,
    run_selection,
    start_dir,
    trusted_options,
    verify_dir_prefix,
)
from pytest_selfheal.names import INBOX_DIR
from pytest_selfheal.plan.build import readable_command, verification_argv
from pytest_selfheal.plan.groups import selected_by
from pytest_selfheal.records.attempt import Attempt, Decision, RepairBlock
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import every_key
from pytest_selfheal.records.models import Failure
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import DecisionContext, DecisionPoint, LoopResult
from pytest_selfheal.records.vocab import TERMINAL, Line, StopReason, final_tone, first_few
from pytest_selfheal.store import events as ev
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.root import Store


class Provider(Protocol):
    """A repair provider, called before each verification: None (the iteration only
    verifies) or its :class:`RepairBlock`, whose ``worktree`` the verification then runs in."""

    def __call__(self, *, incident_id: str, iteration: int, store: Store, plan: Plan, last_attempt: Optional[Attempt],
                 observations: Sequence[policy.Observation]) -> Optional[RepairBlock]: ...


def selection_nodeids(plan: Plan, incident: Incident, argvs: Sequence[Sequence[str]]) -> list[str]:
    """The node ids the verification commands select: the plan's node ids the commands name
    (or whose file they name), else the command words holding ``::``."""
    words = {word for argv in argvs for word in argv}
    candidates = list(dict.fromkeys(nodeid for action in plan.actions for nodeid in action.nodeids))
    if not candidates:
        candidates = list(dict.fromkeys(incident.nodeids))
    chosen = [n for n in candidates if selected_by(n, words)]
    if chosen:
        return chosen
    return list(dict.fromkeys(word for argv in argvs for word in argv[1:] if "::" in word and not word.startswith("-")))


def _exclude_from_argvs(argvs: Sequence[Sequence[str]], excluded: Sequence[str]) -> list[list[str]]:
    """Drop excluded node ids from the commands (``--deselect`` one selected through its file);
    a command left with no node id is dropped too: it would run the whole suite."""
    if not excluded:
        return [list(a) for a in argvs]
    gone = set(excluded)
    out: list[list[str]] = []
    for argv in argvs:
        kept = [w for w in argv if w not in gone]
        if len(kept) < len(argv) and not any("::" in w or w.endswith(".py") for w in kept[1:]):
            continue
        for nodeid in excluded:
            if nodeid not in argv and selected_by(nodeid, kept):
                kept += ["--deselect", nodeid]
        out.append(kept)
    return out


def _command_text(argv: Sequence[str]) -> str:
    """The command as shown and recorded: a long selection shortened."""
    return readable_command(" ".join(shlex.quote(a) for a in argv))


def plan_argvs(plan: Plan, incident: Incident, effective: EffectiveConfig) -> list[list[str]]:
    """The plan's commands as argv lists, each followed by :func:`trusted_options`."""
    incident_id = incident.incident_id
    argvs = verification_argv(plan)
    if not argvs:
        raise InputError(
            f"plan.json of {incident_id} has no verification_commands; regenerate it with "
            f"`selfheal plan {incident_id} --force`"
        )
    trusted = trusted_options(incident, effective)
    return [argv + trusted for argv in argvs]


def check_commands(run: LoopRun, argvs: Sequence[Sequence[str]], *, effective: EffectiveConfig,
                   project_root: Path) -> None:
    """:func:`check_command` on every command before the first runs; a refusal is logged (nothing ran) and raised."""
    trusted = trusted_options(run.incident, effective)
    incident_id = run.incident_id
    for argv in argvs:
        try:
            check_command(argv, allowlist=effective.settings.verification.allowlist, root=project_root,
                          trusted=trusted)
        except RefusedError as exc:
            command = _command_text(argv)
            options = (
                option_record("regenerate_plan", "Regenerate the plan from the incident",
                              f"selfheal plan {incident_id} --force"),
                option_record("allowlist", "Add the runner to ralf_lite.verification.allowlist (only if you trust it)",
                              None),
                option_record("stop", "Give up and archive as escalated",
                              f"selfheal archive {incident_id} --as escalated"),
            )
            point = DecisionPoint(
                reason="verification_command_refused", message=exc.message, options=options,
                context=DecisionContext(keys=("command",), extra=(("command", command),)),
                keys=every_key(DecisionPoint),
            )
            run.append_event(ev.DECISION_POINT_NEEDED, refused=True, command=command, reason=exc.message,
                             decision_point=point.to_json())
            raise


def run_loop(store: Store, incident_id: str, *, effective: EffectiveConfig, project_root: Path,
             provider: Optional[Provider] = None, approve: bool = False, out: Optional[Callable[[str], None]] = None,
             unattended: Optional[bool] = None, env: Optional[Mapping[str, str]] = None,
             hook_rules: Sequence[Rule] = (), verifier: Verifier = run_selection, incident: Optional[Incident] = None,
             shown: bool = False, state: Optional[LoopRun] = None) -> LoopResult:
    """Run (or resume) the loop of one incident until it stops; returns the run result.

    Refuses (``RefusedError``, exit 5) an archived incident, a second loop on it and commands
    that are not allowlisted. Ctrl-C/SIGTERM records ``cancelled`` (the incident stays open)
    and raises ``Cancelled``. ``hook_rules``: the classification rules of pytest hooks, so a
    failure gets the fingerprint it had at capture. ``incident`` / ``state``: the records as
    the caller read them (not read again; the caller sees them as the loop left them).
    ``shown``: the caller shows the plan's suspects after the loop, so they are localised.
    """
    incident_id = validate_incident_id(incident_id)
    require_inbox(store, incident_id)
    remove_stale_verify_dirs()  # what a SIGKILLed loop left: unredacted output of its runs
    # One line each, whatever a test's file name holds (a line break would forge a status line).
    say: Callable[[str], None] = (lambda line: out(printable(line))) if out else (lambda line: None)
    if unattended is None:
        unattended = not (sys.stdin is not None and sys.stdin.isatty())
    cancel = CancelState()
    with loop_lock(store, incident_id), signal_handlers(cancel):
        # Read once, under the loop lock: no other loop writes this incident while it runs (a
        # state the caller holds is read again only if the files moved on without it).
        if state is None:
            run = LoopRun.resume(store, incident_id, incident)
        else:
            with store.lock():
                state.refresh()
            run = state
        if run.status in TERMINAL and run.pending() is None:
            # A final status and no recorded stop: a half-done `selfheal archive` someone closed.
            raise RefusedError(
                f"incident {incident_id} is {run.status} but still in {INBOX_DIR} (an interrupted archive): "
                f"run `selfheal archive {incident_id} --as {run.status}` to finish it")
        # The keys in force at the capture judge the incident (a later edit is reported).
        judged, edited_keys = judged_config(effective, run.incident)
        if edited_keys:
            say(edited_keys)
        loop = _Loop(run, judged, Path(project_root), env, rules_for_run(judged.settings.classification_rules,
                                                                          hook_rules), verifier, cancel)
        try:
            return _drive(loop, provider=provider, approve=approve, unattended=unattended, say=say, shown=shown)
        except (Interrupted, KeyboardInterrupt):
            cancel.requested = True
            _cancel(store, incident_id, effective=effective, project_root=Path(project_root), say=say)
            raise Cancelled(
                f"cancelled by {cancel.name}: incident {incident_id} left open, recorded attempts kept; "
                f"resume with `selfheal loop {incident_id}`"
            ) from None


def _cancel(store: Store, incident_id: str, *, effective: EffectiveConfig, project_root: Path, say: Callable[[str], None]) -> None:
    pol = policy.LoopPolicy.from_settings(effective.settings)
    with store.lock():
        # Read again: the interrupt may have landed between a write and the state's update.
        run = LoopRun.read(store, incident_id)
        observations = run.observations()
        decision = decide(pol, observations, cancelled=True)
        if decision.stop_reason != StopReason.CANCELLED:
            # Only disabled/success outrank cancelled; neither can be pending here.
            decision = policy.open_stop(StopReason.CANCELLED, "Cancelled; recorded attempts are saved.", decision.iteration)
        finalize(run, decision, effective=effective, observations=observations, project_root=project_root)
    say(status_line(decision, pol, incident_id=incident_id))


@dataclass
class _Loop:
    """What every iteration of one loop run works with."""

    run: LoopRun
    effective: EffectiveConfig  # under the incident's judging keys
    project_root: Path
    env: Optional[Mapping[str, str]]
    rules: Sequence[Rule]  # the classification rules, pytest hooks' included
    verifier: Verifier
    cancel: CancelState


def _drive(loop: _Loop, *, provider: Optional[Provider], approve: bool, unattended: bool,
           say: Callable[[str], None], shown: bool) -> LoopResult:
    run, effective, project_root, state = loop.run, loop.effective, loop.project_root, loop.cancel
    store, incident_id, incident = run.store, run.incident_id, run.incident
    pol = policy.LoopPolicy.from_settings(effective.settings)

    def close(decision: Decision, final: bool = True) -> LoopResult:
        result = finalize(run, decision, effective=effective, project_root=project_root)
        say(status_line(decision, pol, incident_id=incident_id))
        if final:
            say(_final_line(incident_id, result))
        return result

    with store.lock():
        waiting = run.pending()
        if waiting is not None:
            say(f"selfheal: incident {incident_id}: completing the recorded stop ({waiting.stop_reason})")
            return close(waiting)
        plan = ensure_plan(run)
    if localisation.wanted(run.incident, effective, len(run.attempts), read=provider is not None or shown):
        # Before any repair provider reads the plan: its suspects ranked by a spectrum.
        plan = localisation.localise(run, plan=plan, effective=effective, project_root=project_root, env=loop.env,
                                     say=say)
        incident = run.incident

    argvs = plan_argvs(plan, incident, effective)
    nodeids = selection_nodeids(plan, incident, argvs)
    # A plan without node ids verifies collection (pytest --collect-only): one pseudo test.
    selection = loop_selection(
        pol, nodeids or [COLLECTION_KEY], tdd_nodeids=incident.tdd_nodeids, unattended=unattended, approved=approve
    )
    if selection.refused is not None:
        return close(policy.open_stop(StopReason.DISABLED, f"The loop did not run: {selection.refused}.",
                                      len(run.split()[1])), final=False)
    argvs = _exclude_from_argvs(argvs, selection.excluded)
    nodeids = [n for n in nodeids if n not in selection.excluded]
    check_commands(run, argvs, effective=effective, project_root=project_root)

    with store.lock():
        start_running(run, reason="loop")
    kill_point("loop:after_running")

    # Decided once before the first iteration; after that, each iteration's recorded decision is the one.
    pre = _decide_before_running(run, pol)
    if pre is not None:
        return close(pre)
    while True:
        state.check()
        observations = run.observations()
        baseline, this_run = run.split()
        repair: Optional[RepairBlock] = None
        if provider is not None:
            with state.interruptible():
                repair = provider(incident_id=incident_id, iteration=run.next_iteration, store=store, plan=plan,
                                  last_attempt=this_run[-1] if this_run else None, observations=list(observations))
        verify_cwd = Path(repair.worktree) if repair is not None and repair.worktree else project_root
        prefix = iteration_prefix(incident_id, len(observations), pol.max_iterations)
        known = _unchanged_since(run, this_run if this_run or baseline is None else None, observations, repair,
                                 verify_cwd)
        if known is not None:
            # The code is the one the last run verified: running it again would only repeat that run.
            # Named by the last run that verified: an iteration that skipped its run verified nothing.
            verified = [attempt.iteration for attempt in this_run if attempt.verification_commands]
            seen = f"iteration {verified[-1]}" if verified else "the capture"
            say(f"{prefix}: verification not run: nothing of the repair was kept "
                f"({repair.result if repair is not None else 'no repair'}), so the code is the one {seen} ran; "
                "its failures stand")
            outcome = record_iteration(
                run, effective=effective, outcomes=known[0], failures=known[1],
                diff_hash=observations[-1].diff_hash, started_at=stamp(utcnow()), finished_at=stamp(utcnow()),
                mode="repair", verification_commands=[], exit_code=None, repair=repair, project_root=project_root,
                duration_seconds=0.0, not_run=list(known[0]),
            )
        else:
            say(f"{prefix}: running {'; '.join(command_shown(a) for a in argvs)}"
                + (f" (from {incident.invocation_dir}/)" if incident.invocation_dir else ""))
            kill_point("iteration:before_verify")
            outcome = _verify_and_record(loop, argvs, nodeids, cwd=verify_cwd, repair=repair)
        for line in outcome.lines:
            say(line)
        if outcome.run_result is not None:
            say(_final_line(incident_id, outcome.run_result))
            return outcome.run_result


def _decide_before_running(run: LoopRun, pol: policy.LoopPolicy) -> Optional[Decision]:
    """The stop the records alone decide before anything runs, or None: the capture alone
    is decisive (tooling_env, max_iterations 0), the runtime budget is gone, or the config changed."""
    pre = decide(pol, run.observations(), elapsed_minutes=minutes_between(run.started(), utcnow()),
                 known_flaky=known_flaky(run.incident), unverified=run.incident.unverified_failures)
    # A reopen is the user saying "the environment is fixed" or "it fails again": a
    # tooling_env or a success seen before it is checked by running the verification,
    # not repeated from the record (a resolved incident reopened after a regression).
    rechecked = ({StopReason.TOOLING_ENV, StopReason.SUCCESS} if not run.split()[1] and run.reopened is not None
                 else set())
    return pre if pre.stopped and pre.stop_reason != StopReason.REPLAN_REQUESTED and set(pre.conditions) - rechecked \
        else None


def _unchanged_since(run: LoopRun, attempts: Optional[Sequence[Attempt]], observations: Sequence[policy.Observation],
                     repair: Optional[RepairBlock], cwd: Path) -> Optional[tuple[dict[str, str], list[Failure]]]:
    """The last known outcomes and failures when a repair call left the code exactly as the
    previous observation saw it (rolled back, or nothing changed), else None: verify.
    ``attempts``: this loop run's, None after a reopen or a replan (its first iteration verifies)."""
    if attempts is None or repair is None or (repair.result == policy.REPAIR_DIFF and not repair.scope_denied):
        return None
    previous = observations[-1]
    if previous.diff_hash is None or diff_hash(cwd, exclude=[run.store.root]) != previous.diff_hash:
        return None
    entries = attempts[-1].failures if attempts else run.incident.failures
    return dict(previous.outcomes), list(entries)


@dataclass
class Verification:
    """What the verification commands of one iteration found."""

    outcomes: dict[str, str] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    codes: list[Optional[int]] = field(default_factory=list)
    timed_out: bool = False
    duration: float = 0.0

    @property
    def failed(self) -> bool:
        """A failure besides the outcomes, or a timeout: the selection cannot pass."""
        return bool(self.failures) or self.timed_out


def run_verification(store: Store, incident: Incident, argvs: Sequence[Sequence[str]], nodeids: Sequence[str], *,
                     effective: EffectiveConfig, cwd: Path, env: Optional[Mapping[str, str]], rules: Sequence[Rule],
                     verifier: Verifier = run_selection, cancel: Optional[CancelState] = None,
                     judged: bool = False) -> Verification:
    """Run every verification command in ``cwd`` and observe what it found of ``nodeids``
    (``judged``: with the passing comparisons judged, capture/comparisons.py)."""
    cancel = cancel or CancelState()
    found = Verification()
    invocation_dir = start_dir(cwd, incident.invocation_dir)
    with tempfile.TemporaryDirectory(prefix=verify_dir_prefix()) as tmp:
        for index, argv in enumerate(argvs):
            with cancel.interruptible():
                ran = verifier(argv, cwd=cwd, junit_path=Path(tmp) / f"junit_{index}.xml",
                               timeout_seconds=effective.settings.verification.timeout_seconds, env=env,
                               invocation_dir=invocation_dir,
                               selection_file=store.selection_file(incident.incident_id, index), judged=judged)
            got, failed = observe(ran, [n for n in nodeids if selected_by(n, argv)] or list(nodeids), rules=rules,
                                  redactor=effective.redactor)
            found.outcomes.update(got)
            found.failures.extend(failed)
            found.duration += ran.duration_seconds
            found.timed_out = found.timed_out or ran.timed_out
            found.codes.append(ran.exit_code)
    return found


def _verify_and_record(loop: _Loop, argvs: Sequence[Sequence[str]], nodeids: Sequence[str], *, cwd: Path,
                       repair: Optional[RepairBlock]) -> IterationOutcome:
    """One iteration in ``cwd``: the diff hash (in a thread, while the tests run), every
    verification command, observe, the seal and the regression check, then :func:`record_iteration`."""
    run, effective, env, rules, verifier, state = loop.run, loop.effective, loop.env, loop.rules, loop.verifier, loop.cancel
    incident = run.incident
    started = utcnow()
    hasher = PendingSnapshot(cwd, exclude=[run.store.root], context=False)
    ran = run_verification(run.store, incident, argvs, nodeids, effective=effective, cwd=cwd, env=env, rules=rules,
                           verifier=verifier, cancel=state)
    context = read_context(run.store, incident.incident_id)
    changes = harness_changed(incident, cwd, store=run.store, plan=run.plan, context=context, environ=env,
                              extra_code=repair.files_changed if repair is not None else ())
    # A changed harness always stops and never as a success: no regression check for it. Edited
    # tests are checked: a broken neighbour keeps the repair going, which may still undo the edit.
    regression = None
    if not changes.harness:
        with state.interruptible():  # a passing selection: the tests the change can reach run before a success
            regression = check_incident(
                run.store, incident, effective=effective, tree=cwd, runner=verifier, outcomes=ran.outcomes,
                failed=ran.failed, env=env, rules=rules,
                captured_tree=loop.project_root if repair is not None else None, context=context)
    if not changes.harness and not changes.tests and still_success(ran.outcomes, ran.failed, regression):
        # A success-to-be runs once more with its passing comparisons judged: judging slows every
        # passing assert, so no other iteration pays for it.
        judged = run_verification(run.store, incident, argvs, nodeids, effective=effective, cwd=cwd, env=env,
                                  rules=rules, verifier=verifier, cancel=state, judged=True)
        ran = replace(judged, duration=ran.duration + judged.duration)
    outcomes, failures, codes = ran.outcomes, ran.failures, ran.codes
    tree_hash = hasher.result().diff_hash
    kill_point("iteration:after_verify")
    outcome = record_iteration(
        run, effective=effective, outcomes=outcomes, failures=failures, diff_hash=tree_hash,
        started_at=stamp(started), finished_at=stamp(utcnow()), mode="repair" if repair is not None else "verify",
        verification_commands=[_command_text(a) for a in argvs],
        # The first failing command's code (None: timed out or could not start), else 0.
        exit_code=next((c for c in codes if c != 0), 0) if codes else None, timed_out=ran.timed_out, repair=repair,
        project_root=loop.project_root, duration_seconds=ran.duration, tests_edited=changes.tests,
        harness_changed=changes.harness, regression=regression,
    )
    if not outcome.closed:
        state.check()  # a signal that arrived while recording cancels now, between iterations
    return outcome


def verify_iteration(store: Store, incident_id: str, *, effective: EffectiveConfig, project_root: Path,
                     env: Optional[Mapping[str, str]] = None, verifier: Verifier = run_selection) -> IterationOutcome:
    """ONE iteration now, without the loop lock, signal handling or pre-checks (for embedding: benchmarks)."""
    run = LoopRun.resume(store, incident_id)
    plan = run.require_plan()
    incident = run.incident
    effective, _ = judged_config(effective, incident)
    argvs = plan_argvs(plan, incident, effective)
    check_commands(run, argvs, effective=effective, project_root=project_root)
    loop = _Loop(run, effective, project_root, env, rules_for_run(effective.settings.classification_rules, ()), verifier,
                 CancelState())
    return _verify_and_record(loop, argvs, selection_nodeids(plan, incident, argvs), cwd=project_root, repair=None)


def _final_line(incident_id: str, result: LoopResult) -> str:
    where = f" -> {result.archived_to}" if result.archived_to else ""
    flaky = list(result.flaky_tests)
    # A success without a code change is a flaky test passing on re-run: say so, it is not a fix.
    verdict = f"; flaky (passed on re-run with no code change): {first_few(flaky)}" if flaky else ""
    if result.stop_reason == StopReason.TOOLING_ENV:
        # Not code-fixable: the line says what to fix (the missing module, the failed command).
        verdict += f"; {result.decision.message if result.decision is not None else ''}".rstrip("; ")
    final = result.final_status
    return Line(f"selfheal: incident {incident_id} {final or 'open'}: stop_reason "
                f"{result.stop_reason} after {result.loops_used} iteration(s){where}{verdict}",
                final_tone(final))
