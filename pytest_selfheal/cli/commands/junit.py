"""``selfheal junit [ID] --output PATH``: the incident's tests as junit, re-runs as ``<flakyFailure>``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pytest_selfheal.cli.commands._common import add_dir_argument, project_root, store_from_args
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import NotFoundError
from pytest_selfheal.history.sources import quarantine_in_force
from pytest_selfheal.junit.reruns import rerun_junit
from pytest_selfheal.report.junit_reruns import rerun_cases
from pytest_selfheal.report.load import select_ids
from pytest_selfheal.store import fsio

NAME = "junit"
HELP = "write an incident's tests as junit XML, tests that passed on re-run with <flakyFailure> (Surefire)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("incident_id", metavar="ID", nargs="?",
                        help="incident id, a unique prefix of one, or `latest` (default: the latest incident)")
    parser.add_argument("--output", "-o", metavar="PATH", required=True, help="where to write the junit XML")
    add_dir_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Write the document; 0, 2 bad arguments or config, 3 corrupted files, 4 no incident, 6 unwritable."""
    project = project_root()
    effective = load_config(project)
    store = store_from_args(args, effective)
    ids = select_ids(store, args.incident_id, every=False)
    if not ids:
        raise NotFoundError(f"no incident in {store.root}")
    incident_id = ids[0]
    quarantine, warnings = quarantine_in_force(project, effective.settings.history.quarantine_file, os.environ)
    for warning in warnings:
        print(f"selfheal: warning: {warning}")
    cases = rerun_cases(store.read_incident(incident_id), store.read_attempts(incident_id), quarantine)
    target = Path(args.output)
    fsio.ensure_dir(target.parent if str(target.parent) else Path("."))
    fsio.atomic_write_bytes(target, rerun_junit(cases, suite_name=f"selfheal {incident_id}"))
    flaky = sum(1 for case in cases if case.flaky)
    print(f"wrote {target}: {len(cases)} test(s) of {incident_id}, {flaky} flaky")
    return 0

