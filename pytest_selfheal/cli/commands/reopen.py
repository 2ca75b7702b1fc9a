"""``selfheal reopen ID``: bring an archived incident back to the inbox, status ``planned``."""

from __future__ import annotations

import argparse

from pytest_selfheal.cli.commands._common import (
    ID_HELP,
    add_dir_argument,
    incident_id_from_args,
    print_json,
    project_root,
    store_from_args,
)
from pytest_selfheal.config.files import load_config
from pytest_selfheal.loop.attempts import reopen_incident
from pytest_selfheal.loop.seal_check import take_fresh_seal
from pytest_selfheal.names import archived_path

NAME = "reopen"
HELP = ("move an archived (resolved or escalated) incident back to error_inbox/ with status planned, "
        "so that `selfheal loop ID` runs it again")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ID [--json] [--dir DIR]``."""
    parser.add_argument("incident_id", metavar="ID", help=ID_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_dir_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Reopen the incident; an open (inbox) incident exits 5, unknown ids 4, bad ids 2."""
    project = project_root()
    effective = load_config(project)  # a reopen is a person's act: it takes a fresh seal, with today's keys
    store = store_from_args(args, effective)
    incident_id = incident_id_from_args(store, args)
    bucket, previous, after = reopen_incident(store, incident_id)
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
