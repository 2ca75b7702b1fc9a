"""``selfheal loop ID``: run (or resume) the RALF-Lite loop of one incident."""

from __future__ import annotations

import argparse
import sys

from pytest_selfheal.cli.commands._common import add_incident_arguments, incident_from_args, print_json, project_root
from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.settings import Override, parse_override
from pytest_selfheal.hooks import cli_plugin_manager
from pytest_selfheal.loop.attempts import reopen_incident
from pytest_selfheal.names import archive_dir
from pytest_selfheal.run import exit_code_for, run_incident_loop
from pytest_selfheal.store.reader import INBOX

NAME = "loop"
HELP = ("run or resume the RALF-Lite loop of an incident: re-run its verification selections (with the "
        "repair provider in between, when one is configured) until it stops")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_incident_arguments(parser, "print the run result as JSON on stdout (progress lines go to stderr)")
    parser.add_argument("--approve", action="store_true",
                        help="approve up front: unattended loops (apply_to.autonomous_plans: false) and "
                             "applying a repair provider's patch")
    parser.add_argument("--allow-test-edits", action="store_true",
                        help="let the repair provider edit tests, conftest and fixtures (repair.allow_test_edits); "
                             "a selection that passes with tests edited stops with tests_edited, never success")
    parser.add_argument("--reopen", action="store_true",
                        help="reopen the incident first when it is archived (as `selfheal reopen ID`), then run")
    parser.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                        help="override a ralf_lite key for this run, e.g. --set max_iterations=5 (repeatable)")


def run(args: argparse.Namespace) -> int:
    """Run the loop; exit codes in docs/exit-codes.md (0 resolved, 1 not resolved, 130 cancelled)."""
    project = project_root()
    overrides = [parse_override(text, "--set") for text in args.overrides]
    if args.allow_test_edits:
        overrides.append(Override("repair.allow_test_edits", True, "--allow-test-edits"))
    effective = load_config(project, overrides=overrides)
    store, incident_id = incident_from_args(args, effective)
    store.locate(incident_id)  # unknown id: exit 4 before anything runs

    def progress(line: str) -> None:
        stream = sys.stderr if args.json else sys.stdout
        stream.write(line + "\n")
        stream.flush()

    if args.reopen and store.locate(incident_id)[0] != INBOX:
        bucket, previous, _ = reopen_incident(store, incident_id)
        progress(f"selfheal: reopened {incident_id} ({previous} -> planned) from {archive_dir(bucket)}")
    elif args.reopen:  # said, not silently ignored
        progress(f"selfheal: {incident_id} is open (in the inbox), not archived: --reopen has nothing to reopen; "
                 "the loop goes on with the budget it has")

    result = run_incident_loop(
        store,
        incident_id,
        effective=effective,
        cwd=project,
        approve=bool(args.approve),
        out=progress,
        pluginmanager=cli_plugin_manager(),
    )
    if args.json:
        print_json(result.to_json())
    # 0 resolved; 1 anything else that stopped (escalated, replan_requested, disabled).
    return exit_code_for(result.final_status or "")
