"""The benchmark scripts (benchmarks/) run end to end and print their figures; no timing
thresholds here. Every one is in the ``slow`` tier (``.ci/run`` runs it after the default
one): each at a tiny size, and at the suite sizes the scripts default to (the sizes of the
documented figures), with fewer repeats. They cost the README's test command about a
minute on the 2-core machine, which it cannot spare."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Optional

import pytest
from helpers import PY, run_env

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run_benchmark(script: str, args: list[str], cwd: Path, env: Optional[dict[str, str]] = None) -> str:
    """``python benchmarks/SCRIPT ARGS``: exit 0; returns what it printed."""
    done = subprocess.run([PY, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=1800,
                          cwd=cwd, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize(("tests", "failures", "repeat"), [
    (40, 3, 1),
    pytest.param(5000, 50, 3, marks=pytest.mark.slow, id="at-size"),
])
def test_plugin_overhead_benchmark_prints_ratios(tmp_path: Path, tests: int, failures: int, repeat: int) -> None:
    # The child pytest runs need the plugin autoloaded (--selfheal): this process's environment.
    out = run_benchmark("bench_plugin_overhead.py",
                        ["--tests", str(tests), "--failures", str(failures), "--repeat", str(repeat)], tmp_path)
    assert f"green suite ({tests} tests)" in out and f"with {failures} failures ({tests} tests)" in out
    assert out.count("ratio ") == 2 and out.count(" CPU (target") == 2


def test_all_failing_suite_benchmark_prints_one_ratio_against_its_125_target(tmp_path: Path) -> None:
    out = run_benchmark("bench_plugin_overhead.py",
                        ["--tests", "3", "--failures", "3", "--repeat", "1", "--skip-green", "--no-autoload"], tmp_path)
    assert "green suite" not in out and out.count("ratio ") == 1
    assert "with 3 failures (3 tests)" in out and "(target <= 1.25)" in out


def test_plugin_import_benchmark_prints_the_median_and_the_baseline(tmp_path: Path) -> None:
    out = run_benchmark("bench_plugin_import.py", ["--repeat", "1"], tmp_path)
    assert "import pytest_selfheal.plugin after pytest (1 fresh interpreters): median " in out
    assert " ms CPU (target <= 10 ms); import pytest " in out and "ratio plugin/pytest " in out


@pytest.mark.parametrize(("cases", "failures", "repeat"), [
    (200, 20, 1),
    pytest.param(100_000, 10_000, 2, marks=pytest.mark.slow, id="at-size"),
])
def test_fingerprint_benchmark_prints_its_ratios(tmp_path: Path, cases: int, failures: int, repeat: int) -> None:
    out = run_benchmark("bench_fingerprint.py",
                        ["--cases", str(cases), "--failures", str(failures), "--repeat", str(repeat)], tmp_path)
    lines = out.splitlines()
    assert f"failures fingerprinted: {failures}" in lines
    for label in ("in-process time ratio: ", "subprocess time ratio: ", "peak memory ratio: "):
        assert any(line.startswith(label) for line in lines), out


@pytest.mark.parametrize(("tests", "failing", "sleep", "repeat", "more"), [
    (20, 2, "0", 1, ()),
    pytest.param(2000, 3, "0.005", 2, (), marks=pytest.mark.slow, id="at-size"),
    # The exact selection: 30 failures over 3 of 6 files.
    pytest.param(600, 30, "0", 1, ("--file-size", "100", "--failing-files", "3"), marks=pytest.mark.slow,
                 id="exact-selection"),
])
def test_loop_benchmark_prints_its_ratios(tmp_path: Path, tests: int, failing: int, sleep: str, repeat: int,
                                          more: tuple[str, ...]) -> None:
    out = run_benchmark("bench_loop.py", ["--tests", str(tests), "--failing", str(failing), "--sleep", sleep,
                                          "--repeat", str(repeat), "--full-repeat", "1", *more], tmp_path,
                        env=run_env())
    assert "ratio a/b (iteration vs direct pytest of the failing tests):" in out
    assert "ratio c/a (whole suite vs one iteration):" in out
    assert "ratio d/b (selfheal loop ID vs direct pytest of the failing tests):" in out
    assert f"{failing} failing" in out


def test_flaky_query_benchmark_prints_its_ratio(tmp_path: Path) -> None:
    out = run_benchmark("bench_flaky.py", ["--outcomes", "2000", "--tests", "100", "--repeat", "1"], tmp_path)
    assert "built 2000 outcomes over 100 tests" in out and out.count("ratio ") == 1


def test_history_benchmark_prints_the_capture_ratio_and_the_share_of_the_history(tmp_path: Path) -> None:
    out = run_benchmark("bench_history.py", ["--failures", "3", "--repeat", "1"], tmp_path)
    assert out.startswith("capture of 3 failures (a persisted database): without history ")
    assert out.count("ratio ") == 1 and "the history's own work in one capture: " in out


@pytest.mark.parametrize("args", [
    ["--runs", "60", "--failures", "5", "--writers", "2", "--segments-per-writer", "1", "--repeat", "1"],
    pytest.param([], marks=pytest.mark.slow, id="at-size"),
])
def test_shared_history_benchmark_pulls_every_run_and_loses_none_under_concurrent_pushes(
        tmp_path: Path, args: list[str]) -> None:
    out = run_benchmark("bench_history_share.py", args, tmp_path)
    assert "pull + rebuild of " in out and out.count("ratio ") == 2
    assert ", lost 0" in out and "concurrent pushes of " in out


@pytest.mark.parametrize("args", [
    ["--attr-mb", "1", "--failures", "300", "--line-mb", "1"],
    pytest.param(["--attr-mb", "150", "--failures", "1060000", "--line-mb", "512"], marks=pytest.mark.slow,
                 id="at-size"),
])
def test_hostile_xml_benchmark_prints_each_case(tmp_path: Path, args: list[str]) -> None:
    out = run_benchmark("bench_hostile_xml.py", args, tmp_path)
    assert f"one {args[1]} MB attribute" in out and f"{args[3]} failing testcases" in out
    assert f"selfheal ci copying {args[5]} MB without a newline" in out
    assert out.count("time ratio selfheal/plain: CPU ") == 2 and out.count("peak RSS over idle: ") == 3
    kept = min(int(args[3]), 10_000)
    assert f"failures kept: {kept}" in out


def test_localisation_benchmark_prints_its_table(tmp_path: Path) -> None:
    # One fault of each written project, the default capture only: the table has its rows,
    # FauxPy's says "not run".
    out = run_benchmark("localisation/run.py", ["--corpus", "written", "--limit", "1", "--modes", "evidence"],
                        tmp_path)
    assert "2 faults kept of 2 tried (caches 1, textfmt 1)" in out
    assert "| previous | 2 |" in out and "| evidence | 2 |" in out and "| fauxpy | not run |" in out


def test_localisation_benchmark_ranks_a_kept_round_again_per_fault(tmp_path: Path) -> None:
    # The localised mode keeps its spectrum: --faults ranks each fault again from it alone,
    # with the leaders' counts of failing and passing tests.
    kept = tmp_path / "round.jsonl"
    run_benchmark("localisation/run.py", ["--corpus", "written", "--limit", "1", "--modes", "localised",
                                          "--keep-evidence", "--json", str(kept)], tmp_path)
    assert all(json.loads(line)["localised"]["spectrum"]["failed"] for line in kept.read_text().splitlines())
    out = run_benchmark("localisation/run.py", ["--faults", str(kept)], tmp_path)
    assert out.startswith("| fault | rank | answer: score, failing / passing | 1st |"), out
    assert "2 faults: top-1 " in out and " / " in out.splitlines()[2]


def test_localisation_benchmark_prints_the_regressions_apart(tmp_path: Path) -> None:
    # Offline: the cache already holds both releases of a declared regression (a stand-in
    # for boltons 24.0.0 and 24.1.0, so nothing is downloaded). The case runs N's code with
    # N+1's test, and its table is the regressions' own.
    cache = tmp_path / "cache" / "src"
    old, new = cache / "boltons-24.0.0", cache / "boltons-24.1.0"
    sentinel = ("def make_sentinel(name='_MISSING', var_name=None):\n"
                "    class Sentinel:\n"
                "        def __init__(self):\n"
                "            self.name = name\n"
                "{more}"
                "    return Sentinel()\n")
    copies = ("        def __copy__(self):\n            return self\n\n"
              "        def __deepcopy__(self, _memo):\n            return self\n")
    for root, more in ((old, ""), (new, copies)):
        (root / "boltons").mkdir(parents=True)
        (root / "tests").mkdir()
        (root / "boltons" / "__init__.py").write_text("")
        (root / "boltons" / "typeutils.py").write_text(sentinel.format(more=more))
        (root / "pytest.ini").write_text("[pytest]\npythonpath = .\n")
    (old / "tests" / "test_typeutils.py").write_text("from boltons.typeutils import make_sentinel\n")
    (new / "tests" / "test_typeutils.py").write_text(
        "import copy\nfrom boltons.typeutils import make_sentinel\n\n"
        "def test_sentinel_name():\n    assert make_sentinel('x').name == 'x'\n\n"
        "def test_sentinel_copy():\n    test = make_sentinel('test')\n    assert test is copy.copy(test)\n")
    out = run_benchmark("localisation/run.py", ["--corpus", "regressions", "--projects", "boltons", "--limit", "1",
                                                "--modes", "previous,evidence"], tmp_path,
                        env={**os.environ, "SELFHEAL_LOCALISATION_CACHE": str(tmp_path / "cache")})
    assert "1 faults kept of 1 tried (boltons 24.0.0->24.1.0 (regressions) 1)" in out, out
    assert "regressions: 1 faults (boltons 1)" in out and "mutants:" not in out
    assert "| evidence | 1 | 100% | 100% |" in out and "| fauxpy | not run |" in out


def test_localisation_benchmark_refuses_the_fauxpy_mode_without_its_interpreter(tmp_path: Path) -> None:
    done = subprocess.run([PY, str(BENCHMARKS / "localisation/run.py"), "--modes", "evidence,fauxpy"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "the 'fauxpy' mode needs --fauxpy PYTHON" in done.stderr


def test_floors_benchmark_prints_the_floor_of_the_iteration_and_of_the_capture(tmp_path: Path) -> None:
    out = run_benchmark("bench_floors.py", ["--tests", "4", "--failing", "1", "--capture-tests", "2"], tmp_path)
    lines = out.splitlines()
    assert lines[0].startswith("iteration: b ") and " python start " in lines[0]
    assert lines[1].startswith("iteration (child + python start) / b: floor ") and "(target <= 1.25: " in lines[1]
    assert lines[2].startswith("capture: plain ") and " of the package) cost " in lines[2]
    assert lines[3].startswith("capture (plain + imports) / plain: floor ") and "(target <= 1.25: " in lines[3]


def test_new_tests_benchmark_prints_the_ratio_of_the_check(tmp_path: Path) -> None:
    out = run_benchmark("bench_new_tests.py", ["--tests", "40", "--new", "2", "--repeat", "1", "--share", "5"],
                        tmp_path)
    assert "suite: 40 tests" in out and "ratio check on / off: median" in out
    assert "2 new or changed test(s) re-run 5 of 5 time(s)" in out


def test_mcp_start_benchmark_prints_its_ratio(tmp_path: Path) -> None:
    out = run_benchmark("bench_mcp_start.py", ["--repeat", "1"], tmp_path)
    assert "MCP start (1 interleaved pairs, wall medians): selfheal mcp to its tool list" in out and "ratio" in out
