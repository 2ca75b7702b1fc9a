"""A real project's suite: ``pytest --selfheal`` vs plain ``pytest``, green and red.

The suite of a pinned PyPI sdist (``--project``), downloaded once with ``pip download
--no-binary :all: --no-deps`` into ``--cache`` (outside the repository), unpacked into a
temporary git repository:

* ``cachetools`` (default): cachetools 5.5.2, 216 tests, about a second; its bug
  (``size > maxsize`` -> ``size >= maxsize`` in ``Cache.__setitem__``) fails 41 of them;
* ``more-itertools``: more-itertools 10.5.0, 664 tests, about two seconds; its bug (``last``
  returns the next-to-last item of an iterator) fails 6 of them.

Two runs of it:

* **green**: the suite as released. Every user with ``selfheal = true`` pays this on every
  run. Target: ratio <= 1.03;
* **red**: the project's injected bug, each ``--selfheal`` run with a fresh reports root, so
  each pays a whole capture. Target: ratio <= 1.20.

Each in two bytecode modes: ``PYTHONDONTWRITEBYTECODE=1`` (as many CI images set it: pytest
then parses, rewrites and compiles every module of a ``pytest11`` plugin's package it
imports, on every run; the pytest-rewritten ``.pyc`` files of the installed package are
deleted first, as in a fresh image) and with ``.pyc`` files written (warmed first). Paired
runs whose order alternates; medians of wall and CPU time (CPU is steadier on a shared
machine). Both sides autoload the installed plugins, as a user's run does.

Measure with the package installed from a wheel into a venv of its own (``--python``): an
editable install is not what users run, and the script says so when it sees one.

    python benchmarks/bench_real_project.py [--python PY] [--project cachetools|more-itertools]
                                            [--repeat 9] [--only green|red]
                                            [--instructions] [--configured]
                                            [--bytecode both|write|dont-write] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, Optional

from bench_plugin_overhead import instructions, timed  # this folder is first on sys.path


class Project(NamedTuple):
    sdist: str
    pythonpath: str  # relative to the unpacked sdist
    bug: tuple[str, str, str]  # (file, text, replacement): the injected bug of the red run
    tests: str = "tests"


PROJECTS = {
    "cachetools": Project("cachetools==5.5.2", "src",
                          ("src/cachetools/__init__.py", "        if size > maxsize:\n", "        if size >= maxsize:\n")),
    "more-itertools": Project("more-itertools==10.5.0", ".", (
        "more_itertools/more.py", "            return deque(iterable, maxlen=1)[-1]\n",
        "            return deque(iterable, maxlen=2)[0]\n")),
}
DEFAULT_CACHE = Path.home() / ".cache" / "pytest-selfheal-bench"


def fetch(spec: str, cache: Path, python: str) -> Path:
    """The sdist of ``spec`` in ``cache``, downloaded there once."""
    name, _, version = spec.partition("==")
    cache.mkdir(parents=True, exist_ok=True)
    found = [p for p in cache.glob("*.tar.gz") if p.name.lower().replace("_", "-") == f"{name}-{version}.tar.gz"]
    if not found:
        subprocess.run([python, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q", "-d", str(cache),
                        spec], check=True)
        found = [p for p in cache.glob("*.tar.gz") if p.name.lower().replace("_", "-") == f"{name}-{version}.tar.gz"]
    return found[0]


def unpack(sdist: Path, dest: Path, bug: Optional[tuple[str, str, str]]) -> Path:
    """The sdist unpacked into a git repository at ``dest``, with the bug injected when ``bug``."""
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        # The "data" filter (Python 3.12, and backported) drops the archive's owners, which
        # git refuses as dubious ownership when extracted as root.
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest.parent / "unpack", filter="data")  # a pinned sdist from PyPI
        else:
            tar.extractall(dest.parent / "unpack")
    shutil.move(str(dest.parent / "unpack" / top), str(dest))
    if bug:
        path = dest / bug[0]
        text = path.read_text()
        if bug[1] not in text:
            raise SystemExit(f"the injected bug does not apply to {path}")
        path.write_text(text.replace(bug[1], bug[2], 1))
    (dest / ".gitignore").write_text(".selfheal*/\n__pycache__/\n")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "sdist"]):
        subprocess.run(git + args, cwd=dest, check=True)
    return dest


def installed(python: str) -> tuple[Path, bool]:
    """(the installed package's folder, whether it is an editable install) for ``python``."""
    probe = ("import json, pathlib, importlib.metadata as m, pytest_selfheal as p\n"
             "d = m.distribution('pytest-selfheal').read_text('direct_url.json') or '{}'\n"
             "print(json.dumps([str(pathlib.Path(p.__file__).parent), "
             "json.loads(d).get('dir_info', {}).get('editable', False)]))")
    # Not from this folder: ``-c`` puts the working directory first on sys.path.
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True,
                         cwd=tempfile.gettempdir()).stdout
    folder, editable = json.loads(out)
    return Path(folder), bool(editable)


def drop_rewritten_pyc(*folders: Path) -> None:
    """Delete pytest's rewritten ``.pyc`` files (``*-pytest-*.pyc``) below ``folders``: with
    PYTHONDONTWRITEBYTECODE pytest would still read them, and a fresh CI image has none."""
    for folder in folders:
        for pyc in folder.rglob("__pycache__/*-pytest-*.pyc"):
            pyc.unlink()


