"""``selfheal demo``: self-heal a bundled demo project, start to finish, and show each step."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

from pytest_selfheal import process
from pytest_selfheal.errors import UsageError
from pytest_selfheal.gitrepo import init_repo
from pytest_selfheal.names import DEFAULT_REPORTS_DIR, INBOX_DIR, INCIDENT_PREFIX

NAME = "demo"
HELP = "copy the bundled demo project (one real bug, one flaky test) into a temp git repo and self-heal it"

DEMO_SOURCE = Path(__file__).resolve().parents[2] / "demo"
DEMO_AGENT = Path(__file__).resolve().parents[1] / "demo_agent.py"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dest", metavar="DIR", help="where to create the demo project (default: a new temp dir)")


def make_demo_project(dest: Path) -> Path:
    """Copy the demo files into ``dest`` and commit them in a fresh git repository."""
    dest.mkdir(parents=True, exist_ok=True)
    for item in DEMO_SOURCE.iterdir():
        if item.is_file():
            shutil.copy2(item, dest / item.name)
    init_repo(dest, "demo project")
    return dest


def _step(title: str) -> None:
    sys.stdout.write(f"\n=== {title}\n")
    sys.stdout.flush()


def _run(args: list[str], cwd: Path) -> int:
    shown = " ".join(args)
    sys.stdout.write(f"$ {shown}\n")
    sys.stdout.flush()
    argv = [sys.executable, "-m", "pytest", *args[1:]] if args[0] == "pytest" else [sys.executable, "-m", "pytest_selfheal", *args[1:]]
    result = process.run(argv, cwd=cwd, on_line=_echo)
    return result.exit_code if result.exit_code is not None else 1


def _echo(line: bytes) -> None:
    sys.stdout.write(line.decode("utf-8", errors="replace"))
    sys.stdout.flush()


def _newest_inbox_incident(project: Path) -> Optional[str]:
    inbox = project / DEFAULT_REPORTS_DIR / INBOX_DIR
    ids = sorted(p.name for p in inbox.glob(f"{INCIDENT_PREFIX}*")) if inbox.is_dir() else []
    return ids[-1] if ids else None


def run(args: argparse.Namespace) -> int:
    dest = Path(args.dest) if args.dest else Path(tempfile.mkdtemp(prefix="selfheal-demo-"))
    if dest.exists() and any(dest.iterdir()):
        raise UsageError(f"{dest}: demo destination must be empty or absent")
    project = make_demo_project(dest)
    sys.stdout.write(f"demo project: {project} (calc.add has a real bug; test_flaky times out on its first run)\n")

    _step("1. a red run is captured as an incident, fingerprinted, with a plan")
    _run(["pytest", "--selfheal", "-q", "-p", "no:randomly"], project)
    first = _newest_inbox_incident(project)
    if first is None:
        raise UsageError("the demo run captured nothing; is pytest-selfheal installed in this Python?")

    _step("2. the verify-only loop: the flaky test passes on re-run, the real bug repeats -> hard stop")
    _run(["selfheal", "loop", first], project)

    _step("3. running again does not reset the stop: the same failure, the same code -> STOP already_stopped")
    _run(["pytest", "--selfheal", "-q", "-p", "no:randomly"], project)

    _step("4. you reopen it with a repair provider (a stand-in agent) fixing it in an isolated worktree")
    command = json.dumps([sys.executable, str(DEMO_AGENT), "{worktree}", "{prompt_file}"])
    _run(["selfheal", "loop", first, "--reopen", "--set", f"repair.command={command}"], project)
    _step("5. the fix was proposed, not applied: your working tree is untouched until you approve")
    sys.stdout.write((project / "calc.py").read_text())
    _run(["selfheal", "apply", first, "--yes"], project)
    _step("6. green again")
    _run(["pytest", "-q", "-p", "no:randomly"], project)

    _step("the incidents and the RALF Lite Loop Report")
    _run(["selfheal", "status"], project)
    _run(["selfheal", "report", "--all", "--format", "text"], project)
    sys.stdout.write(f"\nEverything is on disk under {project / '.selfheal'}; the full markdown report, with the "
                     f"decision points: cd {project} && selfheal report --all\n")
    return 0
