"""Failure history cost: a capture of 50 failures with the history vs the same capture without.

Both sides run ``pytest --selfheal`` on the same generated suite (every test fails, so
every run captures an incident of ``--failures`` failures), interleaved; the only
difference is ``--selfheal-set history.enabled=false`` on one side. Each side keeps its
own reports root across its runs, so the history side records into a database that
already holds the earlier runs (the steady state of a CI cache or a developer's
checkout); ``--fresh`` gives every run a new root instead (the first run: the database is
created). Target: ratio <= 1.05.

    python benchmarks/bench_history.py [--failures 50] [--repeat 9] [--fresh]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_plugin_overhead import child_env, make_suite, timed


def measure(root: Path, repeat: int, fresh: bool) -> tuple[float, float, float, float, float]:
    """(median wall without history, with history, wall ratio, CPU ratio, ratio of the fastest
    runs), runs interleaved. On a shared machine the CPU and fastest-run ratios are the steady ones."""
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_selfheal.plugin",
            "--selfheal"]
    env = child_env()
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # no other plugin on either side
    off = base + ["--selfheal-set", "history.enabled=false"]
    without: list[tuple[float, float]] = []
    with_history: list[tuple[float, float]] = []
    timed(off + ["--selfheal-dir=.selfheal-warm"], root, env)  # warm the file cache and .pyc files
    timed(base + ["--selfheal-dir=.selfheal-warm"], root, env)
    for n in range(repeat):
        suffix = f"-{n}" if fresh else ""
        without.append(timed(off + [f"--selfheal-dir=.selfheal-off{suffix}"], root, env))
        with_history.append(timed(base + [f"--selfheal-dir=.selfheal-on{suffix}"], root, env))
    w, h = statistics.median(t for t, _ in without), statistics.median(t for t, _ in with_history)
    cpu = statistics.median(c for _, c in with_history) / statistics.median(c for _, c in without)
    fastest = min(t for t, _ in with_history) / min(t for t, _ in without)
    return w, h, h / w, cpu, fastest


def recording_ms(root: Path, failures: int, repeat: int) -> float:
    """Median milliseconds of the history's own work in a capture (``record_and_triage`` of
    ``failures`` failures into the persisted database), measured in this process."""
    from pytest_selfheal.config.keys import HistorySettings
    from pytest_selfheal.history.recording import record_and_triage, run_info
    from pytest_selfheal.history.records import FAILED, TestOutcome
    from pytest_selfheal.history.sources import ActionsContext
    from pytest_selfheal.records.context import GitContext

    failing = [TestOutcome(f"test_gen_000.py::test_{i}", FAILED, f"{i:012x}", "deterministic") for i in range(failures)]
    times: list[float] = []
    for n in range(repeat):
        start = time.perf_counter()
        record_and_triage(root / ".selfheal-inprocess", HistorySettings(),
                          run_info(run_key=f"bench:{n}", kind="capture", project_root=root, actions=ActionsContext(),
                                   git=GitContext(branch="main", commit="0" * 40)),
                          failing, project_root=root, actions=ActionsContext())
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--failures", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--fresh", action="store_true", help="a new reports root (and database) for every run")
    args = parser.parse_args(list(argv) or None)
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-history-") as tmp:
        root = Path(tmp, "suite")
        make_suite(root, args.failures, args.failures)
        w, h, r, c, f = measure(root, args.repeat, args.fresh)
        where = "a new database each run" if args.fresh else "a persisted database"
        print(f"capture of {args.failures} failures ({where}): without history {w:.3f}s, with history {h:.3f}s, "
              f"ratio {r:.3f} wall, {c:.3f} CPU, {f:.3f} fastest runs (target <= 1.05)")
        ms = recording_ms(root, args.failures, args.repeat)
        print(f"the history's own work in one capture: {ms:.1f} ms = {ms / 10 / w:.1f} % of the capture without "
              "history (record_and_triage in process, median)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
