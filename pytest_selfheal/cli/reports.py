"""The commands that write reports: ``report``, ``merge``, ``junit`` and ``fingerprint`` (it
reports, it does not judge: exit 0 whenever the files were read, 3 when one is not junit XML)."""

from __future__ import annotations

import argparse
import json
import operator
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple

from pytest_selfheal import hooks
from pytest_selfheal.analysis.analyse import analyse_junit
from pytest_selfheal.analysis.classify import Rule
from pytest_selfheal.cli.common import print_json, project_redactor, project_root, store_from_args, warn
from pytest_selfheal.cli.options import DIR, arg, command, flag, json_flag, latest_id
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import EXIT_BAD_INPUT, EXIT_OK, InputError, NotFoundError, UsageError
from pytest_selfheal.history.db import HISTORY_FILE, HistoryDB, HistoryUnavailable
from pytest_selfheal.history.sources import ActionsContext, judge_event, quarantine_in_force
from pytest_selfheal.junit.reruns import rerun_junit
from pytest_selfheal.records.models import Failure
from pytest_selfheal.records.report import Report
from pytest_selfheal.report.junit_reruns import rerun_cases
from pytest_selfheal.report.load import build_from_store, latest_incident, read_report, select_ids
from pytest_selfheal.report.merge import merge_reports
from pytest_selfheal.report.render import render_terminal
from pytest_selfheal.report.sections import report_markdown
from pytest_selfheal.store import fsio

FORMAT = (
    arg("--format", choices=("md", "json", "text"), default=None,
        help="md (default): the markdown report; json: the report data; text: the compact lines pytest --selfheal "
             "prints"),
    json_flag("same as --format json"),
    arg("--output", "-o", metavar="PATH", help="write the report to PATH (atomically) instead of printing it"),
    flag("--headline", "markdown: put the one-line status (stop reason, final status) before the report heading, as "
                       "in the PR comment"),
)


def write_output(args: argparse.Namespace, data: bytes) -> Path:
    target = Path(args.output)
    fsio.ensure_dir(target.parent if str(target.parent) else Path("."))
    fsio.atomic_write_bytes(target, data)
    return target


def output_format(args: argparse.Namespace) -> str:
    """``md``, ``json`` or ``text`` from ``--format``/``--json``; ``UsageError`` when they disagree."""
    if args.json and args.format in ("md", "text"):
        raise UsageError(f"--json and --format {args.format} contradict each other")
    return "json" if args.json else (args.format or "md")


def emit(report: Report, args: argparse.Namespace) -> None:
    """Print ``report`` (or write it to ``--output``) in the chosen format; the markdown has the
    plugins' ``pytest_selfheal_report_sections`` (a broken one is a ``ConfigError``, 2)."""
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
    write_output(args, body.encode("utf-8"))


@command("report", "print the RALF Lite Loop Report of an incident (latest by default) as markdown or JSON",
         latest_id("the newest readable incident by the time in its id"),
         flag("--all", "one report over every incident of the reports root"), *FORMAT, DIR)
def report_command(args: argparse.Namespace) -> int:
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


@command("merge", "merge the JSON reports of several jobs (e.g. a CI matrix) into one report",
         arg("reports", metavar="REPORT.json", nargs="*",
             help="reports written by `selfheal report --format json` (one per shard)"),
         arg("--history", metavar="FILE", nargs="+", action="extend", default=[],
             help="shard history databases (a history.sqlite3, or a shard's reports root) to merge into this "
                  "project's history"),
         DIR,
         arg("--name", metavar="NAME", nargs="+", action="extend", dest="names", default=None,
             help="shard names, one per report in the same order (default: the file paths)"),
         *FORMAT)
def merge_command(args: argparse.Namespace) -> int:
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
                added = mine.import_runs(other.runs())
        except HistoryUnavailable as exc:
            raise InputError(str(exc).replace("; continuing without history", "")) from None
        print(f"merged {added} run(s) of {shard} into {mine.path}", file=sys.stderr)


@command("junit", "write an incident's tests as junit XML, tests that passed on re-run with <flakyFailure> "
                  "(Surefire)",
         latest_id("the latest incident"),
         arg("--output", "-o", metavar="PATH", required=True, help="where to write the junit XML"), DIR)
