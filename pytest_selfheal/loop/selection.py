"""Which failing tests the loop may touch, from ``enabled`` and ``apply_to`` (pure)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Optional

from pytest_selfheal.loop.policy import LoopPolicy


@dataclass(frozen=True)
class LoopSelection:
    """Which failing tests the loop may verify, and whether it may run at all."""

    nodeids: tuple[str, ...]  # what the loop verifies
    excluded: tuple[str, ...]  # failing tests left out by apply_to
    refused: Optional[str]  # why the loop must not run (the driver stops with `disabled`); None = run


def loop_selection(policy: LoopPolicy, nodeids: Sequence[str], *, tdd_nodeids: Collection[str] = (),
                   unattended: bool = False, approved: bool = False) -> LoopSelection:
    """Apply ``enabled`` and ``apply_to`` to the incident's failing node ids (a ``tdd`` test
    is expected to fail until its feature exists)."""
    tdd = set(tdd_nodeids)
    keep: list[str] = []
    excluded: list[str] = []
    for nodeid in nodeids:
        allowed = policy.tdd_tasks if nodeid in tdd else policy.auto_tasks
        (keep if allowed else excluded).append(nodeid)
    refused: Optional[str] = None
    if not policy.enabled:
        refused = "the loop is disabled (ralf_lite.enabled is false)"
    elif unattended and not approved and not policy.autonomous_plans:
        refused = "unattended loops are disabled (ralf_lite.apply_to.autonomous_plans is false); pass --approve"
    elif not keep:
        refused = "every failing test is excluded by ralf_lite.apply_to (auto_tasks/tdd_tasks)"
    return LoopSelection(tuple(keep), tuple(excluded), refused)
