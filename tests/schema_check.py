"""Test helper: validate documents against the shipped JSON Schemas with ``jsonschema``.

Other test modules use it for every file they write::

    from schema_check import assert_valid, assert_file_valid

    assert_valid("attempt", attempt_doc)
    assert_file_valid("run_result", store.runs_dir(incident_id) / "run_result.json")

Kinds: ``incident``, ``plan``, ``attempt``, ``run_result`` (pytest_selfheal/schemas/).
``jsonschema`` is a test-only dependency; the runtime uses ``pytest_selfheal.records.schema_gen``.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_selfheal.records.schema_gen import KINDS, schema_filename

_VALIDATORS: dict[str, Any] = {}


def load_schema(kind: str) -> dict[str, Any]:
    """A fresh copy of the shipped JSON Schema for ``kind`` (as the wheel ships it)."""
    ref = resources.files("pytest_selfheal").joinpath("schemas").joinpath(schema_filename(kind))
    loaded: dict[str, Any] = json.loads(ref.read_text(encoding="utf-8"))
    return loaded


def validator(kind: str) -> Any:
    """A cached ``jsonschema`` validator for the shipped ``kind`` schema."""
    if kind not in _VALIDATORS:
        if kind not in KINDS:
            raise ValueError(f"unknown schema kind {kind!r} (expected one of {', '.join(KINDS)})")
        schema = load_schema(kind)
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _VALIDATORS[kind] = cls(schema)
    return _VALIDATORS[kind]


def jsonschema_errors(kind: str, doc: Any) -> list[str]:
    """Every violation ``jsonschema`` finds, as ``"<path>: <message>"`` strings."""
    errors = sorted(validator(kind).iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(document)'}: {e.message}" for e in errors]


def assert_valid(kind: str, doc: Any) -> None:
    """Fail the test (with every violation listed) unless ``doc`` fits the ``kind`` schema."""
    errors = jsonschema_errors(kind, doc)
    if errors:
        pytest.fail(f"{kind} document does not fit {kind}.schema.json:\n  " + "\n  ".join(errors))


def assert_file_valid(kind: str, path: Path) -> Any:
    """Parse the JSON file at ``path``, ``assert_valid`` it, and return the document."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    assert_valid(kind, doc)
    return doc
