"""The shipped JSON Schemas (``pytest_selfheal/schemas/``), generated from the record
declarations that ``from_json`` checks, so the two never disagree. Pure."""

from __future__ import annotations

import json

from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import JsonRecord, Schema
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult

_TYPED = "contract fields required, extensions (docs/store.md) optional but typed."
# kind -> (record, title, description)
DOCUMENTS: dict[str, tuple[type[JsonRecord], str, str]] = {
    "incident": (
        Incident,
        "incident.json",
        "error_inbox/<incident_id>/incident.json. Contract fields are required; "
        "extra fields are allowed and typed when known.",
    ),
    "plan": (Plan, "plan.json", "error_plans/<incident_id>/plan.json. Extra fields are allowed."),
    "attempt": (Attempt, "attempt_XX.json", f"error_runs/<incident_id>/attempt_XX.json: {_TYPED}"),
    "run_result": (RunResult, "run_result.json", f"error_runs/<incident_id>/run_result.json: {_TYPED}"),
}


def document_schema(kind: str) -> Schema:
    record, title, description = DOCUMENTS[kind]
    head: Schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:pytest-selfheal:schema:{kind}",
        "title": title,
        "description": description,
    }
    return {**head, **record.schema()}


def schema_text(kind: str) -> str:
    return json.dumps(document_schema(kind), indent=2, ensure_ascii=False) + "\n"
