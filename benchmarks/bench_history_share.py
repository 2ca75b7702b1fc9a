"""Benchmark: the shared history on a git remote — pull + rebuild at size, and concurrent pushes.

Usage::

    python benchmarks/bench_history_share.py [--runs 10000] [--failures 50] [--writers 8]
                                             [--segments-per-writer 5] [--repeat 3]

1. **Pull + rebuild.** A local bare repository holds ``--runs`` segments of ``--failures``
   failures each on ``refs/selfheal/history`` (written with ``git fast-import``). Each
   repeat, in this process, interleaved:

   * baseline: what the cache fallback does to combine the same runs — ``git fetch`` of
     the ref into a fresh repository (the transport alone), then ``selfheal merge
     --history``'s ``HistoryDB.import_runs`` of a database already holding them;
   * ours: ``selfheal history pull``'s ``share.pull`` into a fresh repository and reports
     root (fetch, read every segment, rebuild ``history.sqlite3`` in one transaction).

   Every run must be in the rebuilt database. Then a pull again into one of them (the
   database holds every segment: what a pull after a restored cache costs).

2. **Concurrent pushes.** ``--writers`` clones each hold ``--segments-per-writer``
   segments and run ``python -m pytest_selfheal history push`` at the same moment (real
   processes racing on one ref); baseline: the same pushes one after the other. A fresh
   pull must then see every run: no record lost. The attempts each push needed are printed.

No target is set by the issue: the figures are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

from pytest_selfheal.gitrepo import run_git
from pytest_selfheal.history import records as hr
from pytest_selfheal.history import share
from pytest_selfheal.history.db import HistoryDB
from pytest_selfheal.history.segments import encode, segment_name, single_run, tree_path, write_segment


def segment_for(number: int, failures: int, prefix: str = "run") -> tuple[hr.RunInfo, list[hr.TestOutcome]]:
    """The run ``number``: ``failures`` failing tests on main."""
    run = hr.RunInfo(run_key=f"capture:{prefix}-{number}", recorded_at=f"2026-10-{1 + number % 28:02d}T00:00:00+00:00",
                     kind=hr.CAPTURE, branch="main", commit=f"{number:040x}", ci_job="tests", tests_run=2000)
    return run, [hr.TestOutcome(f"tests/test_m{(number + i) % 97}.py::test_{(number * 7 + i) % 5000}", hr.FAILED,
                                f"{(number + i) % 3000:012x}", "deterministic") for i in range(failures)]


def bare_with_segments(base: Path, runs: int, failures: int) -> Path:
    """A bare repository whose refs/selfheal/history holds ``runs`` segments (one commit)."""
    bare = base / "remote.git"
    run_git(base, ["init", "--quiet", "--bare", str(bare)])
    stream = bytearray(b"commit refs/selfheal/history\ncommitter bench <bench@localhost> 0 +0000\ndata 5\nbench\n")
    for number in range(runs):
        data = encode(single_run(*segment_for(number, failures)))
        path = tree_path(segment_name(data), compacted=False)
        stream += f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n"
    run_git(bare, ["fast-import", "--quiet"], stdin=bytes(stream))
    return bare


def fresh_repo(path: Path, bare: Path) -> Path:
    """An empty repository with ``bare`` as its origin (a CI checkout before the pull)."""
    run_git(path.parent, ["init", "--quiet", str(path)])
    run_git(path, ["remote", "add", "origin", str(bare)])
    return path


def timed(function: Callable[[], object]) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def bench_pull(base: Path, runs: int, failures: int, repeat: int) -> None:
    started = time.perf_counter()
    bare = bare_with_segments(base, runs, failures)
    shard = base / "shard"
    with HistoryDB.open(shard) as db:
        db.import_runs(segment_for(n, failures) for n in range(runs))
    print(f"built {runs} segments of {failures} failures in {time.perf_counter() - started:.1f} s")
    ours: list[float] = []
    baseline: list[float] = []
    for index in range(repeat):
        def base_side(index: int = index) -> None:
            repo = fresh_repo(base / f"base-{index}", bare)
            share.fetch(share.Repo(repo), "origin")
            with HistoryDB.open_file(shard / "history.sqlite3", create=False) as other, \
                    HistoryDB.open(repo / ".selfheal") as mine:
                mine.import_runs(other.runs())

        def our_side(index: int = index) -> None:
            repo = fresh_repo(base / f"ours-{index}", bare)
            pulled = share.pull(repo, repo / ".selfheal")
            assert pulled.added == runs, pulled

        pair = [("base", base_side), ("ours", our_side)]
        for name, function in pair if index % 2 == 0 else list(reversed(pair)):
            (baseline if name == "base" else ours).append(timed(function))
    ratio = statistics.median(o / b for o, b in zip(ours, baseline))
    print(f"pull + rebuild of {runs} runs x {failures} failures: median {statistics.median(ours):.2f} s; "
          f"fetch + merge of the same runs from a database: median {statistics.median(baseline):.2f} s; "
          f"ratio {ratio:.2f}")
    # The CI case: the cache restored a database that holds them; the pull reads nothing old.
    again = [timed(lambda: share.pull(base / "ours-0", base / "ours-0" / ".selfheal")) for _ in range(repeat)]
    print(f"pull again with nothing new: median {statistics.median(again):.2f} s")


def bench_push(base: Path, writers: int, per_writer: int, failures: int) -> None:
    bare = base / "pushes.git"
    run_git(base, ["init", "--quiet", "--bare", str(bare)])

    def clones(label: str) -> list[Path]:
        made = []
        for writer in range(writers):
            clone = fresh_repo(base / f"{label}-{writer}", bare)
            for number in range(per_writer):
                write_segment(clone / ".selfheal", single_run(*segment_for(number, failures, f"{label}{writer}")))
            made.append(clone)
        return made

    env = dict(os.environ)
    env.pop("GITHUB_EVENT_NAME", None)
    argv = [sys.executable, "-m", "pytest_selfheal", "history", "push"]
    sequential = clones("seq")
    start = time.perf_counter()
    for clone in sequential:
        subprocess.run(argv, cwd=clone, env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    one_by_one = time.perf_counter() - start
    concurrent = clones("par")
    start = time.perf_counter()
    processes = [subprocess.Popen(argv, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL) for clone in concurrent]
    outputs = [p.communicate(timeout=600) for p in processes]
    at_once = time.perf_counter() - start
    failed = [err for p, (_, err) in zip(processes, outputs) if p.returncode != 0]
    assert not failed, failed
    attempts = [int(out.split(" after ")[1].split()[0]) if " after " in out else 1 for out, _ in outputs]
    reader = fresh_repo(base / "reader", bare)
    pulled = share.pull(reader, reader / ".selfheal")
    expected = 2 * writers * per_writer
    lost = expected - pulled.added
    print(f"{writers} concurrent pushes of {per_writer} segment(s) each: {at_once:.2f} s "
          f"(attempts {sorted(attempts)}); "
          f"one after the other: {one_by_one:.2f} s; ratio {at_once / one_by_one:.2f}; "
          f"runs on the remote {pulled.added} of {expected}, lost {lost}")
    assert lost == 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--failures", type=int, default=50)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--segments-per-writer", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-share-") as tmp:
        bench_pull(Path(tmp), args.runs, args.failures, args.repeat)
        bench_push(Path(tmp), args.writers, args.segments_per_writer, args.failures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
