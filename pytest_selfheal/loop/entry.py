"""Run the RALF-Lite loop on one incident, with or without a repair provider (edge).

One entry point for ``selfheal loop``, ``pytest --selfheal --selfheal-loop`` and
``selfheal ci``: with a repair provider (``repair.command`` or a
``pytest_selfheal_repair`` hook implementation) the loop runs in an isolated git
worktree (repair.py); without one it is verify-only (loop.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional

if TYPE_CHECKING:
    import pluggy

    from pytest_selfheal.config.settings import EffectiveConfig
    from pytest_selfheal.store.root import Store


def has_repair_provider(effective: "EffectiveConfig", pluginmanager: Optional["pluggy.PluginManager"]) -> bool:
    """True when a repair command is configured or a plugin implements the repair hook."""
    if effective.get("repair.command"):
        return True
    if pluginmanager is None:
        return False
    hook = getattr(pluginmanager.hook, "pytest_selfheal_repair", None)
    return bool(hook is not None and hook.get_hookimpls())


def hook_classification_rules(pluginmanager: Optional["pluggy.PluginManager"]) -> List[Mapping[str, Any]]:
    """Classification rules contributed by ``pytest_selfheal_classification_rules`` implementations.

    Verification must classify (and so fingerprint) exactly like the capture did.
    """
    hook = getattr(pluginmanager.hook, "pytest_selfheal_classification_rules", None) if pluginmanager else None
    rules: List[Mapping[str, Any]] = []
    if hook is not None:
        for contributed in hook():
            rules.extend(contributed or [])
    return rules


def run_incident_loop(
    store: "Store",
    incident_id: str,
    *,
    effective: "EffectiveConfig",
    project_root: Path,
    approve: bool = False,
    out: Optional[Callable[[str], None]] = None,
    pluginmanager: Optional["pluggy.PluginManager"] = None,
    interactive: Optional[bool] = None,
) -> Dict[str, Any]:
    """Run the loop to its stop and return the run result."""
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stdout.isatty()
    if has_repair_provider(effective, pluginmanager):
        from pytest_selfheal.repair.session import repair_loop

        return repair_loop(
            store,
            incident_id,
            effective=effective,
            project_root=project_root,
            approve=approve,
            interactive=interactive,
            pluginmanager=pluginmanager,
            out=out,
        )
    from pytest_selfheal.loop.driver import run_loop

    return run_loop(
        store,
        incident_id,
        effective=effective,
        project_root=project_root,
        approve=approve,
        out=out,
        hook_rules=hook_classification_rules(pluginmanager),
    )
