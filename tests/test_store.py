"""The incident store on real files: layout, fields, status moves, events, plans, attempts,
archive, listing, and the crash-safe file primitives underneath (fsio)."""

from __future__ import annotations

import dataclasses
import errno
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import disk_full_on
from schema_check import assert_file_valid

from pytest_selfheal.errors import InputError, NotFoundError, RefusedError, StoreIOError, UsageError
from pytest_selfheal.records import vocab as states
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.plan import GroupKey, Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.root import Store

NOW = datetime(2026, 2, 17, 12, 0, 0, tzinfo=timezone.utc)


def incident_data(**extra: Any) -> Incident:
    """A capture's incident record (the store fills its identity and time fields), with ``extra`` fields."""
    data: dict[str, Any] = {
        "step": "tests/test_a.py::test_x",
        "failure_class": "deterministic",
        "message": "assert 1 == 2",
        "error_signature": "TEST_ASSERTION | tests.test_a::test_x | assert 1 == 2",
        "failures": (Failure(nodeid="tests/test_a.py::test_x", fingerprint="ab12", failure_type="TEST_ASSERTION"),),
    }
    data.update(extra)
    return Incident(**data)


def plan_doc(incident_id: str) -> dict[str, Any]:
    return {
        "incident_id": incident_id,
        "generated_at": "2026-02-17T12:01:00+00:00",
        "summary": "1 failing test",
        "root_cause_hypotheses": [{"id": "H1", "confidence": "medium", "reason": "r"}],
        "actions": [
            {
                "id": "A1",
                "title": "Fix test_x",
                "priority": "P0",
                "risk": "low",
                "target_paths": ["src/a.py"],
                "verification": ["tests/test_a.py::test_x"],
            }
        ],
        "verification_commands": ["tests/test_a.py::test_x"],
        "done_criteria": ["passes"],
    }


def plan_record(incident_id: str, **changes: Any) -> Plan:
    return Plan.from_json({**plan_doc(incident_id), **changes}, "a test plan")


def off_schema_plan(incident_id: str) -> Plan:
    """A plan built in code with a value ``from_json`` would refuse: the writer's check must catch it."""
    plan = plan_record(incident_id)
    action = dataclasses.replace(plan.actions[0], root_cause=GroupKey(evidence="a guess", keys=None, extra=()))
    return dataclasses.replace(plan, actions=(action,))


def attempt_doc(incident_id: str, iteration: int, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "incident_id": incident_id,
        "iteration": iteration,
        "started_at": "2026-02-17T12:02:00+00:00",
        "finished_at": "2026-02-17T12:03:00+00:00",
        "actions_applied": ["A1"],
        "verification_commands": ["tests/test_a.py::test_x"],
        "verification_passed": False,
        "result": "continue",
        "error_signature": "TEST_ASSERTION | tests.test_a::test_x | assert 1 == 2",
    }
    doc.update(extra)
    return doc


def attempt_rec(incident_id: str, iteration: int, **extra: Any) -> Attempt:
    """``attempt_doc`` as the record the store writes."""
    return Attempt.from_json(attempt_doc(incident_id, iteration, **extra), "test attempt")


def run_result_doc(incident_id: str, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "incident_id": incident_id,
        "final_status": "escalated",
        "loops_used": 2,
        "runtime_minutes": 0.1,
        "same_error_repeats": 2,
        "archived_to": None,
        "stop_reason": "repeated_fingerprint",
    }
    doc.update(extra)
    return doc


def run_result_rec(incident_id: str, **extra: Any) -> RunResult:
    """``run_result_doc`` as the record the store writes."""
    return RunResult.from_json(run_result_doc(incident_id, **extra), "test run result")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / ".selfheal", lock_timeout=5)


def create(store: Store, **extra: Any) -> str:
    return store.create_incident(incident_data(**extra), log_tail="E assert 1 == 2\n", context=RunContext(python="3.x"), now=NOW)


def force_status(store: Store, incident_id: str, status: str) -> None:
    """Put an incident into ``status`` the way a hand edit would (status.txt + incident.json)."""
    folder = store.incident_dir(incident_id)
    (folder / "status.txt").write_text(status + "\n")
    doc = json.loads((folder / "incident.json").read_text())
    doc["status"] = status
    (folder / "incident.json").write_text(json.dumps(doc))


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def no_temp_files(root: Path) -> bool:
    return not [p for p in root.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".tmp_")]


# --------------------------------------------------------------------------- create