def run_env(project: Path, dont_write: bool, pythonpath: str) -> dict[str, str]:
    """The environment of both sides' runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONDONTWRITEBYTECODE"))}
    env["PYTHONPATH"] = str(project / pythonpath)
    env["OPENCODE_CONFIG_DIR"] = str(project.parent / "no-global-config")
    if dont_write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def selfheal_argv(plain_argv: list[str], project: Path, configured: bool) -> list[str]:
    """The ``--selfheal`` side, on a fresh default reports root (removed first, so each red run
    pays a whole capture). ``configured``: the root named by ``--selfheal-dir`` too, a flag that
    sets a config key, so the run reads the config at its start as a configured project's does."""
    shutil.rmtree(project / ".selfheal", ignore_errors=True)
    return plain_argv + ["--selfheal", *(["--selfheal-dir=.selfheal"] if configured else [])]


def count(project: Path, python: str, dont_write: bool, package: Path, configured: bool,
          spec: Project) -> tuple[int, int]:
    """(plain, selfheal) instructions of one run each, after a warming pair (the .pyc files)."""
    env = run_env(project, dont_write, spec.pythonpath)
    plain_argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", spec.tests]
    counts = []
    for n in range(4):
        if dont_write:
            drop_rewritten_pyc(package, project)
        argv = plain_argv if n % 2 == 0 else selfheal_argv(plain_argv, project, configured)
        if n < 2:
            timed(argv, project, env)
        else:
            counts.append(instructions(argv, project, env))
    return counts[0], counts[1]


def measure(project: Path, python: str, repeat: int, dont_write: bool, package: Path,
            configured: bool, spec: Project) -> tuple[float, ...]:
    """(plain wall, selfheal wall, wall ratio, plain CPU, selfheal CPU, CPU ratio): medians of interleaved pairs."""
    env = run_env(project, dont_write, spec.pythonpath)
    plain_argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", spec.tests]
    runs: dict[str, list[tuple[float, float]]] = {"plain": [], "selfheal": []}
    for n in range(repeat + 1):
        if dont_write:
            drop_rewritten_pyc(package, project)
        for name in ("plain", "selfheal") if n % 2 == 0 else ("selfheal", "plain"):
            result = timed(plain_argv if name == "plain" else selfheal_argv(plain_argv, project, configured), project, env)
            if n:  # the first pair warms the file cache (and, writing, the .pyc files)
                runs[name].append(result)
    plain = statistics.median(w for w, _ in runs["plain"])
    healed = statistics.median(w for w, _ in runs["selfheal"])
    plain_cpu = statistics.median(c for _, c in runs["plain"])
    healed_cpu = statistics.median(c for _, c in runs["selfheal"])
    return plain, healed, healed / plain, plain_cpu, healed_cpu, healed_cpu / plain_cpu


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable, help="an interpreter with pytest-selfheal installed")
    parser.add_argument("--project", choices=sorted(PROJECTS), default="cachetools", help="whose suite and bug")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--only", choices=("green", "red"))
    parser.add_argument("--bytecode", choices=("both", "write", "dont-write"), default="both")
    parser.add_argument("--instructions", action="store_true",
                        help="also count the instructions of one run per side (valgrind): load does not change them")
    parser.add_argument("--configured", action="store_true",
                        help="pass --selfheal-dir too: the run reads the config at its start, as a configured project's")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the sdist is kept")
    parser.add_argument("--sdist", default=None, help=argparse.SUPPRESS)  # the tests' tiny stand-in
    args = parser.parse_args(list(argv) or None)
    spec = PROJECTS[args.project]
    args.sdist = args.sdist or spec.sdist
    package, editable = installed(args.python)
    sdist = Path(args.sdist) if args.sdist.endswith(".tar.gz") else fetch(args.sdist, args.cache, args.python)
    print(f"{sdist.name}, pytest-selfheal from {package}" + (" (an EDITABLE install: build a wheel "
          "and install it into a venv of its own to measure what users run)" if editable else ""))
    modes = {"both": (True, False), "write": (False,), "dont-write": (True,)}[args.bytecode]
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-real-") as tmp:
        for kind in ("green", "red") if args.only is None else (args.only,):
            project = unpack(sdist, Path(tmp, kind), bug=spec.bug if kind == "red" else None)
            for dont_write in modes:
                p, h, r, pc, hc, c = measure(project, args.python, args.repeat, dont_write, package, args.configured,
                                             spec)
                mode = "PYTHONDONTWRITEBYTECODE=1" if dont_write else ".pyc written"
                target = "1.03" if kind == "green" else "1.20"
                print(f"{kind} run, {mode}: plain {p:.3f}s, --selfheal {h:.3f}s, ratio {r:.3f} wall, "
                      f"{c:.3f} CPU ({pc:.3f}s vs {hc:.3f}s) (target <= {target})")
                if args.instructions:
                    pi, hi = count(project, args.python, dont_write, package, args.configured, spec)
                    print(f"{kind} run, {mode}: instructions plain {pi:,}, --selfheal {hi:,}, ratio {hi / pi:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
