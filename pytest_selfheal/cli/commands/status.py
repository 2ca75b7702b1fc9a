"""``selfheal status``: every incident in the reports root, with its status and bucket."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pytest_selfheal.cli.commands._common import add_dir_argument, print_json, store_from_args
from pytest_selfheal.store.reader import IncidentSummary

NAME = "status"
HELP = "list incidents (inbox and archive) with their status"

_SIGNATURE_WIDTH = 90


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    add_dir_argument(parser)


def _cell(value: Any, width: int = 0) -> str:
    # Table cells stay on one line whatever the incident files contain.
    text = " ".join(str("-" if value is None else value).split())
    return text if not width or len(text) <= width else text[: width - 3] + "..."


def format_table(rows: Sequence[IncidentSummary]) -> str:
    """The incidents as an aligned text table (ID, STATUS, BUCKET, ATTEMPTS, SIGNATURE)."""
    header = ("ID", "STATUS", "BUCKET", "ATTEMPTS", "SIGNATURE")
    body: list[Sequence[str]] = []
    for row in rows:
        # A corrupted incident shows its whole error: that line is what the user must fix.
        last = _cell(row.error) if row.corrupted else _cell(row.error_signature, _SIGNATURE_WIDTH)
        body.append((_cell(row.incident_id), _cell(row.status), _cell(row.bucket), _cell(row.attempts), last))
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header) - 1)]
    lines = []
    for line in [header, *body]:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(line[:-1])]
        lines.append("  ".join([*cells, line[-1]]).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """List incidents; a missing reports root is an empty list (exit 0)."""
    store = store_from_args(args)
    rows = store.list_incidents()
    if args.json:
        print_json([row.to_json() for row in rows])
    elif not rows:
        print(f"no incidents in {store.root}")
    else:
        print(format_table(rows))
    return 0
