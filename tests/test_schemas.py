"""The shipped JSON Schemas: well-formed, agree with the runtime validator, accept the
seed contract's examples and refuse broken documents."""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_check import assert_valid, jsonschema_errors, load_schema

import pytest_selfheal
from pytest_selfheal.errors import InputError
from pytest_selfheal.records import schema_gen as schema
from pytest_selfheal.records.schema_gen import DOCUMENTS, schema_text

ID = "incident_20260217_120000_run_abc"
TS = "2026-02-17T03:00:00+00:00"

# The seed contract's examples (error automation contract), verbatim.
INCIDENT: dict[str, Any] = {
    "incident_id": ID,
    "status": "new",
    "created_at": TS,
    "updated_at": TS,
    "run_id": "run_20260217_115959_123456",
    "year": 2026,
    "month": 1,
    "ym": "2026-01",
    "step": "amazon_download",
    "failure_class": "transient",
    "message": "Network timeout during receipt download",
    "error_signature": "transient | amazon_download | Network timeout during receipt download",
}
PLAN: dict[str, Any] = {
    "incident_id": ID,
    "generated_at": "2026-02-17T03:15:00+00:00",
    "summary": "Short problem summary",
    "root_cause_hypotheses": [{"id": "H1", "confidence": "medium", "reason": "Selector changed in provider page"}],
    "actions": [
        {
            "id": "A1",
            "title": "Adjust selector",
            "priority": "P0",
            "risk": "low",
            "target_paths": ["skills/x/scripts/provider_download_chatgpt.mjs"],
            "verification": ["python -m pytest -q tests/test_provider_download_orchestrator.py"],
        }
    ],
    "verification_commands": ["python -m pytest -q tests/test_run_core_pipeline.py"],
    "done_criteria": ["Target error no longer reproduces", "Listed verification commands pass"],
}
ATTEMPT: dict[str, Any] = {
    "incident_id": ID,
    "iteration": 1,
    "started_at": "2026-02-17T03:20:00+00:00",
    "finished_at": "2026-02-17T03:25:00+00:00",
    "actions_applied": ["A1"],
    "verification_commands": ["python -m pytest -q tests/test_provider_download_orchestrator.py"],
    "verification_passed": False,
    "result": "continue",
    "error_signature": "selector_not_found",
}
RUN_RESULT: dict[str, Any] = {
    "incident_id": ID,
    "final_status": "resolved",
    "loops_used": 3,
    "runtime_minutes": 18,
    "same_error_repeats": 1,
    "archived_to": f"error_archive/resolved/{ID}",
}

# Documents using every extension field of docs/architecture.md.
INCIDENT_FULL = dict(
    INCIDENT,
    failures=[
        {
            "nodeid": "tests/test_a.py::test_x",
            "test": "tests.test_a::test_x",
            "outcome": "failed",
            "fingerprint": "ab12cd34ef56",
            "signature": "TEST_ASSERTION | tests.test_a::test_x | assert 1 == 2",
            "scheme": 1,
            "failure_type": "TEST_ASSERTION",
            "code_fixable": True,
            "transient": False,
            "failure_class": "deterministic",
            "message": "assert 1 == 2",
            "target_paths": ["src/a.py"],
        },
        {"nodeid": None, "test": "t", "outcome": "error"},
    ],
    fingerprints=["ab12cd34ef56"],
    nodeids=["tests/test_a.py::test_x"],
    rootdir="/repo",
    counts={"failed": 1},
)
ATTEMPT_FULL = dict(
    ATTEMPT,
    mode="verify",
    stop_reason=None,
    outcomes={"tests/test_a.py::test_x": "failed", "tests/test_a.py::test_y": "missing"},
    failures=[{"nodeid": "tests/test_a.py::test_x", "test": "t", "fingerprint": "f", "signature": "s", "failure_type": "TEST_ASSERTION"}],
    new_failures=[],
    fingerprint_changed=None,
    progress=False,
    progress_reasons=["fingerprint_changed"],
    diff_hash=None,
    exit_code=1,
    duration_seconds=1.5,
    timed_out=False,
    repair={"provider": "command", "result": "diff", "files_changed": ["src/a.py"], "patch": "attempt_01.patch"},
)
RUN_RESULT_FULL = dict(
    RUN_RESULT,
    final_status="escalated",
    archived_to=None,
    runtime_minutes=0.25,
    stop_reason="repeated_fingerprint",
    flaky_tests=[],
    tests_fixed=["tests/test_a.py::test_y"],
    fingerprints_per_iteration=[["ab12"], "cd34", None, []],
    decision_point={"reason": "repeated_fingerprint", "message": "m", "options": [{"id": "retry"}, {"id": "x"}], "context": {}},
    handoff={"iterations": 3, "fingerprints_per_iteration": [["ab12"]], "fixed": [], "recommended_next_action": "look"},
    effective_config={"max_iterations": 3},
)

