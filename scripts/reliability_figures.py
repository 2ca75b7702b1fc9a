#!/usr/bin/env python3
"""Run the reliability suite and print the figures table of docs/reliability.md.

    python scripts/reliability_figures.py            # the default (bounded) sample, ~3 min
    python scripts/reliability_figures.py --full     # every kill point, 500 MB junit, 2,000 examples (~40 min)
    python scripts/reliability_figures.py --no-run --figures FILE   # only aggregate an earlier run

Each test of tests/reliability appends its numbers as one JSON line to the file named by
$SELFHEAL_RELIABILITY_FIGURES when it passes; this script sets it, runs pytest, sums the
lines and prints a markdown table. The pytest exit code is printed with the table: figures
of a run that failed are not figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def run(figures: Path, full: bool, extra: list[str]) -> int:
    env = dict(os.environ)
    env["SELFHEAL_RELIABILITY_FIGURES"] = str(figures)
    if full:
        env["SELFHEAL_RELIABILITY_FULL"] = "1"
    else:
        env.pop("SELFHEAL_RELIABILITY_FULL", None)
    argv = [sys.executable, "-m", "pytest", "tests/reliability", "-q", "-p", "no:cacheprovider", "-rxs", *extra]
    print("$", " ".join(argv), "(full)" if full else "(sample)", file=sys.stderr)
    started = time.monotonic()
    code = subprocess.call(argv, cwd=ROOT, env=env)
    print(f"pytest exit code {code} after {time.monotonic() - started:.0f} s", file=sys.stderr)
    return code


def load(figures: Path) -> list[dict[str, Any]]:
    if not figures.exists():
        return []
    return [json.loads(line) for line in figures.read_text().splitlines() if line.strip()]


def merge(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per family / property: under pytest-xdist (``-n auto`` in pyproject) every
    worker builds its own module fixtures and records its own share; the shares add up."""
    merged: list[dict[str, Any]] = []
    by_key: dict[Any, dict[str, Any]] = {}
    for row in rows:
        if "family" in row:
            key: Any = ("family", row["family"])
        elif "examples" in row:
            key = ("examples", row["test"])
        else:
            merged.append(row)
            continue
        if key not in by_key:
            by_key[key] = json.loads(json.dumps(row))
            merged.append(by_key[key])
            continue
        target = by_key[key]
        for field in ("cases", "examples", "tracebacks", "failures"):
            if field in row:
                target[field] = target.get(field, 0) + row[field]
    return merged


def table(rows: list[dict[str, Any]]) -> str:
    rows = merge(rows)
    out: list[str] = ["| What | Count | Losses / failures | Test |", "|------|-------|-------------------|------|"]

    # --- kills: one row per test (the sample and its long variant apart), then the total
    kills: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    labels = {"file_operation": "SIGKILL before the N-th file operation", "named_step": "SIGKILL at a named loop step",
              "random_instant": "SIGKILL at a random instant"}
    for row in rows:
        if row.get("method") in labels:
            k = kills[row["test"]]
            k["method:" + row["method"]] = 1
            for key in ("attempted", "landed", "mid_operation", "replay_window", "resumed", "losses"):
                k[key] += int(row.get(key, 0))
            k["op:" + row.get("op", "?")] += int(row.get("attempted", 0))
    total: dict[str, int] = defaultdict(int)
    for test in sorted(kills, key=lambda t: ("slow" in t, t)):
        k = kills[test]
        method = next(name[7:] for name in k if name.startswith("method:"))
        per_op = ", ".join(f"{name[3:]} {n}" for name, n in sorted(k.items()) if name.startswith("op:"))
        out.append(f"| {labels[method]} ({per_op}) | {k['attempted']} kills: {k['landed']} landed, "
                   f"{k['mid_operation']} mid-operation; replay window {k['replay_window']} | "
                   f"{k['losses']} attempts lost | {test} |")
        for key in ("attempted", "landed", "mid_operation", "replay_window", "losses"):
            total[key] += k[key]
    if total["attempted"]:
        out.append(f"| **All kills** | **{total['attempted']}** ({total['landed']} landed, "
                   f"{total['mid_operation']} mid-operation) | **{total['losses']} attempts lost** | "
                   f"test_fault_injection.py |")

    # --- disk faults
    disk = [r for r in rows if r.get("method") == "disk_fault"]
    if disk:
        cases = sum(int(r["cases"]) for r in disk)
        modes = sorted({r["mode"] for r in disk})
        out.append(f"| Disk full / read-only ({', '.join(modes)}; capture, plan, loop, archive, report) | {cases} cases "
                   f"| 0 tracebacks, 0 half-written | test_fault_injection.py::test_*disk_fault* |")
    for r in rows:
        if r.get("method") == "root_is_file":
            out.append(f"| Reports root occupied by a regular file | {r['cases']} cases | 0 tracebacks | "
                       f"test_fault_injection.py::test_reports_root_occupied_by_a_file |")

    # --- concurrency
    for r in rows:
        if r["test"].startswith("test_concurrency.py"):
            workers = f" × {r['workers_each']} workers" if r.get("workers_each", 1) > 1 else ""
            out.append(f"| Concurrent: {r['processes']} processes{workers}, {r['runs']} run(s) | "
                       f"{r.get('incidents', r.get('refused', ''))} {'incidents' if 'incidents' in r else 'refused'} | "
                       f"{r['corrupted']} corrupted, {r['duplicates']} duplicates | {r['test']} |")

    # --- hostile input
    for r in rows:
        if r.get("family"):
            out.append(f"| Hostile input: {r['family']} | {r['cases']} cases | {r['tracebacks']} tracebacks | "
                       f"test_hostile_input.py |")
        if "peak_rss_mb" in r:
            out.append(f"| {r['megabytes']} MB junit ({r['testcases']:,} testcases) | peak RSS {r['peak_rss_mb']} MB "
                       f"| limit 200 MB | {r['test']} |")

    # --- property-based
    for r in rows:
        if "examples" in r:
            out.append(f"| Property: {r['test'].split('::')[1]} | {r['examples']} examples | {r['failures']} failures "
                       f"| {r['test']} |")

    # --- secrets and action
    for r in rows:
        if "kinds" in r:
            out.append(f"| Secrets: {r['kinds']} kinds × {r['surfaces']} surfaces ({r['files']} files/bodies) | "
                       f"{r['checks']} checks | {r['leaks']} leaks, {r['partial_leaks']} partial | {r['test']} |")
        if "processes_checked" in r:
            out.append(f"| Token withheld from test processes | {r['processes_checked']} processes | "
                       f"{r['token_seen']} saw it | {r['test']} |")
        if "executed" in r:
            out.append(f"| PR-controlled plan commands under `selfheal ci` | {r['commands']} commands | "
                       f"{r['executed']} executed | {r['test']} |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="SELFHEAL_RELIABILITY_FULL=1: the long variants")
    parser.add_argument("--figures", type=Path, default=None, help="JSON-lines file (default: a temp file)")
    parser.add_argument("--no-run", action="store_true", help="only aggregate --figures")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    figures = args.figures or Path(tempfile.mkstemp(prefix="reliability-", suffix=".jsonl")[1])
    code = 0
    if not args.no_run:
        if figures.exists():
            figures.write_text("")
        code = run(figures, args.full, args.pytest_args)
    print(table(load(figures)))
    if code:
        print(f"\n**pytest failed (exit {code}): these figures are incomplete.**")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
