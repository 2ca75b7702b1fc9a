"""The store's check of a document by kind, and the words of the shipped JSON Schemas
(generated from the record declarations, ``records/schema_gen.py``) that redaction keeps."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from pytest_selfheal.names import INCIDENT_ID_PATTERN
from pytest_selfheal.records.jsondoc import FieldError
from pytest_selfheal.records.schema_gen import DOCUMENTS, document_schema

KINDS: tuple[str, ...] = ("incident", "plan", "attempt", "run_result")


def schema_filename(kind: str) -> str:
    """File name of the schema for ``kind`` (``incident`` → ``incident.schema.json``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown schema kind {kind!r} (expected one of {', '.join(KINDS)})")
    return f"{kind}.schema.json"


@lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """Every property name and enum word of the shipped schemas (``incident_id``, ``failed``,
    ``escalated``...): the package's own words, which redaction leaves alone so that a broad
    ``redaction.patterns`` entry cannot make a document break its schema."""
    words: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            properties = node.get("properties")
            if isinstance(properties, dict):
                words.update(str(name) for name in properties)
            words.update(value for value in node.get("enum", ()) if isinstance(value, str))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
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


def validate(kind: str, doc: Any) -> list[str]:
    """The first violation of the ``kind`` record's declaration by ``doc``, as a list: empty when valid."""
    schema_filename(kind)
    try:
        DOCUMENTS[kind][0].parse(doc, "")
    except FieldError as exc:
        return [str(exc)]
    return []
