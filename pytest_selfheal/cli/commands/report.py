"""``selfheal report [ID] [--all]``: the RALF Lite Loop Report as markdown or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pytest_selfheal import hooks
from pytest_selfheal.cli.commands._common import (
    add_dir_argument,
    print_json,
    project_redactor,
    project_root,
    store_from_args,
)
from pytest_selfheal.errors import UsageError
from pytest_selfheal.records.report import Report
from pytest_selfheal.report.load import build_from_store, latest_incident, select_ids
from pytest_selfheal.report.render import render_terminal
from pytest_selfheal.report.sections import report_markdown
from pytest_selfheal.store import fsio

NAME = "report"
HELP = "print the RALF Lite Loop Report of an incident (latest by default) as markdown or JSON"


def add_format_arguments(parser: argparse.ArgumentParser) -> None:
    """``--format md|json``, ``--json``, ``--output PATH``, ``--headline`` (shared with ``merge``)."""
    parser.add_argument("--format", choices=("md", "json", "text"), default=None,
                        help="md (default): the markdown report; json: the report data; text: the compact "
                             "lines pytest --selfheal prints")
    parser.add_argument("--json", action="store_true", help="same as --format json")
    parser.add_argument("--output", "-o", metavar="PATH",
                        help="write the report to PATH (atomically) instead of printing it")
    parser.add_argument("--headline", action="store_true",
                        help="markdown: put the one-line status (stop reason, final status) before the "
                             "report heading, as in the PR comment")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("incident_id", metavar="ID", nargs="?",
                        help="incident id, a unique prefix of one, or `latest` (default: the newest readable incident by the time in its id)")
    parser.add_argument("--all", action="store_true", help="one report over every incident of the reports root")
    add_format_arguments(parser)
    add_dir_argument(parser)


def output_format(args: argparse.Namespace) -> str:
    """``md``, ``json`` or ``text`` from ``--format``/``--json``; ``UsageError`` when they disagree."""
    if args.json and args.format in ("md", "text"):
        raise UsageError(f"--json and --format {args.format} contradict each other")
    return "json" if args.json else (args.format or "md")


def emit(report: Report, args: argparse.Namespace) -> None:
    """Print ``report`` (or write it to ``--output``) in the chosen format.

    The markdown carries the sections of the ``pytest_selfheal_report_sections`` hooks of
    the installed ``pytest_selfheal`` plugins; a broken one is a ``ConfigError`` (2).
    """
    fmt = output_format(args)
    if fmt == "json" and args.output is None:
        print_json(report.to_json())
        return
    if fmt == "json":
        body = json.dumps(report.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    elif fmt == "text":
        body = "".join(line + "\n" for line in render_terminal(report))
    else:
        body = report_markdown(report, hooks.cli_plugin_manager(), headline=args.headline)
    # What leaves here is redacted like every other surface: the stored data already is, the
    # effective config is read now (a secret written into a config value).
    body = project_redactor().redact(body)
    if args.output is None:
        print(body, end="")
        return
    target = Path(args.output)
    fsio.ensure_dir(target.parent if str(target.parent) else Path("."))
    fsio.atomic_write_text(target, body)


def run(args: argparse.Namespace) -> int:
    """Print the report; 2 bad arguments/id/config/plugin, 3 corrupted files, 4 unknown id, 6 unwritable output."""
    if args.all and args.incident_id is not None:
        raise UsageError("give an incident ID or --all, not both")
    output_format(args)  # a contradiction fails before anything is read
    store = store_from_args(args)
    if args.incident_id is None and not args.all:
        latest, note = latest_incident(store)
        ids = [latest] if latest else []
        if note:  # which one "the latest" is, when there was a choice (stdout stays the report)
            print(note, file=sys.stderr)
    else:
        ids = select_ids(store, args.incident_id, args.all)
    emit(build_from_store(store, ids, project_root()), args)
    return 0
