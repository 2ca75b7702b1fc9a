"""A capture's incident published with its plan in one step (``Store.create_incident(plan=…)``).

The one-step path must leave exactly what the four steps it replaces leave
(create_incident, write_plan, append_event plan_generated, set_status planned), with fewer
fsyncs, and keep the crash guarantees of docs/store.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import disk_full_on
from schema_check import assert_file_valid
from test_store import NOW, incident_data, no_temp_files, plan_doc
from test_store_concurrency import check_root, kill_after

from pytest_selfheal.errors import StoreIOError
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import GroupKey, Plan
from pytest_selfheal.report.load import load_incident_run
from pytest_selfheal.store.events import pending
from pytest_selfheal.store.root import Store

CLASSIFIED = [pending("failure_classified", {"nodeid": "tests/test_a.py::test_x", "fingerprint": "ab12"})]


def build(incident: Incident, **changes: Any) -> tuple[Plan, str]:
    plan = Plan.from_json({**plan_doc(incident.incident_id), **changes}, "a test plan")
    return plan, render_plan_md(plan)


def four_steps(store: Store) -> str:
    """The capture as it was: create, write the plan, log plan_generated, move to planned."""
    incident_id = store.create_incident(incident_data(), log_tail="tail\n", context=RunContext(python="3.x"), now=NOW,
                                        events=CLASSIFIED)
    plan = Plan.from_json(plan_doc(incident_id), "a test plan")
    store.write_plan(incident_id, plan, render_plan_md(plan))
    store.append_event(incident_id, "plan_generated", actions=[a.id for a in plan.actions])
    store.set_status(incident_id, "planned")
    return incident_id


def one_step(store: Store) -> str:
    return store.create_incident(incident_data(), log_tail="tail\n", context=RunContext(python="3.x"), now=NOW,
                                 events=CLASSIFIED, plan=build)


def snapshot(store: Store, incident_id: str) -> dict[str, Any]:
    """Every file of the incident and its plan, the id and the moment-dependent fields neutralised."""
    files: dict[str, Any] = {}
    for folder in (store.incident_dir(incident_id), store.plans_dir(incident_id)):
        for path in sorted(folder.iterdir()):
            text = path.read_text().replace(incident_id, "<id>")
            if path.name.endswith(".json"):
                doc = json.loads(text)
                for key in ("updated_at", "run_id"):
                    doc.pop(key, None)
                files[path.name] = doc
            elif path.name.endswith(".jsonl"):
                files[path.name] = [{k: v for k, v in json.loads(line).items() if k not in ("ts", "run_id")}
                                    for line in text.splitlines()]
            else:
                files[path.name] = text
    return files


def test_one_step_leaves_what_the_four_steps_leave(tmp_path: Path) -> None:
    old, new = Store(tmp_path / "old"), Store(tmp_path / "new")
    old_id, new_id = four_steps(old), one_step(new)
    assert snapshot(new, new_id) == snapshot(old, old_id)
    folder = new.incident_dir(new_id)
    doc = assert_file_valid("incident", folder / "incident.json")
    assert doc["status"] == "planned" and new.read_status(new_id) == "planned"
    assert_file_valid("plan", new.plans_dir(new_id) / "plan.json")
    events, warnings = new.read_events(new_id)
    assert warnings == []
    assert [e.event for e in events] == ["incident_captured", "failure_classified", "plan_generated", "status_changed"]
    assert (events[-1].get("from"), events[-1].get("to")) == ("new", "planned")
    assert no_temp_files(new.root)


def test_one_step_takes_fewer_fsyncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counted: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (counted.append(fd), real(fd))[1])
    four_steps(Store(tmp_path / "old"))
    old = len(counted)
    counted.clear()
    one_step(Store(tmp_path / "new"))
    # 5 incident files + build folder + inbox, 2 plan files + plan build folder + error_plans,
    # the judging records' digests in the state directory (file + folder).
    assert len(counted) == 13 < old


def test_a_failed_plan_write_publishes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / ".selfheal")
    disk_full_on(monkeypatch, "plan.json")  # the build folder's files are written in place
    with pytest.raises(StoreIOError, match="No space left"):
        one_step(store)
    assert store.list_incidents() == []
    assert list(store.plans_root.iterdir()) == [] and list(store.inbox_dir.iterdir()) == []


def test_a_plan_left_without_its_incident_is_never_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A capture killed between its two renames leaves a whole plan and no incident; the
    incident never appears half made and the next capture takes another id."""
    store = Store(tmp_path / ".selfheal")
    tokens = iter(["aaaaaa", "aaaaaa", "bbbbbb"])
    monkeypatch.setattr("pytest_selfheal.store.ids.new_run_token", lambda: next(tokens))
    monkeypatch.setattr("pytest_selfheal.store.root.new_run_token", lambda: next(tokens))
    orphan = store.plans_root / "incident_20260217_120000_aaaaaa"
    orphan.mkdir(parents=True)
    (orphan / "plan.json").write_text("{}")
    stale = store.plans_root / ".tmp_plan"
    stale.mkdir()
    (stale / "plan.json").write_text("{trunc")
    assert store.list_incidents() == []
    incident_id = one_step(store)
    assert incident_id == "incident_20260217_120000_bbbbbb"
    assert (orphan / "plan.json").read_text() == "{}"  # not ours to touch
    assert not stale.exists()  # the build folder is a crash leftover, removed under the lock
    assert store.read_plan(incident_id).incident_id == incident_id


