"""SIGKILL ``selfheal loop`` at many points; the root stays readable and the loop resumes to the
same final result without losing or duplicating an attempt.

Two kinds of kill points:

- *named steps*: the test-only hook ``SELFHEAL_TEST_KILL_AT=<step>`` (loop/control.py KILL_STEPS) makes
  the loop SIGKILL itself exactly there — every step of an iteration and of the close-out;
- *random instants*: a real ``SIGKILL`` after a random delay (seeded, printed on failure).

After each kill: ``selfheal status`` exits 0, every JSON file under the root parses, a
resumed ``selfheal loop`` reaches the reference result of an uninterrupted run, the
attempts are numbered 1..n without gaps or duplicates, every close-out event appears once,
and ``replay`` equals the disk. By default a bounded sample (~15 kills) runs; the long
variant (every step of every scenario, 40 random kills) is marked ``slow`` and runs with
``pytest -m slow``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

import pytest
from helpers import (
    DETERMINISTIC,
    MOVING,
    PY,
    assert_files_valid,
    assert_replay_equals_disk,
    capture,
    cli,
    clone_project,
    events_named,
    make_project,
    run_env,
    selfheal,
)

from pytest_selfheal.loop.control import KILL_ENV, KILL_STEPS
from pytest_selfheal.store.root import Store

# scenario: (files, loop settings, expected (stop_reason, attempts, bucket, exit code))
SCENARIOS: dict[str, tuple[str, tuple[str, ...], tuple[str, int, str, int]]] = {
    "deterministic": ("det", (), ("repeated_fingerprint", 1, "escalated", 1)),
    "replan": ("det", ("auto_replan_on_no_progress=true",), ("replan_requested", 1, "inbox", 1)),
    "moving": ("moving", ("max_iterations=3",), ("max_iterations", 3, "escalated", 1)),
}

REPLAN_STEPS = ("finalize:after_plan_proposed", "finalize:after_replan_written")
ARCHIVE_STEPS = ("finalize:before_archive",)
DEFAULT_STEPS = [("deterministic", s) for s in KILL_STEPS if s not in REPLAN_STEPS] + [
    ("replan", s) for s in REPLAN_STEPS
]
ALL_STEPS = [
    (name, s)
    for name in SCENARIOS
    for s in KILL_STEPS
    if not (name == "replan" and s in ARCHIVE_STEPS) and (name == "replan" or s not in REPLAN_STEPS)
]


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """One captured project per kind, copied for every kill."""
    config_dir = tmp_path_factory.mktemp("opencode")
    env = {"OPENCODE_CONFIG_DIR": str(config_dir)}
    base = tmp_path_factory.mktemp("templates")
    det = make_project(base / "det", {"test_calc.py": DETERMINISTIC})
    moving = make_project(base / "moving", {"test_moving.py": MOVING}, git=False)  # a new message = progress
    return {"det": (det, capture(det, env=env)), "moving": (moving, capture(moving, env=env))}


def loop_args(incident_id: str, settings: tuple[str, ...]) -> list[str]:
    args = ["loop", incident_id]
    for setting in settings:
        args += ["--set", setting]
    return args


def loop_command(incident_id: str, settings: tuple[str, ...]) -> list[str]:
    """``selfheal loop`` as a process of its own: what the kills hit."""
    return [PY, "-m", "pytest_selfheal", *loop_args(incident_id, settings)]


def check_root_readable(project: Path) -> None:
    """``selfheal status`` exits 0 and lists nothing corrupted; no JSON file is partial."""
    root = project / ".selfheal"
    code, out, err = cli("status", "--json", "--dir", str(root))
    assert code == 0, err
    rows = json.loads(out)
    assert rows and all(row["status"] != "corrupted" for row in rows), rows
    for path in root.rglob("*.json"):
        json.loads(path.read_text())  # atomic writes: never a partial document


def resume_and_check(
    project: Path, incident_id: str, scenario: str, context: str
) -> None:
    _, settings, (reason, attempts, bucket, code) = SCENARIOS[scenario]
    check_root_readable(project)
    store = Store(project / ".selfheal")
    before = [a.iteration for a in store.read_attempts(incident_id)]
    assert before == list(range(1, len(before) + 1)), context
    if not _finished(store, incident_id, reason):  # a random kill may come after the end
        done = selfheal(project, *loop_args(incident_id, settings))  # the resume, in process
        assert done.returncode == code, f"{context}\n{done.stdout}\n{done.stderr}"
    run_result = store.read_run_result(incident_id)
    assert run_result is not None and run_result.stop_reason == reason, context
    assert store.locate(incident_id)[0] == bucket, context
    recorded = store.read_attempts(incident_id)
    assert [a.iteration for a in recorded] == list(range(1, attempts + 1)), context
    assert [a.iteration for a in recorded][: len(before)] == before  # nothing recorded was lost
    assert_files_valid(store, incident_id)
    assert_replay_equals_disk(store, incident_id)
    # Close-out events exactly once; one verification_finished per attempt.
    for name in ("decision_point_needed", "loop_stopped"):
        assert len(events_named(store, incident_id, name)) == 1, f"{context}: {name}"
    finished = [e["iteration"] for e in events_named(store, incident_id, "verification_finished")]
    assert sorted(finished) == list(range(1, attempts + 1)), context
    if bucket != "inbox":
        assert len(events_named(store, incident_id, "incident_archived")) == 1, context
    else:
        assert store.read_status(incident_id) == "planned"
        assert store.read_plan(incident_id).revision == 2, context
        assert len(events_named(store, incident_id, "plan_generated")) == 2, context  # capture + replan
    check_root_readable(project)


def _finished(store: Store, incident_id: str, reason: str) -> bool:
    """The loop had completed its close-out before the kill."""
    result = store.read_run_result(incident_id)
    if result is None or result.stop_reason != reason:
        return False
    if store.locate(incident_id)[0] != "inbox":
        return True
    return reason == "replan_requested" and store.read_status(incident_id) == "planned"


def kill_at_step(
    templates: Mapping[str, tuple[Path, str]], tmp_path: Path, scenario: str, step: str,
) -> None:
    kind, settings, _ = SCENARIOS[scenario]
    template, incident_id = templates[kind]
    project = clone_project(template, tmp_path / f"{scenario}-{step.replace(':', '-')}")
    killed = subprocess.run(loop_command(incident_id, settings), cwd=project, capture_output=True, text=True,
                            timeout=120, env=run_env({KILL_ENV: step}))
    assert killed.returncode == -signal.SIGKILL, f"{step} never reached: {killed.stdout}{killed.stderr}"
    resume_and_check(project, incident_id, scenario, f"killed at {step}")


def kill_at_random(
    templates: Mapping[str, tuple[Path, str]], tmp_path: Path, seed: int,
    scenario: Optional[str] = None,
) -> None:
    rng = random.Random(seed)
    scenario = scenario or rng.choice(sorted(SCENARIOS))
    kind, settings, _ = SCENARIOS[scenario]
    template, incident_id = templates[kind]
    project = clone_project(template, tmp_path / f"random-{seed}")
    delay = rng.uniform(0.2, 2.5)
    proc = subprocess.Popen(loop_command(incident_id, settings), cwd=project, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=run_env(), start_new_session=True)
    time.sleep(delay)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the loop and its verification child at once
    except ProcessLookupError:
        pass
    proc.wait()
    resume_and_check(project, incident_id, scenario, f"seed {seed}: {scenario} killed after {delay:.2f}s")


# --------------------------------------------------------------------------- the bounded sample


@pytest.mark.parametrize("scenario, step", DEFAULT_STEPS, ids=[f"{a}-{b}" for a, b in DEFAULT_STEPS])
def test_kill_at_named_step_then_resume(
    templates: dict[str, tuple[Path, str]], tmp_path: Path, scenario: str, step: str,
) -> None:
    kill_at_step(templates, tmp_path, scenario, step)


# One seed by default; test_slow_kill_at_many_random_instants below runs forty.
@pytest.mark.parametrize("seed", [11])
def test_kill_at_random_instant_then_resume(
    templates: dict[str, tuple[Path, str]], tmp_path: Path, seed: int
) -> None:
    kill_at_random(templates, tmp_path, seed, scenario="moving")


def test_every_kill_step_is_reachable() -> None:
    covered = {step for _, step in ALL_STEPS}
    assert covered == set(KILL_STEPS)


# --------------------------------------------------------------------------- the long variant


@pytest.mark.slow
@pytest.mark.parametrize("scenario, step", ALL_STEPS, ids=[f"{a}-{b}" for a, b in ALL_STEPS])
def test_slow_kill_every_step_of_every_scenario(
    templates: dict[str, tuple[Path, str]], tmp_path: Path, scenario: str,
    step: str,
) -> None:
    kill_at_step(templates, tmp_path, scenario, step)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1040))
def test_slow_kill_at_many_random_instants(
    templates: dict[str, tuple[Path, str]], tmp_path: Path, seed: int,
) -> None:
    kill_at_random(templates, tmp_path, seed)


