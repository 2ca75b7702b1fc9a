"""A capture's plan, published with its new incident in one step (edge: files, docs/store.md).

``Store.create_incident(plan=…)`` calls :func:`publish_plan` under the store lock, once the
incident's id is chosen and before the incident folder is renamed into place: the incident
appears already ``planned``, with its plan, in fewer fsyncs than four separate writes.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

from pytest_selfheal.records.event import Event
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.vocab import IncidentStatus
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.reader import PLAN_JSON, PLAN_MD
from pytest_selfheal.store.schema import written_by_selfheal
from pytest_selfheal.store.states import check_transition

# The plan a capture publishes with its incident: built from the incident with its final id
# (the id is chosen under the lock), as (the plan, plan.md's text).
PlanBuilder = Callable[[Incident], tuple[Plan, str]]

# error_plans/.tmp_plan/: a capture's plan under construction. One fixed name: under the lock
# nobody else builds a plan, so whatever is there is a crash leftover (and error_plans/,
# which keeps every plan, is never listed).
PLAN_BUILD = ".tmp_plan"


def publish_plan(
    plans_root: Path,
    incident: Incident,
    plan: PlanBuilder,
    *,
    text: Callable[[Plan, str], str],
    redact: Callable[[str], str],
) -> tuple[list[Event], str]:
    """Build ``error_plans/<id>/`` for the new ``incident`` and rename it into place; returns
    the plan's two events for the incident's log and the text of ``plan.json``.

    Nobody reads the plan of an incident that does not exist yet, so its folder is built like
    the incident's: files fsynced in place, one folder fsync, one rename. ``text``: the
    writer's text of a plan (redacted, checked); ``redact``: its redaction of a text.
    """
    incident_id = incident.incident_id
    target = plans_root / validate_incident_id(incident_id)
    built, built_md = plan(incident)
    plan_text, plan_md = text(built, incident_id), redact(built_md)  # once: a bad plan fails before any write
    check_transition(incident_id, IncidentStatus.NEW, IncidentStatus.PLANNED)
    fsio.ensure_dir(plans_root)
    build = plans_root / PLAN_BUILD
    shutil.rmtree(build, ignore_errors=True)
    try:
        build.mkdir()
        fsio.write_new_bytes(build / PLAN_MD, plan_md.encode("utf-8"))
        fsio.write_new_bytes(build / PLAN_JSON, plan_text.encode("utf-8"))
        fsio.fsync_dir(build)
        os.rename(build, target)  # the caller checked the id free under the lock
    except BaseException as exc:
        shutil.rmtree(build, ignore_errors=True)
        if isinstance(exc, OSError):
            raise fsio.io_error("write plan", target, exc) from None
        raise
    fsio.fsync_dir(plans_root)
    # The action ids as plan.json has them (redacted as in the document).
    actions = [action.id if written_by_selfheal(action.id) else redact(action.id) for action in built.actions]
    return [
        ev.pending(ev.PLAN_GENERATED, {"actions": actions}),
        ev.pending(ev.STATUS_CHANGED, {"from": IncidentStatus.NEW, "to": IncidentStatus.PLANNED}),
    ], plan_text
