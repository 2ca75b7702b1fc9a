"""``selfheal history``: the recent runs, one test's or one failure's outcomes, and the
shared history on the git remote (``push``, ``pull``, ``compact``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Optional

from pytest_selfheal.cli.commands._common import (
    add_dir_argument,
    parse_days,
    print_json,
    project_redactor,
    project_root,
    store_from_args,
)
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import NotFoundError, UsageError
from pytest_selfheal.history.db import HISTORY_FILE, HistoryDB, HistoryUnavailable
from pytest_selfheal.history.records import RunInfo, TestOutcome
from pytest_selfheal.history.segments import is_segment_name
from pytest_selfheal.history.share import (
    DEFAULT_REMOTE,
    HISTORY_REF,
    compact_shared,
    pull,
    push,
    refuse_unless_merged,
    token_env,
)
from pytest_selfheal.redact import Redactor

NAME = "history"
HELP = "the recent runs, one test's or failure's outcomes; push|pull|compact the shared history (git remote)"
ACTIONS = ("push", "pull", "compact")
# The options of some actions only.
_ONLY_FOR = {"older_than": ("compact",), "token_env": ACTIONS, "segments": ("push",)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", choices=ACTIONS,
                        help="push: add this machine's segments to the remote's refs/selfheal/history; pull: fetch "
                             "it and rebuild the local history; compact: merge the shared segments older than "
                             "--older-than into one")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--test", metavar="NODEID", help="a pytest node id")
    which.add_argument("--fingerprint", metavar="FP", help="a failure fingerprint")
    which.add_argument("--path", action="store_true",
                       help="print the absolute path of the history database (an empty line when "
                            "history.enabled is false): what the Action caches")
    parser.add_argument("--limit", type=int, default=50, metavar="N", help="newest N runs (default 50)")
    parser.add_argument("--json", action="store_true", help="print the runs as JSON")
    parser.add_argument("--remote", default=DEFAULT_REMOTE, metavar="REMOTE",
                        help=f"git remote (name or URL) of the shared history (default {DEFAULT_REMOTE}; "
                             f"ref {HISTORY_REF})")
    parser.add_argument("--older-than", metavar="DAYS", help="compact: segments whose runs are all older than DAYS")
    parser.add_argument("--segments", metavar="NAMES",
                        help="push: only these segments (names separated by spaces or commas: those one run "
                             "recorded, as `selfheal ci` writes them to its history-segments output); default "
                             "every segment here")
    parser.add_argument("--token-env", metavar="VAR",
                        help="push|pull|compact: send the token in environment variable VAR to an https remote "
                             "(as the Action does with its github-token); git then works in a private scratch "
                             "repository and reads no git configuration but its own")
    add_dir_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Print or share the history; 0, 2 bad arguments, 4 no history yet (or an unusable
    database), 5 push or compact on an event that tests code not merged yet, 6 git could not reach or
    update the remote."""
    if args.limit < 1:
        raise UsageError(f"--limit: expected an integer >= 1, got {args.limit}")
    for dest, actions in _ONLY_FOR.items():
        if getattr(args, dest) is not None and args.action not in actions:
            raise UsageError(f"--{dest.replace('_', '-')} is for `selfheal history {'|'.join(actions)}`")
    if args.action is not None:
        if args.test is not None or args.fingerprint is not None or args.path:
            raise UsageError(f"history {args.action}: --test, --fingerprint and --path are for reading the history")
        return _share(args)
    if args.path:
        effective = load_config(project_root())
        path = str((store_from_args(args, effective).root / HISTORY_FILE).absolute())
        if "\n" in path or "\r" in path:  # it goes into $GITHUB_OUTPUT as one line
            raise UsageError(f"the history path {path!r} holds a line break")
        print(path if effective.settings.history.enabled else "")
        return 0
    # The config is loaded once: its redactor also redacts the --json output.
    config = None if args.dir else load_config(project_root())
    store = store_from_args(args, config)
    redactor = config.redactor if config is not None else None
    try:
        with HistoryDB.open(store.root, create=False) as db:
            if args.test is None and args.fingerprint is None:
                return _print_recent(db.runs(newest=args.limit), args.json, redactor)
            rows = db.history_of(nodeid=args.test, fingerprint=args.fingerprint, limit=args.limit)
    except HistoryUnavailable as exc:
        raise NotFoundError(str(exc)) from None
    if args.json:
        print_json([
            {"recorded_at": run_info.recorded_at, "kind": run_info.kind, "incident_id": run_info.incident_id,
             "iteration": run_info.iteration, "commit": run_info.commit, "branch": run_info.branch,
             "ci_run_id": run_info.ci_run_id, **asdict(outcome)}
            for run_info, outcome in rows
        ], redactor)
        return 0
    subject = args.test if args.test is not None else f"fingerprint {args.fingerprint}"
    if not rows:
        print(f"no recorded outcome for {subject}")
        return 0
    print(f"{subject}: {len(rows)} recorded outcome(s), newest first")
    for run_info, outcome in rows:
        where = " ".join(str(v) for v in (run_info.branch, (run_info.commit or "")[:12]) if v)
        print(f"  {run_info.recorded_at}  {outcome.outcome:<16} {run_info.kind:<7} {outcome.fingerprint or '-':<12}  "
              f"{where}")
    return 0


