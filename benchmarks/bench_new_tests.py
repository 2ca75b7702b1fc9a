"""Benchmark: what checking a pull request's new tests for flakiness adds to ``selfheal ci``.

Usage::

    python benchmarks/bench_new_tests.py [--tests 1000] [--new 10] [--repeat 5]

Builds a git repository with a suite of ``--tests`` passing tests in 20 modules, each taking
``--sleep`` seconds (the base
commit) and a head commit that adds a module of ``--new`` tests, then runs ``selfheal ci``
on a simulated pull_request event (base: that commit; no comment, no GitHub) in
interleaved pairs, in this process:

* baseline: ``selfheal ci --set new_tests.enabled=false`` (the plain run: tests and report);
* ours: ``selfheal ci`` with the check on (defaults: 5 re-runs, at most 20 % of the run's
  time or 120 s; ``--share`` changes the share).

Prints the median wall time of each and the median ratio ours / baseline. By design the
re-runs take at most the share of the job's own run. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from pytest_selfheal.cli.main import main


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def build(root: Path, tests: int, new: int, sleep: float) -> str:
    """The project (every test sleeps ``sleep`` seconds); returns the base commit."""
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    per_module = max(1, tests // 20)
    for module in range(0, tests, per_module):
        body = "import time\n\n\n" + "".join(f"def test_{n}():\n    time.sleep({sleep})\n\n\n"
                                            for n in range(module, min(tests, module + per_module)))
        (root / f"test_suite_{module // per_module:02d}.py").write_text(body)
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "base"], cwd=root, check=True, env=env)
    base = _git(root, "rev-parse", "HEAD")
    (root / "test_added.py").write_text("import time\n\n\n" + "".join(
        f"def test_new_{n}():\n    time.sleep({sleep})\n\n\n" for n in range(new)))
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "add tests"], cwd=root, check=True, env=env)
    return base


def run_ci(root: Path, event: Path, *extra: str, notes: list[str] | None = None) -> float:
    """One ``selfheal ci`` in-process; its wall seconds (its new-tests line added to ``notes``)."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.environ.update({"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event),
                       "PYTEST_ADDOPTS": "-p no:hypothesispytest -p no:xdist"})
    os.chdir(root)
    started = time.perf_counter()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["ci", "--no-comment", *extra])
    finally:
        elapsed = time.perf_counter() - started
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    if code != 0:
        raise SystemExit(f"selfheal ci exited {code}")
    if notes is not None:
        notes += [line for line in out.getvalue().splitlines() if "new or changed test(s) re-run" in line]
    return elapsed


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=1000)
    parser.add_argument("--new", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--share", type=float, default=0.2)
    parser.add_argument("--sleep", type=float, default=0.01, help="seconds each test takes (a real suite's weight)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "proj"
        root.mkdir()
        base = build(root, args.tests, args.new, args.sleep)
        event = Path(tmp) / "event.json"
        event.write_text(json.dumps({"pull_request": {"number": 1, "base": {"sha": base}}}))
        run_ci(root, event, "--set", "new_tests.enabled=false")  # warm-up
        plain: list[float] = []
        checked: list[float] = []
        notes: list[str] = []
        for _ in range(args.repeat):
            plain.append(run_ci(root, event, "--set", "new_tests.enabled=false"))
            checked.append(run_ci(root, event, "--set", f"new_tests.max_share={args.share}", notes=notes))
    ratios = [c / p for c, p in zip(checked, plain)]
    print(f"suite: {args.tests} tests of {args.sleep} s each, the pull request adds {args.new}; {args.repeat} pairs")
    print(f"selfheal ci, check off: median {statistics.median(plain):.2f} s")
    print(f"selfheal ci, check on (share {args.share}): median {statistics.median(checked):.2f} s")
    for note in notes:
        print(f"  {note}")
    print(f"ratio check on / off: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main_()
