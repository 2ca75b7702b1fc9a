"""The commands around the loop: ``config``, ``demo`` (the bundled project, self-healed step by
step) and ``stop-gate`` (a coding agent's stop hook, answered from the loop's verdict, and its
install; docs/agents.md)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from pytest_selfheal import process
from pytest_selfheal.cli.common import print_json, project_redactor, project_root
from pytest_selfheal.cli.options import arg, command, flag, json_flag, set_flag
from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.settings import parse_override
from pytest_selfheal.errors import EXIT_OK, UsageError
from pytest_selfheal.gate.agents import Agent, Change, cannot_judge, hook_output
from pytest_selfheal.gate.install import HOOK_MARGIN_SECONDS, install
from pytest_selfheal.gate.run import stop_gate
from pytest_selfheal.gitrepo import init_repo
from pytest_selfheal.names import DEFAULT_REPORTS_DIR, INBOX_DIR, INCIDENT_PREFIX

# "key = value" columns wider than this are not padded, so one long list does not push
# every origin far to the right.
_MAX_ALIGN = 60


@command("config", "print the effective ralf_lite config (defaults <- global <- project <- pytest ini <- --set)",
         flag("--show-origin", "one line per key with the file or flag its value came from"),
         json_flag("print JSON (with --show-origin: {key: {value, origin}})"),
         set_flag("override a key, e.g. --set max_iterations=5 (repeatable)"),
         arg("--project", metavar="DIR", default=None,
             help="project root holding .planning/ and the pytest ini (default: .)"))
def config_command(args: argparse.Namespace) -> int:
    """Load, check and print the effective config; ConfigError (exit 2) when it is bad."""
    project = Path(args.project) if args.project else project_root()
    if not project.is_dir():
        raise UsageError(f"--project: not a directory: {project}")
    overrides = [parse_override(text, "--set") for text in args.overrides]
    effective = load_config(project.resolve(), overrides=overrides)
    if not args.show_origin:
        print_json(effective.to_json(), effective.redactor)
    elif args.json:
        print_json(effective.with_origins(), effective.redactor)
    else:
        rows = [(f"{key} = {json.dumps(entry['value'], ensure_ascii=False)}", entry["origin"])
                for key, entry in effective.with_origins().items()]
        width = min(max(len(left) for left, _ in rows), _MAX_ALIGN)
        for left, origin in rows:
            print(f"{left.ljust(width)}    ({origin})")
    return EXIT_OK


DEMO_SOURCE = Path(__file__).resolve().parents[1] / "demo"

DEMO_AGENT = Path(__file__).resolve().parent / "demo_agent.py"


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


@command("demo", "copy the bundled demo project (one real bug, one flaky test) into a temp git repo and self-heal it",
         arg("--dest", metavar="DIR", help="where to create the demo project (default: a new temp dir)"))
def demo_command(args: argparse.Namespace) -> int:
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


def _gate_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="gate_command", metavar="AGENT|install")
    sub.required = True
    for agent in Agent:
        sub.add_parser(agent.value, help=f"the {agent.value} stop hook: reads its payload on stdin, "
                                         "answers on stdout, always exits 0")
    setup = sub.add_parser("install", help="write the hook into .claude/settings.json or .cursor/hooks.json")
    setup.add_argument("agent", choices=[agent.value for agent in Agent], help="the agent whose settings file gets the hook")
    setup.add_argument("--user", action="store_true",
                       help="the settings file in your home directory (every project), not the project's")
    setup.add_argument("--command", default="", metavar="CMD",
                       help="the command line the hook runs (default: this selfheal by its absolute path, "
                            "then stop-gate AGENT)")


@command("stop-gate", "answer a coding agent's stop hook (Claude Code, Cursor) from the loop's verdict, or install "
                      "that hook", _gate_arguments)
def stop_gate_command(args: argparse.Namespace) -> int:
    """The hook: 0 always (a gate fails open). install: 0; 3 a settings file that cannot be kept whole
    (not JSON, a key twice, another shape); 5 a symbolic link on the way; 6 unwritable."""
    if args.gate_command == "install":
        return _install(args)
    agent = Agent(args.gate_command)
    try:
        stream = getattr(sys.stdin, "buffer", None)  # the bytes; a text-only stdin (embedding) as text
        raw = stream.read() if stream is not None else sys.stdin.read().encode("utf-8", "surrogateescape")
        answer, lines = stop_gate(agent, raw)
    except Exception as exc:
        answer, lines = cannot_judge(agent, f"internal error ({type(exc).__name__})")
    out, err = hook_output(agent, answer, lines, project_redactor().redact)
    sys.stderr.write(err)
    sys.stdout.write(out)
    return EXIT_OK  # always: to Claude Code, exit 2 means "block"


def _install(args: argparse.Namespace) -> int:
    agent = Agent(args.agent)
    root = project_root()
    base = Path.home() if args.user else root
    timeout = load_config(root).settings.gate.timeout_seconds
    done = install(agent, base, timeout, args.command)
    bound = (f", with a timeout of at least {int(timeout) + HOOK_MARGIN_SECONDS} s (gate.timeout_seconds "
             f"{timeout:g} + {HOOK_MARGIN_SECONDS})" if agent is Agent.CLAUDE else "")
    sys.stdout.write(f"{_SAID[done.change]} {done.path}: it runs {done.command}{bound}\n")
    return EXIT_OK


_SAID = {Change.ADDED: "installed the stop hook in", Change.UPDATED: "updated the stop hook in",
         Change.NONE: "the stop hook is already in"}
