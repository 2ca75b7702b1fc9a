"""``selfheal merge REPORT.json... [--history FILE...]``: one report from several shard reports,
and the shards' failure histories merged into this project's."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_selfheal.cli.commands._common import add_dir_argument, store_from_args
from pytest_selfheal.cli.commands.report import add_format_arguments, emit, output_format
from pytest_selfheal.errors import InputError, NotFoundError, UsageError
from pytest_selfheal.history.db import HISTORY_FILE, HistoryDB, HistoryUnavailable
from pytest_selfheal.report.load import read_report
from pytest_selfheal.report.merge import merge_reports

NAME = "merge"
HELP = "merge the JSON reports of several jobs (e.g. a CI matrix) into one report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reports", metavar="REPORT.json", nargs="*",
                        help="reports written by `selfheal report --format json` (one per shard)")
    parser.add_argument("--history", metavar="FILE", nargs="+", action="extend", default=[],
                        help="shard history databases (a history.sqlite3, or a shard's reports root) to merge "
                             "into this project's history")
    add_dir_argument(parser)
    parser.add_argument("--name", metavar="NAME", nargs="+", action="extend", dest="names", default=None,
                        help="shard names, one per report in the same order (default: the file paths)")
    add_format_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Print the merged report; 2 bad arguments or plugin, 3 a bad report or history file, 4 a missing one."""
    output_format(args)
    if not args.reports and not args.history:
        raise UsageError("give shard reports (REPORT.json...) and/or --history FILE...")
    if args.history:
        merge_histories(store_from_args(args).root, [Path(p) for p in args.history])
    if not args.reports:
        return 0
    names: list[str] = list(args.names) if args.names else [str(p) for p in args.reports]
    if len(names) != len(args.reports):
        raise UsageError(f"{len(names)} --name values for {len(args.reports)} reports: give one per report")
    reports = [read_report(Path(p)) for p in args.reports]
    emit(merge_reports(reports, names=names), args)
    return 0


def merge_histories(root: Path, shards: list[Path]) -> None:
    """Add every run of each shard's history that ``root``'s history does not have yet."""
    for shard in shards:
        source = shard / HISTORY_FILE if shard.is_dir() else shard
        if not source.is_file():
            raise NotFoundError(f"{shard}: no history database there")
        try:
            with HistoryDB.open_file(source, create=False) as other, HistoryDB.open(root) as mine:
                added = mine.merge_from(other)
        except HistoryUnavailable as exc:
            raise InputError(str(exc).replace("; continuing without history", "")) from None
        print(f"merged {added} run(s) of {shard} into {mine.path}", file=sys.stderr)
