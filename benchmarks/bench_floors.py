"""Floors: the least the capture and the loop iteration can cost, in instructions.

A ratio target cannot be met when what has to run before the measured side does any work
of its own already costs more than the target leaves. This script counts, with valgrind's
callgrind (children included; the machine's load does not move the counts):

* **iteration** (``bench_loop.py``'s project: ``--tests`` tests, ``--failing`` failing):
  (b) the failing node ids run directly; (child) the same node ids run as the loop runs
  them (``-p no:cacheprovider --junitxml``: the loop reads the junit file); (start) a Python
  interpreter that does nothing. Floor = (child + start) / b: an iteration whose parent
  only started Python and then ran its child.
* **capture** (``bench_plugin_overhead.py``'s suite: ``--capture-tests`` trivial tests, all
  failing): (plain) ``pytest`` with the plugin loaded and off; (imports) importing the
  modules a capture imports beyond those the plain run imports. Floor = (plain + imports)
  / plain: a capture that imported its code and did nothing with it.

    python benchmarks/bench_floors.py [--tests 2000] [--failing 3] [--capture-tests 50]

Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench_loop import child_env, generate  # this folder is first on sys.path
from bench_plugin_overhead import instructions, make_suite

# Prints the modules a pytest session in this directory leaves in sys.modules (argv: pytest's).
_MODULES_AFTER = (
    "import json, sys, pytest\n"
    "pytest.main(sys.argv[1:])\n"
    "print(json.dumps(sorted(sys.modules)))\n"
)


def modules_after(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> set[str]:
    """The modules loaded once ``pytest argv`` ran in-process (its output goes to stderr)."""
    done = subprocess.run([sys.executable, "-c", _MODULES_AFTER, *argv], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    last = done.stdout.strip().splitlines()[-1]
    return {name for name in json.loads(last) if "__main__" not in name and not name.startswith("test_")}


def importing(names: Sequence[str]) -> str:
    """A program importing ``names`` in order (one that fails to import is passed over)."""
    return "\n".join(f"try:\n    import {name}\nexcept Exception:\n    pass" for name in names) or "pass"


def ratio_line(label: str, numerator: int, denominator: int, target: float) -> str:
    """The floor as a ratio, and what the target leaves for all the rest of the work."""
    left = int(target * denominator) - numerator
    rest = f"leaves {left / 1e6:.0f} M instructions for the rest" if left >= 0 else "out of reach"
    return f"{label}: floor {numerator / denominator:.3f} (target <= {target:.2f}: {rest})"


def iteration_floor(work: Path, tests: int, failing: int) -> None:
    root = work / "loop-project"
    ids = generate(root, tests, failing, 0.005)
    env = child_env(work)
    python = [sys.executable]
    direct = instructions([*python, "-m", "pytest", "-q", *ids], root, env)
    child = instructions([*python, "-m", "pytest", "-q", *ids, "-p", "no:cacheprovider",
                          f"--rootdir={root}", f"--junitxml={work / 'junit.xml'}"], root, env)
    start = instructions([*python, "-c", "pass"], root, env)
    print(f"iteration: b {direct:,}, child {child:,} ({child / direct:.3f} b), python start {start:,} "
          f"({start / direct:.3f} b)")
    print(ratio_line("iteration (child + python start) / b", child + start, direct, 1.25))


def capture_floor(work: Path, tests: int) -> None:
    root = work / "capture-suite"
    make_suite(root, tests, tests)
    env = child_env(work)
    base = ["-q", "-p", "no:cacheprovider", "-p", "pytest_selfheal.plugin"]  # autoload is off
    plain_modules = modules_after(base, root, env)
    captured = modules_after([*base, "--selfheal", f"--selfheal-dir={work / 'modules-run'}"], root, env)
    extra = sorted(captured - plain_modules)
    plain = instructions([sys.executable, "-m", "pytest", *base], root, env)
    shared = importing(sorted(plain_modules))
    before = instructions([sys.executable, "-c", shared], root, env)
    after = instructions([sys.executable, "-c", shared + "\n" + importing(extra)], root, env)
    package = sum(1 for name in extra if name.startswith("pytest_selfheal"))
    print(f"capture: plain {plain:,}; {len(extra)} more modules ({package} of the package) cost "
          f"{after - before:,} to import ({(after - before) / plain:.3f} plain)")
    print(ratio_line("capture (plain + imports) / plain", plain + after - before, plain, 1.25))


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--failing", type=int, default=3)
    parser.add_argument("--capture-tests", type=int, default=50)
    args = parser.parse_args(list(argv) or None)
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed: the floors are instruction counts")
    work = Path(tempfile.mkdtemp(prefix="selfheal-bench-floors-"))
    try:
        os.environ["OPENCODE_CONFIG_DIR"] = str(work)
        iteration_floor(work, args.tests, args.failing)
        capture_floor(work, args.capture_tests)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
