"""``selfheal mcp``: serve this project to coding agents over the Model Context Protocol (stdio)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from pytest_selfheal.config.files import is_project
from pytest_selfheal.config.settings import parse_override
from pytest_selfheal.errors import UsageError
from pytest_selfheal.mcp_server.server import build_server, operations

NAME = "mcp"
HELP = "serve run_tests, status, show, loop, report and apply to a coding agent over MCP (stdio)"

INSTALL_HINT = "selfheal mcp needs the optional extra (Python 3.10+): pip install 'pytest-selfheal[mcp]'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", metavar="DIR", default=None,
                        help="the project to serve (default: the current directory); pytest runs there")
    parser.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                        help="override a ralf_lite key for every call, e.g. --set mcp.max_chars=4000 (repeatable)")


def run(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin; 2 without the extra, a bad --root or a bad --set
    (a bad config file is each tool's one-line error instead)."""
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
    build_server(operations(directory, args.overrides, confirmed)).run("stdio")
    return 0
