"""The on-disk records (pytest_selfheal/records/): exact round trip over real documents, bad input.

Real documents come from the real flow: a `pytest --selfheal` capture (pytester), the
bundled demo (a snapshot of its reports root in tests/records_docs/demo/, and the demo
itself under `-m slow`), the golden report inputs, and `replan()` over the demo's plan.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_check import assert_valid

from pytest_selfheal.cli.main import main
from pytest_selfheal.errors import EXIT_OK, InputError
from pytest_selfheal.plan.build import replan
from pytest_selfheal.records.attempt import Attempt, Decision, RepairBlock
from pytest_selfheal.records.context import GitContext
from pytest_selfheal.records.incident import CodeRef, Failure, Incident, RootCause
from pytest_selfheal.records.jsondoc import JsonRecord, fields_of
from pytest_selfheal.records.plan import Excerpt, GroupKey, Hypothesis, Plan, PlanAction, ReplanEntry, SuspectEntry
from pytest_selfheal.records.run_result import (
    DecisionContext,
    DecisionOption,
    DecisionPoint,
    Handoff,
    RunRepair,
    RunResult,
)
from pytest_selfheal.records.schema_gen import validate
from pytest_selfheal.store.events import Event
from pytest_selfheal.store.root import Store

TESTS = Path(__file__).parent
DEMO = TESTS / "records_docs" / "demo"
RECORDS: dict[str, type[JsonRecord]] = {"incident": Incident, "plan": Plan, "attempt": Attempt, "run_result": RunResult}
ALL_RECORDS: tuple[type[JsonRecord], ...] = (
    Incident, Failure, RootCause, CodeRef, Plan, PlanAction, GroupKey, SuspectEntry, Excerpt, Hypothesis,
    ReplanEntry, Attempt,
    RepairBlock, Decision, RunResult, DecisionPoint, DecisionOption, DecisionContext, Handoff, RunRepair, Event,
)  # fmt: skip


def kind_of(path: Path) -> str:
    """The record kind of a reports-root file name (``attempt_01.json`` → ``attempt``)."""
    name = path.name.split("_", 1)[1] if path.parent == DEMO else path.name
    if name.startswith("attempt_"):
        return "attempt"
    return {"incident.json": "incident", "plan.json": "plan", "run_result.json": "run_result"}[name]


def root_documents(root: Path) -> Iterator[tuple[str, str, Any]]:
    """``(kind, where, doc)`` for every record file under a reports root (or the snapshot folder)."""
    for path in sorted(root.rglob("*.json")):
        if path.name != "context.json":
            yield kind_of(path), str(path), json.loads(path.read_text(encoding="utf-8"))
    for path in sorted(root.rglob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            yield "event", f"{path} line {number}", json.loads(line)


def golden_documents() -> Iterator[tuple[str, str, Any]]:
    """The documents inside tests/golden_reports/*.input.json (merged shards included)."""

    def incidents(data: dict[str, Any]) -> Iterator[dict[str, Any]]:
        yield from data.get("incidents", [])
        for shard in data.get("merge", []):
            yield from incidents(shard)

    for path in sorted((TESTS / "golden_reports").glob("*.input.json")):
        for n, item in enumerate(incidents(json.loads(path.read_text(encoding="utf-8")))):
            for kind in ("incident", "plan", "run_result"):
                if item.get(kind) is not None:
                    yield kind, f"{path.name}#{n}.{kind}", item[kind]
            for i, attempt in enumerate(item.get("attempts", [])):
                yield "attempt", f"{path.name}#{n}.attempts[{i}]", attempt


def record_class(kind: str) -> type[JsonRecord]:
    return Event if kind == "event" else RECORDS[kind]


def assert_exact_round_trip(kind: str, where: str, doc: Any) -> JsonRecord:
    """Parse, write back, compare bytes (insertion order and the store's sorted, indented form)."""
    record = record_class(kind).from_json(doc, where)
    again = record.to_json()
    assert json.dumps(again) == json.dumps(doc), where
    assert json.dumps(again, sort_keys=True, indent=2) == json.dumps(doc, sort_keys=True, indent=2)
    assert again is not doc
    return record


def known_keys_seen(record: Any, seen: dict[str, set]) -> None:  # type: ignore[type-arg]
    """Collect, per record class, the known keys present in ``record`` and its nested records."""
    if isinstance(record, JsonRecord):
        known = {field.key for field in fields_of(type(record))}
        seen.setdefault(type(record).__name__, set()).update(k for k in record.keys or () if k in known)
        for field in fields_of(type(record)):
            known_keys_seen(getattr(record, field.name), seen)
    elif isinstance(record, tuple):
        for item in record:
            known_keys_seen(item, seen)


# --------------------------------------------------------------------------- real documents


@pytest.fixture(scope="module")
def demo_snapshot() -> list[tuple[str, str, Any]]:
    return list(root_documents(DEMO))


@pytest.fixture
def captured(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any]]:
    """A real capture: `pytest --selfheal` on a failing project with a tdd-marked test and a
    bug in a source module (its failure carries root-cause evidence: a frame, a stack, calls,
    the run's spectrum, and the exception raised in the standard library below them), and
    one failure more than the capture keeps (its cap, lowered to 4: unverified_failures)."""
    from pytest_selfheal.junit import reader

    monkeypatch.setattr(reader, "MAX_FAILURES", 4)
    pytester.makepyfile(shapes="import json\n\ndef area(w, h):\n    return _checked(w * h)\n\ndef _checked(value):\n"
                                "    return json.loads('negative')\n\nclass Base:\n    pass\n\nclass Square(Base):\n    pass\n")
    pytester.makepyfile(
        test_t="""
import pytest
from shapes import area, Square

class TestParser:
    @pytest.mark.tdd
    def test_red_first(self):
        raise NotImplementedError("parser")

@pytest.mark.parametrize("n", [1, 2])
def test_double(n):
    assert Square() and n * 2 == 3

def test_area():
    assert area(1, 2) == 2

def test_zz_over_the_cap():
    assert False
"""
    )
    # Started from a subdirectory (incident.json gains invocation_dir), selecting the rootdir
    # through a filter (pytest_filters), by a `selfheal ci` run (its token: ci_run).
    monkeypatch.setenv("SELFHEAL_CI_RUN", "token-of-this-ci-run")
    (pytester.path / "sub").mkdir()
    here = os.getcwd()
    os.chdir(pytester.path / "sub")
    try:
        pytester.runpytest("--selfheal", "--selfheal-spectrum", "--strict-markers", "--rootdir", str(pytester.path),
                           "-k", "not nothing_of_this_name", str(pytester.path)).assert_outcomes(failed=5)
    finally:
        os.chdir(here)
    # Archived, then reopened (`selfheal reopen`): incident.json gains reopened_after_iteration.
    store = Store(pytester.path / ".selfheal")
    (incident_id,) = store.incident_ids()
    store.archive(incident_id, "escalated")
    store.reopen(incident_id)
    # Stopped again, then seen with the code changed (loop/sticky.py): resumed_after_iteration.
    store.archive(incident_id, "escalated")
    store.reopen(incident_id, continue_run=True)
    docs = list(root_documents(pytester.path / ".selfheal"))
    assert sorted({kind for kind, _, _ in docs}) == ["event", "incident", "plan"]
    return docs


def replanned_plan() -> dict[str, Any]:
    """The demo's escalated plan after the real ``replan`` (as the loop's close-out writes it)."""
    plan = json.loads((DEMO / "ce6465_plan.json").read_text(encoding="utf-8"))
    attempts = [json.loads((DEMO / f"ce6465_attempt_0{n}.json").read_text(encoding="utf-8")) for n in (1, 2)]
    records = [Attempt.from_json(a, "attempt") for a in attempts]
    once = replan(Plan.from_json(plan, "plan"), records, generated_at="2026-11-23T22:00:00+00:00")
    once = dataclasses.replace(once, replanned_at_iteration=2)
    return replan(once, records, generated_at="2026-11-23T22:10:00+00:00").to_json()


def test_golden_report_inputs_round_trip_exactly() -> None:
    docs = list(golden_documents())
    assert {kind for kind, _, _ in docs} == set(RECORDS)
    for kind, where, doc in docs:
        record = assert_exact_round_trip(kind, where, doc)
        assert record.extra == (), f"{where}: untyped keys {[k for k, _ in record.extra]}"


def test_demo_documents_round_trip_exactly(demo_snapshot: list[tuple[str, str, Any]]) -> None:
    assert {kind for kind, _, _ in demo_snapshot} == {*RECORDS, "event"}
    for kind, where, doc in demo_snapshot:
        record = assert_exact_round_trip(kind, where, doc)
        if kind != "event":  # an event's data is its extra
            assert record.extra == (), f"{where}: untyped keys {[k for k, _ in record.extra]}"


def test_captured_incident_plan_and_events_round_trip_exactly(captured: list[tuple[str, str, Any]]) -> None:
    for kind, where, doc in captured:
        record = assert_exact_round_trip(kind, where, doc)
        if isinstance(record, Incident):
            assert record.tdd_nodeids == ("test_t.py::TestParser::test_red_first",)
            assert [f.nodeid for f in record.failures] == [
                "test_t.py::TestParser::test_red_first",
                "test_t.py::test_double[1]",
                "test_t.py::test_double[2]",
                "test_t.py::test_area",
            ]
            evidence = record.failures[3].root_cause
            assert evidence is not None and evidence.frame == CodeRef(path="shapes.py", name="_checked", line=7)
            assert evidence.stack == (CodeRef(path="shapes.py", name="area", line=4),)
            assert evidence.test_line == CodeRef(path="test_t.py", line=14)
            assert evidence.calls == (CodeRef(path="shapes.py", name="area", line=3),)
            # Raised in the standard library, below the project's frame.
            assert evidence.exception == "json.decoder.JSONDecodeError"
            assert evidence.raised is not None and evidence.raised.path == "json/decoder.py"
            square = record.failures[1].root_cause
            assert square is not None and square.calls == (CodeRef(path="shapes.py", name="Square", bases=("shapes.py::Base",)),)
            assert record.status == "planned" and record.extra == ()  # the capture planned it
            assert record.ci_run == "token-of-this-ci-run"
            assert record.failures[0].triage is not None and record.failures[0].triage.label == "new"


def test_replanned_plan_round_trips_with_its_history() -> None:
    doc = replanned_plan()
    assert_valid("plan", doc)
    plan = assert_exact_round_trip("plan", "replanned plan.json", doc)
    assert isinstance(plan, Plan)
    assert plan.revision == 3 and plan.replanned_at_iteration == 2 and plan.base_summary
    assert [entry.revision for entry in plan.replan_history] == [1, 2]
    assert plan.replan_history[0].fingerprints_seen and plan.extra == ()


def test_every_known_field_occurs_in_a_real_document(
    demo_snapshot: list[tuple[str, str, Any]], captured: list[tuple[str, str, Any]]
) -> None:
    """The fixtures exercise every typed field (contract and extensions) of every record."""
    seen: dict[str, set] = {}  # type: ignore[type-arg]
    docs = [*golden_documents(), *demo_snapshot, *captured, ("plan", "replan", replanned_plan())]
    for kind, where, doc in docs:
        known_keys_seen(record_class(kind).from_json(doc, where), seen)
    missing = {
        cls.__name__: sorted({f.key for f in fields_of(cls)} - seen.get(cls.__name__, set()))
        for cls in ALL_RECORDS
    }
    assert {name: keys for name, keys in missing.items() if keys} == {}


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_every_schema_property_is_a_typed_field(kind: str) -> None:
    schema = json.loads((TESTS.parent / "pytest_selfheal" / "schemas" / f"{kind}.schema.json").read_text())
    fields = {field.key for field in fields_of(RECORDS[kind])}
    assert set(schema["properties"]) <= fields
    assert set(schema["required"]) == {field.key for field in fields_of(RECORDS[kind]) if field.required}


def test_typed_values_are_frozen(demo_snapshot: list[tuple[str, str, Any]]) -> None:
    docs = {where.rsplit("/", 1)[-1]: (kind, doc) for kind, where, doc in demo_snapshot}
    attempt = Attempt.from_json(docs["106549_attempt_01.json"][1], "attempt_01.json")
    assert attempt.repair is not None and attempt.repair.result == "diff"
    assert attempt.repair.files_changed == ("calc.py",)
    assert attempt.decision is not None and attempt.decision.stop_reason == "success"
    assert attempt.outcomes["test_calc.py::test_add"] == "passed"
    with pytest.raises(dataclasses.FrozenInstanceError):
        attempt.iteration = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        attempt.outcomes["test_calc.py::test_add"] = "failed"  # type: ignore[index]
    result = RunResult.from_json(docs["106549_run_result.json"][1], "run_result.json")
    assert result.effective_config["max_iterations"] == 3
    assert isinstance(result.effective_config["verification"]["allowlist"], tuple)
    assert result.decision_point is not None and result.decision_point.context is not None
    assert result.decision_point.context.failure_signature == "TEST_ASSERTION | test_calc::test_add | assert -1 == 5"
    out = result.to_json()
    out["effective_config"]["verification"]["allowlist"].append("mutated")
    assert "mutated" not in result.to_json()["effective_config"]["verification"]["allowlist"]


# --------------------------------------------------------------------------- exactness details


def demo_attempt() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DEMO / "106549_attempt_01.json").read_text(encoding="utf-8"))
    return doc


def test_unknown_keys_keep_their_value_and_position() -> None:
    doc = demo_attempt()
    items = list(doc.items())
    items.insert(3, ("zz_note", {"b": [1, {"c": None}], "a": 1.5}))
    doc = dict(items)
    doc["repair"] = {"later": True, **doc["repair"]}
    record = assert_exact_round_trip("attempt", "attempt_01.json", doc)
    assert isinstance(record, Attempt) and record.repair is not None
    assert [key for key, _ in record.extra] == ["zz_note"]
    assert record.get_extra("zz_note")["b"][1]["c"] is None
    assert record.repair.extra == (("later", True),)


def test_absent_and_null_stay_apart() -> None:
    contract = {k: v for k, v in demo_attempt().items() if k in {f.key for f in fields_of(Attempt) if f.required}}
    bare = assert_exact_round_trip("attempt", "attempt_01.json", contract)
    assert isinstance(bare, Attempt) and bare.repair is None and bare.stop_reason is None
    assert "repair" not in bare.to_json() and "stop_reason" not in bare.to_json()
    nulls = assert_exact_round_trip("attempt", "attempt_01.json", dict(contract, repair=None, stop_reason=None))
    assert nulls.to_json()["repair"] is None and nulls.to_json()["stop_reason"] is None


def test_integral_float_integer_is_the_one_normalisation() -> None:
    doc = dict(demo_attempt(), iteration=1.0)
    record = Attempt.from_json(doc, "attempt_01.json")
    assert record.iteration == 1 and isinstance(record.iteration, int)
    assert record.to_json()["iteration"] == 1 and json.dumps(record.to_json()["iteration"]) == "1"
    assert dict(record.to_json(), iteration=1.0) == doc


def test_replace_writes_a_new_field_after_the_read_keys() -> None:
    doc = {k: v for k, v in demo_attempt().items() if k != "mode"}
    changed = dataclasses.replace(Attempt.from_json(doc, "a.json"), mode="verify", result="stop")
    out = changed.to_json()
    assert list(out) == [*doc, "mode"] and out["mode"] == "verify" and out["result"] == "stop"


def test_record_built_in_code_writes_required_then_set_fields() -> None:
    entry = Failure(test="t::x", fingerprint="abc", nodeid=None)
    assert entry.to_json() == {"test": "t::x", "fingerprint": "abc"}
    event = Event(event="status_changed", ts="2026-11-23T22:00:00.000001+00:00", extra=(("from", "new"), ("to", "planned")))
    assert event.to_json() == {"event": "status_changed", "ts": "2026-11-23T22:00:00.000001+00:00", "from": "new", "to": "planned"}
    assert event.get("to") == "planned" and event.data == {"from": "new", "to": "planned"}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    extra=st.lists(st.tuples(st.text(min_size=1, max_size=6).map(lambda s: "x_" + s), JSON_VALUES), max_size=4),
    position=st.integers(min_value=0, max_value=30),
    config=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=4),
)
def test_round_trip_property(extra: list[tuple[str, Any]], position: int, config: dict[str, Any]) -> None:
    doc = json.loads((DEMO / "106549_run_result.json").read_text(encoding="utf-8"))
    items = list(doc.items())
    for offset, pair in enumerate(extra):
        items.insert(min(position + offset, len(items)), pair)
    doc = dict(items)
    doc["effective_config"] = config
    assert_exact_round_trip("run_result", "run_result.json", doc)


# --------------------------------------------------------------------------- bad input


def set_path(doc: Any, path: str, value: Any) -> Any:
    """A deep copy of ``doc`` with the value at the dotted/indexed ``path`` replaced."""
    doc = json.loads(json.dumps(doc))
    parts = path.replace("[", ".").replace("]", "").split(".")
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


BAD = [
    ("incident", "year", "2026", "field year: expected integer, got string"),
    ("incident", "failures[0].scheme", "1", "field failures[0].scheme: expected integer, got string"),
    ("incident", "failures[0].nodeid", 3, "field failures[0].nodeid: expected string or null, got integer"),
    ("incident", "failures[0].code_fixable", 1, "field failures[0].code_fixable: expected boolean or null, got integer"),
    ("incident", "failures", {}, "field failures: expected array, got object"),
    ("plan", "actions[0].target_paths", "a.py", "field actions[0].target_paths: expected array, got string"),
    ("plan", "root_cause_hypotheses[0].reason", None, "field root_cause_hypotheses[0].reason: expected string, got null"),
    ("attempt", "verification_passed", "yes", "field verification_passed: expected boolean, got string"),
    ("attempt", "error_signature", 7, "field error_signature: expected string or null, got integer"),
    ("attempt", "repair", [], "field repair: expected object or null, got array"),
    ("attempt", "failures[0].fingerprint", 5, "field failures[0].fingerprint: expected string, got integer"),
    ("attempt", "duration_seconds", True, "field duration_seconds: expected number, got boolean"),
    ("run_result", "runtime_minutes", "2", "field runtime_minutes: expected number, got string"),
    ("run_result", "handoff.iterations", 1.5, "field handoff.iterations: expected integer, got number"),
    ("run_result", "fingerprints_per_iteration[0]", 3, "field fingerprints_per_iteration[0]: expected array or string or null, got integer"),
    ("run_result", "decision_point.options", {}, "field decision_point.options: expected array, got object"),
    ("run_result", "archived_to", False, "field archived_to: expected string or null, got boolean"),
]  # fmt: skip
DEMO_FILE = {"incident": "106549_incident.json", "plan": "106549_plan.json", "attempt": "ce6465_attempt_01.json",
             "run_result": "106549_run_result.json"}  # fmt: skip


@pytest.mark.parametrize("kind, path, value, problem", BAD)
def test_wrong_type_is_one_line_naming_file_and_field(kind: str, path: str, value: Any, problem: str) -> None:
    doc = set_path(json.loads((DEMO / DEMO_FILE[kind]).read_text(encoding="utf-8")), path, value)
    with pytest.raises(InputError) as info:
        RECORDS[kind].from_json(doc, f"/r/{kind}.json")
    assert info.value.message == f"/r/{kind}.json: invalid {kind}: {problem}"
    assert "\n" not in info.value.message
    assert validate(kind, doc) == [problem]  # the shipped-schema check says the same words


EXTENSIONS = [
    ("incident", "counts.failed", "1", "field counts.failed: expected integer, got string"),
    ("incident", "diff_hash", 0, "field diff_hash: expected string or null, got integer"),
    ("plan", "revision", "2", "field revision: expected integer or null, got string"),
    ("plan", "actions[0].nodeids", "t.py::x", "field actions[0].nodeids: expected array, got string"),
    ("attempt", "decision.same_error_repeats", None, "field decision.same_error_repeats: expected integer, got null"),
    ("attempt", "scope_denied", "no", "field scope_denied: expected boolean or null, got string"),
    ("run_result", "decision_point.context.remaining", "1", "field decision_point.context.remaining: expected integer, got string"),
    ("run_result", "repair.provider_calls", [], "field repair.provider_calls: expected integer, got array"),
]  # fmt: skip


@pytest.mark.parametrize("kind, path, value, problem", EXTENSIONS)
def test_records_and_schema_type_the_extensions(kind: str, path: str, value: Any, problem: str) -> None:
    # The schema is generated from the record, so it types every key the record knows.
    doc = set_path(json.loads((DEMO / DEMO_FILE[kind]).read_text(encoding="utf-8")), path, value)
    assert validate(kind, doc) == [problem]
    with pytest.raises(InputError) as info:
        RECORDS[kind].from_json(doc, f"{kind}.json")
    assert info.value.message == f"{kind}.json: invalid {kind}: {problem}"


def test_wrong_type_inside_a_mapping_names_the_key() -> None:
    doc = demo_attempt()
    doc["outcomes"]["test_calc.py::test_add"] = 1
    with pytest.raises(InputError, match=r"^a\.json: invalid attempt: field outcomes\.test_calc\.py::test_add: "
                       r"expected string, got integer$"):  # fmt: skip
        Attempt.from_json(doc, "a.json")


@pytest.mark.parametrize("kind", sorted(RECORDS))
def test_missing_required_field_and_non_object(kind: str) -> None:
    doc = json.loads((DEMO / DEMO_FILE[kind]).read_text(encoding="utf-8"))
    required = next(field.key for field in fields_of(RECORDS[kind]) if field.required)
    del doc[required]
    with pytest.raises(InputError) as info:
        RECORDS[kind].from_json(doc, "f.json")
    assert info.value.message == f"f.json: invalid {kind}: field {required}: required field missing"
    assert validate(kind, doc)[0] == f"field {required}: required field missing"
    with pytest.raises(InputError) as info:
        RECORDS[kind].from_json([doc], "f.json")
    assert info.value.message == f"f.json: invalid {kind}: expected object, got array"
    assert validate(kind, [doc]) == ["expected object, got array"]


@pytest.mark.parametrize(
    "doc, problem",
    [
        ({"ts": "2026-11-23T22:00:00+00:00"}, "field event: required field missing"),
        ({"event": 3}, "field event: expected string, got integer"),
        ({"event": "loop_stopped", "incident_id": ["x"]}, "field incident_id: expected string or null, got array"),
    ],
)
def test_bad_event(doc: dict[str, Any], problem: str) -> None:
    with pytest.raises(InputError) as info:
        Event.from_json(doc, "audit_tail.jsonl line 4")
    assert info.value.message == f"audit_tail.jsonl line 4: invalid event: {problem}"


def test_a_git_context_writes_what_the_snapshot_wrote_as_a_dict() -> None:
    snapshot = {"root": "/r", "commit": None, "branch": None, "dirty": False, "diff_stat": "", "untracked": 0}
    built = GitContext(root="/r", dirty=False, diff_stat="", untracked=0,
                       keys=("root", "commit", "branch", "dirty", "diff_stat", "untracked"))
    assert json.dumps(built.to_json()) == json.dumps(snapshot)
    assert GitContext.from_json(snapshot, "context.json") == built and built.clean_commit is None
    assert GitContext.failed("git status: boom").to_json() == {"error": "git status: boom"}
    assert GitContext(commit="abc", dirty=False).clean_commit == "abc"


@pytest.mark.slow
def test_demo_run_documents_round_trip_exactly(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The whole demo (capture, repair, loop, archive), in process: every file it writes round-trips."""
    if "slow" not in str(request.config.getoption("markexpr") or ""):
        pytest.skip("runs the whole demo (~45 s): run with -m slow; the snapshot test covers its documents")
    assert main(["demo", "--dest", str(tmp_path / "demo")]) == EXIT_OK
    docs = list(root_documents(tmp_path / "demo" / ".selfheal"))
    assert {kind for kind, _, _ in docs} == {*RECORDS, "event"}
    for kind, where, doc in docs:
        assert_exact_round_trip(kind, where, doc)


def test_equality_hash_and_repr_ignore_the_read_key_order() -> None:
    """A record with nested records, read keys and extra keys: ``keys`` is neither compared,
    hashed nor shown, ``extra`` is."""
    doc = {"path": "src/a.py", "name": "f", "line": 3, "more": [1]}
    ref = CodeRef.from_json(doc, "x")
    assert ref == CodeRef(path="src/a.py", name="f", line=3, extra=(("more", (1,)),))
    assert ref != CodeRef(path="src/a.py", name="f", line=3)
    assert repr(ref) == "CodeRef(extra=(('more', (1,)),), path='src/a.py', name='f', line=3, bases=(), score=None)"
    entry = Failure(nodeid="t::x", root_cause=RootCause(frame=ref))
    assert entry == dataclasses.replace(entry) and hash(entry) == hash(dataclasses.replace(entry))
    assert len({entry, dataclasses.replace(entry, keys=("nodeid",))}) == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.nodeid = "t::y"  # type: ignore[misc]
