"""``selfheal config``: print the effective configuration, optionally with origins."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pytest_selfheal.cli.commands._common import print_json, project_root
from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.settings import parse_override
from pytest_selfheal.errors import EXIT_OK, UsageError

NAME = "config"
HELP = "print the effective ralf_lite config (defaults <- global <- project <- pytest ini <- --set)"

# "key = value" columns wider than this are not padded, so one long list does not push
# every origin far to the right.
_MAX_ALIGN = 60


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--show-origin", action="store_true",
                        help="one line per key with the file or flag its value came from")
    parser.add_argument("--json", action="store_true",
                        help="print JSON (with --show-origin: {key: {value, origin}})")
    parser.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append",
                        default=[], help="override a key, e.g. --set max_iterations=5 (repeatable)")
    parser.add_argument("--project", metavar="DIR", default=None,
                        help="project root holding .planning/ and the pytest ini (default: .)")


def run(args: argparse.Namespace) -> int:
    """Load, check and print the effective config; ConfigError (exit 2) when it is bad."""
    project = Path(args.project) if args.project else project_root()
    if not project.is_dir():
        raise UsageError(f"--project: not a directory: {project}")
    overrides = [parse_override(text, "--set") for text in args.overrides]
    effective = load_config(project.resolve(), overrides=overrides)
    if not args.show_origin:
        print_json(effective.to_json(), effective.redactor)
    elif args.json:
        print_json(effective.with_origins(), effective.redactor)
    else:
        rows = [(f"{key} = {json.dumps(entry['value'], ensure_ascii=False)}", entry["origin"])
                for key, entry in effective.with_origins().items()]
        width = min(max(len(left) for left, _ in rows), _MAX_ALIGN)
        for left, origin in rows:
            print(f"{left.ljust(width)}    ({origin})")
    return EXIT_OK