def test_create_writes_the_five_files(store: Store) -> None:
    incident_id = create(store)
    assert incident_id.startswith("incident_20260217_120000_")
    folder = store.inbox_dir / incident_id
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["incident.json", "status.txt", "log_tail.txt", "audit_tail.jsonl", "context.json"]
    )
    doc = assert_file_valid("incident", folder / "incident.json")
    assert doc["incident_id"] == incident_id
    assert doc["status"] == "new"
    assert doc["created_at"] == doc["updated_at"] == "2026-02-17T12:00:00+00:00"
    assert (doc["year"], doc["month"], doc["ym"]) == (2026, 2, "2026-02")
    assert doc["run_id"].startswith("run_20260217_120000_")
    assert doc["failures"][0]["fingerprint"] == "ab12"  # extras kept
    assert (folder / "status.txt").read_text() == "new\n"
    assert (folder / "log_tail.txt").read_text() == "E assert 1 == 2\n"
    assert json.loads((folder / "context.json").read_text()) == {"python": "3.x"}
    events, warnings = store.read_events(incident_id)
    assert warnings == []
    assert [e.event for e in events] == ["incident_captured"]
    assert events[0].incident_id == incident_id
    assert events[0].get("error_signature") == doc["error_signature"]
    # canonical JSON: sorted keys, indent 2, trailing newline
    text = (folder / "incident.json").read_text()
    assert text == json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    assert no_temp_files(store.root)


def test_create_logs_the_given_events_after_incident_captured(store: Store) -> None:
    events = [ev.pending("failure_classified", {"nodeid": f"t.py::t{i}", "fingerprint": f"f{i}"}) for i in range(3)]
    incident_id = store.create_incident(incident_data(), log_tail="", context=RunContext(), now=NOW, events=events)
    logged, warnings = store.read_events(incident_id)
    assert warnings == []
    assert [e.event for e in logged] == ["incident_captured"] + ["failure_classified"] * 3
    assert [e.get("nodeid") for e in logged[1:]] == ["t.py::t0", "t.py::t1", "t.py::t2"]
    assert {e.incident_id for e in logged} == {incident_id}
    # An unknown event name is refused before anything is written.
    with pytest.raises(ValueError, match="unknown event name"):
        store.create_incident(incident_data(), log_tail="", context=RunContext(), now=NOW, events=[ev.pending("no_such_event")])
    assert [p.name for p in store.inbox_dir.iterdir()] == [incident_id]


def test_create_keeps_given_fields(store: Store) -> None:
    incident_id = create(store, run_id="run_x", year=2025, month=12, ym="2025-12", created_at="2026-01-01T00:00:00+00:00")
    doc = store.read_incident(incident_id)
    assert (doc.run_id, doc.year, doc.month, doc.ym) == ("run_x", 2025, 12, "2025-12")
    assert doc.created_at == doc.updated_at == "2026-01-01T00:00:00+00:00"


def test_create_with_run_token(store: Store) -> None:
    assert create_with_run(store, "gw1") == "incident_20260217_120000_gw1"
    # the same run token in the same second gets a fresh suffix rather than failing
    second = create_with_run(store, "gw1")
    assert second.startswith("incident_20260217_120000_gw1_") and second != "incident_20260217_120000_gw1"


def create_with_run(store: Store, run: str) -> str:
    return store.create_incident(incident_data(), log_tail="", context=RunContext(), run=run, now=NOW)


