"""``selfheal reopen ID``: bring an archived incident back to the inbox, status ``planned``.

A reopen gives a budget, never a new seal: the capture's seal judges the reopened incident.
``--new-seal`` also accepts what changed since (a person at a terminal, asked to confirm), and
only where a capture could be: the failing tests still fail on the captured code under it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from pytest_selfheal.cli.commands._common import add_incident_arguments, incident_from_args, print_json, project_root
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import RefusedError
from pytest_selfheal.loop.attempts import reopen_incident
from pytest_selfheal.loop.regression import short_name
from pytest_selfheal.loop.seal_check import harness_changed, passing_without_the_code, take_fresh_seal
from pytest_selfheal.names import archived_path
from pytest_selfheal.records.vocab import first_few
from pytest_selfheal.repair.approval import ask_on_stderr, is_interactive

NAME = "reopen"
HELP = ("move an archived (resolved or escalated) incident back to error_inbox/ with status planned, "
        "so that `selfheal loop ID` runs it again")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_incident_arguments(parser)
    parser.add_argument("--new-seal", action="store_true",
                        help="also take a new seal of what is there now, accepting what changed since the capture "
                             "(asks for a yes at a terminal; refused without one and under a coding agent)")

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


def run(args: argparse.Namespace) -> int:
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
                               "changed since: "
                               "the change passes them by itself, not a fix of the code")
    bucket, previous, after = reopen_incident(store, incident_id)
    if args.new_seal:
        take_fresh_seal(store, incident_id, project, effective)
    relative = store.locate(incident_id)[1].relative_to(store.root).as_posix()
    if args.json:
        print_json(
            {
                "incident_id": incident_id,
                "status": "planned",
                "previous_status": previous,
                "reopened_from": archived_path(bucket, incident_id),
                "reopened_after_iteration": after,
                "path": relative,
            }
        )
    else:
        print(f"reopened {incident_id} ({previous} -> planned) to {relative}; "
              f"run the loop again: selfheal loop {incident_id}")
    return 0
