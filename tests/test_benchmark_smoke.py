"""The plugin-overhead benchmark runs end to end at a tiny size (no timing thresholds here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_plugin_overhead.py"


def test_plugin_overhead_benchmark_prints_ratios() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--tests", "40", "--failures", "3", "--repeat", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert "green suite (40 tests)" in out and "with 3 failures (40 tests)" in out
    assert out.count("ratio ") == 2 and out.count(" CPU (target") == 2