def test_create_retries_on_a_taken_id(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = iter(["aaaaaa", "aaaaaa", "aaaaaa", "bbbbbb"])
    monkeypatch.setattr("pytest_selfheal.store.ids.new_run_token", lambda: next(tokens))
    monkeypatch.setattr("pytest_selfheal.store.root.new_run_token", lambda: next(tokens))
    first = create(store)
    second = create(store)
    assert first == "incident_20260217_120000_aaaaaa"
    assert second == "incident_20260217_120000_bbbbbb"


def test_create_never_reuses_an_archived_id(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens = iter(["aaaaaa", "aaaaaa", "cccccc"])
    monkeypatch.setattr("pytest_selfheal.store.ids.new_run_token", lambda: next(tokens))
    monkeypatch.setattr("pytest_selfheal.store.root.new_run_token", lambda: next(tokens))
    first = create(store)
    store.archive(first, "escalated")
    assert create(store) == "incident_20260217_120000_cccccc"


def test_create_with_explicit_existing_id_is_refused(store: Store) -> None:
    incident_id = create(store)
    with pytest.raises(RefusedError, match="already exists"):
        create(store, incident_id=incident_id)


def test_create_refuses_bad_documents_before_writing(store: Store) -> None:
    with pytest.raises(ValueError, match="step"):
        create(store, step=None)
    with pytest.raises(ValueError, match="status"):
        create(store, status="running")
    with pytest.raises(UsageError):
        create(store, incident_id="../evil")
    with pytest.raises(TypeError):
        store.create_incident(incident_data(), log_tail="", context=RunContext(extra=(("x", object()),)))
    assert not store.inbox_dir.exists() or list(store.inbox_dir.iterdir()) == []


def test_half_made_incident_never_appears(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    disk_full_on(monkeypatch, "context.json")  # the build folder's files are written in place
    with pytest.raises(StoreIOError, match="No space left"):
        create(store)
    assert list(store.inbox_dir.iterdir()) == []
    assert store.list_incidents() == []


def test_stale_build_folder_is_ignored_then_cleaned(store: Store) -> None:
    stale = store.inbox_dir / ".tmp_incident_20260101_000000_x_dead"
    stale.mkdir(parents=True)
    (stale / "incident.json").write_text("{trunc")
    assert store.list_incidents() == []
    create(store)
    assert not stale.exists()


# --------------------------------------------------------------------------- locate / read


def test_locate_and_errors(store: Store) -> None:
    incident_id = create(store)
    assert store.locate(incident_id) == ("inbox", store.inbox_dir / incident_id)
    with pytest.raises(NotFoundError):
        store.locate("incident_20990101_000000_zz")
    for bad in ("../x", "/abs", "incident_..", "a\x00"):
        with pytest.raises(UsageError):
            store.locate(bad)
    # a hand-made second copy is reported, never silently picked
    import shutil

    shutil.copytree(store.inbox_dir / incident_id, store.resolved_dir / incident_id)
    with pytest.raises(InputError, match="exists twice"):
        store.locate(incident_id)


def test_unknown_id_creates_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "root")
    with pytest.raises(NotFoundError):
        store.set_status("incident_20990101_000000_zz", "planned")
    with pytest.raises(NotFoundError):
        store.append_event("incident_20990101_000000_zz", "loop_stopped")
    with pytest.raises(NotFoundError):
        store.archive("incident_20990101_000000_zz", "resolved")
    assert not (tmp_path / "root").exists()


@pytest.mark.parametrize(
    "content,needle",
    [
        ("", "corrupted JSON (empty file)"),
        ('{"incident_id": "incident_2026', "corrupted JSON (Unterminated string"),
        ("[1, 2]", "invalid incident: expected object, got array"),
        (None, "file missing"),
        (b"\xff\xfe{}", "not UTF-8"),
    ],
)
def test_corrupted_incident_json(store: Store, content: Any, needle: str) -> None:
    incident_id = create(store)
    path = store.inbox_dir / incident_id / "incident.json"
    if content is None:
        path.unlink()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(InputError) as info:
        store.read_incident(incident_id)
    assert str(path) in str(info.value) and needle in str(info.value)
    assert "\n" not in str(info.value)


def test_schema_invalid_incident_names_the_field(store: Store) -> None:
    incident_id = create(store)
    path = store.inbox_dir / incident_id / "incident.json"
    doc = json.loads(path.read_text())
    doc["year"] = "2026"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"incident.json: invalid incident: field year: expected integer"):
        store.read_incident(incident_id)
    doc["year"] = 2026
    doc["incident_id"] = "incident_20260101_000000_other"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="does not match its folder"):
        store.read_incident(incident_id)


def test_bad_status_txt(store: Store) -> None:
    incident_id = create(store)
    (store.inbox_dir / incident_id / "status.txt").write_text("done\nmore\n")
    with pytest.raises(InputError, match=r"status.txt: unknown status 'done\\nmore' \(expected one of new, planned"):
        store.read_status(incident_id)
    with pytest.raises(InputError):
        store.set_status(incident_id, "planned")


def test_read_log_tail_and_context(store: Store) -> None:
    incident_id = create(store)
    assert store.read_log_tail(incident_id) == "E assert 1 == 2\n"
    assert store.read_context(incident_id) == RunContext(python="3.x")


# --------------------------------------------------------------------------- status


