"""``selfheal reopen ID``: an archived incident back to the inbox, status
``planned``, event ``incident_reopened``; the loop then runs a new loop run on it, with
attempt numbers that keep counting, and ``selfheal replay`` stays equal to the files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import (
    FIXED,
    ROOT_ON_PATH,
    SPLIT,
    SPLIT_FIXED,
    assert_files_valid,
    assert_replay_equals_disk,
    capture,
    events_named,
    make_project,
    run_pytest_selfheal,
    selfheal,
)

from pytest_selfheal.errors import EXIT_NOT_FOUND, EXIT_OK, EXIT_REFUSED, EXIT_UNRESOLVED, EXIT_USAGE
from pytest_selfheal.store.root import Store


def _escalated(tmp_path: Path) -> tuple[Path, str, Store]:
    project = make_project(tmp_path / "p", {"sub.py": SPLIT["sub.py"], "tests/test_calc.py": SPLIT["test_calc.py"]},
                           ini=ROOT_ON_PATH)
    incident_id = capture(project)
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    store = Store(project / ".selfheal")
    assert store.locate(incident_id)[0] == "escalated"
    return project, incident_id, store


def test_reopen_then_resolve(tmp_path: Path) -> None:
    project, incident_id, store = _escalated(tmp_path)
    code, out, err = selfheal(project / "tests", "reopen", incident_id, "--json")  # from a subdirectory
    assert code == EXIT_OK, err
    assert json.loads(out) == {
        "incident_id": incident_id, "status": "planned", "previous_status": "escalated",
        "reopened_from": f"error_archive/escalated/{incident_id}", "reopened_after_iteration": 1,
        "path": f"error_inbox/{incident_id}",
    }
    assert store.locate(incident_id)[0] == "inbox" and store.read_status(incident_id) == "planned"
    assert store.read_incident(incident_id).reopened_after_iteration == 1
    (event,) = events_named(store, incident_id, "incident_reopened")
    assert event["bucket"] == "escalated" and event["after_iteration"] == 1
    replayed = assert_replay_equals_disk(store, incident_id)
    assert (replayed["status"], replayed["bucket"], replayed["stop_reason"]) == ("planned", "inbox", None)
    # The report and `show` see an open incident whose next step is the loop, not the old stop.
    code, out, _ = selfheal(project, "report", incident_id, "--format", "text")
    assert f"next: Continue the loop: selfheal loop {incident_id}" in out
    # A second reopen is refused: the incident is open.
    code, _, err = selfheal(project, "reopen", incident_id)
    assert code == EXIT_REFUSED and "only an archived incident can be reopened" in err

    # Fixed, then the loop as printed: a new loop run, attempt numbers keep counting.
    (project / "sub.py").write_text(SPLIT_FIXED)
    result = selfheal(project / "tests", "loop", incident_id)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "iteration 1 of 3" in result.stdout  # a fresh budget, not iteration 2
    assert store.locate(incident_id)[0] == "resolved"
    assert [a.iteration for a in store.read_attempts(incident_id)] == [1, 2]
    run_result = store.read_run_result(incident_id)
    assert run_result is not None and run_result.stop_reason == "success" and run_result.loops_used == 1
    assert_files_valid(store, incident_id)
    replayed = assert_replay_equals_disk(store, incident_id)
    assert (replayed["status"], replayed["stop_reason"]) == ("resolved", "success")


def test_a_reopened_loop_that_still_fails_stops_by_repetition_against_the_last_attempt(tmp_path: Path) -> None:
    project, incident_id, store = _escalated(tmp_path)
    # `selfheal loop ID --reopen`: what the escalation's decision point prints.
    result = selfheal(project, "loop", incident_id, "--reopen")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    assert f"reopened {incident_id} (escalated -> planned)" in result.stdout
    # The new run's baseline is the last attempt: the same failure once more is a repeat.
    assert [a.iteration for a in store.read_attempts(incident_id)] == [1, 2]
    run_result = store.read_run_result(incident_id)
    assert run_result is not None and run_result.stop_reason == "repeated_fingerprint"
    assert run_result.iteration == 2 and run_result.loops_used == 1
    assert len(events_named(store, incident_id, "loop_stopped")) == 2
    assert_replay_equals_disk(store, incident_id)
    # --reopen on an open incident only runs it; bad and unknown ids are the usual errors.
    assert selfheal(project, "reopen", "incident_20990101_000000_zz").returncode == EXIT_NOT_FOUND
    assert selfheal(project, "reopen", "../x").returncode == EXIT_USAGE


@pytest.mark.slow
def test_agent_mode_runs_a_reopened_incident(tmp_path: Path) -> None:
    project, incident_id, store = _escalated(tmp_path)
    assert selfheal(project, "reopen", "latest").returncode == EXIT_OK
    # The agent's fix edits a test file (defining the code in it), which is never a plain
    # `success` (docs/repair.md), but it is the reopened incident's run.
    (project / "tests" / "test_calc.py").write_text(FIXED.replace("\n    ", "\n").lstrip("\n"))
    again = run_pytest_selfheal(project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"incident {incident_id} iteration 1 of 3" in again.stdout and "STOP tests_edited" in again.stdout
    assert store.locate(incident_id)[0] == "escalated"
    assert store.read_attempts(incident_id)[-1].tests_edited == ("tests/test_calc.py",)
    assert_replay_equals_disk(store, incident_id)


def test_reopening_a_resolved_incident_and_one_archived_before_its_plan(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", SPLIT, ini=ROOT_ON_PATH)
    incident_id = capture(project)
    store = Store(project / ".selfheal")
    plans = store.plans_dir(incident_id)
    for path in plans.iterdir():
        path.unlink()
    plans.rmdir()
    store.archive(incident_id, "escalated")  # planned -> escalated, never looped
    code, out, err = selfheal(project, "reopen", incident_id)
    assert code == EXIT_OK, err
    assert out.startswith(f"reopened {incident_id} (escalated -> planned) to error_inbox/{incident_id}")
    assert store.has_plan(incident_id)  # a plan again, so `planned` is true
    assert store.read_incident(incident_id).reopened_after_iteration == 0
    assert_replay_equals_disk(store, incident_id)
    (project / "sub.py").write_text(SPLIT_FIXED)
    assert selfheal(project, "loop", incident_id).returncode == EXIT_OK
    code, out, err = selfheal(project, "reopen", incident_id)  # resolved -> planned
    assert code == EXIT_OK and "(resolved -> planned)" in out, err
    replayed = assert_replay_equals_disk(store, incident_id)
    assert (replayed["status"], replayed["stop_reason"], replayed["final_status"]) == ("planned", None, None)


def test_an_interrupted_reopen_is_completed_by_the_next(tmp_path: Path) -> None:
    project, incident_id, store = _escalated(tmp_path)
    folder = store.locate(incident_id)[1]
    # Killed after the status files and before the rename: planned, still in the archive.
    doc = json.loads((folder / "incident.json").read_text())
    doc.update(status="planned", reopened_after_iteration=1)
    (folder / "incident.json").write_text(json.dumps(doc))
    (folder / "status.txt").write_text("planned\n")
    code, _, err = selfheal(project, "loop", incident_id)
    assert code == EXIT_REFUSED and "already archived" in err
    code, out, err = selfheal(project, "reopen", incident_id)
    assert code == EXIT_OK, err
    assert store.locate(incident_id)[0] == "inbox"
    (event,) = events_named(store, incident_id, "incident_reopened")
    assert event["recovered"] is True
    assert_replay_equals_disk(store, incident_id)
