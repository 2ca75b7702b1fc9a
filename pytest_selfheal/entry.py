"""The loop entry: run the RALF-Lite loop on one incident, for every surface (edge).

``pytest --selfheal --selfheal-loop``, ``selfheal loop``, ``selfheal ci`` and the MCP server
all call :func:`run_incident_loop`. With a repair provider (``repair.command`` or a
``pytest_selfheal_repair`` hook implementation) the loop runs in an isolated git worktree
(repair/); without one it is verify-only (loop/). Either way the verification runs get the
hook classification rules, so they fingerprint a failure exactly like the capture did.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional

import pluggy

from pytest_selfheal import hooks
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.loop.driver import run_loop
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.repair.session import repair_loop
from pytest_selfheal.store.root import Store


def verification_root(incident: Incident, fallback: Path) -> Path:
    """Where the verification commands run: the capture's rootdir (node ids are relative
    to it) when it still exists, else ``fallback`` (the current directory)."""
    if incident.rootdir and Path(incident.rootdir).is_dir():
        return Path(incident.rootdir)
    return fallback


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
) -> Dict[str, Any]:
    """Run (or resume) the loop of ``incident_id`` to its stop and return the run result.

    The verification runs in the capture's rootdir (``cwd`` when it is gone).
    ``interactive`` (asking for approval on the terminal) and ``unattended`` default to
    whether stdin is a terminal; ``env`` is the test processes' environment (default
    ``os.environ``).
    """
    project_root = verification_root(store.read_incident(incident_id), cwd)
    if interactive is None:
        interactive = sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()
    rules = hooks.classification_rules(pluginmanager)
    if has_repair_provider(effective, pluginmanager):
        return repair_loop(
            store, incident_id, effective=effective, project_root=project_root, approve=approve,
            interactive=interactive, pluginmanager=pluginmanager, out=out, env=env, hook_rules=rules,
            unattended=unattended,
        )
    return run_loop(
        store, incident_id, effective=effective, project_root=project_root, approve=approve, out=out,
        unattended=unattended, env=env, hook_rules=rules,
    )
