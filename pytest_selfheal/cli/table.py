"""Every ``selfheal`` command but ``mcp`` by its name. cli/main.py imports this at the first
command that needs it; ``selfheal mcp`` never does (docs/benchmarks.md, MCP start)."""

from __future__ import annotations

from pytest_selfheal.cli import ci, incidents, reports, show, tools
from pytest_selfheal.cli.options import Command

COMMANDS: dict[str, Command] = {found.name: found for module in (ci, incidents, reports, show, tools)
                                for found in vars(module).values() if isinstance(found, Command)}
