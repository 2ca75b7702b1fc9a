"""The shipped JSON Schemas (``pytest_selfheal/schemas/``), generated from the record
declarations that ``from_json`` checks, so the two never disagree; the store's check of a
document by kind, and the schemas' words that redaction keeps. Pure."""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from pytest_selfheal.names import INCIDENT_ID_PATTERN
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import FieldError, JsonRecord, Schema
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
KINDS: tuple[str, ...] = tuple(DOCUMENTS)


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


def schema_filename(kind: str) -> str:
    """File name of the schema for ``kind`` (``incident`` → ``incident.schema.json``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown schema kind {kind!r} (expected one of {', '.join(KINDS)})")
    return f"{kind}.schema.json"


def validate(kind: str, doc: Any) -> list[str]:
    """The first violation of the ``kind`` record's declaration by ``doc``, as a list: empty when valid."""
    schema_filename(kind)
    try:
        DOCUMENTS[kind][0].parse(doc, "")
    except FieldError as exc:
        return [str(exc)]
    return []


@lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """Every property name and enum word of the shipped schemas (``incident_id``, ``failed``,
    ``escalated``...): the package's own words, which redaction leaves alone so that a broad
    ``redaction.patterns`` entry cannot make a document break its schema."""
    words: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            words.update(str(name) for name in node.get("properties", ()))
            words.update(value for value in node.get("enum", ()) if isinstance(value, str))
            node = list(node.values())
        if isinstance(node, list):
            for value in node:
                walk(value)

    for kind in KINDS:
        walk(document_schema(kind))
    return frozenset(words)


# The package's own generated values: incident ids and ISO timestamps, never a secret.
_OWN_VALUE = re.compile(
    INCIDENT_ID_PATTERN.strip("^$") + r"|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,15}(?:Z|[+-][0-9]{2}:[0-9]{2})",
)


def written_by_selfheal(text: str) -> bool:
    """Whether ``text`` is the package's own word in a document (a schema's property name or
    enum word, an incident id, a timestamp): redaction leaves it alone."""
    return text in vocabulary() or _OWN_VALUE.fullmatch(text) is not None
