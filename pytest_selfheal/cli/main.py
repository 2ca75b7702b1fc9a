"""The ``selfheal`` console script: ``mcp`` here, the other commands in the modules of
cli/table.py and cli/ci.py. Errors reach the user as one line and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import NoReturn, Optional

from pytest_selfheal import __version__
from pytest_selfheal.cli.options import Command, arg, command, commands_of, set_flag
from pytest_selfheal.config.files import is_project
from pytest_selfheal.config.settings import parse_override
from pytest_selfheal.errors import EXIT_CANCELLED, EXIT_OK, SelfhealError, UsageError
from pytest_selfheal.gate.agents import Agent, cannot_judge, hook_call, hook_output
from pytest_selfheal.mcp_server.server import build_server, operations
from pytest_selfheal.redact import default_redactor

INSTALL_HINT = "selfheal mcp needs the optional extra (Python 3.10+): pip install 'pytest-selfheal[mcp]'"


@command("mcp", "serve run_tests, status, show, loop, report and apply to a coding agent over MCP (stdio)",
         arg("--root", metavar="DIR", default=None,
             help="the project to serve (default: the current directory); pytest runs there"),
         set_flag("override a ralf_lite key for every call, e.g. --set mcp.max_chars=4000 (repeatable)"))
def mcp(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin; 2 without the extra, a bad --root or a bad --set."""
    if importlib.util.find_spec("mcp") is None:
        raise UsageError(INSTALL_HINT)
    directory = Path(args.root) if args.root else Path.cwd()
    if not directory.is_dir():
        raise UsageError(f"--root {directory}: not a directory")
    for text in args.overrides:
        parse_override(text, "--set")  # a bad one: exit 2 now
    # Outside a project (clients start servers in / or $HOME) tests run only in a root the
    # client names; --root is the user's word that the directory is the project.
    confirmed = bool(args.root) or is_project(directory.resolve())
    # A bad config file does not stop the server: the config is read at every call, so every
    # tool answers with its one-line error until it is fixed (a client shows no start-up error).
    build_server(operations(lambda: _table().Project(directory, args.overrides, confirmed=confirmed))).run("stdio")
    return 0


def _table() -> ModuleType:
    # Imported at the first need: `selfheal mcp` answers its client's first requests without
    # the other commands' modules and its operations (docs/benchmarks.md, MCP start).
    from pytest_selfheal.cli import table

    return table


# The commands of CI and the failure history: only they load the GitHub client, the CI run
# and the shared history (every other command imports cli/table.py, not cli/ci.py).
CI_COMMANDS = ("ci", "history", "flaky", "quarantine")


DESCRIPTION = (
    "Turn a red pytest run into a bounded, honest repair loop. `pytest --selfheal` captures the "
    "failing run as an incident; the RALF-Lite loop re-runs only its failing tests, lets a repair "
    "provider (an AI coding agent or a hook) change code in between, and stops on a hard rule: "
    "success, max_iterations, repeated_fingerprint, no_progress..."
)
# Every command, in the order a newcomer meets them (tests/test_entry_point.py checks that none
# is left out).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Start here", ("demo", "status", "show", "loop", "report")),
    ("Incidents", ("reopen", "apply", "plan", "archive", "prune", "replay")),
    ("CI and the failure history", ("ci", "merge", "history", "flaky", "quarantine", "junit")),
    ("Coding agents", ("mcp", "stop-gate")),
    ("Configuration and tools", ("config", "fingerprint")),
)
_HELP_WIDTH = 100


def command_names() -> list[str]:
    return sorted(name for _, names in GROUPS for name in names)


def find_command(name: str) -> Command:
    """The command ``name``; ValueError for none."""
    if name == mcp.name:
        return mcp
    if name in CI_COMMANDS:
        from pytest_selfheal.cli import ci  # only a CI or history command needs it

        return commands_of(ci)[name]
    commands: dict[str, Command] = _table().COMMANDS
    try:
        return commands[name]
    except KeyError:
        raise ValueError(f"no selfheal command {name!r}") from None


def command_overview(helps: dict[str, str]) -> str:
    """The grouped list of commands with their one-line help (``selfheal --help``'s body)."""
    width = max(map(len, helps), default=8) + 2
    lines: list[str] = []
    for title, names in GROUPS:
        lines.append(f"{title}:")
        for name in names:
            text = " ".join(helps[name].split())
            wrapped = textwrap.wrap(text, _HELP_WIDTH - width - 2) or [""]
            lines.append(f"  {name.ljust(width)}{wrapped[0]}")
            lines += [" " * (width + 2) + more for more in wrapped[1:]]
        lines.append("")
    lines.append("`selfheal COMMAND --help` shows a command's options.")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are a UsageError: one line and our usage code."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """One subparser per command (``only``: that one alone, so that running it imports no other)."""
    commands = [find_command(name) for name in ([only] if only is not None else command_names())]
    parser = _Parser(prog="selfheal", description=textwrap.fill(DESCRIPTION, _HELP_WIDTH),
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog=command_overview({c.name: c.help for c in commands}) if only is None else None)
    parser.add_argument("--version", action="version", version=f"selfheal {__version__}")
    # The commands are listed by the epilog, grouped; argparse's own list would be alphabetical.
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser,
                                help="one of the commands below")
    sub.required = True
    for found in commands:
        child = sub.add_parser(found.name, description=found.help)
        found.add_arguments(child)
        child.set_defaults(run=found.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # A stop hook's command line answers the agent whatever goes wrong, a bad argument or a
    # bug included: to Claude Code, exit 2 or a traceback would mean "block".
    hook = hook_call(words)
    try:
        # The command is the first word (global options come alone: --help, --version). A
        # command module that does not load (a broken install) raises here, where a stop hook
        # still answers.
        only = words[0] if words and words[0] in command_names() else None
        args = build_parser(only).parse_args(words)
        return int(args.run(args))
    except SelfhealError as exc:
        if hook is not None:
            return _let_the_agent_stop(hook, str(exc))
        sys.stderr.write(f"selfheal: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("selfheal: cancelled\n")
        return EXIT_CANCELLED
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if hook is None:
            raise
        return _let_the_agent_stop(hook, f"internal error ({type(exc).__name__}: {exc})")


def _let_the_agent_stop(agent: Agent, why: str) -> int:
    """A stop hook's answer when the gate did not start."""
    out, err = hook_output(agent, *cannot_judge(agent, f"selfheal stop-gate: {why}"), default_redactor().redact)
    sys.stderr.write(err)
    sys.stdout.write(out)
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
