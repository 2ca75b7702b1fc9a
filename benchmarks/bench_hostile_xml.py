"""Benchmark: the hostile-XML cases, against a plain expat parse.

Usage::

    python benchmarks/bench_hostile_xml.py [--attr-mb 8] [--failures 20000] [--line-mb 16] [--repeat 1]

The figures of docs/reliability.md were taken with ``--attr-mb 64``, ``--attr-mb 150``,
``--failures 1060000`` and ``--line-mb 512`` (one case at a time: ``--only``).

Cases, each generated in a temporary directory:

* ``attribute``: one ``<failure message="…">`` of ``--attr-mb`` MB;
* ``failures``: ``--failures`` failing testcases (message + a short traceback each);
* ``ci-line``: ``selfheal ci``'s copy of its pytest child's output
  (``github.ci.run_pytest``) when the child prints ``--line-mb`` MB without a newline.

Every variant runs in a fresh interpreter (``--child``); its peak RSS comes from
``os.wait4``, its time from the child itself (CPU and wall, median over ``--repeat``).
The XML cases compare:

* ``plain``: ``xml.parsers.expat`` with no handler, the whole file in one ``Parse`` call
  (the least any reader can cost; the file read is not timed, its memory is counted);
* ``selfheal``: ``analysis.analyse.analyse_junit`` (what ``selfheal fingerprint`` runs:
  the bounded junit reader, classification and fingerprint of each kept failure).

Target: time ratio selfheal/plain <= 2, and a peak RSS that does not grow with
the input (compare with ``idle``: an interpreter that imported the same modules).
Linux/macOS only (``os.wait4``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

MB = 1024 * 1024


# --------------------------------------------------------------------------- inputs


def write_attribute(path: Path, megabytes: int) -> None:
    """One failing testcase whose ``message`` attribute is ``megabytes`` MB."""
    piece = b"A" * MB
    with open(path, "wb") as out:
        out.write(b'<?xml version="1.0"?><testsuites><testsuite name="s">'
                  b'<testcase classname="tests.test_big" name="test_big"><failure message="')
        for _ in range(megabytes):
            out.write(piece)
        out.write(b'">E   AssertionError</failure></testcase></testsuite></testsuites>\n')


def write_failures(path: Path, count: int) -> None:
    """``count`` failing testcases, each a different test with a pytest-like failure."""
    with open(path, "wb") as out:
        out.write(b'<?xml version="1.0"?><testsuites><testsuite name="s">\n')
        batch: list[bytes] = []
        for index in range(count):
            batch.append(
                b'<testcase classname="tests.test_mod%d" name="test_case_%d" time="0.001">'
                b'<failure message="assert %d == %d">def test_case():\n&gt;       assert compute() == %d\n'
                b"E       assert %d == %d\n\ntests/test_mod%d.py:12: AssertionError</failure></testcase>\n"
                % (index % 97, index, index, index + 1, index + 1, index, index + 1, index % 97)
            )
            if len(batch) == 10_000:
                out.write(b"".join(batch))
                batch.clear()
        out.write(b"".join(batch))
        out.write(b"</testsuite></testsuites>\n")


# --------------------------------------------------------------------------- children


def child(mode: str, target: str) -> dict[str, float]:
    """One variant in this (fresh) interpreter: its CPU and wall seconds."""
    from xml.parsers import expat

    from pytest_selfheal.analysis.analyse import analyse_junit
    from pytest_selfheal.github import ci

    result: dict[str, float] = {}
    if mode == "idle":
        return {"cpu": 0.0, "wall": 0.0}
    if mode == "plain":
        data = Path(target).read_bytes()
        cpu, wall = time.process_time(), time.perf_counter()
        expat.ParserCreate().Parse(data, True)
    elif mode == "selfheal":
        warnings: list[str] = []
        cpu, wall = time.process_time(), time.perf_counter()
        kept = analyse_junit(Path(target), warnings=warnings)
        result["kept"] = len(kept)
    elif mode == "ci-line":
        megabytes = int(target)
        code = ("import sys\nw = sys.stdout.buffer.write\npiece = b'x' * (1024 * 1024)\n"
                f"for _ in range({megabytes}):\n    w(piece)\n")
        cpu, wall = time.process_time(), time.perf_counter()
        with open(os.devnull, "w") as sink:
            exit_code = ci.run_pytest([sys.executable, "-c", code], cwd=Path.cwd(), env=dict(os.environ),
                                      stream=sink)
        assert exit_code == 0, exit_code
    else:
        raise SystemExit(f"unknown mode {mode}")
    result.update(cpu=time.process_time() - cpu, wall=time.perf_counter() - wall)
    return result


def run_child(mode: str, target: str) -> tuple[dict[str, float], int]:
    """(what the child printed, its peak RSS in bytes)."""
    proc = subprocess.Popen([sys.executable, __file__, "--child", mode, target], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"child {mode} failed ({status})")
    rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return json.loads(out), rss


def measure(label: str, path: Optional[Path], repeat: int, modes: tuple[str, ...], target: str = "") -> None:
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpus: dict[str, list[float]] = {m: [] for m in modes}
    rss: dict[str, int] = {m: 0 for m in modes}
    kept = None
    for _ in range(repeat):
        for mode in modes:
            got, peak = run_child(mode, str(path) if path is not None else target)
            times[mode].append(got["wall"])
            cpus[mode].append(got["cpu"])
            rss[mode] = max(rss[mode], peak)
            kept = got.get("kept", kept)
    size = f"{path.stat().st_size / MB:.1f} MB file" if path is not None else f"{target} MB output"
    print(f"{label} ({size}):")
    for mode in modes:
        print(f"  {mode:9} wall {statistics.median(times[mode]):8.3f} s  CPU {statistics.median(cpus[mode]):8.3f} s"
              f"  peak RSS {rss[mode] / MB:7.1f} MB")
    if kept is not None:
        print(f"  failures kept: {int(kept)}")
    if "plain" in modes:
        ratio = statistics.median(cpus["selfheal"]) / max(statistics.median(cpus["plain"]), 1e-9)
        wall_ratio = statistics.median(times["selfheal"]) / max(statistics.median(times["plain"]), 1e-9)
        print(f"  time ratio selfheal/plain: CPU {ratio:.2f}, wall {wall_ratio:.2f} (target <= 2)")
    print(f"  peak RSS over idle: {(max(rss[m] for m in modes if m not in ('idle', 'plain')) - rss['idle']) / MB:.1f} MB")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attr-mb", type=int, default=8, help="size of the one huge attribute (MB)")
    parser.add_argument("--failures", type=int, default=20_000, help="failing testcases of the big document")
    parser.add_argument("--line-mb", type=int, default=16, help="output without a newline through selfheal ci (MB)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", choices=("attribute", "failures", "ci-line"))
    parser.add_argument("--child", nargs=2, metavar=("MODE", "TARGET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-hostile-xml-") as tmp:
        xml_modes = ("idle", "plain", "selfheal")
        if args.only in (None, "attribute"):
            path = Path(tmp) / "attribute.xml"
            write_attribute(path, args.attr_mb)
            measure(f"one {args.attr_mb} MB attribute", path, args.repeat, xml_modes)
            path.unlink()
        if args.only in (None, "failures"):
            path = Path(tmp) / "failures.xml"
            write_failures(path, args.failures)
            measure(f"{args.failures} failing testcases", path, args.repeat, xml_modes)
            path.unlink()
        if args.only in (None, "ci-line"):
            measure(f"selfheal ci copying {args.line_mb} MB without a newline", None, args.repeat,
                    ("idle", "ci-line"), target=str(args.line_mb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