def test_set_status_updates_both_files_and_logs(store: Store) -> None:
    incident_id = create(store)
    store.set_status(incident_id, "planned", plan="plan.json")
    folder = store.inbox_dir / incident_id
    assert (folder / "status.txt").read_text() == "planned\n"
    doc = assert_file_valid("incident", folder / "incident.json")
    assert doc["status"] == "planned"
    assert doc["updated_at"] >= doc["created_at"]
    events, _ = store.read_events(incident_id)
    assert events[-1].event == "status_changed"
    assert (events[-1].get("from"), events[-1].get("to"), events[-1].get("plan")) == ("new", "planned", "plan.json")


@pytest.mark.parametrize(
    "current,new", list(itertools.product(states.STATUSES, repeat=2)), ids=lambda s: str(s)
)
def test_set_status_every_pair(store: Store, current: str, new: str) -> None:
    incident_id = create(store)
    force_status(store, incident_id, current)
    before = {p: p.read_bytes() for p in all_files(store.root)}
    if states.can_transition(current, new):
        store.set_status(incident_id, new)
        assert store.read_status(incident_id) == new
        assert store.read_incident(incident_id).status == new
        return
    with pytest.raises(RefusedError) as info:
        store.set_status(incident_id, new)
    assert str(info.value).startswith(f"cannot move incident {incident_id} from {current} to {new} (allowed from {current}: ")
    # refused: nothing changed on disk (the lock file aside)
    after = {p: p.read_bytes() for p in all_files(store.root)}
    assert {p: b for p, b in after.items() if p.name != ".lock"} == {p: b for p, b in before.items() if p.name != ".lock"}


def test_set_status_rejects_unknown_status_and_clashing_data(store: Store) -> None:
    incident_id = create(store)
    with pytest.raises(ValueError):
        store.set_status(incident_id, "done")
    with pytest.raises(ValueError):
        store.set_status(incident_id, "planned", to="x")


def test_update_incident(store: Store) -> None:
    incident_id = create(store)
    doc = store.update_incident(incident_id, fingerprints=["a", "b"])
    assert store.read_incident(incident_id).fingerprints == ("a", "b") and doc.fingerprints == ("a", "b")
    with pytest.raises(ValueError):
        store.update_incident(incident_id, status="planned")
    with pytest.raises(ValueError):
        store.update_incident(incident_id, year="x")
    assert store.read_incident(incident_id).year == 2026


# --------------------------------------------------------------------------- events


def test_events_append_and_read(store: Store) -> None:
    incident_id = create(store)
    for name in ev.SPEC_EVENTS[1:]:
        store.append_event(incident_id, name, iteration=1, note="line\nbreak")
    events, warnings = store.read_events(incident_id)
    assert warnings == []
    assert [e.event for e in events] == list(ev.SPEC_EVENTS)
    assert all(e.incident_id == incident_id and str(e.ts).endswith("+00:00") for e in events)
    assert events[1].get("note") == "line\nbreak"
    lines = (store.inbox_dir / incident_id / "audit_tail.jsonl").read_text().splitlines()
    assert len(lines) == len(ev.SPEC_EVENTS)


def test_append_events_writes_the_same_records_in_order(store: Store) -> None:
    incident_id = create(store)
    records = store.append_events(
        incident_id, [ev.pending("failure_classified", {"nodeid": "t.py::a"}), ev.pending("failure_classified", {"nodeid": "t.py::b"})]
    )
    store.append_event(incident_id, "plan_generated", actions=[])
    events, warnings = store.read_events(incident_id)
    assert warnings == []
    assert [e.event for e in events] == ["incident_captured", "failure_classified", "failure_classified", "plan_generated"]
    assert [e.to_json() for e in events[1:3]] == [r.to_json() for r in records]
    assert [r.get("nodeid") for r in records] == ["t.py::a", "t.py::b"]
    with pytest.raises(ValueError, match="unknown event name"):
        store.append_events(incident_id, [ev.pending("failure_classified"), ev.pending("incident_exploded")])
    assert len(store.read_events(incident_id)[0]) == 4  # a bad batch writes nothing


def test_unknown_event_name_is_a_programming_error(store: Store) -> None:
    incident_id = create(store)
    with pytest.raises(ValueError, match="unknown event name"):
        store.append_event(incident_id, "incident_exploded")
    with pytest.raises(ValueError):
        store.append_event(incident_id, "loop_stopped", ts="now")
    # data may use any other key, even the parameter names
    record = store.append_event(incident_id, "loop_stopped", name="n", new="x", data=1)
    assert (record.get("name"), record.get("new"), record.get("data")) == ("n", "x", 1)


