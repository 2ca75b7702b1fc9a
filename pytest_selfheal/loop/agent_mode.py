"""Agent-in-the-loop: a ``pytest --selfheal`` run is the next iteration of an open incident.

When an agent's (or a person's) run executes any of an open incident's verification tests,
it is recorded as the next attempt (mode ``agent``) and the loop decides. Selected tests
this run did not execute keep their last known outcome, so running a subset never looks
like a fix; one it should have run and did not is ``missing``. A run narrower than the
capture cannot have the regression check, so its passing selection is not counted.
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Optional

from pytest_selfheal.analysis.rules import rules_for_run
from pytest_selfheal.analysis.testfiles import changed
from pytest_selfheal.config.seal import Loaded
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gitrepo import diff_hash
from pytest_selfheal.loop.attempts import AGENT_MODE, record_iteration
from pytest_selfheal.loop.driver import Verification, plan_argvs, run_verification, selection_nodeids
from pytest_selfheal.loop.regression import (
    NOT_YET_CHECKED,
    RunOutcomes,
    capture_words,
    check_incident,
    narrower_than_capture,
    passes,
    still_success,
)
from pytest_selfheal.loop.seal_check import harness_changed, judged_config
from pytest_selfheal.loop.state import LoopRun, read_context
from pytest_selfheal.loop.verify import check_command, run_selection, trusted_options
from pytest_selfheal.plan.build import verification_argv
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.models import FAILING_OUTCOMES, OUTCOME_FAILED, OUTCOME_MISSING, Failure
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.vocab import first_few
from pytest_selfheal.store.events import format_ts
from pytest_selfheal.store.root import Store

OPEN_STATUSES = ("planned", "running")


@dataclass
class OpenIncident:
    """An incident in the inbox whose loop has not stopped, with its verification selection."""

    captured: Incident  # incident.json: its seal, judging keys and test code
    plan: Plan  # plan.json as read: its selection's records are checked (store/judging.py)
    selection: list[str]
    last_outcomes: dict[str, str]
    last_failures: dict[str, Failure]  # nodeid -> last known failure

    @property
    def incident_id(self) -> str:
        return self.captured.incident_id

    @property
    def options(self) -> Optional[list[str]]:
        return recorded_options(self.captured)


@dataclass
class AgentResult:
    """What the agent-mode recording did: status lines, closed incidents, covered tests."""

    lines: list[str] = field(default_factory=list)
    touched: list[str] = field(default_factory=list)
    still_open: list[str] = field(default_factory=list)
    covered: set[str] = field(default_factory=set)


def _last_known(incident: Incident, attempts: Sequence[Attempt]) -> tuple[dict[str, str], dict[str, Failure]]:
    if attempts:
        outcomes = dict(attempts[-1].outcomes)
        records = attempts[-1].failures
    else:
        records = incident.failures
        outcomes = {r.nodeid: r.outcome or OUTCOME_FAILED for r in records if r.nodeid}
    return outcomes, {r.nodeid: r for r in records if r.nodeid}


def recorded_options(incident: Incident) -> Optional[list[str]]:
    """The capture's replayed pytest options; None when the capture did not record them (no
    options is no key, so a sealed incident, from a version that records them, has none)."""
    recorded = "pytest_options" in (incident.keys or ()) or incident.seal is not None
    return list(incident.pytest_options) if recorded else None


# What a run that is no iteration of an incident says (the MCP verdict and the gate read it).
NOT_AN_ITERATION = "this run is not counted as an iteration"


def not_an_iteration(incident: Incident, run_options: Optional[Sequence[str]], run_dir: Optional[str]) -> Optional[str]:
    """Why this run is not an iteration of ``incident`` (like with like: the capture's options,
    from the capture's directory), or None; None options or ``run_dir`` are unknown."""
    incident_id, options, capture_dir = incident.incident_id, recorded_options(incident), incident.invocation_dir or ""
    if run_options is not None and options is not None and list(run_options) != list(options):
        return (f"selfheal: incident {incident_id}: {NOT_AN_ITERATION}: its options "
                f"({shlex.join(run_options) or 'none'}) differ from the capture's "
                f"({shlex.join(options) or 'none'}); run pytest --selfheal with the capture's options")
    if run_dir is not None and run_dir != capture_dir:
        return (f"selfheal: incident {incident_id}: {NOT_AN_ITERATION}: it ran from "
                f"{run_dir or '.'}/, the capture from {capture_dir or '.'}/ (relative to the rootdir); "
                "run pytest --selfheal from there")
    return None


def open_incidents(store: Store) -> list[OpenIncident]:
    """Inbox incidents still looping (planned/running) with a readable plan; others are skipped."""
    found = []
    for summary in store.list_incidents():
        if summary.bucket != "inbox" or summary.status not in OPEN_STATUSES:
            continue
        incident_id = summary.incident_id
        try:
            incident = store.read_incident(incident_id)
            plan = store.read_plan(incident_id)
            selection = selection_nodeids(plan, incident, verification_argv(plan))
            outcomes, failures = _last_known(incident, store.read_attempts(incident_id))
        except SelfhealError:
            continue  # a corrupted incident is shown by `selfheal status`; it cannot be an iteration
        if selection:
            found.append(OpenIncident(incident, plan, selection, outcomes, failures))
    return found


def _verified(store: Store, incident: OpenIncident, effective: EffectiveConfig, project_root: Path) -> Optional[Verification]:
    """The incident's verification commands run as the loop runs them (None: refused, or none)."""
    trusted = trusted_options(incident.captured, effective)
    try:
        argvs = plan_argvs(incident.plan, incident.captured, effective)
        for argv in argvs:
            check_command(argv, allowlist=effective.settings.verification.allowlist, root=project_root,
                          trusted=trusted)
    except SelfhealError:
        return None
    return run_verification(store, incident.captured, argvs, incident.selection, effective=effective, cwd=project_root,
                            env=None, rules=rules_for_run(effective.settings.classification_rules, ()), judged=True)


def record_agent_attempts(*, store: Store, effective: EffectiveConfig, incidents: Sequence[OpenIncident],
                          outcomes: Mapping[str, str], failures: Sequence[Failure], project_root: Path,
                          reports_root: Path, invocation: Sequence[str], started_at: datetime,
                          exit_code: Optional[int], run_options: Optional[Sequence[str]] = None,
                          run_dir: Optional[str] = None, loaded: Optional[Loaded] = None, gone: Collection[str] = (),
                          ran: Optional[Mapping[str, str]] = None) -> AgentResult:
    """Record this run as the next attempt of every open incident whose selection it ran.

    A run with other ``run_options`` or from another ``run_dir`` than the capture's is no
    iteration (one line says how to run it). ``loaded``: what this process loaded, for the
    seal. ``gone``: selected tests this run should have run and has no outcome for (recorded
    ``missing``). ``ran``: every test this run ran (None: cut short), which the regression
    check takes as they are.
    """
    result = AgentResult()
    here = project_root.resolve()

    def of_this_project(incident: OpenIncident) -> bool:
        # A reports root shared by several projects: a test of another project's incident is
        # not gone because this project's run did not run it.
        rootdir = incident.captured.rootdir
        return not rootdir or Path(rootdir).resolve() == here

    touched = [i for i in incidents
               if any(n in outcomes or (n in gone and of_this_project(i)) for n in i.selection)]
    if not touched:
        return result
    diff = diff_hash(project_root, exclude=[reports_root])
    finished = format_ts()
    by_nodeid = {f.nodeid: f for f in failures if f.nodeid}
    command = shlex.join(["python", "-m", "pytest", *invocation])
    this_run = None if ran is None else RunOutcomes(
        ran, capture_words(invocation, str(project_root / (run_dir or "")), project_root))
    for incident in touched:
        incident_id, selection = incident.incident_id, incident.selection
        result.covered.update(selection)
        unlike = not_an_iteration(incident.captured, run_options, run_dir)
        if unlike is not None:
            result.lines.append(unlike)
            result.still_open.append(incident_id)
            continue
        run_outcomes: dict[str, str] = {}
        run_failures: list[Failure] = []
        for nodeid in selection:
            if nodeid in gone and nodeid not in outcomes:
                run_outcomes[nodeid] = OUTCOME_MISSING  # it should have run: not verified, never carried over
                continue
            # Not run in this run (-x / --maxfail stopped it, or a subset was selected): its last
            # outcome, listed as not run, so it is never counted as run, gone or passed.
            run_outcomes[nodeid] = outcomes.get(nodeid, incident.last_outcomes.get(nodeid, OUTCOME_FAILED))
            known = by_nodeid if nodeid in outcomes else incident.last_failures
            if run_outcomes[nodeid] in FAILING_OUTCOMES and nodeid in known:
                run_failures.append(known[nodeid])
        not_run = [n for n in selection if n not in outcomes and n not in gone]
        judged, edited_keys = judged_config(effective, incident.captured)
        context = read_context(store, incident_id)
        changes = harness_changed(incident.captured, project_root, store=store, plan=incident.plan, context=context,
                                  loaded=loaded)
        # Tests, conftests, test data edited since the capture: a pass with them is never `success`.
        edited = [*dict.fromkeys([*changed(project_root, dict(incident.captured.test_digests)), *changes.tests])]
        if edited_keys:
            result.lines.append(edited_keys)
        narrower = None if not passes(run_outcomes) or edited or changes.harness \
            else narrower_than_capture(context, project_root, invocation, project_root / (run_dir or ""))
        if narrower is not None:
            # A success needs the regression check, which a quick run of the failing tests skips:
            # nothing is decided, so the budget is not spent on it.
            words = shlex.join(narrower)
            result.lines.append(
                f"selfheal: incident {incident_id}: {NOT_YET_CHECKED}: this run is "
                f"narrower than the capture's ({words or 'its default selection'}), so it is not counted as an "
                f"iteration; run {' '.join(['pytest --selfheal', words]).strip()} (or the stop gate, or MCP "
                "run_tests with no selection) for the check and the verdict")
            result.still_open.append(incident_id)
            continue
        # A passing selection: the tests the change can reach run before it can be a success
        # (a changed harness never is one).
        regression = None if changes.harness else check_incident(
            store, incident.captured, effective=judged, tree=project_root, runner=run_selection,
            outcomes=run_outcomes, rules=rules_for_run(judged.settings.classification_rules, ()), this_run=this_run,
            context=context)
        if not edited and not changes.harness and still_success(run_outcomes, False, regression):
            # A success is a verification run's: this process cannot show selfheal its passing
            # comparisons (capture/comparisons.py) nor load it before the conftests.
            again = _verified(store, incident, judged, project_root)
            if again is not None and not passes(again.outcomes):
                run_outcomes.update((n, o) for n, o in again.outcomes.items() if n in run_outcomes)
                run_failures = again.failures
                failed = sorted(n for n, o in again.outcomes.items() if o in FAILING_OUTCOMES)
                result.lines.append(f"selfheal: incident {incident_id}: this run passes its tests, but its "
                                    f"verification run does not pass {first_few(failed, 3)}"
                                    + (f": {again.failures[0].message}" if again.failures else ""))
        outcome = record_iteration(
            LoopRun.resume(store, incident_id, incident.captured, incident.plan), effective=judged,
            outcomes=run_outcomes, failures=run_failures, diff_hash=diff, started_at=format_ts(started_at),
            finished_at=finished, mode=AGENT_MODE, verification_commands=[command], exit_code=exit_code,
            new_failures=[f for f in failures if f.nodeid not in incident.selection], project_root=project_root,
            not_run=not_run, tests_edited=edited, harness_changed=changes.harness, regression=regression,
        )
        result.lines += outcome.lines
        result.touched.append(incident_id)
        if not outcome.closed:
            result.still_open.append(incident_id)
    return result
