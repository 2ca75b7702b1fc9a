"""The seal's cost (config/seal.py): taking it at capture and comparing it at a verification,
on a project directory: ``python benchmarks/bench_seal.py DIR`` (median of 7, milliseconds).

Every module under DIR counts as imported by the run (the context-read check parses those
that name a read at all), and so does every module this process imported with pytest (the
installed code a run loads, sealed by content): the figure is an upper bound of what a
capture or an agent-mode run pays.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import pytest  # noqa: F401  (what a run imports: the installed code the seal hashes)

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
    modules += tuple(f for f in (getattr(m, "__file__", None) for m in list(sys.modules.values())) if isinstance(f, str))
    runs = [once(root, tests, modules) for _ in range(7)]
    print(f"{len(tests)} test modules, {len(modules)} modules (project and installed): take {statistics.median(r[0] for r in runs):.1f} ms, "
          f"compare {statistics.median(r[1] for r in runs):.1f} ms")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve())
