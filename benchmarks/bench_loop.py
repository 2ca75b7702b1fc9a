"""Benchmark: one verify-only loop iteration vs running the failing tests by hand vs the whole suite.

Usage::

    python benchmarks/bench_loop.py [--tests 2000] [--failing 3] [--sleep 0.005] [--repeat 7] [--full-repeat 3]
                                [--file-size 50] [--failing-files N] [--calls] [--instructions]

Generates a pytest project in a temporary git repository (``--tests`` tests in files of
``--file-size``, each sleeping ``--sleep`` seconds, ``--failing`` of them failing
deterministically: spread over the suite, or over the first ``--failing-files`` files;
with ``--calls`` each test checks a function of the project, so a failure has root-cause
evidence and the loop could localise it), captures it once with ``pytest --selfheal``, then
times, in interleaved runs (median reported):

* (a) one verify-only iteration, exactly what ``selfheal loop`` does per iteration
  (``loop.verify_iteration``: diff hash, ``python -m pytest -q <node ids> --junitxml``,
  read + fingerprint the junit, write ``attempt_XX.json`` and the events, decide) — the
  loop is configured not to stop (high repeat thresholds) so nothing is archived;
* (b) ``python -m pytest -q <the failing node ids>`` run directly;
* (c) the whole suite, ``python -m pytest -q``;
* (d) ``selfheal loop ID`` as a user runs it (a process: the CLI's start, one verify-only
  iteration, the stop and the archive), the reports root restored to the capture's before
  each run (not timed).

Wall time is what the targets are about; the CPU time of each side (this process and its
children) is printed too, since it barely moves when the machine is busy with other work.
Every child runs with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` (the capture loads the plugin
with ``-p``): other installed plugins would add the same startup cost to (a) and (b) and
flatter the ratio. Targets: a/b <= 1.25 and c/a >= 20; d/b <= 1.25. The exact-selection
variant, ``--tests 600 --file-size 100 --failing 30 --failing-files 3`` (30 failures over 3
of 6 files: the iteration must run the 30 node ids, not their files): a/b <= 1.25.
Results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench_cli_start import selfheal_argv  # this folder is first on sys.path
from bench_plugin_overhead import instructions


def _failing_numbers(tests: int, failing: int, file_size: int, failing_files: int) -> set[int]:
    """The failing tests' numbers: one per region of the suite, or of each of the first
    ``failing_files`` files (evenly within each)."""
    if not failing_files:
        return {int((k + 0.5) * tests / failing) for k in range(min(failing, tests))}
    chosen: set[int] = set()
    for index in range(failing_files):
        count = failing // failing_files + (1 if index < failing % failing_files else 0)
        chosen.update(index * file_size + int((k + 0.5) * file_size / count) for k in range(min(count, file_size)))
    return chosen


def generate(root: Path, tests: int, failing: int, sleep: float, file_size: int = 50,
             failing_files: int = 0, calls: bool = False) -> list[str]:
    """Write the project; returns the failing node ids."""
    root.mkdir(parents=True)
    if calls:
        (root / "mod.py").write_text("def double(n):\n    return n * 2\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".gitignore").write_text(".selfheal/\n__pycache__/\n.pytest_cache/\n")
    tests_dir = root / "tests"
    tests_dir.mkdir()
    failing_ids: list[str] = []
    files = (tests + file_size - 1) // file_size
    chosen = _failing_numbers(tests, failing, file_size, failing_files)
    for index in range(files):
        lines = ["import time", *(["from mod import double"] if calls else []), "", ""]
        for number in range(file_size):
            global_number = index * file_size + number
            if global_number >= tests:
                break
            lines.append(f"def test_{number:03d}():")
            lines.append(f"    time.sleep({sleep})")
            product = f"double({number})" if calls else f"{number} * 2"
            if global_number in chosen:
                lines.append(f"    assert {product} == {number * 2 + 1}, 'deterministic failure {len(failing_ids)}'")
                failing_ids.append(f"tests/test_mod{index:03d}.py::test_{number:03d}")
            elif calls:
                lines.append(f"    assert {product} == {number * 2}")
            lines.append("")
        (tests_dir / f"test_mod{index:03d}.py").write_text("\n".join(lines) + "\n")
    import git

    repo = git.Repo.init(root)
    repo.git.add(A=True)
    actor = git.Actor("bench", "bench@example.invalid")
    repo.index.commit("bench", author=actor, committer=actor)
    repo.close()
    return failing_ids


def child_env(config_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["OPENCODE_CONFIG_DIR"] = str(config_dir)  # no global config of the machine
    env.pop("PYTEST_ADDOPTS", None)
    return env


# The judging keys at their bound (config/keys.py): no stop in the iterations a benchmark runs.
NEVER_STOP = ("max_iterations=1000", "error_fingerprint_repeats=1000", "no_progress_repeats=1000")


# (d) is a loop as a user runs it: one iteration, then the stop and the archive.
ONE_ITERATION = ("max_iterations=1",)


def capture(root: Path, env: dict[str, str], judging: tuple[str, ...]) -> str:
    """Capture the project with these judging keys (they are the incident's: a later config cannot change them)."""
    shutil.rmtree(root / ".selfheal", ignore_errors=True)
    subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "pytest_selfheal.plugin", "--selfheal", "-q", "-p", "no:cacheprovider",
         *(word for key in judging for word in ("--selfheal-set", key))],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
    )
    inbox = root / ".selfheal" / "error_inbox"
    ids = sorted(p.name for p in inbox.iterdir() if p.name.startswith("incident_"))
    if len(ids) != 1:
        raise SystemExit(f"expected one incident after the capture, found {ids}")
    return ids[0]


