"""The JSON Schemas that ship in ``pytest_selfheal/schemas/`` and a tiny validator for them.

``jsonschema`` is a test-only dependency, so the runtime checks its subset of the
standard here: ``type`` (a name or a list of names), ``required``, ``properties``,
``additionalProperties`` (bool or schema), ``enum``, ``items`` (one schema), ``minimum``,
``maximum`` and ``pattern``; ``$schema``, ``$id``, ``title`` and ``description`` are
annotations. A schema using any other keyword is refused (``ValueError``) so the shipped
files can never silently mean more than this validator checks. tests/test_schemas.py
checks that this validator and ``jsonschema`` agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Optional

from pytest_selfheal.errors import InputError, one_line
from pytest_selfheal.records.jsondoc import type_name

KINDS: tuple[str, ...] = ("incident", "plan", "attempt", "run_result")

SUPPORTED_KEYWORDS = frozenset(
    {"type", "required", "properties", "additionalProperties", "enum", "items", "minimum", "maximum", "pattern"}
)
ANNOTATIONS = frozenset({"$schema", "$id", "title", "description"})


def schema_filename(kind: str) -> str:
    """File name of the schema for ``kind`` (``incident`` → ``incident.schema.json``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown schema kind {kind!r} (expected one of {', '.join(KINDS)})")
    return f"{kind}.schema.json"


@cache
def _load_text(kind: str) -> str:
    ref = resources.files("pytest_selfheal").joinpath("schemas").joinpath(schema_filename(kind))
    return ref.read_text(encoding="utf-8")


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
        walk(load_schema(kind))
    return frozenset(words)


# The package's own generated values: incident ids and ISO timestamps, never a secret.
_OWN_VALUE = re.compile(
    r"incident_[0-9]{8}_[0-9]{6}_[A-Za-z0-9_-]{1,40}|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{8,15}(?:Z|[+-][0-9]{2}:[0-9]{2})",
    re.ASCII,
)


def ours(text: str) -> bool:
    """True for a string the package itself wrote into a document: a schema's property name
    or enum word (:func:`vocabulary`), an incident id, a timestamp. Redaction leaves these
    alone (``Redactor.redact_obj``'s ``keep``)."""
    return text in vocabulary() or _OWN_VALUE.fullmatch(text) is not None


def load_schema(kind: str) -> dict[str, Any]:
    """A fresh copy of the shipped JSON Schema for ``kind``."""
    data = json.loads(_load_text(kind))
    if not isinstance(data, dict):  # pragma: no cover - the shipped files are objects
        raise ValueError(f"schema {kind} is not a JSON object")
    return data


def _type_matches(name: str, value: Any) -> bool:
    # Same semantics as jsonschema's draft 2020-12 type checker: bool is not a number,
    # and a float with an integral value counts as an integer.
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    raise ValueError(f"unsupported JSON Schema type {name!r}")


def _same(a: Any, b: Any) -> bool:
    # enum equality as in JSON: true is not 1.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else bool(a == b)


def _where(path: str) -> str:
    return f"field {path}: " if path else ""


def iter_errors(schema: Mapping[str, Any], doc: Any, path: str = "") -> list[str]:
    """Every violation of ``schema`` by ``doc`` as ``"field <path>: <problem>"`` strings."""
    unknown = set(schema) - SUPPORTED_KEYWORDS - ANNOTATIONS
    if unknown:
        raise ValueError(f"unsupported JSON Schema keyword(s) {sorted(unknown)} at {_where(path) or 'the top level'}")
    errors: list[str] = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_matches(name, doc) for name in names):
            errors.append(f"{_where(path)}expected {' or '.join(names)}, got {type_name(doc)}")
            return errors  # other keywords would only repeat the same problem
    if "enum" in schema and not any(_same(doc, option) for option in schema["enum"]):
        shown = ", ".join("null" if o is None else str(o) for o in schema["enum"])
        errors.append(f"{_where(path)}{one_line(repr(doc), 80)} is not one of {shown}")
    if isinstance(doc, (int, float)) and not isinstance(doc, bool):
        if "minimum" in schema and doc < schema["minimum"]:
            errors.append(f"{_where(path)}{doc} is less than the minimum {schema['minimum']}")
        if "maximum" in schema and doc > schema["maximum"]:
            errors.append(f"{_where(path)}{doc} is more than the maximum {schema['maximum']}")
    if isinstance(doc, str) and "pattern" in schema and re.search(schema["pattern"], doc) is None:
        errors.append(f"{_where(path)}{one_line(repr(doc), 80)} does not match {schema['pattern']}")
    if isinstance(doc, dict):
        for key in schema.get("required", []):
            if key not in doc:
                errors.append(f"field {path + '.' if path else ''}{key}: required field missing")
        properties: Mapping[str, Any] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, value in doc.items():
            child = f"{path}.{key}" if path else str(key)
            if key in properties:
                errors.extend(iter_errors(properties[key], value, child))
            elif extra is False:
                errors.append(f"field {child}: unexpected field")
            elif isinstance(extra, dict):
                errors.extend(iter_errors(extra, value, child))
    if isinstance(doc, list) and "items" in schema:
        for index, item in enumerate(doc):
            errors.extend(iter_errors(schema["items"], item, f"{path}[{index}]"))
    return errors


