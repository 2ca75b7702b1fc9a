"""The regression check on a real project: what it runs, and what that costs, per candidate success.

The suite of a pinned PyPI sdist (default ``packaging==24.1``: 26,854 tests in 11 modules;
its tests need ``pretend``), downloaded once with ``pip download`` into ``--cache`` (outside
the repository), unpacked into a temporary git repository (``pythonpath = src``). Then:

* **which modules can reach each source module** (loop/regression.py ``affected_test_files``):
  for every module of the package, the test modules a change to it re-runs and their share
  of the suite's tests (one ``--collect-only`` of the whole suite counts them);
* **the loop in agent mode**: one injected bug (``canonicalize_version`` in ``utils.py``),
  captured by ``pytest --selfheal`` over the whole suite; then, after a fix that also breaks
  ``canonicalize_name`` and after the correct fix, the incident's selection alone (it passes:
  "not yet checked for regressions", not counted) and the whole suite again, which runs the
  check (it names what the first fix broke, ``CONTINUE``; it finds nothing for the correct
  one, ``STOP success``). Each run's wall time, and what the check ran.

    python benchmarks/bench_regression.py [--cache DIR] [--package packaging==24.1]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from pytest_selfheal.loop.regression import affected_test_files

BUG = ("    if parsed.epoch != 0:", "    if parsed.epoch != 1:")
BREAK = ('_canonicalize_regex = re.compile(r"[-_.]+")', '_canonicalize_regex = re.compile(r"[-_]+")')


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start, done.stdout + done.stderr


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=bench@example.invalid", "-c", "user.name=bench", *args], cwd=cwd,
                   check=True, capture_output=True)


def prepare(cache: Path, package: str, into: Path) -> tuple[Path, dict[str, str]]:
    """The sdist unpacked into a git repository, and the environment its tests need."""
    cache.mkdir(parents=True, exist_ok=True)
    name, _, version = package.partition("==")
    sdists = sorted(cache.glob(f"{name}-{version}.tar.gz"))
    if not sdists:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        package, "-d", str(cache)], check=True)
        sdists = sorted(cache.glob(f"{name}-{version}.tar.gz"))
    extra = cache / "extra"
    if not (extra / "pretend.py").exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(extra), "pretend"], check=True)
    with tarfile.open(sdists[0]) as tar:
        tar.extractall(into, filter="data")
    root = into / f"{name}-{version}"
    (root / "pytest.ini").write_text("[pytest]\npythonpath = src\n")
    (root / ".gitignore").write_text(".selfheal/\n__pycache__/\n.pytest_cache/\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "as released")
    env = dict(os.environ, PYTHONPATH=str(extra), PYTHONDONTWRITEBYTECODE="1")
    env.pop("SELFHEAL_VERIFYING", None)
    return root, env


def tests_per_module(root: Path, env: dict[str, str]) -> collections.Counter[str]:
    """How many tests each test module holds (one collection of the whole suite)."""
    _, out = _run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0"],
                  root, env)
    files = (line.split("::", 1)[0] for line in out.splitlines() if "::" in line and " " not in line.split("::")[0])
    return collections.Counter(f for f in files if f.endswith(".py"))


def affected_table(root: Path, counts: collections.Counter[str]) -> None:
    total = sum(counts.values())
    print(f"suite: {total:,} tests in {len(counts)} modules")
    for module in sorted((root / "src").rglob("*.py")):
        rel = module.relative_to(root).as_posix()
        start = time.perf_counter()
        files = affected_test_files(root, [rel])
        took = (time.perf_counter() - start) * 1000
        if files is None:
            print(f"  {rel}: the whole command ({took:.0f} ms)")
            continue
        share = sum(counts.get(f, 0) for f in files)
        print(f"  {rel}: {len(files)} of {len(counts)} test modules, {share:,} tests ({share / total:.0%}); "
              f"found in {took:.0f} ms")


def agent_mode(root: Path, env: dict[str, str]) -> None:
    utils = root / "src" / "packaging" / "utils.py"
    utils.write_text(utils.read_text().replace(*BUG))
    _git(root, "commit", "-qam", "a bug in canonicalize_version")
    pytest = [sys.executable, "-m", "pytest", "--selfheal", "-q", "-p", "no:cacheprovider", "-n", "0"]
    took, out = _run(pytest, root, env)
    summary = _last(out, r"\d+ failed")
    print(f"capture, whole suite: {took:.1f} s; {summary}")
    incident = next(root.glob(".selfheal/error_inbox/**/incident.json"))
    selection = json.loads(incident.read_text())["nodeids"]
    for label, edits in (("fix that breaks canonicalize_name", [BUG[::-1], BREAK]), ("correct fix", [BREAK[::-1]])):
        text = utils.read_text()
        for old, new in edits:
            text = text.replace(old, new)
        utils.write_text(text)
        for what, argv in ((f"the {len(selection)} selected tests", [*pytest, *selection]), ("the whole suite", pytest)):
            took, out = _run(argv, root, env)
            lines = [line for line in out.splitlines() if line.startswith("selfheal: incident")]
            print(f"agent run of {what}, {label}: {took:.1f} s")
            for line in lines:
                print("  " + re.sub(r"incident_[0-9_a-z]+", "ID", line)[:300])


def _last(out: str, pattern: str) -> str:
    found = [line for line in out.splitlines() if re.search(pattern, line)]
    return found[-1].strip("= ") if found else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "selfheal-bench-cache")
    parser.add_argument("--package", default="packaging==24.1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-regression-") as tmp:
        root, env = prepare(args.cache, args.package, Path(tmp))
        affected_table(root, tests_per_module(root, env))
        agent_mode(root, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
