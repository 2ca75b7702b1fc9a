"""``selfheal ci [-- PYTEST_ARGS...]``: what the GitHub Action runs (docs/action.md).

pytest --selfheal, the RALF-Lite loop on the captured incident, the report in files, the
job summary, the step outputs and one sticky PR comment. ``--comment-from REPORT.json``
only posts an existing report (the trusted half of the fork-PR recipe).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from pytest_selfheal.cli.commands._common import add_dir_argument, print_json
from pytest_selfheal.errors import UsageError
from pytest_selfheal.github.ci import comment_from_report, run_ci
from pytest_selfheal.github.ci_inputs import DEFAULT_REPORT_NAME, CiOptions, action_inputs, parse_sha

NAME = "ci"
HELP = "run pytest --selfheal, the loop and the report, and comment on the pull request (what the Action runs)"


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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_dir_argument(parser)
    parser.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                        help="override a ralf_lite key (repeatable); also passed to pytest as --selfheal-set")
    for name, text in _SWITCHES.items():
        parser.add_argument(f"--{name.replace('_', '-')}", action=argparse.BooleanOptionalAction, default=None,
                            help=text)
    parser.add_argument("--report-name", metavar="NAME", default=None,
                        help="name of the sticky comment (one comment per PR and name; default: default)")
    parser.add_argument("--report-path", metavar="PATH", default=None,
                        help="where to write the markdown report (default: <reports root>/ralf_lite_report.md); "
                             "the JSON goes beside it (.json)")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON on stdout (pytest and progress output go to stderr)")
    parser.add_argument("--action-inputs", action="store_true",
                        help="read the GitHub Action's inputs from INPUT_* environment variables "
                             "(what action.yml does; flags given here win)")
    parser.add_argument("--comment-from", metavar="REPORT.json", default=None,
                        help="comment-only mode: post this report JSON (from selfheal ci or selfheal merge --json); "
                             "runs no tests")
    parser.add_argument("--post-only", action="store_true",
                        help="with --comment-from: post the PR comment only, no job summary and no step outputs "
                             "(the action's posting step; the step that ran the tests wrote them)")
    parser.add_argument("--pr", metavar="N", type=int, default=None,
                        help="the pull request to comment on (default: from the event payload or the report JSON)")
    parser.add_argument("--expected-head-sha", metavar="SHA", default=None,
                        help="comment only if the pull request's head commit is SHA")
    parser.add_argument("pytest_args", metavar="PYTEST_ARGS", nargs="*",
                        help="arguments for pytest, after --")


def options_from_args(args: argparse.Namespace, env: Any = None) -> CiOptions:
    """The run's options: flags first, then (with ``--action-inputs``) the ``INPUT_*``
    variables, then the defaults. Lists add up: the inputs' pytest args and overrides come
    before the flags' ones."""
    given = action_inputs(os.environ if env is None else env) if args.action_inputs else {}
    if args.pr is not None and args.pr <= 0:
        raise UsageError(f"--pr: expected a pull request number, got {args.pr}")
    flags = {**{name: getattr(args, name) for name in _SWITCHES}, "report_name": args.report_name,
             "comment_from": Path(args.comment_from) if args.comment_from else None, "pull_request": args.pr,
             "expected_head_sha": parse_sha(args.expected_head_sha) if args.expected_head_sha is not None else None}
    options = CiOptions(**{**given, **{key: value for key, value in flags.items() if value is not None}})
    options.pytest_args = [*given.get("pytest_args", ()), *args.pytest_args]
    options.overrides = [*given.get("overrides", ()), *((text, "--set") for text in args.overrides)]
    options.reports_dir = Path(args.dir) if args.dir else None
    options.report_path = Path(args.report_path) if args.report_path else None
    options.report_name = options.report_name or DEFAULT_REPORT_NAME
    options.post_only = bool(args.post_only)
    if options.comment_from is not None and options.pytest_args:
        raise UsageError("--comment-from runs no tests: pytest arguments cannot be given with it")
    if options.post_only and options.comment_from is None:
        raise UsageError("--post-only posts a report written earlier: give --comment-from REPORT.json")
    return options


def run(args: argparse.Namespace) -> int:
    """Run it; exit codes in docs/exit-codes.md ("selfheal ci")."""
    options = options_from_args(args)
    if options.working_directory is not None:
        if not options.working_directory.is_dir():
            raise UsageError(f"working-directory: {options.working_directory} is not a directory")
        os.chdir(options.working_directory)
    stream = sys.stderr if args.json else sys.stdout
    if options.comment_from is not None:
        result = comment_from_report(options, stream=stream)
    else:
        result = run_ci(options, stream=stream)
    if args.json:
        print_json(result.to_dict())
    return result.exit_code