def test_torn_last_line_is_skipped_and_reported(store: Store) -> None:
    incident_id = create(store)
    store.append_event(incident_id, "failure_classified")
    log = store.inbox_dir / incident_id / "audit_tail.jsonl"
    with log.open("a") as handle:
        handle.write('{"ts": "2026-02-17T12:00:00+00:00", "event": "plan_gen')  # killed mid-append
    events, warnings = store.read_events(incident_id)
    assert [e.event for e in events] == ["incident_captured", "failure_classified"]
    assert len(warnings) == 1 and "line 3: torn last line skipped" in warnings[0]
    # the next append does not glue onto the torn fragment
    store.append_event(incident_id, "plan_generated")
    events, warnings = store.read_events(incident_id)
    assert [e.event for e in events] == ["incident_captured", "failure_classified", "plan_generated"]
    assert len(warnings) == 1 and "line 3: corrupted line skipped" in warnings[0]


def test_parse_events_tolerates_garbage() -> None:
    text = '\n{"event": "loop_stopped"}\n[1]\n{"no_event": 1}\nnot json\n\xff\n{"event": "x"'
    events, warnings = ev.parse_events(text, "log")
    assert [e.to_json() for e in events] == [{"event": "loop_stopped"}]
    assert len(warnings) == 5
    assert warnings[-1].startswith("log line 7: torn last line skipped")


def test_missing_audit_log_is_a_warning(store: Store) -> None:
    incident_id = create(store)
    (store.inbox_dir / incident_id / "audit_tail.jsonl").unlink()
    events, warnings = store.read_events(incident_id)
    assert events == [] and "missing" in warnings[0]


# --------------------------------------------------------------------------- plans, attempts, run result


def test_plan_roundtrip(store: Store) -> None:
    incident_id = create(store)
    assert not store.has_plan(incident_id)
    with pytest.raises(NotFoundError, match="no plan"):
        store.read_plan(incident_id)
    path = store.write_plan(incident_id, plan_record(incident_id), "# Plan\n")
    assert path == store.plans_dir(incident_id) / "plan.json"
    assert_file_valid("plan", path)
    assert store.read_plan(incident_id).to_json() == plan_doc(incident_id)
    assert store.read_plan_md(incident_id) == "# Plan\n"
    with pytest.raises(ValueError):
        store.write_plan(incident_id, off_schema_plan(incident_id), "")
    with pytest.raises(ValueError, match="names incident"):
        store.write_plan(incident_id, plan_record("incident_20260101_000000_other"), "")
    path.write_text('{"incident_id": 1}')
    with pytest.raises(InputError, match="plan.json: invalid plan"):
        store.read_plan(incident_id)


def test_attempts(store: Store) -> None:
    incident_id = create(store)
    assert store.next_attempt_number(incident_id) == 1
    assert store.read_attempts(incident_id) == []
    first = store.write_attempt(incident_id, attempt_rec(incident_id, 1))
    second = store.write_attempt(incident_id, attempt_rec(incident_id, 2, result="stop", stop_reason="repeated_fingerprint"))
    assert (first.name, second.name) == ("attempt_01.json", "attempt_02.json")
    assert_file_valid("attempt", second)
    assert store.next_attempt_number(incident_id) == 3
    assert [a.iteration for a in store.read_attempts(incident_id)] == [1, 2]
    with pytest.raises(RefusedError, match="attempt_02.json already exists.*next attempt .* is 3"):
        store.write_attempt(incident_id, attempt_rec(incident_id, 2, result="stop"))
    assert json.loads(second.read_text())["result"] == "stop"  # untouched
    with pytest.raises(ValueError):
        store.write_attempt(incident_id, dataclasses.replace(attempt_rec(incident_id, 1), iteration=0))
    store.write_attempt(incident_id, attempt_rec(incident_id, 10))
    assert [a.iteration for a in store.read_attempts(incident_id)] == [1, 2, 10]  # numeric, not lexical


def test_corrupted_attempt_is_named(store: Store) -> None:
    incident_id = create(store)
    store.write_attempt(incident_id, attempt_rec(incident_id, 1))
    path = store.runs_dir(incident_id) / "attempt_02.json"
    path.write_text('{"incident_id": "')
    with pytest.raises(InputError) as info:
        store.read_attempts(incident_id)
    assert str(path) in str(info.value)
    assert store.next_attempt_number(incident_id) == 3  # by file name, corruption or not
    path.write_text(json.dumps(attempt_doc(incident_id, 5)))
    with pytest.raises(InputError, match="does not match the file name"):
        store.read_attempts(incident_id)