def timed(fn: Callable[[], None]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process and its children) of one call.

    CPU time is far less sensitive to other load on the machine than wall time, so the
    a/b ratio is also reported in CPU terms (the c/a ratio is wall-only: the suite's tests
    sleep, which costs no CPU).
    """
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = time.process_time()
    start = time.perf_counter()
    fn()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (after.ru_utime - children.ru_utime) + (after.ru_stime - children.ru_stime)
    return wall, child_cpu + (time.process_time() - cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--failing", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.005)
    parser.add_argument("--file-size", type=int, default=50, help="tests per file")
    parser.add_argument("--failing-files", type=int, default=0,
                        help="put the failing tests in the first N files (0: spread over the suite)")
    parser.add_argument("--calls", action="store_true",
                        help="each test checks a function of the project (its failures have root-cause evidence)")
    parser.add_argument("--repeat", type=int, default=7, help="interleaved runs of (a) and (b)")
    parser.add_argument("--full-repeat", type=int, default=3, help="runs of (c), interleaved with the first ones")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the instructions of (d) and (b), children included (valgrind)")
    args = parser.parse_args(argv)

    from pytest_selfheal.config.files import load_config
    from pytest_selfheal.config.settings import parse_override
    from pytest_selfheal.loop.driver import verify_iteration
    from pytest_selfheal.store.root import Store

    work = Path(tempfile.mkdtemp(prefix="selfheal-bench-loop-"))
    try:
        config_dir = work / "opencode"
        config_dir.mkdir()
        os.environ["OPENCODE_CONFIG_DIR"] = str(config_dir)
        root = work / "project"
        failing = generate(root, args.tests, args.failing, args.sleep, args.file_size, args.failing_files,
                           args.calls)
        env = child_env(config_dir)
        # A state directory of its own: the installed code's bytecode the clean room keeps is
        # this run's (filled by the warm-up), whatever else runs on the machine.
        env["XDG_STATE_HOME"] = str(work / "state")
        # Two captures of the same run: (d)'s stops after one iteration, (a)'s never stops.
        loop_id = capture(root, env, ONE_ITERATION)
        loop_snapshot = work / "captured_loop"
        shutil.copytree(root / ".selfheal", loop_snapshot)
        started = time.perf_counter()
        incident_id = capture(root, env, NEVER_STOP)
        print(f"project: {args.tests} tests ({args.sleep * 1000:g} ms each), {len(failing)} failing; "
              f"captured {incident_id} in {time.perf_counter() - started:.1f}s")
        store = Store(root / ".selfheal")
        # (a)'s capture never stops: each measured iteration is a plain "continue" (nothing archived).
        overrides = [parse_override(text, "bench") for text in NEVER_STOP]
        effective = load_config(root, overrides=overrides)

        def iteration() -> None:
            outcome = verify_iteration(store, incident_id, effective=effective, project_root=root, env=env)
            assert not outcome.closed and outcome.attempt is not None, outcome
            assert len(outcome.attempt.failures) == len(failing), outcome.attempt

        def direct() -> None:
            subprocess.run([sys.executable, "-m", "pytest", "-q", *failing], cwd=root, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

        snapshot = work / "captured"
        shutil.copytree(root / ".selfheal", snapshot)

        def restore(source: Path = snapshot) -> None:
            shutil.rmtree(root / ".selfheal")
            shutil.copytree(source, root / ".selfheal")

        def loop_cli() -> None:
            subprocess.run([*selfheal_argv(sys.executable), "loop", loop_id], cwd=root, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=600)

        def full() -> None:
            subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=root, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

        iteration()  # warm-up: imports (gitpython, junit reader) happen once per process
        direct()
        restore(loop_snapshot)
        loop_cli()
        restore()
        times: dict[str, list[float]] = {"a": [], "b": [], "c": [], "d": []}
        cpu: dict[str, list[float]] = {"a": [], "b": [], "c": [], "d": []}
        for index in range(max(args.repeat, args.full_repeat)):
            runs = [("a", iteration), ("b", direct), ("d", loop_cli)] if index < args.repeat else []
            if index % 2:
                runs.reverse()  # alternate the order: neither side always runs second
            if index < args.full_repeat:
                runs.append(("c", full))
            for key, fn in runs:
                if key == "d":
                    restore(loop_snapshot)
                wall, used = timed(fn)
                if key == "d":
                    restore()  # (a) records into the open incident the loop archived
                times[key].append(wall)
                cpu[key].append(used)
        median: dict[str, float] = {key: statistics.median(values) for key, values in times.items()}
        median_cpu: dict[str, float] = {key: statistics.median(values) for key, values in cpu.items()}
        rows: tuple[tuple[str, str], ...] = (
            ("a", "one verify-only iteration (verify_iteration)"),
            ("b", f"python -m pytest -q <{len(failing)} node ids>"),
            ("c", "python -m pytest -q (whole suite)"),
            ("d", "selfheal loop ID (a process)"),
        )
        for key, label in rows:
            spread = ", ".join(f"{t:.3f}" for t in times[key])
            print(f"({key}) {label}: median {median[key]:.3f}s wall, {median_cpu[key]:.3f}s CPU  [{spread}]")
        ratio_ab = median["a"] / median["b"]
        ratio_ca = median["c"] / median["a"]
        print(f"ratio a/b (iteration vs direct pytest of the failing tests): {ratio_ab:.3f} (target <= 1.25)")
        print(f"ratio c/a (whole suite vs one iteration): {ratio_ca:.1f} (target >= 20)")
        print(f"ratio d/b (selfheal loop ID vs direct pytest of the failing tests): {median['d'] / median['b']:.3f} "
              f"wall, {median_cpu['d'] / median_cpu['b']:.3f} CPU (target <= 1.25)")
        print(f"CPU ratio a/b: {median_cpu['a'] / median_cpu['b']:.3f}; load average now: "
              f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        if args.instructions:
            restore(loop_snapshot)
            loop_count = instructions([*selfheal_argv(sys.executable), "loop", loop_id], root, env)
            restore()
            direct_count = instructions([sys.executable, "-m", "pytest", "-q", *failing], root, env)
            print(f"instructions d {loop_count:,}, b {direct_count:,}: ratio d/b {loop_count / direct_count:.3f}")
        print(f"attempts recorded: {store.count_attempts(incident_id)}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
