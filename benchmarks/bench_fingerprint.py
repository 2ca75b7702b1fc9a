"""Benchmark: ``selfheal fingerprint`` vs a plain junitparser load-and-iterate.

Usage::

    python benchmarks/bench_fingerprint.py [--cases 100000] [--failures 10000] [--repeat 5]

Generates a pytest-style junit file (``--cases`` testcases, ``--failures`` of them
failing with realistic tracebacks) in a temporary directory, then measures, in
interleaved runs (median reported):

* in-process: ``junitparser.JUnitXml.fromfile`` + iterating every case and its results,
  vs the function path the CLI uses (``commands.fingerprint.collect`` + ``write_json``
  to /dev/null);
* subprocess, like with like: ``python -c <junitparser baseline>`` vs the real
  ``python -m pytest_selfheal fingerprint FILE --json > /dev/null``; wall time, CPU time
  and the peak RSS of each child (``os.wait4``).

The order of each pair alternates. CPU times are printed beside wall times: on a machine
shared with other jobs they are much less noisy.

Targets: time ratio <= 1.5, peak memory ratio <= 1.0. Results are recorded in
docs/benchmarks.md. Linux/macOS only (peak RSS through ``os.wait4``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional
from xml.sax.saxutils import escape, quoteattr

BASELINE_CODE = """
import sys
from junitparser import JUnitXml
xml = JUnitXml.fromfile(sys.argv[1])
n = 0
for suite in xml:
    for case in suite:
        n += 1
        _ = (case.classname, case.name, case.time)
        for result in case.result:
            _ = (result.message, result.type, result.text)
"""

_FAILURE_TEMPLATES = [
    (
        "assert {a} == {b}",
        "def test_it():\n>       assert compute({a}) == {b}\nE       assert {a} == {b}\n"
        "E        +  where {a} = compute({a})\n\ntests/test_mod{m}.py:{line}: AssertionError",
    ),
    (
        "FileNotFoundError: [Errno 2] No such file or directory: "
        "'/tmp/pytest-of-ci/pytest-{run}/test_load{m}0/data/config.json'",
        "tmp_path = PosixPath('/tmp/pytest-of-ci/pytest-{run}/test_load{m}0')\n\n"
        "    def test_load(tmp_path):\n>       load(tmp_path / 'data' / 'config.json')\n"
        "E       FileNotFoundError: [Errno 2] No such file or directory: "
        "'/tmp/pytest-of-ci/pytest-{run}/test_load{m}0/data/config.json'\n\n"
        "src/loader.py:{line}: FileNotFoundError",
    ),
    (
        "ValueError: unexpected <app.models.Order object at 0x7f{addr:010x}> in worker pid {pid}",
        "    def test_order():\n>       process(order)\n\nsrc/app/orders.py:{line}: in process\n"
        "    raise ValueError(f'unexpected {{order!r}} in worker pid {{os.getpid()}}')\n"
        "E   ValueError: unexpected <app.models.Order object at 0x7f{addr:010x}> in worker pid {pid}",
    ),
    (
        "ConnectionRefusedError: [Errno 111] Connection refused",
        "    def test_db():\n>       connect('127.0.0.1', {port})\n\n"
        "/usr/lib/python3.11/socket.py:851: in create_connection\n    raise exceptions[0]\n"
        "E   ConnectionRefusedError: [Errno 111] Connection refused",
    ),
    (
        "Failed: Timeout >{a}.0s",
        "+++++++++++++++++++++++++++++++++++ Timeout +++++++++++++++++++++++++++++++++++\n"
        "  File \"/home/ci/work/proj/src/app/slow.py\", line {line}, in wait\n    time.sleep(1)",
    ),
    (
        "KeyError: 'order-{b}'",
        "    def test_lookup():\n>       orders['order-{b}']\nE       KeyError: 'order-{b}'\n\n"
        "tests/test_mod{m}.py:{line}: KeyError",
    ),
]


def generate(path: Path, cases: int, failures: int, seed: int = 1) -> None:
    """Write a pytest-style junit file with ``cases`` testcases, ``failures`` failing."""
    rng = random.Random(seed)
    failing = set(rng.sample(range(cases), min(failures, cases)))
    per_module = 50
    with open(path, "w", encoding="utf-8") as out:
        out.write('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">')
        out.write(
            f'<testsuite name="pytest" errors="0" failures="{len(failing)}" skipped="0" '
            f'tests="{cases}" time="123.456" timestamp="2026-01-01T00:00:00" hostname="ci">'
        )
        for i in range(cases):
            module = i // per_module
            attrs = (
                f'classname="tests.pkg{module % 97}.test_mod{module}" '
                f'name="test_case_{i}[param-{i % 7}]" time="0.{rng.randrange(1000):03d}"'
            )
            if i in failing:
                message, text = rng.choice(_FAILURE_TEMPLATES)
                values = {
                    "a": rng.randrange(100),
                    "b": rng.randrange(100),
                    "m": module,
                    "line": rng.randrange(10, 400),
                    "run": rng.randrange(1, 50),
                    "addr": rng.randrange(1 << 36),
                    "pid": rng.randrange(1000, 99999),
                    "port": rng.randrange(1024, 65535),
                }
                out.write(
                    f"<testcase {attrs}><failure message={quoteattr(message.format(**values))}>"
                    f"{escape(text.format(**values))}</failure></testcase>"
                )
            else:
                out.write(f"<testcase {attrs} />")
        out.write("</testsuite></testsuites>")


def baseline_in_process(path: Path) -> int:
    """junitparser: load the whole file and touch every case and result."""
    from junitparser import JUnitXml

    count = 0
    for suite in JUnitXml.fromfile(str(path)):
        for case in suite:
            count += 1
            _ = (case.classname, case.name, case.time)
            for result in case.result:
                _ = (result.message, result.type, result.text)
    return count


def selfheal_in_process(path: Path) -> int:
    """The CLI's own function path: read, analyse, JSON-encode (what ``--json`` prints)."""
    from pytest_selfheal.analysis import classify, fingerprint
    from pytest_selfheal.cli.reports import collect, write_json

    # Every timed run starts cold, like the CLI process does.
    fingerprint.normalise.cache_clear()
    classify._default_headline_match.cache_clear()
    rows = collect([str(path)], [], [])
    with open(os.devnull, "w", encoding="utf-8") as sink:
        write_json(rows, sink)
    return len(rows)