Check = Callable[[Any], bool]


def compile_check(schema: Mapping[str, Any]) -> Check:
    """``schema`` as one predicate, true exactly when :func:`iter_errors` finds nothing.

    The keywords are read once, not at every node of every document: a capture validates
    an incident of many failures, and the predicate is several times faster than walking
    the schema (docs/benchmarks.md). The error messages still come from
    :func:`iter_errors`, which runs only on an invalid document.
    """
    unknown = set(schema) - SUPPORTED_KEYWORDS - ANNOTATIONS
    if unknown:
        raise ValueError(f"unsupported JSON Schema keyword(s) {sorted(unknown)}")
    checks: list[Check] = []
    if "type" in schema:
        checks.append(_type_check(tuple(schema["type"] if isinstance(schema["type"], list) else [schema["type"]])))
    if "enum" in schema:
        options = tuple(schema["enum"])
        checks.append(lambda doc: any(_same(doc, option) for option in options))
    # `not <`, `not >`: exactly the walk's test (a NaN passes both, as there).
    if "minimum" in schema:
        low = schema["minimum"]
        checks.append(lambda doc: not isinstance(doc, (int, float)) or isinstance(doc, bool) or not doc < low)
    if "maximum" in schema:
        high = schema["maximum"]
        checks.append(lambda doc: not isinstance(doc, (int, float)) or isinstance(doc, bool) or not doc > high)
    if "pattern" in schema:
        search = re.compile(schema["pattern"]).search
        checks.append(lambda doc: not isinstance(doc, str) or search(doc) is not None)
    if "required" in schema or "properties" in schema or "additionalProperties" in schema:
        checks.append(_object_check(schema))
    if "items" in schema:
        item = compile_check(schema["items"])
        checks.append(lambda doc: not isinstance(doc, list) or all(item(value) for value in doc))
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda doc: first(doc) and second(doc)
    return lambda doc: all(check(doc) for check in checks)


# Types whose check is one isinstance (bool is not an int here: "boolean" is its own type).
_PLAIN_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def _type_check(names: tuple[str, ...]) -> Check:
    for name in names:
        _type_matches(name, None)  # an unknown type name is refused when compiling, as when walking
    if set(names) <= set(_PLAIN_TYPES) | {"null"}:
        types = tuple(_PLAIN_TYPES[n] for n in names if n != "null")
        if "null" in names:
            return lambda doc: doc is None or isinstance(doc, types)
        return lambda doc: isinstance(doc, types)
    return lambda doc: any(_type_matches(name, doc) for name in names)


def _object_check(schema: Mapping[str, Any]) -> Check:
    required = tuple(schema.get("required", ()))
    properties = {key: compile_check(child) for key, child in schema.get("properties", {}).items()}
    extra = schema.get("additionalProperties", True)
    other: Optional[Check] = compile_check(extra) if isinstance(extra, dict) else None

    def check(doc: Any) -> bool:
        if not isinstance(doc, dict):
            return True
        if any(key not in doc for key in required):
            return False
        for key, value in doc.items():
            known = properties.get(key)
            if known is not None:
                if not known(value):
                    return False
            elif extra is False or (other is not None and not other(value)):
                return False
        return True

    return check


def validate(kind: str, doc: Any) -> list[str]:
    """Violations of the shipped ``kind`` schema by ``doc`` (an empty list when valid)."""
    if _cached_check(kind)(doc):
        return []
    return iter_errors(_cached_schema(kind), doc)


@cache
def _cached_check(kind: str) -> Check:
    return compile_check(_cached_schema(kind))


@cache
def _cached_schema(kind: str) -> Mapping[str, Any]:
    return load_schema(kind)


def ensure_valid(kind: str, doc: Any, source: str) -> None:
    """Raise a one-line ``InputError`` ``"<source>: invalid <kind>: field <path>: <problem>"`` if ``doc`` is invalid."""
    problems = validate(kind, doc)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(one_line(f"{source}: invalid {kind}: {problems[0]}{more}"))