GOOD: list[tuple[str, dict[str, Any]]] = [
    ("incident", INCIDENT),
    ("incident", INCIDENT_FULL),
    ("incident", dict(INCIDENT, status="plan_proposed", created_at="2026-02-17T03:00:00.123456+00:00")),
    ("plan", PLAN),
    ("plan", dict(PLAN, actions=[], root_cause_hypotheses=[], extra={"anything": 1})),
    ("attempt", ATTEMPT),
    ("attempt", ATTEMPT_FULL),
    ("attempt", dict(ATTEMPT, error_signature=None, result="stop", stop_reason="success", repair=None)),
    ("run_result", RUN_RESULT),
    ("run_result", RUN_RESULT_FULL),
    ("run_result", dict(RUN_RESULT, final_status="replan_requested", archived_to=None, decision_point=None, handoff=None)),
]


def _without(doc: dict[str, Any], key: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    del out[key]
    return out


BAD: list[tuple[str, str, Any]] = [
    ("incident", "not an object", [INCIDENT]),
    ("incident", "missing step", _without(INCIDENT, "step")),
    ("incident", "missing error_signature", _without(INCIDENT, "error_signature")),
    ("incident", "status unknown", dict(INCIDENT, status="done")),
    ("incident", "year as string", dict(INCIDENT, year="2026")),
    ("incident", "year as bool", dict(INCIDENT, year=True)),
    ("incident", "month 13", dict(INCIDENT, month=13)),
    ("incident", "month 0", dict(INCIDENT, month=0)),
    ("incident", "ym shape", dict(INCIDENT, ym="2026/01")),
    ("incident", "Z timestamp", dict(INCIDENT, created_at="2026-02-17T03:00:00Z")),
    ("incident", "local offset", dict(INCIDENT, updated_at="2026-02-17T03:00:00+09:00")),
    ("incident", "traversal id", dict(INCIDENT, incident_id="../../etc")),
    ("incident", "message null", dict(INCIDENT, message=None)),
    ("incident", "failures not a list", dict(INCIDENT, failures={"a": 1})),
    ("incident", "failure with bad type", dict(INCIDENT, failures=[{"failure_type": "NOPE"}])),
    ("incident", "failure code_fixable string", dict(INCIDENT, failures=[{"code_fixable": "yes"}])),
    ("incident", "fingerprints of ints", dict(INCIDENT, fingerprints=[1, 2])),
    ("plan", "missing actions", _without(PLAN, "actions")),
    ("plan", "hypothesis without reason", dict(PLAN, root_cause_hypotheses=[{"id": "H1", "confidence": "low"}])),
    ("plan", "action without verification", dict(PLAN, actions=[_without(PLAN["actions"][0], "verification")])),
    ("plan", "target_paths a string", dict(PLAN, actions=[dict(PLAN["actions"][0], target_paths="src/a.py")])),
    ("plan", "verification_commands a string", dict(PLAN, verification_commands="pytest")),
    ("attempt", "iteration 0", dict(ATTEMPT, iteration=0)),
    ("attempt", "iteration string", dict(ATTEMPT, iteration="1")),
    ("attempt", "result unknown", dict(ATTEMPT, result="maybe")),
    ("attempt", "verification_passed string", dict(ATTEMPT, verification_passed="false")),
    ("attempt", "missing finished_at", _without(ATTEMPT, "finished_at")),
    ("attempt", "mode unknown", dict(ATTEMPT, mode="magic")),
    ("attempt", "stop_reason unknown", dict(ATTEMPT, stop_reason="bored")),
    ("attempt", "outcome unknown", dict(ATTEMPT, outcomes={"t": "green"})),
    ("attempt", "duration negative", dict(ATTEMPT, duration_seconds=-1)),
    ("attempt", "repair result unknown", dict(ATTEMPT, repair={"result": "ok"})),
    ("attempt", "exit_code float string", dict(ATTEMPT, exit_code="1")),
    ("run_result", "final_status unknown", dict(RUN_RESULT, final_status="done")),
    ("run_result", "loops negative", dict(RUN_RESULT, loops_used=-1)),
    ("run_result", "runtime as string", dict(RUN_RESULT, runtime_minutes="18")),
    ("run_result", "missing archived_to", _without(RUN_RESULT, "archived_to")),
    ("run_result", "decision_point a string", dict(RUN_RESULT, decision_point="stop")),
    ("run_result", "handoff iterations string", dict(RUN_RESULT, handoff={"iterations": "3"})),
    ("run_result", "fingerprints_per_iteration of ints", dict(RUN_RESULT, fingerprints_per_iteration=[1])),
]


@pytest.mark.parametrize("kind", schema.KINDS)
def test_shipped_schema_is_generated_from_the_record(kind: str) -> None:
    # scripts/regen_schemas.py rewrites the files after a change to a record's fields.
    shipped = (pathlib.Path(pytest_selfheal.__file__).parent / "schemas" / f"{kind}.schema.json").read_text("utf-8")
    assert shipped == schema_text(kind)


@pytest.mark.parametrize("kind", schema.KINDS)
def test_shipped_schema_is_valid_json_schema(kind: str) -> None:
    loaded = load_schema(kind)
    jsonschema.Draft202012Validator.check_schema(loaded)
    assert loaded["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("kind,doc", GOOD, ids=[f"{k}-{i}" for i, (k, _) in enumerate(GOOD)])
def test_good_documents_pass_both_validators(kind: str, doc: dict[str, Any]) -> None:
    assert_valid(kind, doc)
    assert schema.validate(kind, doc) == []
    assert json.dumps(DOCUMENTS[kind][0].from_json(doc, "x.json").to_json()) == json.dumps(doc)


@pytest.mark.parametrize("kind,why,doc", BAD, ids=[f"{k}-{w}" for k, w, _ in BAD])
def test_bad_documents_fail_both_validators(kind: str, why: str, doc: Any) -> None:
    assert jsonschema_errors(kind, doc), why
    problems = schema.validate(kind, doc)
    assert problems, why
    with pytest.raises(InputError) as info:
        DOCUMENTS[kind][0].from_json(doc, "/r/x.json")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"/r/x.json: invalid {kind}: ")


def test_the_record_names_the_first_of_several_violations() -> None:
    doc = dict(INCIDENT, year="x", month=13, status="nope")
    del doc["step"]
    assert len(jsonschema_errors("incident", doc)) == 4
    assert schema.validate("incident", doc) == ["field step: required field missing"]  # required keys first


def test_error_message_names_the_field() -> None:
    problems = schema.validate("incident", dict(INCIDENT, year="2026"))
    assert problems == ["field year: expected integer, got string"]
    assert schema.validate("incident", _without(INCIDENT, "step")) == ["field step: required field missing"]
    nested = schema.validate("plan", dict(PLAN, actions=[dict(PLAN["actions"][0], risk=3)]))
    assert nested == ["field actions[0].risk: expected string, got integer"]


def test_integral_float_counts_as_integer_like_jsonschema() -> None:
    doc = dict(ATTEMPT, iteration=2.0)
    assert schema.validate("attempt", doc) == [] and jsonschema_errors("attempt", doc) == []
    doc = dict(ATTEMPT, iteration=2.5)
    assert schema.validate("attempt", doc) and jsonschema_errors("attempt", doc)


def test_unknown_kind() -> None:
    with pytest.raises(ValueError):
        schema.validate("nope", {})


def test_schemas_ship_inside_the_package() -> None:
    from importlib import resources

    for kind in schema.KINDS:
        text = resources.files("pytest_selfheal").joinpath("schemas").joinpath(f"{kind}.schema.json").read_text(encoding="utf-8")
        assert json.loads(text)["title"]


def test_docs_link_every_shipped_schema() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "store.md").read_text(encoding="utf-8")
    for kind in schema.KINDS:
        assert (Path(pytest_selfheal.__file__).parent / "schemas" / f"{kind}.schema.json").is_file()
        assert f"(../pytest_selfheal/schemas/{kind}.schema.json)" in docs, f"docs/store.md does not link {kind}.schema.json"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(schema.KINDS), st.data())
def test_record_and_jsonschema_agree_on_mutated_documents(kind: str, data: st.DataObject) -> None:
    base = {"incident": INCIDENT, "plan": PLAN, "attempt": ATTEMPT, "run_result": RUN_RESULT}[kind]
    values = st.one_of(st.none(), st.booleans(), st.integers(-3, 20), st.floats(allow_nan=True),
                       st.text(max_size=30), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
    doc = copy.deepcopy(base)
    for _ in range(data.draw(st.integers(1, 3))):
        node: Any = doc  # walk down to a random object, nested ones included (failures, actions)
        while True:
            inner = [v for v in node.values() if isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], dict))]
            if not inner or data.draw(st.booleans()):
                break
            node = data.draw(st.sampled_from(inner))
            node = node[0] if isinstance(node, list) else node
        key = data.draw(st.sampled_from(sorted(node) + ["extra"]))
        if data.draw(st.booleans()):
            node[key] = data.draw(values)
        else:
            node.pop(key, None)
    assert (schema.validate(kind, doc) == []) == (jsonschema_errors(kind, doc) == [])
