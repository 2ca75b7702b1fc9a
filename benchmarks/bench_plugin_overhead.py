"""Plugin overhead: `pytest --selfheal` vs plain `pytest` on a generated suite.

Prints wall-time ratios (median of interleaved runs) for an all-green suite and for the
same suite with some failing tests. Each --selfheal run uses a fresh reports root so every
failing run pays a full capture. Targets: green <= 1.03, with failures <= 1.05; a suite
where every test fails (``--tests 50 --failures 50 --skip-green``) <= 1.25 (a fixed-cost watch).

``--reruns N`` arms pytest-rerunfailures on both sides: what a green run costs a project
that re-runs failures when nothing is re-run.

``--no-autoload`` runs both sides with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` and
``-p pytest_selfheal.plugin``: other installed plugins (hypothesis imports itself at
session end) then add nothing to the baseline, which makes the ratio stricter.

    python benchmarks/bench_plugin_overhead.py [--tests 5000] [--failures 50] [--repeat 7]
                                               [--skip-green] [--no-autoload] [--instructions]
                                               [--reruns N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

PER_FILE = 100


def make_suite(root: Path, tests: int, failures: int) -> None:
    """``tests`` trivial tests in files of 100; the first ``failures`` of them fail."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".gitignore").write_text(".selfheal*/\n__pycache__/\n")
    for start in range(0, tests, PER_FILE):
        lines = []
        for i in range(start, min(start + PER_FILE, tests)):
            body = f"assert {i} == -1" if i < failures else "pass"
            lines.append(f"def test_{i}():\n    {body}\n")
        (root / f"test_gen_{start // PER_FILE:03d}.py").write_text("\n".join(lines))
    import git

    repo = git.Repo.init(root)
    repo.git.add(A=True)
    actor = git.Actor("bench", "bench@localhost")
    repo.index.commit("suite", author=actor, committer=actor)
    repo.close()


def child_env() -> dict[str, str]:
    """This environment, but children write and use .pyc files as an installed package does.

    With PYTHONDONTWRITEBYTECODE set, the plugin's modules (an editable install) would be
    compiled from source on every run while pytest's come from site-packages' .pyc files.
    """
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(argv: Sequence[str], cwd: Path, env: Optional[dict[str, str]] = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child): CPU time is steadier on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(list(argv), cwd=str(cwd), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(argv: Sequence[str], cwd: Path, env: Optional[dict[str, str]] = None) -> int:
    """Instructions executed by ``argv`` and every process it starts (valgrind's callgrind,
    ``--trace-children=yes``): a count that other load on the machine does not change."""
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-callgrind-") as logs:
        subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", "--callgrind-out-file=/dev/null",
                        f"--log-file={logs}/%p.log", *argv], cwd=str(cwd), env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        total = 0
        for log in Path(logs).glob("*.log"):
            for line in log.read_text(errors="replace").splitlines():
                if "Collected :" in line:
                    total += int(line.rsplit(":", 1)[1].strip())
        if not total:
            raise SystemExit("valgrind counted nothing: is valgrind installed?")
        return total


def sides(autoload: bool, reruns: int = 0) -> tuple[list[str], dict[str, str]]:
    """(the plain side's argv, the environment of both sides); ``reruns``: pytest-rerunfailures'
    ``--reruns`` on both sides (0: not armed)."""
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    env = child_env()
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        base += ["-p", "pytest_selfheal.plugin"] + (["-p", "pytest_rerunfailures"] if reruns else [])
    if reruns:
        base += ["--reruns", str(reruns)]
    return base, env


def instruction_ratio(root: Path, autoload: bool = True, reruns: int = 0) -> tuple[int, int]:
    """(plain, selfheal) instructions of one run each (after ratio()'s warming runs)."""
    base, env = sides(autoload, reruns)
    return instructions(base, root, env), instructions(base + ["--selfheal", "--selfheal-dir=.selfheal-count"], root, env)


def ratio(root: Path, repeat: int, autoload: bool = True, reruns: int = 0) -> tuple[float, float, float, float]:
    """(median plain wall, median selfheal wall, wall ratio, CPU ratio), runs interleaved."""
    base, env = sides(autoload, reruns)
    plain: list[tuple[float, float]] = []
    healed: list[tuple[float, float]] = []
    # Warm the file cache and the .pyc files of both sides (the plugin's modules are
    # compiled on the first --selfheal run): no first run pays a compilation.
    timed(base, root, env)
    timed(base + ["--selfheal", "--selfheal-dir=.selfheal-bench-warm"], root, env)
    for n in range(repeat):
        # The order alternates, so neither side always runs right after the other's disk writes.
        heal_argv = base + ["--selfheal", f"--selfheal-dir=.selfheal-bench-{n}"]
        if n % 2:
            healed.append(timed(heal_argv, root, env))
            plain.append(timed(base, root, env))
        else:
            plain.append(timed(base, root, env))
            healed.append(timed(heal_argv, root, env))
    p, h = statistics.median(w for w, _ in plain), statistics.median(w for w, _ in healed)
    cpu = statistics.median(c for _, c in healed) / statistics.median(c for _, c in plain)
    return p, h, h / p, cpu


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tests", type=int, default=5000)
    parser.add_argument("--failures", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--skip-green", action="store_true", help="measure only the suite with failures")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the instructions of one run per side (valgrind): load does not change them")
    parser.add_argument("--no-autoload", action="store_true", help="no other installed pytest plugins on either side")
    parser.add_argument("--reruns", type=int, default=0, metavar="N",
                        help="arm pytest-rerunfailures (--reruns N) on both sides")
    args = parser.parse_args(list(argv) or None)
    autoload = not args.no_autoload
    reruns = args.reruns
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-") as tmp:
        if not args.skip_green:
            green = Path(tmp, "green")
            make_suite(green, args.tests, 0)
            p, h, r, c = ratio(green, args.repeat, autoload, reruns)
            print(
                f"green suite ({args.tests} tests): plain {p:.3f}s, --selfheal {h:.3f}s, "
                f"ratio {r:.3f} wall, {c:.3f} CPU (target <= 1.03)"
            )
            if args.instructions:
                pi, hi = instruction_ratio(green, autoload, reruns)
                print(f"green suite: instructions plain {pi:,}, --selfheal {hi:,}, ratio {hi / pi:.3f}")
        red = Path(tmp, "red")
        make_suite(red, args.tests, args.failures)
        p, h, r, c = ratio(red, args.repeat, autoload, reruns)
        target = "1.25" if args.failures >= args.tests else "1.05"
        print(
            f"with {args.failures} failures ({args.tests} tests): plain {p:.3f}s, --selfheal {h:.3f}s, "
            f"ratio {r:.3f} wall, {c:.3f} CPU (target <= {target})"
        )
        if args.instructions:
            pi, hi = instruction_ratio(red, autoload, reruns)
            print(f"with {args.failures} failures: instructions plain {pi:,}, --selfheal {hi:,}, ratio {hi / pi:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