def junit_command(args: argparse.Namespace) -> int:
    """Write the document; 0, 2 bad arguments or config, 3 corrupted files, 4 no incident, 6 unwritable."""
    project = project_root()
    effective = load_config(project)
    store = store_from_args(args, effective)
    ids = select_ids(store, args.incident_id, every=False)
    if not ids:
        raise NotFoundError(f"no incident in {store.root}")
    incident_id = ids[0]
    quarantine, warnings = quarantine_in_force(project, effective.settings.history.quarantine_file,
                                               judge_event(ActionsContext.from_env(), None, project))
    for warning in warnings:
        print(f"selfheal: warning: {warning}")
    cases = rerun_cases(store.read_incident(incident_id), store.read_attempts(incident_id), quarantine)
    target = write_output(args, rerun_junit(cases, suite_name=f"selfheal {incident_id}"))
    flaky = sum(1 for case in cases if case.flaky)
    print(f"wrote {target}: {len(cases)} test(s) of {incident_id}, {flaky} flaky")
    return 0


# The failure's keys of a row of ``--json`` (not ``dataclasses.asdict``: it deep-copies, slowly).
ROW_KEYS = ("test", "fingerprint", "signature", "scheme", "failure_type", "code_fixable", "transient",
            "failure_class", "message", "outcome")
_row_values = operator.attrgetter(*ROW_KEYS)


class FingerprintRow(NamedTuple):
    """One failing testcase of one file (a tuple: 10,000 rows are built per run)."""

    file: str
    failure: Failure
    rule: str  # the classification rule that matched

    def to_json(self) -> dict[str, Any]:
        return {**dict(zip(ROW_KEYS, _row_values(self.failure))), "rule": self.rule, "file": self.file}


def collect(
    files: list[str], warnings: list[str], errors: list[str], rules: Sequence[Rule] = ()
) -> list[FingerprintRow]:
    """Failures of every file, classified by ``rules`` before the built-in ones; bad files go
    to ``errors``. The command's work but config and printing (the benchmark times it)."""
    rows: list[FingerprintRow] = []
    for name in files:
        try:
            analysed = analyse_junit(name, rules, warnings=warnings)
        except InputError as exc:
            errors.append(str(exc))
            continue
        rows.extend(FingerprintRow(name, failure, classification.rule) for failure, classification in analysed)
    return rows


def write_json(rows: Sequence[FingerprintRow], out: IO[str]) -> None:
    """A JSON list with one object per line: json's indenting encoder is pure Python and builds
    the whole text at once; one C-encoded line per failure is still valid, diff-friendly JSON."""
    out.write("[\n")
    last = len(rows) - 1
    for index, row in enumerate(rows):
        line = json.dumps(row.to_json(), sort_keys=True, ensure_ascii=False)
        out.write(f"  {line}{',' if index < last else ''}\n")
    out.write("]\n")


@command("fingerprint", "fingerprint and classify the failing testcases of junit XML files (any runner).",
         arg("files", nargs="+", metavar="FILE", help="junit XML file(s)"),
         json_flag("print a JSON list of failures (test, fingerprint, signature, failure_type, …)"),
         flag("--no-config", "built-in classification rules only (ignore classification.rules of the config)"))
def fingerprint_command(args: argparse.Namespace) -> int:
    """Print one line (or JSON object) per failing testcase; warnings/errors on stderr."""
    rules: list[Rule] = []
    if not args.no_config:
        # The project's configured rules (docs/fingerprints.md), as `pytest --selfheal` and
        # `selfheal loop` use them; hook rules are not applied here (docs/hooks.md).
        rules = list(load_config(project_root()).settings.classification_rules)
    warnings: list[str] = []
    errors: list[str] = []
    rows = collect(args.files, warnings, errors, rules)
    warn(warnings)
    for error in errors:
        sys.stderr.write(f"selfheal: error: {error}\n")
    if len(errors) < len(args.files):
        # Something was read: print it, even when another file was bad.
        if args.json:
            write_json(rows, sys.stdout)
        else:
            for row in rows:
                sys.stdout.write(f"{row.failure.fingerprint}  {row.failure.signature}\n")
    return EXIT_BAD_INPUT if errors else EXIT_OK
