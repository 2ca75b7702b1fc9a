"""``selfheal quarantine add|remove|list``: the committed quarantine list (docs/history.md)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from pytest_selfheal.cli.commands._common import print_json, project_root
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import NotFoundError, UsageError
from pytest_selfheal.history.sources import quarantine_path, read_quarantine
from pytest_selfheal.history.triage import QuarantineEntry, add_entry, remove_entries
from pytest_selfheal.store import fsio

NAME = "quarantine"
HELP = "add, remove or list quarantined tests and fingerprints (.selfheal-quarantine.yml)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("add", "remove", "list"))
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--test", metavar="NODEID", help="the test to (un)quarantine")
    which.add_argument("--fingerprint", metavar="FP", help="the failure fingerprint to (un)quarantine")
    parser.add_argument("--reason", help="why (required by add)")
    parser.add_argument("--expires", metavar="YYYY-MM-DD", help="last day the entry applies (add)")
    parser.add_argument("--owner", help="who follows it up (add)")
    parser.add_argument("--revision", metavar="REV", help="list: read the file at this git revision")
    parser.add_argument("--json", action="store_true", help="list: print the entries as JSON")


def run(args: argparse.Namespace) -> int:
    """0 done; 2 bad arguments, a bad file or a bad config; 4 nothing to remove; 5 the configured
    file is not a real file inside the project (add, remove)."""
    project = project_root()
    relative = load_config(project).settings.history.quarantine_file
    if args.action == "list":
        entries, warnings = read_quarantine(project, relative, revision=args.revision)
        for warning in warnings:
            print(f"selfheal: warning: {warning}", file=sys.stderr)
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