def test_run_result_and_run_files(store: Store) -> None:
    incident_id = create(store)
    assert store.read_run_result(incident_id) is None
    path = store.write_run_result(incident_id, run_result_rec(incident_id))
    assert_file_valid("run_result", path)
    read = store.read_run_result(incident_id)
    assert read is not None and read.to_json() == run_result_doc(incident_id)
    store.write_run_result(incident_id, run_result_rec(incident_id, final_status="replan_requested"))
    read = store.read_run_result(incident_id)
    assert read is not None and read.final_status == "replan_requested"
    patch = store.write_run_file(incident_id, "attempt_01.patch", "diff\n")
    assert patch.read_text() == "diff\n"
    for bad in ("../x", ".hidden", "a/b", "run_result.json", "attempt_01.json", ""):
        with pytest.raises(ValueError):
            store.write_run_file(incident_id, bad, "")


def test_writes_need_an_existing_incident(store: Store) -> None:
    ghost = "incident_20990101_000000_zz"
    with pytest.raises(NotFoundError):
        store.write_plan(ghost, plan_record(ghost), "")
    with pytest.raises(NotFoundError):
        store.write_attempt(ghost, attempt_rec(ghost, 1))
    with pytest.raises(NotFoundError):
        store.write_run_result(ghost, run_result_rec(ghost))


# --------------------------------------------------------------------------- archive


def walk_to_running(store: Store, incident_id: str) -> None:
    store.set_status(incident_id, "planned")
    store.set_status(incident_id, "running")


def test_archive_moves_the_inbox_folder_only(store: Store) -> None:
    incident_id = create(store)
    store.write_plan(incident_id, plan_record(incident_id), "# Plan\n")
    walk_to_running(store, incident_id)
    store.write_attempt(incident_id, attempt_rec(incident_id, 1, verification_passed=True, result="stop"))
    store.write_run_result(incident_id, run_result_rec(incident_id, final_status="resolved"))
    plans_before = {p: p.read_bytes() for p in all_files(store.plans_root)}
    runs_before = {p: p.read_bytes() for p in all_files(store.runs_root)}
    inbox_files = sorted(p.name for p in (store.inbox_dir / incident_id).iterdir())

    destination = store.archive(incident_id, "resolved")

    assert destination == store.resolved_dir / incident_id
    assert not (store.inbox_dir / incident_id).exists()
    assert sorted(p.name for p in destination.iterdir()) == inbox_files
    assert store.locate(incident_id) == ("resolved", destination)
    assert (destination / "status.txt").read_text() == "resolved\n"
    assert assert_file_valid("incident", destination / "incident.json")["status"] == "resolved"
    events, warnings = store.read_events(incident_id)
    assert warnings == []
    assert [e.event for e in events][-2:] == ["status_changed", "incident_archived"]
    assert events[-1].get("archived_to") == f"error_archive/resolved/{incident_id}"
    assert events[-1].get("bucket") == "resolved"
    assert {p: p.read_bytes() for p in all_files(store.plans_root)} == plans_before
    assert {p: p.read_bytes() for p in all_files(store.runs_root)} == runs_before
    assert store.read_plan(incident_id).incident_id == incident_id
    assert [s.bucket for s in store.list_incidents()] == ["resolved"]
    assert no_temp_files(store.root)


@pytest.mark.parametrize("bucket", ["resolved", "escalated"])
def test_archiving_twice_is_refused(store: Store, bucket: str) -> None:
    incident_id = create(store)
    walk_to_running(store, incident_id)
    store.archive(incident_id, bucket)
    for again in ("resolved", "escalated"):
        with pytest.raises(RefusedError) as info:
            store.archive(incident_id, again)
        assert str(info.value) == f"incident {incident_id} is already archived in error_archive/{bucket}"
    assert store.locate(incident_id)[0] == bucket


@pytest.mark.parametrize("status", ["new", "planned", "plan_proposed"])
def test_archive_as_resolved_needs_a_run(store: Store, status: str) -> None:
    incident_id = create(store)
    force_status(store, incident_id, status)
    with pytest.raises(RefusedError, match=f"from {status} to resolved"):
        store.archive(incident_id, "resolved")
    assert store.locate(incident_id)[0] == "inbox"
    assert store.read_status(incident_id) == status
    assert not store.resolved_dir.exists()
    # giving up is always possible from a non-final status
    store.archive(incident_id, "escalated")
    assert store.locate(incident_id)[0] == "escalated"


