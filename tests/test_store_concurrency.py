"""Several processes on one reports root, and processes killed at random instants."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from schema_check import assert_valid

from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.store.reader import INCIDENT_FILES
from pytest_selfheal.store.root import Store

WORKER = r"""
import os, sys, time
from datetime import datetime, timezone
import pytest_selfheal.store.ids as ids
import pytest_selfheal.store.root as store_mod
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.store.root import Store

# One fixed second and a 256-value token space: ids collide across processes on purpose.
small = lambda: os.urandom(1).hex()
ids.new_run_token = small
store_mod.new_run_token = small
now = datetime(2026, 2, 17, 12, 0, 0, tzinfo=timezone.utc)

root, shared, worker = sys.argv[1], sys.argv[2], sys.argv[3]
store = Store(root, lock_timeout=60)
while not os.path.exists(os.path.join(root, "go")):
    time.sleep(0.001)
made = []
for i in range(20):
    made.append(store.create_incident(
        Incident(step=f"w{worker}::{i}", failure_class="deterministic", message="m",
                 error_signature=f"sig {worker} {i}"),
        log_tail="x\n", context=RunContext(python=str(worker)), now=now))
    for j in range(50 // 20 + (1 if i < 50 % 20 else 0)):
        store.append_event(shared, "verification_finished", worker=worker, n=i, j=j)
print("\n".join(made))
"""

LOOPER = r"""
import sys
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.store.root import Store

store = Store(sys.argv[1], lock_timeout=60)
print("ready", flush=True)
n = 0
while True:
    n += 1
    iid = store.create_incident(
        Incident(step=f"s{n}", failure_class="deterministic", message="m" * 2000, error_signature="sig"),
        log_tail="log\n" * 500, context=RunContext(python=str(n)))
    store.append_event(iid, "failure_classified", n=n)
    store.set_status(iid, "planned")
    store.write_plan(iid, Plan.from_json({"incident_id": iid, "generated_at": "2026-02-17T12:00:00+00:00", "summary": "s",
                                          "root_cause_hypotheses": [], "actions": [], "verification_commands": ["t"],
                                          "done_criteria": []}, "plan"), "# plan\n" * 200)
    store.set_status(iid, "running")
    for it in (1, 2):
        store.write_attempt(iid, Attempt.from_json({
            "incident_id": iid, "iteration": it, "started_at": "2026-02-17T12:00:00+00:00",
            "finished_at": "2026-02-17T12:00:01+00:00", "actions_applied": [], "verification_commands": ["t"],
            "verification_passed": it == 2, "result": "continue" if it == 1 else "stop", "error_signature": "sig",
            "outputs": ["x" * 100] * 50}, "test attempt"))
    store.write_run_result(iid, RunResult.from_json({"incident_id": iid, "final_status": "resolved", "loops_used": 2,
                                                     "runtime_minutes": 0, "same_error_repeats": 0,
                                                     "archived_to": "error_archive/resolved/" + iid}, "test"))
    store.append_event(iid, "loop_stopped", stop_reason="success")
    store.archive(iid, "resolved" if n % 2 else "escalated")
"""

SHARED_EXTRA_EVENTS = 50


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def check_root(root: Path) -> None:
    """No partial JSON a reader opens, every incident complete and listable."""
    for path in root.rglob("*.json"):
        if any(part.startswith(".tmp_") for part in path.relative_to(root).parts):
            continue  # a killed capture's build folder: never read, removed by the next capture
        json.loads(path.read_text(encoding="utf-8"))  # raises on a partial file
    store = Store(root)
    rows = store.list_incidents()
    assert [r for r in rows if r.status == "corrupted"] == []
    for row in rows:
        folder = root / row.path
        assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == sorted(INCIDENT_FILES)
        assert_valid("incident", json.loads((folder / "incident.json").read_text()))
        events, warnings = store.read_events(row.incident_id)
        assert events[0].event == "incident_captured"
        # only a torn *last* line can exist (from a kill mid-append)
        assert all("torn last line" in w for w in warnings), warnings
        store.read_attempts(row.incident_id)
        store.read_run_result(row.incident_id)
    # no incident is ever in two places
    ids = [r.incident_id for r in rows]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("workers", [3])
def test_parallel_processes_share_one_root(tmp_path: Path, workers: int) -> None:
    root = tmp_path / ".selfheal"
    store = Store(root)
    shared = store.create_incident(
        Incident(step="shared", failure_class="deterministic", message="m", error_signature="s"), log_tail="",
        context=RunContext()
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(root), shared, str(n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        for n in range(workers)
    ]
    time.sleep(0.3)  # let every worker import and spin on the start flag
    (root / "go").write_text("")
    made: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        made.extend(out.split())
    assert len(made) == workers * 20
    assert len(set(made)) == len(made)  # all ids unique despite the tiny token space
    assert all(m.startswith("incident_20260217_120000_") for m in made)
    listed = [r.incident_id for r in store.list_incidents()]
    assert sorted(listed) == sorted(made + [shared])
    events, warnings = store.read_events(shared)
    assert warnings == []
    assert len(events) == 1 + workers * SHARED_EXTRA_EVENTS
    per_worker = {str(n): [e for e in events if e.get("worker") == str(n)] for n in range(workers)}
    assert all(len(v) == SHARED_EXTRA_EVENTS for v in per_worker.values())
    for n in range(workers):  # each worker's own events stay in its order
        seen = [(e.get("n"), e.get("j")) for e in per_worker[str(n)]]
        assert seen == sorted(seen)
    check_root(root)


def kill_after(script: str, root: Path, delay: float) -> None:
    """Run ``script`` (a writer looping on ``root``) and SIGKILL it ``delay`` seconds after it is ready."""
    proc = subprocess.Popen([sys.executable, "-c", script, str(root)], stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stdout.close()


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_killed_at_random_instants_leaves_a_readable_root(tmp_path: Path) -> None:
    root = tmp_path / ".selfheal"
    delays = [0.05, 0.13, 0.21, 0.29, 0.37, 0.45]
    for delay in delays:
        kill_after(LOOPER, root, delay)
        check_root(root)
    # the lock died with the process: a new writer proceeds at once
    store = Store(root, lock_timeout=2)
    incident_id = store.create_incident(
        Incident(step="after", failure_class="deterministic", message="m", error_signature="s"), log_tail="",
        context=RunContext()
    )
    assert store.read_status(incident_id) == "new"
    assert len(store.list_incidents()) > len(delays)  # the loopers did get work done
    assert not [p for p in (root / "error_inbox").iterdir() if p.name.startswith(".tmp_")]  # leftovers cleaned
    check_root(root)
