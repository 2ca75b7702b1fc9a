"""The commands of CI and the failure history: ``ci`` (what the GitHub Action runs), ``history``,
``flaky`` and ``quarantine`` (docs/history.md)."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.cli.common import parse_days, print_json, project_redactor, project_root, store_from_args, warn
from pytest_selfheal.cli.options import DIR, arg, command, exclusive, flag, json_flag, set_flag
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import NotFoundError, UsageError
from pytest_selfheal.github import ci as github_ci
from pytest_selfheal.github.ci_inputs import DEFAULT_REPORT_NAME, CiOptions, action_inputs, parse_sha
from pytest_selfheal.history.db import HISTORY_FILE, HistoryDB, HistoryUnavailable
from pytest_selfheal.history.records import RunInfo, TestOutcome
from pytest_selfheal.history.segments import is_segment_name
from pytest_selfheal.history.share import HISTORY_REF, compact_shared, pull, push, refuse_unless_merged, token_env
from pytest_selfheal.history.sources import DEFAULT_REMOTE, quarantine_path, read_quarantine
from pytest_selfheal.history.triage import QuarantineEntry, add_entry, remove_entries
from pytest_selfheal.redact import Redactor
from pytest_selfheal.store import fsio
from pytest_selfheal.store.events import format_ts

# The on/off flags, by their CiOptions field (their defaults are CiOptions').
_SWITCHES = {
    "comment": "post/update the sticky PR comment on pull request events (default: on)",
    "fail_on_unresolved": "exit 1 when the loop did not resolve the failure (default: on)",
    "pass_on_proposed_fix": "exit 0 when a repair provider's fix is only proposed (default: off: the code that "
                            "was checked out still fails, so the job fails)",
    "fail_on_new_flaky": "on a pull request, exit 1 when a test it adds or changes passes and fails on "
                         "re-runs (default: on; the re-runs: the new_tests keys)",
    "fail_on_new_unchecked": "on a pull request, exit 1 when a test it adds or changes could not be re-run its "
                             "count (the budget spent, a refused re-run), so it was not checked (default: on)",
}


def options_from_args(args: argparse.Namespace, env: Any = None) -> CiOptions:
    """The run's options: flags, else (``--action-inputs``) the ``INPUT_*`` variables, else the
    defaults; the inputs' pytest args and overrides come before the flags'."""
    given = action_inputs(os.environ if env is None else env) if args.action_inputs else {}
    if args.pr is not None and args.pr <= 0:
        raise UsageError(f"--pr: expected a pull request number, got {args.pr}")
    flags = {**{name: getattr(args, name) for name in _SWITCHES}, "report_name": args.report_name,
             "comment_from": Path(args.comment_from) if args.comment_from else None, "pull_request": args.pr,
             "expected_head_sha": parse_sha(args.expected_head_sha) if args.expected_head_sha is not None else None,
             "pytest_args": [*given.get("pytest_args", ()), *args.pytest_args],
             "overrides": [*given.get("overrides", ()), *((text, "--set") for text in args.overrides)],
             "reports_dir": Path(args.dir) if args.dir else None, "post_only": bool(args.post_only),
             "report_path": Path(args.report_path) if args.report_path else None}
    options = CiOptions(**{**given, **{key: value for key, value in flags.items() if value is not None}})
    options.report_name = options.report_name or DEFAULT_REPORT_NAME
    if options.comment_from is not None and options.pytest_args:
        raise UsageError("--comment-from runs no tests: pytest arguments cannot be given with it")
    if options.post_only and options.comment_from is None:
        raise UsageError("--post-only posts a report written earlier: give --comment-from REPORT.json")
    return options


@command("ci", "run pytest --selfheal, the loop and the report, and comment on the pull request (what the Action runs)",
         DIR, set_flag("override a ralf_lite key (repeatable); also passed to pytest as --selfheal-set"),
         *(arg(f"--{name.replace('_', '-')}", action=argparse.BooleanOptionalAction, default=None, help=text)
           for name, text in _SWITCHES.items()),
         arg("--report-name", metavar="NAME", default=None,
             help="name of the sticky comment (one comment per PR and name; default: default)"),
         arg("--report-path", metavar="PATH", default=None,
             help="where to write the markdown report (default: <reports root>/ralf_lite_report.md); the JSON goes "
                  "beside it (.json)"),
         json_flag("print the result as JSON on stdout (pytest and progress output go to stderr)"),
         flag("--action-inputs", "read the GitHub Action's inputs from INPUT_* environment variables (what action.yml "
                                 "does; flags given here win)"),
         arg("--comment-from", metavar="REPORT.json", default=None,
             help="comment-only mode: post this report JSON (from selfheal ci or selfheal merge --json); runs no "
                  "tests"),
         flag("--post-only", "with --comment-from: post the PR comment only, no job summary and no step outputs (the "
                             "action's posting step; the step that ran the tests wrote them)"),
         arg("--pr", metavar="N", type=int, default=None,
             help="the pull request to comment on (default: from the event payload or the report JSON)"),
         arg("--expected-head-sha", metavar="SHA", default=None,
             help="comment only if the pull request's head commit is SHA"),
         arg("pytest_args", metavar="PYTEST_ARGS", nargs="*", help="arguments for pytest, after --"))
def ci_command(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    if options.working_directory is not None:
        if not options.working_directory.is_dir():
            raise UsageError(f"working-directory: {options.working_directory} is not a directory")
        os.chdir(options.working_directory)
    stream = sys.stderr if args.json else sys.stdout
    if options.comment_from is not None:
        result = github_ci.comment_from_report(options, stream=stream)
    else:
        result = github_ci.run_ci(options, stream=stream)
    if args.json:
        print_json(result.to_dict())
    return result.exit_code


ACTIONS = ("push", "pull", "compact")

# The options of some actions only.
_ONLY_FOR = {"older_than": ("compact",), "token_env": ACTIONS, "segments": ("push",)}


@command("history", "the recent runs, one test's or failure's outcomes; push|pull|compact the shared history (git "
                    "remote)",
         arg("action", nargs="?", choices=ACTIONS,
             help="push: add this machine's segments to the remote's refs/selfheal/history; pull: fetch it and "
                  "rebuild the local history; compact: merge the shared segments older than --older-than into one"),
         exclusive(arg("--test", metavar="NODEID", help="a pytest node id"),
                   arg("--fingerprint", metavar="FP", help="a failure fingerprint"),
                   flag("--path", "print the absolute path of the history database (an empty line when "
                                  "history.enabled is false): what the Action caches")),
         arg("--limit", type=int, default=50, metavar="N", help="newest N runs (default 50)"),
         json_flag("print the runs as JSON"),
         arg("--remote", default=DEFAULT_REMOTE, metavar="REMOTE",
             help=f"git remote (name or URL) of the shared history (default {DEFAULT_REMOTE}; ref {HISTORY_REF})"),
         arg("--older-than", metavar="DAYS", help="compact: segments whose runs are all older than DAYS"),
         arg("--segments", metavar="NAMES",
             help="push: only these segments (names separated by spaces or commas: those one run recorded, as "
                  "`selfheal ci` writes them to its history-segments output); default every segment here"),
         arg("--token-env", metavar="VAR",
             help="push|pull|compact: send the token in environment variable VAR to an https remote (as the Action "
                  "does with its github-token); git then works in a private scratch repository and reads no git "
                  "configuration but its own"),
         DIR)
def history_command(args: argparse.Namespace) -> int:
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


def _print_recent(runs: Sequence[tuple[RunInfo, list[TestOutcome]]], as_json: bool, redactor: Optional[Redactor]) -> int:
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
        warn(pulled.problems)
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
        warn(pushed.problems)
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
    """The names of ``--segments`` (None: not given); UsageError for a word that is not one."""
    if text is None:
        return None
    names = text.replace(",", " ").split()
    bad = [name for name in names if not is_segment_name(name)]
    if bad:
        raise UsageError(f"--segments: {bad[0][:80]!r} is not a history segment name")
    return names


@command("flaky", "tests ranked by flake rate over a window, with their counts",
         arg("--window", metavar="DAYS", default=None,
             help="look back this many days (default: history.window_days, 30)"),
         json_flag("print the ranking as JSON"), DIR)
def flaky_command(args: argparse.Namespace) -> int:
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


@command("quarantine", "add, remove or list quarantined tests and fingerprints (.selfheal-quarantine.yml)",
         arg("action", choices=("add", "remove", "list")),
         exclusive(arg("--test", metavar="NODEID", help="the test to (un)quarantine"),
                   arg("--fingerprint", metavar="FP", help="the failure fingerprint to (un)quarantine")),
         arg("--reason", help="why (required by add)"),
         arg("--expires", metavar="YYYY-MM-DD", help="last day the entry applies (add)"),
         arg("--owner", help="who follows it up (add)"),
         arg("--revision", metavar="REV", help="list: read the file at this git revision"),
         json_flag("list: print the entries as JSON"))
def quarantine_command(args: argparse.Namespace) -> int:
    """0 done; 2 bad arguments, a bad file or a bad config; 4 nothing to remove; 5 the configured
    file is not a real file inside the project (add, remove)."""
    project = project_root()
    relative = load_config(project).settings.history.quarantine_file
    if args.action == "list":
        entries, warnings = read_quarantine(project, relative, revision=args.revision)
        warn(warnings)
        if args.json:
            print_json([dict(e.to_mapping(), line=e.line) for e in entries])
        elif not entries:
            print(f"no quarantine entries in force ({relative})")
        for e in entries if not args.json else []:
            subject = f"test {e.test}" if e.test else f"fingerprint {e.fingerprint}"
            extra = "".join(f", {k} {v}" for k, v in (("owner", e.owner), ("until", e.expires)) if v)
            print(f"{relative}:{e.line}: {subject}: {e.reason}{extra}")
        return 0
    if args.test is None and args.fingerprint is None:
        raise UsageError(f"quarantine {args.action}: give --test NODEID or --fingerprint FP")
    if args.action == "add" and (not args.reason or not args.reason.strip()):
        raise UsageError("quarantine add: --reason is required")
    try:
        given = args.expires if args.action == "add" else None
        expires = dt.date.fromisoformat(given).isoformat() if given is not None else None
    except ValueError:
        raise UsageError(f"--expires: expected a date YYYY-MM-DD, got {args.expires!r}") from None
    path = quarantine_path(project, relative)
    text = fsio.read_text(path) if path.is_file() else None
    try:
        if args.action == "add":
            text = add_entry(text, QuarantineEntry(reason=args.reason.strip(), test=args.test,
                                                   fingerprint=args.fingerprint, expires=expires, owner=args.owner))
            said = f"quarantined {'test ' + args.test if args.test else 'fingerprint ' + args.fingerprint} in {relative}"
        else:
            text, removed = remove_entries(text or "", test=args.test, fingerprint=args.fingerprint)
            if not removed:
                raise NotFoundError(f"{relative}: no entry for {args.test or args.fingerprint}")
            said = f"removed {removed} entr{'y' if removed == 1 else 'ies'} from {relative}"
    except ValueError as exc:
        raise UsageError(f"{relative}: {exc}; fix the file first") from None
    fsio.atomic_write_text(path, text)
    print(said)
    return 0

