"""``selfheal archive ID --as resolved|escalated``: close an incident by moving its folder."""

from __future__ import annotations

import argparse

from pytest_selfheal.cli.commands._common import (
    ID_HELP,
    add_dir_argument,
    incident_id_from_args,
    print_json,
    store_from_args,
)
from pytest_selfheal.store.states import ARCHIVE_BUCKETS

NAME = "archive"
HELP = "move an incident from error_inbox/ to error_archive/resolved|escalated/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ID --as resolved|escalated [--json] [--dir DIR]``."""
    parser.add_argument("incident_id", metavar="ID", help=ID_HELP)
    parser.add_argument(
        "--as",
        dest="bucket",
        required=True,
        choices=tuple(bucket.value for bucket in ARCHIVE_BUCKETS),
        help="archive bucket; resolved is only allowed from status running (docs/store.md)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_dir_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Archive the incident; refused transitions exit 5, unknown ids 4, bad ids 2."""
    store = store_from_args(args)
    incident_id = incident_id_from_args(store, args)
    previous = store.read_status(incident_id)
    destination = store.archive(incident_id, args.bucket)
    relative = destination.relative_to(store.root).as_posix()
    if args.json:
        print_json(
            {
                "incident_id": incident_id,
                "bucket": args.bucket,
                "status": args.bucket,
                "previous_status": previous,
                "path": relative,
            }
        )
    else:
        print(f"archived {incident_id} ({previous} -> {args.bucket}) to {relative}")
    return 0
