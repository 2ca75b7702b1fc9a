"""The seal's cost (config/seal.py): taking it at capture and comparing it at a verification,
on a project directory: ``python benchmarks/bench_seal.py DIR`` (median of 7, milliseconds).

Every module under DIR counts as imported by the run (the test-aware check reads them all),
so the figure is an upper bound of what a capture or an agent-mode run pays.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from pytest_selfheal.config.seal import Loaded, reseal, take_seal


def once(root: Path, tests: list[str], modules: tuple[str, ...]) -> tuple[float, float]:
    """Milliseconds to take the seal of ``root`` and to compare it once."""
    start = time.perf_counter()
    seal = take_seal(root, test_files=tests, inifile="pyproject.toml", judging={}, loaded=Loaded((), modules))
    taken = time.perf_counter()
    reseal(seal, root, judging={}, loaded=Loaded((), modules))
    return (taken - start) * 1000, (time.perf_counter() - taken) * 1000


def main(root: Path) -> None:
    """Print the medians of 7 runs."""
    tests = [p.relative_to(root).as_posix() for p in root.rglob("test_*.py") if ".venv" not in p.parts]
    modules = tuple(str(p) for p in root.rglob("*.py") if ".venv" not in p.parts)
    runs = [once(root, tests, modules) for _ in range(7)]
    print(f"{len(tests)} test modules, {len(modules)} modules: take {statistics.median(r[0] for r in runs):.1f} ms, "
          f"compare {statistics.median(r[1] for r in runs):.1f} ms")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
