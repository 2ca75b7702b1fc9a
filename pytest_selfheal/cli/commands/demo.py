"""``selfheal demo``: self-heal a bundled demo project, start to finish, and show each step."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

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


def _step(title: str) -> None:
    sys.stdout.write(f"\n=== {title}\n")
    sys.stdout.flush()


def _run(args: list[str], cwd: Path) -> None:
    """Show ``args`` and run them (``pytest``: this Python's; ``selfheal``: this package), echoing their output."""
    sys.stdout.write(f"$ {' '.join(args)}\n")
    sys.stdout.flush()
    module = "pytest" if args[0] == "pytest" else "pytest_selfheal"
    process.run([sys.executable, "-m", module, *args[1:]], cwd=cwd, on_line=_echo)


def _echo(line: bytes) -> None:
    sys.stdout.write(line.decode("utf-8", errors="replace"))
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    project = Path(args.dest) if args.dest else Path(tempfile.mkdtemp(prefix="selfheal-demo-"))
    if project.exists() and any(project.iterdir()):
        raise UsageError(f"{project}: demo destination must be empty or absent")
    project.mkdir(parents=True, exist_ok=True)
    for item in DEMO_SOURCE.iterdir():
        if item.is_file():
            shutil.copy2(item, project / item.name)
    init_repo(project, "demo project")
    sys.stdout.write(f"demo project: {project} (calc.add has a real bug; test_flaky times out on its first run)\n")

    _step("1. a red run is captured as an incident, fingerprinted, with a plan")
    _run(["pytest", "--selfheal", "-q", "-p", "no:randomly"], project)
    inbox = project / DEFAULT_REPORTS_DIR / INBOX_DIR
    captured = sorted(p.name for p in inbox.glob(f"{INCIDENT_PREFIX}*")) if inbox.is_dir() else []
    if not captured:
        raise UsageError("the demo run captured nothing; is pytest-selfheal installed in this Python?")

    _step("2. the verify-only loop: the flaky test passes on re-run, the real bug repeats -> hard stop")
    first = captured[-1]
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