def test_interrupted_archive_is_completed(store: Store) -> None:
    incident_id = create(store)
    walk_to_running(store, incident_id)
    store.set_status(incident_id, "escalated")  # crash right after the status was written
    store.archive(incident_id, "escalated")
    assert store.locate(incident_id)[0] == "escalated"
    names = [e.event for e in store.read_events(incident_id)[0]]
    assert names.count("status_changed") == 3 and names.count("incident_archived") == 1


def test_interrupted_archive_after_event_adds_no_duplicate(store: Store) -> None:
    incident_id = create(store)
    force_status(store, incident_id, "resolved")
    store.append_event(incident_id, "status_changed", **{"from": "running", "to": "resolved"})
    store.append_event(incident_id, "incident_archived", bucket="resolved")
    store.archive(incident_id, "resolved")
    names = [e.event for e in store.read_events(incident_id)[0]]
    assert names.count("incident_archived") == 1 and names.count("status_changed") == 1


def test_archive_rename_failure_leaves_one_copy(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    incident_id = create(store)
    walk_to_running(store, incident_id)

    def exdev(src: Any, dst: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "rename", exdev)
    with pytest.raises(StoreIOError, match="Invalid cross-device link"):
        store.archive(incident_id, "resolved")
    monkeypatch.undo()
    assert store.locate(incident_id)[0] == "inbox"
    assert not (store.resolved_dir / incident_id).exists()
    store.archive(incident_id, "resolved")  # the retry completes it
    assert store.locate(incident_id)[0] == "resolved"


def test_archive_bad_bucket(store: Store) -> None:
    incident_id = create(store)
    with pytest.raises(UsageError):
        store.archive(incident_id, "inbox")


# --------------------------------------------------------------------------- listing


def test_list_incidents_sorted_and_tolerant(store: Store) -> None:
    a = store.create_incident(incident_data(), log_tail="", context=RunContext(), now=datetime(2026, 1, 2, tzinfo=timezone.utc))
    b = store.create_incident(incident_data(), log_tail="", context=RunContext(), now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    c = store.create_incident(incident_data(), log_tail="", context=RunContext(), now=datetime(2026, 1, 3, tzinfo=timezone.utc))
    store.write_attempt(a, attempt_rec(a, 1))
    store.archive(b, "escalated")
    (store.inbox_dir / c / "incident.json").write_text('{"incident_id": "inc')  # torn by hand
    (store.inbox_dir / "notes.txt").write_text("x")
    (store.inbox_dir / "not_an_incident").mkdir()
    (store.inbox_dir / ".incident.json.1234.tmp").write_text("")
    rows = store.list_incidents()
    assert [r.incident_id for r in rows] == [b, a, c]
    assert rows[0].status == "escalated" and rows[0].bucket == "escalated"
    assert rows[1].attempts == 1 and rows[1].status == "new"
    assert list(rows[1].to_json()) == ["incident_id", "status", "bucket", "error_signature", "created_at", "updated_at",
                                       "step", "attempts", "path"]
    assert rows[2].corrupted and "corrupted JSON" in str(rows[2].error)
    assert list(rows[2].to_json())[-1] == "error" and rows[2].to_json()["error_signature"] is None


def test_list_missing_root_and_root_is_a_file(tmp_path: Path) -> None:
    assert Store(tmp_path / "nope").list_incidents() == []
    assert not (tmp_path / "nope").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        Store(tmp_path / "file").list_incidents()


# --------------------------------------------------------------------------- fsio


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "a.json"
    fsio.atomic_write_json(target, {"b": 1, "a": [1]})
    assert target.read_text() == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}\n'
    fsio.atomic_write_json(target, {"c": "é"})
    assert json.loads(target.read_text(encoding="utf-8")) == {"c": "é"}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_failure_mid_write_keeps_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "a.json"
    fsio.atomic_write_json(target, {"old": True})

    def boom(src: Any, dst: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(StoreIOError) as info:
        fsio.atomic_write_json(target, {"new": True})
    assert str(info.value) == f"cannot write {target}: No space left on device"
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


@pytest.mark.parametrize("code,reason", [(errno.ENOSPC, "No space left on device"), (errno.EROFS, "Read-only file system"), (errno.EACCES, "Permission denied")])
def test_oserror_while_writing_becomes_store_io_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, reason: str) -> None:
    target = tmp_path / "a.json"
    target.write_text('{"old": 1}')
    real_write = os.write

    def failing_write(fd: int, data: Any) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises(StoreIOError) as info:
        fsio.atomic_write_text(target, "new")
    monkeypatch.setattr(os, "write", real_write)
    assert str(info.value) == f"cannot write {target}: {reason}"
    assert target.read_text() == '{"old": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_keyboard_interrupt_mid_write_removes_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fsio.atomic_write_text(tmp_path / "a.txt", "x")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_unwritable_root_is_store_io_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("x")
    store = Store(tmp_path / "file" / ".selfheal")  # a path under a regular file
    with pytest.raises(StoreIOError) as info:
        create(store)
    assert "Not a directory" in str(info.value) and "\n" not in str(info.value)

    good = Store(tmp_path / "ok")
    incident_id = create(good)
    real_open = os.open

    def erofs(path: Any, flags: int, *args: Any) -> int:
        if str(path).endswith(".tmp"):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", erofs)
    with pytest.raises(StoreIOError, match="Read-only file system"):
        good.set_status(incident_id, "planned")
    monkeypatch.undo()
    assert good.read_status(incident_id) == "new"


def test_read_json_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file missing"):
        fsio.read_json(tmp_path / "none.json")
    (tmp_path / "deep.json").write_text("[" * 100000)
    with pytest.raises(InputError, match="corrupted JSON"):
        fsio.read_json(tmp_path / "deep.json")
    with pytest.raises(InputError, match="is a directory"):
        fsio.read_json(tmp_path)
    with pytest.raises(ValueError):
        fsio.atomic_write_json(tmp_path / "nan.json", {"x": float("nan")})
    assert not (tmp_path / "nan.json").exists()


def test_append_line(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    fsio.append_lines(path, ["a"])
    fsio.append_lines(path, ["b"])
    assert path.read_text() == "a\nb\n"
    path.write_text("a\ntor")
    fsio.append_lines(path, ["c"])
    assert path.read_text() == "a\ntor\nc\n"
    with pytest.raises(ValueError):
        fsio.append_lines(path, ["x\ny"])



def test_append_lines_is_one_write_and_one_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text("a\ntor")
    calls: list[str] = []
    real_write, real_fsync = os.write, os.fsync
    monkeypatch.setattr(fsio.os, "write", lambda fd, data: calls.append("write") or real_write(fd, data))
    monkeypatch.setattr(fsio.os, "fsync", lambda fd: calls.append("fsync") or real_fsync(fd))
    fsio.append_lines(path, ["b", "c", "d"])
    assert calls == ["write", "fsync"]
    assert path.read_text() == "a\ntor\nb\nc\nd\n"
    fsio.append_lines(path, [])
    with pytest.raises(ValueError):
        fsio.append_lines(path, ["e", "x\ny"])
    assert path.read_text() == "a\ntor\nb\nc\nd\n"


# --------------------------------------------------------------------------- lock


def test_lock_is_reentrant_within_a_process(store: Store) -> None:
    incident_id = create(store)
    with store.lock():
        with store.lock():
            store.set_status(incident_id, "planned")
        store.append_event(incident_id, "plan_generated")
    assert store.read_status(incident_id) == "planned"


@pytest.fixture
def held_lock(tmp_path: Path) -> Iterator[Path]:
    """Another process holding root/.lock until the test ends."""
    root = tmp_path / "held"
    root.mkdir()
    code = (
        "import fcntl, os, sys, time\n"
        "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(root / ".lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    yield root
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)


@pytest.mark.skipif(sys.platform == "win32", reason="the helper process uses fcntl")
def test_lock_timeout_is_store_io_error(held_lock: Path) -> None:
    store = Store(held_lock, lock_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(StoreIOError) as info:
        store.create_incident(incident_data(), log_tail="", context=RunContext())
    assert 0.25 <= time.monotonic() - started < 5
    assert str(info.value) == (
        f"timed out after 0.3s waiting for the lock {held_lock / '.lock'} (another selfheal process is using this reports root)"
    )
    assert not (held_lock / "error_inbox").exists()


def test_lock_file_that_cannot_be_opened(tmp_path: Path) -> None:
    store = Store(tmp_path)
    (tmp_path / ".lock").mkdir()
    with pytest.raises(StoreIOError, match=r"cannot lock .*\.lock"):
        with store.lock():
            pass


def test_release_without_acquire(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        fsio.FileLock(tmp_path / "x").release()
