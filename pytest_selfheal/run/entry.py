"""The loop entry every surface calls (edge): with a repair provider the loop runs in an
isolated git worktree (repair/), without one it is verify-only (loop/). Either way the
verification runs get the hook classification rules, so they fingerprint a failure exactly
like the capture did."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Optional

import pluggy

from pytest_selfheal import hooks
from pytest_selfheal.analysis.rules import parse_hook_rules
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.loop.driver import run_loop
from pytest_selfheal.loop.state import LoopRun
from pytest_selfheal.loop.verify import verification_root
from pytest_selfheal.records.run_result import LoopResult
from pytest_selfheal.store.root import Store


def has_repair_provider(effective: EffectiveConfig, pluginmanager: Optional[pluggy.PluginManager]) -> bool:
    """True when a repair command is configured or a plugin implements the repair hook."""
    return bool(effective.settings.repair.command) or bool(hooks.repair_hook_names(pluginmanager))


def run_incident_loop(
    store: Store,
    incident_id: str,
    *,
    effective: EffectiveConfig,
    cwd: Path,
    pluginmanager: Optional[pluggy.PluginManager],
    approve: bool = False,
    out: Optional[Callable[[str], None]] = None,
    interactive: Optional[bool] = None,
    unattended: Optional[bool] = None,
    env: Optional[Mapping[str, str]] = None,
    verify_only: bool = False,
    shown: bool = False,
    state: Optional[LoopRun] = None,
) -> LoopResult:
    """Run (or resume) the loop of ``incident_id`` to its stop and return its result.

    ``cwd``: the project root; the verification runs there, or in the capture's rootdir when
    that lies inside it. ``interactive`` and ``unattended`` default to whether stdin is a
    terminal. ``verify_only`` runs no repair provider even when one is configured (the MCP
    ``loop`` tool: the agent calling it is the one that repairs). ``shown``: the caller shows
    the plan's suspects afterwards, so a verify-only loop ranks them too. ``state``: the
    incident's records as the caller holds them, not read again; the loop writes through it.
    """
    # Read once: the loop state holds it from here on.
    incident = state.incident if state is not None else store.read_incident(incident_id)
    project_root = verification_root(incident, cwd, store.root)
    recorded = incident.rootdir
    if out is not None and recorded and Path(recorded).is_dir() and Path(recorded).resolve() != project_root:
        out(f"selfheal: warning: incident {incident_id} names rootdir {recorded}, outside the project root; "
            f"verifying in {project_root}")
    if interactive is None:
        interactive = sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()
    rules = parse_hook_rules(hooks.classification_rules(pluginmanager))
    if not verify_only and has_repair_provider(effective, pluginmanager):
        # Imported only when a provider runs: the repair side (providers, worktrees, patches,
        # approval) is never loaded by a verify-only loop, the common case (docs/benchmarks.md).
        from pytest_selfheal.repair.session import repair_loop

        return repair_loop(
            store, incident_id, effective=effective, project_root=project_root, approve=approve,
            interactive=interactive, pluginmanager=pluginmanager, out=out, env=env, hook_rules=rules,
            unattended=unattended, incident=incident, state=state,
        )
    return run_loop(
        store, incident_id, effective=effective, project_root=project_root, approve=approve, out=out,
        unattended=unattended, env=env, hook_rules=rules, incident=incident, shown=shown, state=state,
    )
