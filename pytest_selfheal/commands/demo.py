"""``selfheal demo``: run pytest --selfheal on a bundled demo project and show what it captured."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NAME = "demo"
HELP = "copy the bundled demo project (one real bug, one flaky test) into a temp git repo and self-heal it"

DEMO_SOURCE = Path(__file__).resolve().parent.parent / "demo"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dest", metavar="DIR", help="where to create the demo project (default: a new temp dir)")


def make_demo_project(dest: Path) -> Path:
    """Copy the demo files into ``dest`` and commit them in a fresh git repository."""
    from .._git import init_repo

    dest.mkdir(parents=True, exist_ok=True)
    for item in DEMO_SOURCE.iterdir():
        if item.is_file():
            shutil.copy2(item, dest / item.name)
    init_repo(dest, "demo project")
    return dest


def _run(argv: list, cwd: Path) -> int:
    sys.stdout.write(f"\n$ {' '.join(argv[2:]) if argv[:2] == [sys.executable, '-m'] else ' '.join(argv)}\n")
    sys.stdout.flush()
    return subprocess.run(argv, cwd=str(cwd), check=False).returncode


def run(args: argparse.Namespace) -> int:
    from ..errors import UsageError

    dest = Path(args.dest) if args.dest else Path(tempfile.mkdtemp(prefix="selfheal-demo-"))
    if dest.exists() and any(dest.iterdir()):
        raise UsageError(f"{dest}: demo destination must be empty or absent")
    project = make_demo_project(dest)
    sys.stdout.write(f"demo project: {project}\n")
    _run([sys.executable, "-m", "pytest", "--selfheal", "-q"], project)
    _run([sys.executable, "-m", "pytest_selfheal", "status"], project)
    return 0
