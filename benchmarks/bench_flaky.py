"""Benchmark: ``selfheal flaky``'s query vs a hand-written ``GROUP BY`` of the same question.

Usage::

    python benchmarks/bench_flaky.py [--outcomes 1000000] [--tests 5000] [--repeat 7]

Builds a history database with ``--outcomes`` recorded outcomes (runs of 50 failing or
re-run tests over ``--tests`` distinct tests, 10 % of them passing on re-run) in a
temporary directory, then measures in interleaved runs, in this process:

* baseline: ``SELECT nodeid, SUM(outcome = 'passed_on_rerun'), COUNT(*) ... GROUP BY
  nodeid HAVING ... ORDER BY rate`` over the same window, ``fetchall()``;
* ours: ``HistoryDB.flake_rates(since)`` (the call ``selfheal flaky`` makes), records built.

Target: ours / baseline <= 1.5 (median). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pytest_selfheal.history import records as hr
from pytest_selfheal.history.db import HISTORY_FILE, HistoryDB

BASELINE = """
SELECT o.nodeid, SUM(o.outcome = 'passed_on_rerun') AS flaky, COUNT(*) AS failed, MAX(r.recorded_at)
FROM outcomes o JOIN runs r ON r.id = o.run_id
WHERE r.recorded_at >= ? AND o.outcome IN ('failed', 'passed_on_rerun', 'quarantined')
GROUP BY o.nodeid HAVING flaky > 0
ORDER BY flaky * 1.0 / failed DESC, flaky DESC, o.nodeid
"""


def build(root: Path, outcomes: int, tests: int, seed: int = 7) -> None:
    """A history of ``outcomes`` outcomes in runs of 50."""
    rng = random.Random(seed)
    per_run = 50
    with HistoryDB.open(root) as db:
        for number in range(outcomes // per_run):
            day = 1 + number % 28
            run = hr.RunInfo(run_key=f"run-{number}", recorded_at=f"2026-10-{day:02d}T{number % 24:02d}:00:00+00:00",
                             kind=hr.LOOP, branch="main", commit=f"{number:040x}", tests_run=1000)
            picked = rng.sample(range(tests), per_run)
            db.record(run, [hr.TestOutcome(f"tests/test_m{t % 97}.py::test_{t}",
                                           hr.PASSED_ON_RERUN if rng.random() < 0.1 else hr.FAILED,
                                           f"{t:012x}", "deterministic") for t in picked])


def timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outcomes", type=int, default=1_000_000)
    parser.add_argument("--tests", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    since = "2026-10-01T00:00:00+00:00"
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-flaky-") as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        build(root, args.outcomes, args.tests)
        print(f"built {args.outcomes} outcomes over {args.tests} tests in {time.perf_counter() - started:.1f} s")
        raw = sqlite3.connect(str(root / HISTORY_FILE))
        db = HistoryDB.open(root, create=False)
        ours: list[float] = []
        base: list[float] = []
        try:
            for index in range(args.repeat):
                pair = [("base", lambda: raw.execute(BASELINE, (since,)).fetchall()),
                        ("ours", lambda: db.flake_rates(since))]
                for name, function in pair if index % 2 == 0 else reversed(pair):
                    (base if name == "base" else ours).append(timed(function))
            ranked = db.flake_rates(since)
        finally:
            db.close()
            raw.close()
    ratio = statistics.median(o / b for o, b in zip(ours, base))
    print(f"flaky tests ranked: {len(ranked)}")
    print(f"baseline GROUP BY: median {statistics.median(base) * 1000:.1f} ms")
    print(f"selfheal flaky:    median {statistics.median(ours) * 1000:.1f} ms")
    print(f"ratio {ratio:.2f} (target <= 1.5)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