def test_a_bad_plan_is_a_programming_error_before_any_write(tmp_path: Path) -> None:
    store = Store(tmp_path / ".selfheal")

    def bad(incident: Incident) -> tuple[Plan, str]:
        plan, markdown = build(incident)  # then a value from_json would refuse, set in code
        action = dataclasses.replace(plan.actions[0], root_cause=GroupKey(evidence="a guess", keys=None, extra=()))
        return dataclasses.replace(plan, actions=(action,)), markdown

    with pytest.raises(ValueError, match="plan for .* does not fit the schema"):
        store.create_incident(incident_data(), log_tail="", context=RunContext(), now=NOW, plan=bad)
    assert store.list_incidents() == [] and not store.plans_root.exists()


CAPTURE_LOOPER = r"""
import sys
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.report.load import load_incident_run
from pytest_selfheal.store.events import pending
from pytest_selfheal.store.root import Store

store = Store(sys.argv[1], lock_timeout=60)

def plan(incident):
    built = {"incident_id": incident.incident_id, "generated_at": "2026-02-17T12:00:00+00:00", "summary": "s" * 2000,
             "root_cause_hypotheses": [], "actions": [], "verification_commands": ["t"], "done_criteria": []}
    record = Plan.from_json(built, "plan")
    return record, render_plan_md(record) * 20

print("ready", flush=True)
n = 0
while True:
    n += 1
    store.create_incident(
        Incident(step=f"s{n}", failure_class="deterministic", message="m" * 2000, error_signature="sig"),
        log_tail="log\n" * 500, context=RunContext(python=str(n)), events=[pending("failure_classified", {"n": n})], plan=plan)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_capture_killed_at_random_instants_leaves_whole_planned_incidents(tmp_path: Path) -> None:
    root = tmp_path / ".selfheal"
    for delay in (0.05, 0.17, 0.29, 0.41):
        kill_after(CAPTURE_LOOPER, root, delay)
        check_root(root)
        store = Store(root)
        for row in store.list_incidents():
            # Published planned, never without its plan; the log ends with the move to planned.
            assert row.status == "planned" and store.read_plan(row.incident_id).incident_id == row.incident_id
            events, _ = store.read_events(row.incident_id)
            assert [e.event for e in events][-2:] == ["plan_generated", "status_changed"]
    assert Store(root).list_incidents()  # the loopers did get work done
    one_step(Store(root))
    assert not (root / "error_plans" / ".tmp_plan").exists()  # a leftover is removed by the next capture


def test_the_published_plan_goes_through_the_writer_s_redaction(tmp_path: Path) -> None:
    store = Store(tmp_path / ".selfheal")
    secret = "ghp_" + "a1B2c3D4e5" * 4

    def leaky(incident: Incident) -> tuple[Plan, str]:
        plan, _ = build(incident, summary=f"token {secret}")
        return plan, f"# plan\ntoken {secret}\n"

    incident_id = store.create_incident(incident_data(), log_tail="", context=RunContext(), now=NOW, plan=leaky)
    folder = store.plans_dir(incident_id)
    for name in ("plan.json", "plan.md"):
        text = (folder / name).read_text()
        assert secret not in text and "token " in text


def test_published_documents_are_what_the_report_reads_back(tmp_path: Path) -> None:
    """The capture's report is built from ``published``'s records instead of reading the
    files back: they must be exactly what ``load_incident_run`` reads, redaction included."""
    store = Store(tmp_path / "root")
    secret = "ghp_" + "a" * 36
    got: list[tuple[Incident, Optional[Plan]]] = []

    def build_with_secret(incident: Incident) -> tuple[Plan, str]:
        return build(incident, summary=f"token {secret}")

    incident_id = store.create_incident(incident_data(message=f"assert {secret} == 2", counts={"tests": 3}),
                                        log_tail="tail\n", context=RunContext(), now=NOW, events=CLASSIFIED,
                                        plan=build_with_secret, published=lambda doc, plan: got.append((doc, plan)))
    run = load_incident_run(store, incident_id)
    assert got == [(run.incident, run.plan)] and run.plan is not None
    documents = [got[0][0].to_json(), run.plan.to_json()]
    assert secret not in json.dumps(documents) and run.bucket == "inbox" and not run.attempts and run.run_result is None
    assert json.dumps(got[0][0].to_json()) == json.dumps(run.incident.to_json())  # same key order too


def test_published_without_a_plan(tmp_path: Path) -> None:
    store = Store(tmp_path / "root")
    got: list[tuple[Incident, Optional[Plan]]] = []
    incident_id = store.create_incident(incident_data(), log_tail="", context=RunContext(), now=NOW,
                                        published=lambda doc, plan: got.append((doc, plan)))
    assert got == [(load_incident_run(store, incident_id).incident, None)]
