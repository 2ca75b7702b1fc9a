"""The plugin-overhead benchmark runs end to end at a tiny size (no timing thresholds here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_plugin_overhead.py"
IMPORT_BENCH = BENCH.with_name("bench_plugin_import.py")


def test_plugin_overhead_benchmark_prints_ratios() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--tests", "40", "--failures", "3", "--repeat", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert "green suite (40 tests)" in out and "with 3 failures (40 tests)" in out
    assert out.count("ratio ") == 2 and out.count(" CPU (target") == 2


def test_all_failing_suite_benchmark_prints_one_ratio_against_the_110_target() -> None:
    out = subprocess.run(
        [sys.executable, str(BENCH), "--tests", "3", "--failures", "3", "--repeat", "1", "--skip-green", "--no-autoload"],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    assert "green suite" not in out and out.count("ratio ") == 1
    assert "with 3 failures (3 tests)" in out and "(target <= 1.10)" in out


def test_plugin_import_benchmark_prints_the_median_and_the_baseline() -> None:
    out = subprocess.run(
        [sys.executable, str(IMPORT_BENCH), "--repeat", "1"], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "import pytest_selfheal.plugin after pytest (1 fresh interpreters): median " in out
    assert " ms CPU (target <= 10 ms); import pytest " in out and "ratio plugin/pytest " in out
