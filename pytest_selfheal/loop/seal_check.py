"""An open incident's seal at each verification (edge): the judging keys in force at its
capture, and what changed since in what decides what runs (config/seal.py).

- :func:`judged_config`: the effective config with the incident's judging keys (thresholds,
  budget, gate and verification arguments, ``enabled``) as they were at capture, and the one
  line that reports a later edit: reported, never obeyed (a reopen keeps them too).
- :func:`harness_changed`: what changed in the seal, each named; a non-empty answer stops
  the iteration with ``harness_changed`` (never ``success``).
- :func:`fresh_seal`: the seal ``selfheal reopen --new-seal`` (a person at a terminal) records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Optional

from pytest_selfheal.config.seal import (
    NOTHING_LOADED,
    Changes,
    Loaded,
    harness_changes,
    judging_changes,
    replaced_code,
    reseal,
)
from pytest_selfheal.config.settings import EffectiveConfig, judging_values, under_judging
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.seal import Seal
from pytest_selfheal.store import judging
from pytest_selfheal.store.root import Store

# The words of the line that reports an edited judging key (other surfaces pass it on).
NOT_APPLIED = "changed since the capture: not applied to incident"


def judged_config(effective: EffectiveConfig, incident: Incident) -> tuple[EffectiveConfig, Optional[str]]:
    """``effective`` under ``incident``'s judging keys, and the line naming the keys edited
    since its capture (None when none was, or the incident has no seal)."""
    if incident.seal is None:
        return effective, None
    recorded = incident.seal.judging
    changed = judging_changes(recorded, judging_values(effective))
    if not changed:
        return effective, None
    ident = incident.incident_id
    judged = under_judging(effective, recorded, f"incident {ident} (its capture)")
    keys = "config key " + ", ".join(changed) if len(changed) == 1 else "config keys " + ", ".join(changed)
    return judged, f"selfheal: incident {ident}: {keys} {NOT_APPLIED} {ident} (its capture's keys judge it)"


def harness_changed(incident: Incident, root: Path, *, store: Optional[Store] = None, plan: Optional[Plan] = None,
                    loaded: Optional[Loaded] = None, extra_code: Iterable[str] = (),
                    environ: Optional[Mapping[str, str]] = None) -> Changes:
    """What changed since ``incident``'s capture in what decides what runs, in ``root`` (the
    project, or the repair worktree the verification runs in), each named, test code and
    data apart (:class:`~pytest_selfheal.config.seal.Changes`); none without a seal.
    ``store``: the incident's, whose judging records — ``incident`` and ``plan`` as the
    caller read them for this verdict (the plan read here when not given), and the
    capture's context — are checked first (store/judging.py). ``environ``: the environment
    the verification ran with (default this process's), whose option variables are compared."""
    if store is not None and judging.edited(store.root, incident, plan or _plan_of(store, incident.incident_id),
                                             _context_of(store, incident.incident_id)):
        return Changes([], [judging.RECORDS_EDITED])
    if incident.seal is None:
        return Changes([], [])
    # Inside pytest (``loaded`` given) the installed plugin distributions are read again;
    # the loop's parent leaves that to the next run inside pytest (docs/loop.md "The seal").
    now = reseal(incident.seal, root, judging=incident.seal.judging, loaded=loaded or NOTHING_LOADED, extra_code=extra_code,
                 environ=environ, distributions=loaded is not None)
    replaced = replaced_code(incident.seal, root, loaded) if loaded is not None else []
    changes = harness_changes(incident.seal, now, root)
    return Changes(changes.tests, changes.harness + replaced)


def _plan_of(store: Store, incident_id: str) -> Optional[Plan]:
    return store.read_plan(incident_id) if store.has_plan(incident_id) else None


def _context_of(store: Store, incident_id: str) -> Optional[RunContext]:
    try:
        return store.read_context(incident_id)
    except SelfhealError:
        return None  # gone or unreadable: compared with the kept digest, an edit


def take_fresh_seal(store: Store, incident_id: str, root: Path, effective: EffectiveConfig) -> None:
    """After a person confirmed it at a terminal (``selfheal reopen --new-seal``): the
    incident's seal taken again in ``root`` with today's judging keys; what changed before
    is accepted from now on. Nothing for an incident captured without a seal."""
    seal = fresh_seal(store.read_incident(incident_id), root, effective)
    if seal is not None:
        judging.accept(store.root, store.update_incident(incident_id, seal=seal.to_json()), _plan_of(store, incident_id),
                       _context_of(store, incident_id))


def fresh_seal(incident: Incident, root: Path, effective: EffectiveConfig) -> Optional[Seal]:
    """The seal of what ``incident``'s seal covers as it is now, with today's judging keys
    (``selfheal reopen --new-seal``); None for an incident captured without one."""
    if incident.seal is None:
        return None
    return reseal(incident.seal, root, judging=judging_values(effective))


__all__ = ["NOT_APPLIED", "fresh_seal", "take_fresh_seal", "harness_changed", "judged_config"]
