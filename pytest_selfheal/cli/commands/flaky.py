"""``selfheal flaky``: tests ranked by flake rate (re-run passes among recorded failures)."""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta, timezone

from pytest_selfheal.cli.commands._common import add_dir_argument, parse_days, print_json, project_root, store_from_args
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import NotFoundError
from pytest_selfheal.history.db import HistoryDB, HistoryUnavailable
from pytest_selfheal.store.events import format_ts

NAME = "flaky"
HELP = "tests ranked by flake rate over a window, with their counts"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", metavar="DAYS", default=None,
                        help="look back this many days (default: history.window_days, 30)")
    parser.add_argument("--json", action="store_true", help="print the ranking as JSON")
    add_dir_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Print the ranking; 0, 2 bad arguments or config, 4 no history yet (or unusable)."""
    effective = load_config(project_root())
    days = parse_days(args.window, "--window", zero_ok=False) if args.window is not None else float(effective.settings.history.window_days)
    store = store_from_args(args, effective)
    since = format_ts(datetime.now(timezone.utc) - timedelta(days=days))
    try:
        with HistoryDB.open(store.root, create=False) as db:
            rates = db.flake_rates(since)
    except HistoryUnavailable as exc:
        raise NotFoundError(str(exc)) from None
    if args.json:
        print_json([{"nodeid": r.nodeid, "flake_rate": round(r.rate, 3), "flaky": r.flaky, "failed": r.failed,
                     "last_seen_at": r.last_seen_at} for r in rates])
        return 0
    if not rates:
        print(f"no test passed on re-run in the last {days:g} day(s)")
        return 0
    print(f"flaky tests, last {days:g} day(s): rate = passed on re-run / recorded failures")
    for r in rates:
        print(f"  {r.rate:>5.0%}  {r.flaky:>4} / {r.failed:<4} {r.nodeid}  (last {r.last_seen_at[:10]})")
    return 0