def _print_recent(
    runs: Sequence[tuple[RunInfo, list[TestOutcome]]], as_json: bool, redactor: Optional[Redactor] = None
) -> int:
    """The recent runs, newest first, each with its failing and re-run tests."""
    if as_json:
        print_json([
            {"recorded_at": r.recorded_at, "kind": r.kind, "branch": r.branch, "commit": r.commit, "job": r.ci_job,
             "workflow": r.ci_workflow, "ci_run_id": r.ci_run_id, "incident_id": r.incident_id,
             "iteration": r.iteration, "tests_run": r.tests_run,
             "outcomes": [asdict(o) for o in outcomes]}
            for r, outcomes in runs
        ], redactor)
        return 0
    if not runs:
        print("no recorded run")
        return 0
    print(f"{len(runs)} recorded run(s), newest first")
    for r, outcomes in runs:
        where = " ".join(str(v) for v in (r.branch or "-", (r.commit or "-")[:12], r.ci_job or "-"))
        print(f"  {r.recorded_at}  {r.kind:<7} {where}  {len(outcomes)} outcome(s)")
        for o in outcomes:
            print(f"    {o.outcome:<16} {o.fingerprint or '-':<12}  {o.nodeid}")
    return 0


def _share(args: argparse.Namespace) -> int:
    """``push``, ``pull`` or ``compact`` against the remote's shared history ref."""
    project = project_root()
    root = store_from_args(args).root
    remote: str = args.remote
    shown = project_redactor().redact(remote)  # a URL may carry credentials
    if not remote or remote.startswith("-"):
        raise UsageError(f"--remote: expected a git remote name or URL, got {shown!r}")
    auth = None
    if args.token_env is not None:
        token = os.environ.get(args.token_env, "")
        if not token.strip():
            raise UsageError(f"--token-env: the environment variable {args.token_env!r} is unset or empty")
        if "/" not in remote and ":" not in remote:
            # git works in a scratch repository then: it has no remote names, only URLs.
            raise UsageError(f"--token-env: --remote must be a URL, not the remote name {shown!r}")
        auth = token_env(token.strip())
    if args.action == "pull":
        pulled = pull(project, root, remote=remote, auth=auth)
        for line in pulled.problems:
            print(f"selfheal: warning: {line}", file=sys.stderr)
        where = f"{shown} {HISTORY_REF}" + (f" at {pulled.commit[:12]}" if pulled.commit else " (none there yet)")
        print(f"pulled {pulled.segments} new segment(s) from {where}: {pulled.runs} run(s), {pulled.added} new "
              f"in {root / HISTORY_FILE}")
        return 0
    refuse_unless_merged(os.environ, args.action, project)
    if args.action == "push":
        only = _segment_names(args.segments)
        if only is not None and not only:
            print("no segment of this run to push")
            return 0
        pushed = push(project, root, remote=remote, auth=auth, only=only)
        for line in pushed.problems:
            print(f"selfheal: warning: {line}", file=sys.stderr)
        retried = f" after {pushed.attempts} attempts" if pushed.attempts > 1 else ""
        print(f"pushed {pushed.pushed} segment(s) to {shown} {HISTORY_REF}{retried} "
              f"({pushed.already} already there)")
        return 0
    if args.older_than is None:
        raise UsageError("history compact: give --older-than DAYS")
    days = parse_days(args.older_than, "--older-than", zero_ok=True)
    done = compact_shared(project, older_than_days=days, remote=remote, auth=auth)
    if not done.replaced:
        print(f"nothing to compact on {shown} {HISTORY_REF}: fewer than 2 segments older than {days:g} days")
    else:
        print(f"compacted {done.replaced} segment(s) older than {days:g} days into one ({done.runs} run(s)) "
              f"on {shown} {HISTORY_REF}")
    return 0


def _segment_names(text: Optional[str]) -> Optional[list[str]]:
    """The names of ``--segments`` (None: not given); a word that is not a segment name is exit 2."""
    if text is None:
        return None
    names = text.replace(",", " ").split()
    bad = [name for name in names if not is_segment_name(name)]
    if bad:
        raise UsageError(f"--segments: {bad[0][:80]!r} is not a history segment name")
    return names
