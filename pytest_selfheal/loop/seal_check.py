"""An open incident's seal at each verification (edge): the judging keys in force at its
capture (a later edit is reported, never obeyed), what changed since in what decides what
runs (config/seal.py), and a new seal, which is no more than a capture would be.
"""

from __future__ import annotations

import filecmp
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Optional

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.analysis.rules import rules_for_run
from pytest_selfheal.config.seal import (
    NOTHING_LOADED,
    Changes,
    Loaded,
    harness_changes,
    judging_changes,
    replaced_code,
    reseal,
    sha256,
)
from pytest_selfheal.config.settings import EffectiveConfig, judging_values, under_judging
from pytest_selfheal.errors import RefusedError
from pytest_selfheal.loop.regression import (
    BASE_ARGV,
    REGRESSION_SELECTION,
    captured_code,
    project_files,
)
from pytest_selfheal.loop.state import read_context
from pytest_selfheal.loop.verify import observe, run_selection, start_dir, trusted_options
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.models import FAILING_OUTCOMES, OUTCOME_MISSING
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.seal import Seal
from pytest_selfheal.store import judging
from pytest_selfheal.store.root import Store

# The words of the line that reports an edited judging key (other surfaces pass it on).
NOT_APPLIED = "changed since the capture: not applied to incident"


def judged_config(effective: EffectiveConfig, incident: Incident) -> tuple[EffectiveConfig, Optional[str]]:
    """``effective`` under ``incident``'s judging keys, and the line naming those edited since (None: none was)."""
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
                    context: Optional[RunContext] = None, loaded: Optional[Loaded] = None,
                    extra_code: Iterable[str] = (), environ: Optional[Mapping[str, str]] = None) -> Changes:
    """What changed since ``incident``'s capture in what decides what runs, in ``root``, each
    named, test code and data apart. ``store``: the incident's, whose judging records (with
    ``plan`` and ``context``, read when not given) are checked first. ``environ``: the
    verification's environment, whose option variables count."""
    if store is not None and judging.edited(store.root, incident, plan or _plan_of(store, incident.incident_id),
                                             context or read_context(store, incident.incident_id)):
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


def take_fresh_seal(store: Store, incident_id: str, root: Path, effective: EffectiveConfig) -> None:
    """``selfheal reopen --new-seal``, confirmed by a person: the seal taken again with today's judging keys."""
    seal = fresh_seal(store.read_incident(incident_id), root, effective)
    if seal is not None:
        judging.accept(store.root, store.update_incident(incident_id, seal=seal.to_json()), _plan_of(store, incident_id),
                       read_context(store, incident_id))
        judging.forget_stop(root, incident_id)


def fresh_seal(incident: Incident, root: Path, effective: EffectiveConfig) -> Optional[Seal]:
    if incident.seal is None:
        return None
    return reseal(incident.seal, root, judging=judging_values(effective))


# Folders whose files never take part in a test run of the project: tools', caches, environments.
_NOT_THE_PROJECT = frozenset({"__pycache__", "node_modules", "site-packages", "dist-packages"})


def _files(tree: Path, skip: Path) -> set[str]:
    return {rel for rel in project_files(tree, [skip], _NOT_THE_PROJECT) if (tree / rel).is_file()}


def _rebuild(tree: Path, base: Path, incident: Incident, sealed: Iterable[str], skip: Path, dirty: bool) -> None:
    """Make ``base`` (the capture's commit) the captured code under what is in ``tree`` now:
    every file as it is now but the code under repair, which is as the capture saw it (after
    a ``dirty`` capture, the seal's recorded bytes; a module that has neither is refused)."""
    harness = set(sealed)
    recorded = incident.seal.test_aware if incident.seal is not None and dirty else {}

    def is_code(rel: str) -> bool:
        return rel.endswith(".py") and not is_test_file(rel) and rel not in harness

    now = _files(tree, skip)
    for rel in sorted(now | _files(base, skip)):
        source, target = tree / rel, base / rel
        if is_code(rel):
            captured = recorded.get(rel, "").split(" ", 1)[0]
            if not captured or (target.is_file() and sha256(target.read_bytes()) == captured):
                continue  # the commit's (a module the capture did not run: the commit's too)
            if rel in now and sha256(source.read_bytes()) == captured:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
                continue
            raise RefusedError(f"no new seal: the captured code of {rel} cannot be rebuilt (changed since a "
                               "capture that held uncommitted changes)")
        if rel not in now:
            target.unlink()
        elif not target.is_file() or not filecmp.cmp(source, target, shallow=False):
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)


def passing_without_the_code(store: Store, incident: Incident, root: Path, effective: EffectiveConfig) -> dict[str, str]:
    """The incident's failing tests (with their outcome) that do not fail on the captured code
    under what is in ``root`` now: a new seal would accept a cheat, as no capture would.
    ``RefusedError`` when the captured code cannot be rebuilt."""
    context = read_context(store, incident.incident_id)
    commit = context.git.commit if context is not None and context.git is not None else None
    dirty = context is None or context.git is None or context.git.dirty is not False
    plan = _plan_of(store, incident.incident_id)
    selection = list(dict.fromkeys(n for action in (plan.actions if plan else ()) for n in action.nodeids))
    selection = selection or list(incident.nodeids)
    settings = effective.settings.verification
    with tempfile.TemporaryDirectory(prefix="selfheal-new-seal-") as tmp, \
            captured_code(root, commit, Path(tmp)) as base:
        if base is None:
            raise RefusedError("no new seal: the captured code cannot be checked out (no git commit recorded at "
                               "the capture), so the failing tests cannot be run on it")
        now = fresh_seal(incident, root, effective)
        _rebuild(root, base, incident, now.files if now is not None else (), Path(store.root).resolve(), dirty)
        ran = run_selection([*BASE_ARGV, *selection, *trusted_options(incident, effective)], cwd=base,
                     junit_path=Path(tmp) / "new_seal.xml", timeout_seconds=float(settings.timeout_seconds),
                     invocation_dir=start_dir(base, incident.invocation_dir),
                     selection_file=store.selection_file(incident.incident_id, REGRESSION_SELECTION))
        outcomes, _ = observe(ran, selection, rules=rules_for_run(effective.settings.classification_rules, ()),
                              redactor=effective.redactor)
    return {n: outcomes.get(n, OUTCOME_MISSING) for n in selection if outcomes.get(n) not in FAILING_OUTCOMES}
