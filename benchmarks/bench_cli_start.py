"""CLI start: ``selfheal status`` vs ``python -c "import pytest"``.

Every command pays the start of the ``selfheal`` process; ``status`` does almost nothing
else (an empty project: no reports root), so its time is that start. The baseline is what
any pytest-based tool pays to start: ``import pytest``. Paired, interleaved runs of fresh
interpreters (the order alternates), medians; wall and CPU time of the children. Target:
ratio <= 1.2.

``--python`` picks the interpreter (default: this one), e.g. a venv where the package is
installed from a wheel; the console script beside it is used when there is one, else
``python -m pytest_selfheal``. ``--dont-write-bytecode`` runs both with
``PYTHONDONTWRITEBYTECODE=1``.

    python benchmarks/bench_cli_start.py [--repeat 21] [--python PY] [--dont-write-bytecode]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench_plugin_overhead import timed  # this folder is first on sys.path


def selfheal_argv(python: str) -> list[str]:
    """The console script beside ``python``, else ``python -m pytest_selfheal``."""
    script = Path(python).parent / ("selfheal.exe" if sys.platform == "win32" else "selfheal")
    return [str(script)] if script.is_file() else [python, "-m", "pytest_selfheal"]


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--dont-write-bytecode", action="store_true")
    args = parser.parse_args(list(argv) or None)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.dont_write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    sides = {"import pytest": [args.python, "-c", "import pytest"], "selfheal status": selfheal_argv(args.python) +
             ["status"]}
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-cli-") as tmp:
        cwd = Path(tmp)
        (cwd / "pytest.ini").write_text("[pytest]\n")
        env["OPENCODE_CONFIG_DIR"] = str(cwd / "no-global-config")
        for argv_ in sides.values():
            timed(argv_, cwd, env)  # warm the file cache and the .pyc files
        for n in range(args.repeat):
            for name in (list(sides) if n % 2 == 0 else list(reversed(sides))):
                runs[name].append(timed(sides[name], cwd, env))
    wall = {name: statistics.median(w for w, _ in r) for name, r in runs.items()}
    cpu = {name: statistics.median(c for _, c in r) for name, r in runs.items()}
    mode = "PYTHONDONTWRITEBYTECODE=1" if args.dont_write_bytecode else ".pyc written"
    print(f"CLI start ({args.repeat} interleaved pairs, {mode}): selfheal status {wall['selfheal status']:.3f}s, "
          f"import pytest {wall['import pytest']:.3f}s; ratio {wall['selfheal status'] / wall['import pytest']:.3f} "
          f"wall, {cpu['selfheal status'] / cpu['import pytest']:.3f} CPU (target <= 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