def _timed(fn: Callable[[Path], int], path: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one in-process run."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    fn(path)
    return time.perf_counter() - wall, time.process_time() - cpu


def _run_child(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and peak RSS (bytes) of one child, stdout to /dev/null."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}): {' '.join(argv)}")
    # ru_maxrss is KiB on Linux, bytes on macOS.
    peak = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024
    return elapsed, usage.ru_utime + usage.ru_stime, peak


Runs = dict[str, list[tuple[float, float, int]]]


def measure_children(path: Path, repeat: int) -> Runs:
    """Interleaved subprocess runs of the junitparser baseline and the real CLI."""
    py = sys.executable
    base_cmd = [py, "-c", BASELINE_CODE, str(path)]
    ours_cmd = [py, "-m", "pytest_selfheal", "fingerprint", str(path), "--json"]
    # Like installed packages, both sides run from compiled bytecode: an environment with
    # PYTHONDONTWRITEBYTECODE (or a source checkout never compiled) would otherwise make
    # every run of the CLI recompile its modules, which pip-installed junitparser never
    # does. The cache lives beside the junit file and a warm-up run fills it.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(path.parent / "pycache")
    _run_child(base_cmd)
    _run_child(ours_cmd)
    runs: Runs = {"baseline": [], "selfheal": []}
    for index in range(repeat):
        # Alternate which goes first, so neither always runs on a warmer machine.
        order = [("baseline", base_cmd), ("selfheal", ours_cmd)]
        for key, cmd in order if index % 2 == 0 else reversed(order):
            runs[key].append(_run_child(cmd))
    return runs


def _children_via_helper(path: Path, repeat: int) -> Runs:
    # Linux counts the RSS a child had at fork/exec time (a copy of its parent) in its
    # peak RSS. This process holds big in-process data, so the children are started from
    # a small, fresh helper process instead.
    out = subprocess.run(
        [sys.executable, __file__, "--children", str(path), "--repeat", str(repeat)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    data = json.loads(out)
    return {k: [(float(w), float(c), int(m)) for w, c, m in v] for k, v in data.items()}


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def main(argv: Optional[list[str]] = None) -> int:
    """Run the benchmark and print the measurements and ratios."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000)
    parser.add_argument("--failures", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5, help="interleaved runs per measurement")
    parser.add_argument("--keep", action="store_true", help="keep the generated junit file")
    parser.add_argument("--children", metavar="FILE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.children:
        print(json.dumps(measure_children(Path(args.children), args.repeat)))
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="selfheal-bench-"))
    path = workdir / "junit.xml"
    try:
        generate(path, args.cases, args.failures)
        size_mb = path.stat().st_size / 1e6
        print(
            f"junit file: {path} ({args.cases} testcases, {args.failures} failures,"
            f" {size_mb:.1f} MB)"
        )
        # Subprocesses first, from a fresh helper: nothing big is in memory yet.
        runs = _children_via_helper(path, args.repeat)

        found = selfheal_in_process(path)  # warms imports (caches are cleared per run)
        baseline_in_process(path)
        print(f"failures fingerprinted: {found}")
        base_runs: list[tuple[float, float]] = []
        ours_runs: list[tuple[float, float]] = []
        for index in range(args.repeat):
            pair = [(base_runs, baseline_in_process), (ours_runs, selfheal_in_process)]
            for target, fn in pair if index % 2 == 0 else reversed(pair):
                target.append(_timed(fn, path))
        b, o = _median([w for w, _ in base_runs]), _median([w for w, _ in ours_runs])
        bc, oc = _median([c for _, c in base_runs]), _median([c for _, c in ours_runs])

        bt = _median([w for w, _, _ in runs["baseline"]])
        ot = _median([w for w, _, _ in runs["selfheal"]])
        btc = _median([c for _, c, _ in runs["baseline"]])
        otc = _median([c for _, c, _ in runs["selfheal"]])
        bm = _median([float(m) for _, _, m in runs["baseline"]])
        om = _median([float(m) for _, _, m in runs["selfheal"]])
        print(f"in-process: junitparser load+iterate {b:.3f}s (cpu {bc:.3f}s);"
              f" selfheal collect+json {o:.3f}s (cpu {oc:.3f}s)")
        print(f"subprocess: junitparser {bt:.3f}s (cpu {btc:.3f}s), {bm / 1e6:.1f} MB peak RSS")
        print(f"subprocess: selfheal fingerprint --json {ot:.3f}s (cpu {otc:.3f}s),"
              f" {om / 1e6:.1f} MB peak RSS")
        print(f"in-process time ratio: {o / b:.2f} (cpu {oc / bc:.2f}) (target <= 1.5)")
        print(f"subprocess time ratio: {ot / bt:.2f} (cpu {otc / btc:.2f}) (target <= 1.5)")
        print(f"peak memory ratio: {om / bm:.2f} (target <= 1.0)")
    finally:
        if args.keep:
            print(f"kept {path}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
