"""``selfheal merge REPORT.json...``: one RALF Lite Loop Report from several shard reports."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import List

from pytest_selfheal.cli.commands.report import add_format_arguments, emit, output_format
from pytest_selfheal.errors import UsageError
from pytest_selfheal.report.load import read_report
from pytest_selfheal.report.merge import merge_reports

NAME = "merge"
HELP = "merge the JSON reports of several jobs (e.g. a CI matrix) into one report"

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``REPORT.json... [--name NAME...] [--format md|json] [--json] [--output PATH] [--headline]``."""
    parser.add_argument("reports", metavar="REPORT.json", nargs="+",
                        help="reports written by `selfheal report --format json` (one per shard)")
    parser.add_argument("--name", metavar="NAME", nargs="+", action="extend", dest="names", default=None,
                        help="shard names, one per report in the same order (default: the file paths)")
    add_format_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Print the merged report; 2 bad arguments or plugin, 3 a bad report file, 4 a missing one."""
    output_format(args)
    names: List[str] = list(args.names) if args.names else [str(p) for p in args.reports]
    if len(names) != len(args.reports):
        raise UsageError(f"{len(names)} --name values for {len(args.reports)} reports: give one per report")
    reports = [read_report(Path(p)) for p in args.reports]
    emit(merge_reports(reports, names=names), args)
    return 0
