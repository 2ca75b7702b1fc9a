"""``selfheal archive ID --as resolved|escalated``: close an incident by moving its folder."""

from __future__ import annotations

import argparse

from pytest_selfheal.cli.commands._common import add_incident_arguments, incident_from_args, print_json
from pytest_selfheal.records.vocab import ARCHIVE_BUCKETS

NAME = "archive"
HELP = "move an incident from error_inbox/ to error_archive/resolved|escalated/"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_incident_arguments(parser)
    parser.add_argument(
        "--as",
        dest="bucket",
        required=True,
        choices=tuple(bucket.value for bucket in ARCHIVE_BUCKETS),
        help="archive bucket; resolved is only allowed from status running (docs/store.md)",
    )


def run(args: argparse.Namespace) -> int:
    """Archive the incident; refused transitions exit 5, unknown ids 4, bad ids 2."""
    store, incident_id = incident_from_args(args)
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
