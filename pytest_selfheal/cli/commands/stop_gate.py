"""``selfheal stop-gate claude|cursor``: answer a coding agent's stop hook from the loop's verdict;
``selfheal stop-gate install claude|cursor``: install that hook (docs/agents.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pytest_selfheal.cli.commands._common import project_redactor, project_root
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import EXIT_OK
from pytest_selfheal.gate.agents import Agent, Change, cannot_judge, hook_output
from pytest_selfheal.gate.install import HOOK_MARGIN_SECONDS, install
from pytest_selfheal.gate.run import stop_gate

NAME = "stop-gate"
HELP = "answer a coding agent's stop hook (Claude Code, Cursor) from the loop's verdict, or install that hook"

AGENTS = [agent.value for agent in Agent]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="gate_command", metavar="AGENT|install")
    sub.required = True
    for agent in Agent:
        sub.add_parser(agent.value, help=f"the {agent.value} stop hook: reads its payload on stdin, "
                                         "answers on stdout, always exits 0")
    setup = sub.add_parser("install", help="write the hook into .claude/settings.json or .cursor/hooks.json")
    setup.add_argument("agent", choices=AGENTS, help="the agent whose settings file gets the hook")
    setup.add_argument("--user", action="store_true",
                       help="the settings file in your home directory (every project), not the project's")
    setup.add_argument("--command", default="", metavar="CMD",
                       help="the command line the hook runs (default: this selfheal by its absolute path, "
                            "then stop-gate AGENT)")


def run(args: argparse.Namespace) -> int:
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
