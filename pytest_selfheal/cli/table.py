"""Every ``selfheal`` command but ``mcp`` and those of cli/ci.py by its name, and the MCP
server's operations. cli/main.py imports this at the first command (or tool call of ``selfheal
mcp``) that needs it (docs/benchmarks.md, MCP start)."""

from __future__ import annotations

from pytest_selfheal.cli import incidents, reports, show, tools
from pytest_selfheal.cli.options import Command, commands_of
from pytest_selfheal.mcp_server.tools import Project as Project

COMMANDS: dict[str, Command] = commands_of(incidents, reports, show, tools)
