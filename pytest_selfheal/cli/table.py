"""Every ``selfheal`` command module by its command's name. cli/main.py imports this at the
first command that needs it; ``selfheal mcp`` never does (docs/benchmarks.md, MCP start)."""

from __future__ import annotations

from types import ModuleType

from pytest_selfheal.cli.commands import (
    apply,
    archive,
    ci,
    config,
    demo,
    fingerprint,
    flaky,
    history,
    junit,
    loop,
    mcp,
    merge,
    plan,
    prune,
    quarantine,
    reopen,
    replay,
    report,
    show,
    status,
    stop_gate,
)

COMMANDS: dict[str, ModuleType] = {module.NAME: module for module in (
    apply, archive, ci, config, demo, fingerprint, flaky, history, junit, loop, mcp, merge, plan, prune,
    quarantine, reopen, replay, report, show, status, stop_gate)}
