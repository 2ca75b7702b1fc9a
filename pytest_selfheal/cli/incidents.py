"""The commands on the incidents of a reports root: ``status``, ``loop``, ``reopen``, ``apply``,
``plan``, ``archive``, ``prune`` and ``replay``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from functools import partial

from pytest_selfheal.cli.common import (
    answer,
    incident_from_args,
    parse_days,
    print_json,
    project_root,
    store_from_args,
    warn,
)
from pytest_selfheal.cli.options import DIR, arg, command, flag, json_flag, on_incident, set_flag
from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.settings import Override, parse_override
from pytest_selfheal.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNRESOLVED, RefusedError, printable
from pytest_selfheal.hooks import cli_plugin_manager
from pytest_selfheal.loop.attempts import reopen_incident
from pytest_selfheal.loop.localise import localise_plan
from pytest_selfheal.loop.regression import short_name
from pytest_selfheal.loop.replay import differences, replay, state_from_disk
from pytest_selfheal.loop.seal_check import harness_changed, passing_without_the_code, take_fresh_seal
from pytest_selfheal.loop.state import parse_stamp
from pytest_selfheal.loop.verify import verification_root
from pytest_selfheal.mcp_server.tools import incident_table
from pytest_selfheal.names import archive_dir, archived_path
from pytest_selfheal.plan.build import build_plan
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.records.loop_state import LoopState
from pytest_selfheal.records.vocab import ARCHIVE_BUCKETS, first_few
from pytest_selfheal.repair.approval import approver_from, ask_on_stderr, is_interactive
from pytest_selfheal.repair.patches import FINAL_PATCH, apply_proposed, proposed_patch
from pytest_selfheal.run import exit_code_for, run_incident_loop
from pytest_selfheal.store import judging
from pytest_selfheal.store.events import PLAN_GENERATED, format_ts
from pytest_selfheal.store.fsio import project_source
from pytest_selfheal.store.reader import INBOX, IncidentSummary


@command("status", "list incidents (inbox and archive) with their status", json_flag("print the list as JSON"), DIR)
def status_command(args: argparse.Namespace) -> int:
    """List incidents; a missing reports root is an empty list (exit 0)."""
    store = store_from_args(args)
    rows = store.list_incidents()
    text = "\n".join(incident_table(rows)) if rows else f"no incidents in {store.root}"
    return answer(args, [row.to_json() for row in rows], text)


@command("loop", "run or resume the RALF-Lite loop of an incident: re-run its verification selections (with the "
                 "repair provider in between, when one is configured) until it stops",
         *on_incident("print the run result as JSON on stdout (progress lines go to stderr)"),
         flag("--approve", "approve up front: unattended loops (apply_to.autonomous_plans: false) and applying a "
                           "repair provider's patch"),
         flag("--allow-test-edits", "let the repair provider edit tests, conftest and fixtures "
                                    "(repair.allow_test_edits); a selection that passes with tests edited stops with "
                                    "tests_edited, never success"),
         flag("--reopen", "reopen the incident first when it is archived (as `selfheal reopen ID`), then run"),
         set_flag("override a ralf_lite key for this run, e.g. --set max_iterations=5 (repeatable)"))
def loop_command(args: argparse.Namespace) -> int:
    """Run the loop; exit codes in docs/exit-codes.md (0 resolved, 1 not resolved, 130 cancelled)."""
    project = project_root()
    overrides = [parse_override(text, "--set") for text in args.overrides]
    if args.allow_test_edits:
        overrides.append(Override("repair.allow_test_edits", True, "--allow-test-edits"))
    effective = load_config(project, overrides=overrides)
    store, incident_id = incident_from_args(args, effective)
    where, _ = store.locate(incident_id)  # unknown id: exit 4 before anything runs
    progress = partial(print, file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.reopen and where != INBOX:
        bucket, previous, _ = reopen_incident(store, incident_id)
        progress(f"selfheal: reopened {incident_id} ({previous} -> planned) from {archive_dir(bucket)}")
    elif args.reopen:  # said, not silently ignored
        progress(f"selfheal: {incident_id} is open (in the inbox), not archived: --reopen has nothing to reopen; "
                 "the loop goes on with the budget it has")

    result = run_incident_loop(store, incident_id, effective=effective, cwd=project, approve=bool(args.approve),
                               out=progress, pluginmanager=cli_plugin_manager())
    if args.json:
        print_json(result.to_json())
    # 0 resolved; 1 anything else that stopped (escalated, replan_requested, disabled).
    return exit_code_for(result.final_status or "")


# Set in the environment of the coding agents' shells: a seal is never theirs to take.
AGENT_VARIABLES = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CODEX_SANDBOX", "CURSOR_AGENT", "GEMINI_CLI")


def confirm_new_seal(incident_id: str, changes: list[str], environ: Mapping[str, str] = os.environ) -> None:
    """Raise ``RefusedError`` unless a person at a terminal says yes to a new seal."""
    agent = next((name for name in AGENT_VARIABLES if environ.get(name)), None)
    if agent is not None:
        raise RefusedError(f"a new seal is a person's act: refused under a coding agent ({agent} is set)")
    if not is_interactive():
        raise RefusedError("a new seal is a person's act: it needs a terminal to confirm it")
    shown = "; ".join(changes) if changes else "nothing"
    try:
        answer = ask_on_stderr(f"changed since the capture of {incident_id}: {shown}\n"
                               "take a new seal of what is there now, accepting these changes? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise RefusedError("no new seal taken")


@command("reopen", "move an archived (resolved or escalated) incident back to error_inbox/ with status planned, "
                   "so that `selfheal loop ID` runs it again",
         *on_incident(),
         flag("--new-seal", "also take a new seal of what is there now, accepting what changed since the capture "
                            "(asks for a yes at a terminal; refused without one and under a coding agent)"))
def reopen_command(args: argparse.Namespace) -> int:
    """Reopen the incident; an open (inbox) incident exits 5, unknown ids 4, bad ids 2; a
    new seal not confirmed at a terminal, or over a change under which the captured code
    passes the failing tests, exits 5 before anything moves."""
    project = project_root()
    effective = load_config(project)
    store, incident_id = incident_from_args(args, effective)
    if args.new_seal:
        incident = store.read_incident(incident_id)
        changes = harness_changed(incident, project, store=store)
        confirm_new_seal(incident_id, [*changes.harness, *changes.tests])
        # Whoever confirmed it: a change that passes the failing tests by itself is never accepted.
        passing = passing_without_the_code(store, incident, project, effective)
        if passing:
            named = first_few([f"`{short_name(n)}` ({outcome})" for n, outcome in passing.items()])
            raise RefusedError(f"no new seal: the failing test(s) {named} do not fail on the captured code with what "
                               "changed since: the change passes them by itself, not a fix of the code")
    bucket, previous, after = reopen_incident(store, incident_id)
    if args.new_seal:
        take_fresh_seal(store, incident_id, project, effective)
    relative = store.locate(incident_id)[1].relative_to(store.root).as_posix()
    return answer(args, {"incident_id": incident_id, "status": "planned", "previous_status": previous,
                         "reopened_from": archived_path(bucket, incident_id), "reopened_after_iteration": after,
                         "path": relative},
                  f"reopened {incident_id} ({previous} -> planned) to {relative}; run the loop again: selfheal loop "
                  f"{incident_id}")


@command("apply", "apply the repair patch proposed for an incident (error_runs/ID/final.patch) to the working tree",
         *on_incident(),
         flag("--yes", "apply without asking (needed when there is no terminal to ask on)"),
         flag("--allow-test-edits", "apply a patch that edits tests, conftest or fixtures (repair.allow_test_edits); "
                                    "without it such a patch is refused, whatever the approval"))
def apply_command(args: argparse.Namespace) -> int:
    """Apply ``final.patch``; exit codes in docs/exit-codes.md (0 applied or already applied,
    1 declined at the prompt, 4 no incident or no patch, 5 refused: conflict, no confirmation, not git,
    test edits without ``repair.allow_test_edits``)."""
    root = project_root()
    effective = load_config(root)
    store, incident_id = incident_from_args(args, effective)
    proposed = proposed_patch(store, incident_id, root,  # unknown id or no patch: 4
                              allow_binary=effective.settings.repair.allow_binary,
                              allow_test_edits=effective.settings.repair.allow_test_edits or bool(args.allow_test_edits))
    top = proposed.working_tree

    def emit(text: str, *, applied: bool, already: bool = False) -> None:
        if not args.json:
            sys.stdout.write(text + "\n")
            return
        print_json({"incident_id": incident_id, "patch": str(proposed.path), "working_tree": str(top),
                    "applied": applied, "already_applied": already,
                    **({} if already else {"files_changed": proposed.files})}, effective.redactor)

    if proposed.already_applied:
        emit(f"nothing to do: {FINAL_PATCH} of {incident_id} is already applied to {top}", applied=False, already=True)
        return EXIT_OK
    approver = approver_from(approve=bool(args.yes))
    if not approver.approved and not approver.interactive:
        raise RefusedError(f"not applied: confirmation needed and there is no terminal to ask on; "
                           f"re-run with --yes: selfheal apply {incident_id} --yes")
    if not approver.confirm(proposed.question):
        emit("not applied", applied=False)
        return EXIT_UNRESOLVED
    apply_proposed(store, proposed)
    emit(f"applied {FINAL_PATCH} of {incident_id} to {top}: {', '.join(proposed.files)}", applied=True)
    return EXIT_OK


def _say(line: str) -> None:
    sys.stderr.write(printable(line) + "\n")


@command("plan", "print the remediation plan of an incident (--force: regenerate it from incident.json; "
                 "--localise: rank its suspects by a coverage spectrum first)",
         *on_incident("print plan.json instead of plan.md"),
         flag("--force", "regenerate plan.json and plan.md from incident.json (revision 1; status unchanged)"),
         flag("--localise", "before printing, rank the suspects by a coverage spectrum as the loop does for a repair "
                            "provider: runs the failing tests' files once (before the first iteration only)"))
def plan_command(args: argparse.Namespace) -> int:
    """Print (or regenerate and print) the plan; bad id 2, corrupted files 3, unknown id / no plan 4."""
    project = project_root() if args.localise else None
    effective = load_config(project) if project is not None else None
    store, incident_id = incident_from_args(args, effective)
    store.locate(incident_id)
    if args.force:
        with store.lock():
            incident = store.read_incident(incident_id)
            plan = build_plan(incident, generated_at=format_ts(), source=project_source(incident.rootdir))
            store.write_plan(incident_id, plan, render_plan_md(plan))
            store.append_event(incident_id, PLAN_GENERATED, forced=True, revision=plan.revision,
                               actions=[a.id for a in plan.actions])
        if not args.json:
            sys.stderr.write(f"selfheal: regenerated the plan of {incident_id}\n")
    if project is not None and effective is not None:
        localise_plan(store, incident_id, effective=effective,
                      project_root=verification_root(store.read_incident(incident_id), project, store.root),
                      say=_say)
    if args.json:
        print_json(store.read_plan(incident_id).to_json())
    else:
        sys.stdout.write(store.read_plan_md(incident_id))
    return 0


@command("archive", "move an incident from error_inbox/ to error_archive/resolved|escalated/", *on_incident(),
         arg("--as", dest="bucket", required=True, choices=tuple(bucket.value for bucket in ARCHIVE_BUCKETS),
             help="archive bucket; resolved is only allowed from status running (docs/store.md)"))
def archive_command(args: argparse.Namespace) -> int:
    """Archive the incident; refused transitions exit 5, unknown ids 4, bad ids 2."""
    store, incident_id = incident_from_args(args)
    previous = store.read_status(incident_id)
    destination = store.archive(incident_id, args.bucket)
    relative = destination.relative_to(store.root).as_posix()
    return answer(args, {"incident_id": incident_id, "bucket": args.bucket, "status": args.bucket,
                         "previous_status": previous, "path": relative},
                  f"archived {incident_id} ({previous} -> {args.bucket}) to {relative}")


DEFAULT_DAYS = 30.0


@command("prune", "delete archived incidents (resolved/escalated) older than N days, with their plans and runs",
         arg("--older-than", metavar="DAYS", default=str(DEFAULT_DAYS),
             help=f"age since the incident was archived, in days (default {DEFAULT_DAYS:g}; 0: every archived one)"),
         flag("--dry-run", "list what would be deleted, delete nothing"),
         json_flag("print the pruned incidents as JSON"), DIR)
def prune_command(args: argparse.Namespace) -> int:
    """Prune; 0 (also when nothing is old enough), 2 bad arguments, 6 the root cannot be written."""
    cutoff = datetime.now(timezone.utc) - timedelta(days=parse_days(args.older_than, "--older-than", zero_ok=True))
    store = store_from_args(args)
    if not args.dry_run:
        store.finish_prunes()
    pruned: list[IncidentSummary] = []
    # A stop that said the tests pass but it is not a fix outlives the age (store/judging.py).
    kept = {stop.incident_id: stop.stop_reason for stop in judging.remembered(project_root())}
    for row in store.list_incidents():
        # Archiving stamps updated_at: the age of an archived incident is the time since then.
        archived_at = parse_stamp(row.updated_at) or parse_stamp(row.created_at)
        if row.bucket == INBOX or archived_at is None or archived_at > cutoff:
            continue
        if row.incident_id in kept:
            if not args.json:
                print(f"kept {row.incident_id}: it stopped {kept[row.incident_id]}, which stands until it succeeds "
                      "or a person takes a new seal")
            continue
        if not args.dry_run:
            store.prune(row.incident_id)
        pruned.append(row)
    if args.json:
        print_json({"dry_run": bool(args.dry_run), "pruned": [
            {"incident_id": row.incident_id, "bucket": row.bucket, "archived_at": row.updated_at} for row in pruned]})
        return 0
    verb = "would prune" if args.dry_run else "pruned"
    for row in pruned:
        print(f"{verb} {row.incident_id} ({row.bucket}, archived {row.updated_at})")
    print(f"{verb} {len(pruned)} archived incident(s) older than {args.older_than} day(s)")
    return 0


def format_state(state: LoopState) -> list[str]:
    lines = [
        f"incident      {state.incident_id}",
        f"status        {state.status} ({state.bucket})",
        f"stop_reason   {state.stop_reason or '-'}",
        f"final_status  {state.final_status or '-'}",
        f"archived_to   {state.archived_to or '-'}",
        f"iterations    {len(state.iterations)}",
    ]
    for entry in state.iterations:
        verdict = "passed" if entry.verification_passed else "failed"
        stop = f" {entry.stop_reason}" if entry.stop_reason else ""
        fps = ", ".join(entry.fingerprints) or "no failure"
        lines.append(f"  #{entry.iteration}: {verdict}, {entry.result}{stop} [{fps}]")
    for halt in state.loop_stops:
        lines.append(f"loop_stopped  {halt.stop_reason} at iteration {halt.iteration}")
    return lines


@command("replay", "rebuild the loop state from the incident's events alone and check it equals the files (exit 3 "
                   "if not)", *on_incident("print {replayed, disk, equal, differences, warnings} as JSON"))
def replay_command(args: argparse.Namespace) -> int:
    """Replay; 0 when it equals the disk state, 3 when it differs (or files are corrupted)."""
    store, incident_id = incident_from_args(args)
    events, warnings = store.read_events(incident_id)
    replayed = replay(events)
    disk = state_from_disk(store, incident_id)
    diff = differences(replayed, disk)
    verdict = ["replay differs from the files:", *(f"  {line}" for line in diff)] if diff else ["replay equals the files"]
    answer(args, {"replayed": replayed.to_json(), "disk": disk.to_json(), "equal": not diff, "differences": diff,
                  "warnings": warnings}, "\n".join([*format_state(replayed), *verdict]))
    warn(warnings)
    return EXIT_OK if not diff else EXIT_BAD_INPUT
