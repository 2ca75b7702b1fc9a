"""``selfheal prune``: delete archived incidents older than N days (their plans and runs too)."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone

from pytest_selfheal.cli.commands._common import (
    add_dir_argument,
    parse_days,
    print_json,
    project_root,
    store_from_args,
)
from pytest_selfheal.loop.state import parse_stamp
from pytest_selfheal.store import judging
from pytest_selfheal.store.reader import INBOX, IncidentSummary

NAME = "prune"
HELP = "delete archived incidents (resolved/escalated) older than N days, with their plans and runs"

DEFAULT_DAYS = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--older-than", metavar="DAYS", default=str(DEFAULT_DAYS),
                        help=f"age since the incident was archived, in days (default {DEFAULT_DAYS:g}; 0: every archived one)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    parser.add_argument("--json", action="store_true", help="print the pruned incidents as JSON")
    add_dir_argument(parser)


def run(args: argparse.Namespace) -> int:
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
