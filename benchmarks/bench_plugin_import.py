"""Import cost of the plugin: ``import pytest_selfheal.plugin`` after ``import pytest``.

Every pytest run of every user imports the plugin (a ``pytest11`` entry point), so this
must stay small. Each sample is a fresh interpreter that imports pytest, then times the
plugin's import (wall and CPU); ``import pytest`` itself, timed in the same children, is
the baseline printed beside it. Target: median plugin import <= 10 ms.

    python benchmarks/bench_plugin_import.py [--repeat 21]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence

CHILD = """
import time
w, c = time.perf_counter(), time.process_time()
import pytest
w1, c1 = time.perf_counter(), time.process_time()
import pytest_selfheal.plugin
w2, c2 = time.perf_counter(), time.process_time()
print(w1 - w, c1 - c, w2 - w1, c2 - c1)
"""


def sample() -> tuple[float, float, float, float]:
    """(pytest wall, pytest CPU, plugin wall, plugin CPU) in seconds, from one fresh interpreter."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # use .pyc files, as an installed package does
    out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=True).stdout
    pw, pc, hw, hc = (float(x) for x in out.split())
    return pw, pc, hw, hc


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args(list(argv) or None)
    sample()  # warm the .pyc files and the file cache
    runs: list[tuple[float, float, float, float]] = [sample() for _ in range(args.repeat)]
    pw, pc, hw, hc = (statistics.median(r[i] for r in runs) for i in range(4))
    print(
        f"import pytest_selfheal.plugin after pytest ({args.repeat} fresh interpreters): "
        f"median {hw * 1000:.1f} ms wall, {hc * 1000:.1f} ms CPU (target <= 10 ms); "
        f"import pytest {pw * 1000:.1f} ms wall, {pc * 1000:.1f} ms CPU; "
        f"ratio plugin/pytest {hw / pw:.3f} wall"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
