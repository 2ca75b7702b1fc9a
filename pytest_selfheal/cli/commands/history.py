"""``selfheal history``: what the failure history recorded for one test or fingerprint."""

from __future__ import annotations

import argparse
from typing import Any, Dict, List

from pytest_selfheal.cli.commands._common import add_dir_argument, print_json, project_root, store_from_args
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import NotFoundError, UsageError
from pytest_selfheal.history.db import HISTORY_FILE, HistoryDB, HistoryUnavailable

NAME = "history"
HELP = "the recorded outcomes of one test (--test NODEID) or one failure (--fingerprint FP)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``(--test NODEID | --fingerprint FP | --path) [--limit N] [--json] [--dir DIR]``."""
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--test", metavar="NODEID", help="a pytest node id")
    which.add_argument("--fingerprint", metavar="FP", help="a failure fingerprint")
    which.add_argument("--path", action="store_true",
                       help="print the absolute path of the history database (an empty line when "
                            "history.enabled is false): what the Action caches")
    parser.add_argument("--limit", type=int, default=50, metavar="N", help="newest N runs (default 50)")
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    add_dir_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Print the history; 0, 2 bad arguments, 4 no history yet (or an unusable database)."""
    if args.limit < 1:
        raise UsageError(f"--limit: expected an integer >= 1, got {args.limit}")
    if args.path:
        effective = load_config(project_root())
        path = str((store_from_args(args, effective).root / HISTORY_FILE).absolute())
        if "\n" in path or "\r" in path:  # it goes into $GITHUB_OUTPUT as one line
            raise UsageError(f"the history path {path!r} holds a line break")
        print(path if effective.settings.history.enabled else "")
        return 0
    store = store_from_args(args)
    try:
        with HistoryDB.open(store.root, create=False) as db:
            rows = db.history_of(nodeid=args.test, fingerprint=args.fingerprint, limit=args.limit)
    except HistoryUnavailable as exc:
        raise NotFoundError(str(exc)) from None
    data: List[Dict[str, Any]] = [
        {"recorded_at": run_info.recorded_at, "kind": run_info.kind, "incident_id": run_info.incident_id,
         "iteration": run_info.iteration, "commit": run_info.commit, "branch": run_info.branch,
         "ci_run_id": run_info.ci_run_id, "nodeid": outcome.nodeid, "outcome": outcome.outcome,
         "fingerprint": outcome.fingerprint, "failure_class": outcome.failure_class}
        for run_info, outcome in rows
    ]
    if args.json:
        print_json(data)
        return 0
    subject = args.test if args.test is not None else f"fingerprint {args.fingerprint}"
    if not data:
        print(f"no recorded outcome for {subject}")
        return 0
    print(f"{subject}: {len(data)} recorded outcome(s), newest first")
    for row in data:
        where = " ".join(str(v) for v in (row["branch"], (row["commit"] or "")[:12]) if v)
        print(f"  {row['recorded_at']}  {row['outcome']:<16} {row['kind']:<7} {row['fingerprint'] or '-':<12}  {where}")
    return 0
