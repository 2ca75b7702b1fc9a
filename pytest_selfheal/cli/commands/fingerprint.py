"""``selfheal fingerprint FILE... [--json] [--no-config]``: fingerprint junit failures.

Works on junit from any runner (docs/fingerprints.md). It reports, it does not judge:
exit 0 whenever the files were read, failures or not; 3 when a file is not junit XML
(the other files are still reported).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import IO, Any, NamedTuple

from pytest_selfheal.analysis.analyse import analyse_junit
from pytest_selfheal.analysis.classify import Rule
from pytest_selfheal.cli.commands._common import project_root
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import EXIT_BAD_INPUT, EXIT_OK, InputError
from pytest_selfheal.records.models import Failure

NAME = "fingerprint"
HELP = "fingerprint and classify the failing testcases of junit XML files (any runner)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help="junit XML file(s)")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of failures (test, fingerprint, signature, failure_type, …)",
    )
    parser.add_argument(
        "--no-config",
        action="store_true",
        help="built-in classification rules only (ignore classification.rules of the config)",
    )


class FingerprintRow(NamedTuple):
    """One failing testcase of one file (a tuple: 10,000 rows are built per run)."""

    file: str
    failure: Failure
    rule: str  # the classification rule that matched

    def to_json(self) -> dict[str, Any]:
        """The row ``--json`` prints (built by hand: ``dataclasses.asdict`` deep-copies, slowly)."""
        failure = self.failure
        return {
            "test": failure.test,
            "fingerprint": failure.fingerprint,
            "signature": failure.signature,
            "scheme": failure.scheme,
            "failure_type": failure.failure_type,
            "code_fixable": failure.code_fixable,
            "transient": failure.transient,
            "failure_class": failure.failure_class,
            "rule": self.rule,
            "message": failure.message,
            "outcome": failure.outcome,
            "file": self.file,
        }


def collect(
    files: list[str], warnings: list[str], errors: list[str], rules: Sequence[Rule] = ()
) -> list[FingerprintRow]:
    """Failures of every file, classified by ``rules`` before the built-in ones; bad files go
    to ``errors``. The whole work of the command but config and printing (the benchmark times it)."""
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


def run(args: argparse.Namespace) -> int:
    """Print one line (or JSON object) per failing testcase; warnings/errors on stderr."""
    rules: list[Rule] = []
    if not args.no_config:
        # The project's configured rules (docs/fingerprints.md), as `pytest --selfheal` and
        # `selfheal loop` use them; hook rules are not applied here (docs/hooks.md).
        rules = list(load_config(project_root()).settings.classification_rules)
    warnings: list[str] = []
    errors: list[str] = []
    rows = collect(args.files, warnings, errors, rules)
    for warning in warnings:
        sys.stderr.write(f"selfheal: warning: {warning}\n")
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
