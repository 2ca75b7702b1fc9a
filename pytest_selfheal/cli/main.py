"""The ``selfheal`` console script.

Each subcommand is a module in ``pytest_selfheal.cli.commands`` exposing ``NAME``, ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``; they are discovered, so adding a
command never touches this file. Errors reach the user as one line and an exit code
(docs/exit-codes.md), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from types import ModuleType
from typing import List, Optional, Sequence

from pytest_selfheal import __version__
from pytest_selfheal.cli import commands
from pytest_selfheal.errors import EXIT_CANCELLED, EXIT_USAGE, SelfhealError


def _command_modules() -> List[ModuleType]:
    found = []
    for info in pkgutil.iter_modules(commands.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            found.append(module)
    return sorted(found, key=lambda m: str(m.NAME))


class _Parser(argparse.ArgumentParser):
    """argparse that exits with our usage code and a one-line message."""

    def error(self, message: str) -> "NoReturn":  # type: ignore[name-defined]  # noqa: F821
        self.exit(EXIT_USAGE, f"selfheal: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, one subparser per discovered command."""
    parser = _Parser(prog="selfheal", description="Incidents, fingerprints and the RALF-Lite loop.")
    parser.add_argument("--version", action="version", version=f"selfheal {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in _command_modules():
        child = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(child)
        child.set_defaults(_run=module.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point: parse, run, and turn every known error into one line and an exit code."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        return int(args._run(args))
    except SelfhealError as exc:
        sys.stderr.write(f"selfheal: error: {exc}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("selfheal: cancelled\n")
        return EXIT_CANCELLED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
