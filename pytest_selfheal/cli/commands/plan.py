"""``selfheal plan ID``: print an incident's remediation plan; ``--force`` regenerates it,
``--localise`` ranks its suspects by a coverage spectrum first (docs/loop.md "The plan")."""

from __future__ import annotations

import argparse
import sys

from pytest_selfheal.cli.commands._common import add_incident_arguments, incident_from_args, print_json, project_root
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import printable
from pytest_selfheal.loop.localise import localise_plan
from pytest_selfheal.loop.verify import verification_root
from pytest_selfheal.plan.build import build_plan
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.store.events import PLAN_GENERATED, format_ts
from pytest_selfheal.store.fsio import project_source

NAME = "plan"
HELP = ("print the remediation plan of an incident (--force: regenerate it from incident.json; "
        "--localise: rank its suspects by a coverage spectrum first)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_incident_arguments(parser, "print plan.json instead of plan.md")
    parser.add_argument("--force", action="store_true",
                        help="regenerate plan.json and plan.md from incident.json (revision 1; status unchanged)")
    parser.add_argument("--localise", action="store_true",
                        help="before printing, rank the suspects by a coverage spectrum as the loop does for a "
                             "repair provider: runs the failing tests' files once (before the first iteration only)")


def _say(line: str) -> None:
    sys.stderr.write(printable(line) + "\n")


def run(args: argparse.Namespace) -> int:
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
