"""SIGKILL at many points of capture, plan, loop, archive and report; disk full; read-only root.

Three ways to kill ("a crash at any point", "killing the process at any moment
loses no recorded attempt"):

- **random instants**: a real ``SIGKILL`` to the process group after a random delay in
  ``[0, duration of a normal run]`` (seeded; the seed is in the test id);
- **every file-system operation**: ``_faultshim.py`` SIGKILLs the process just before its
  N-th write/rename/mkdir/unlink under the reports root, for N = 1 … (all of them in the
  full run): every intermediate state a crash can leave on disk;
- **named loop steps**: ``SELFHEAL_TEST_KILL_AT=<step>`` for every step of ``loop.control.KILL_STEPS``.

After each kill: every JSON file parses, only documented temp files exist, ``selfheal
status --json`` exits 0 and lists every incident that existed before, attempt files are
1..n and every attempt recorded before the kill is still there byte for byte, ``selfheal
replay`` agrees with the disk (or differs only in the documented close-out window, and
then agrees after the resume), and ``selfheal loop ID`` resumes to a final stop.

Default: a bounded sample; the ``slow`` tier (``pytest -m slow``) runs every point (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest
from helpers import (
    MOVING,
    PY,
    PYTEST_SELFHEAL,
    capture,
    cli,
    clone_project,
    incident_ids,
    make_project,
    run_env,
    run_pytest_selfheal,
    selfheal,
)

from pytest_selfheal.loop.control import KILL_ENV, KILL_STEPS
from pytest_selfheal.store.fsio import FileLock

from .conftest import (
    DETERMINISTIC,
    attempt_bytes,
    attempt_numbers,
    check_files_whole,
    check_root,
    one_error_line,
    record_figures,
    run_with_faults,
    sample,
    tree_snapshot,
    walk_written,
)

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

REPORT_NAME = "ralf_report.md"


@dataclass(frozen=True)
class Op:
    """One operation to kill: what runs, on which template, and when it is complete."""

    name: str
    template: str  # "fresh" (nothing captured yet), "det" or "moving" (one planned incident)
    settings: tuple[str, ...] = ()  # --set for the loop (also on resume)

    def argv(self, incident_id: Optional[str], project: Path) -> tuple[str, list[str]]:
        """(module, args) of the operation."""
        if self.name == "capture":
            return "pytest", list(PYTEST_SELFHEAL)
        assert incident_id is not None
        if self.name == "plan":
            return "pytest_selfheal", ["plan", incident_id, "--force"]
        if self.name == "archive":
            return "pytest_selfheal", ["archive", incident_id, "--as", "escalated"]
        if self.name == "report":
            return "pytest_selfheal", ["report", incident_id, "--output", str(project / "out" / REPORT_NAME)]
        args = ["loop", incident_id]
        for setting in self.settings:
            args += ["--set", setting]
        return "pytest_selfheal", args

    def fault_root(self, project: Path) -> Path:
        """Where this operation writes (the reports root; the report's folder for report)."""
        return project / "out" if self.name == "report" else project / ".selfheal"


OPS: dict[str, Op] = {
    "capture": Op("capture", "fresh"),
    "plan": Op("plan", "det"),
    "loop": Op("loop", "det"),
    "loop-moving": Op("loop", "moving", ("max_iterations=3",)),
    "loop-replan": Op("loop", "det", ("auto_replan_on_no_progress=true",)),
    "archive": Op("archive", "det"),
    "report": Op("report", "det"),
}


@dataclass
class Template:
    project: Path
    incident_id: Optional[str]


@dataclass
class Calibration:
    """A normal (unfaulted) run of an operation: its duration and file-system operations."""

    seconds: float
    ops: int


@dataclass
class Lab:
    base: Path
    templates: dict[str, Template]
    lock: Path
    calibration: dict[str, Calibration] = field(default_factory=dict)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    """Captured template projects (copied for every kill), built once per test run: under
    pytest-xdist the first worker to get here builds them, under a lock, and the others
    reuse them (every test works on a copy)."""
    basetemp = tmp_path_factory.getbasetemp()
    shared = basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp
    base, lock = shared / "fault-lab", shared / "fault-lab.lock"
    with FileLock(lock, timeout=600):
        index = base / "templates.json"
        if not index.is_file():
            # Its own empty global config: module fixtures run before the per-test isolation.
            config_dir = base / "opencode"
            config_dir.mkdir(parents=True)
            env = {"OPENCODE_CONFIG_DIR": str(config_dir)}
            fresh = make_project(base / "fresh", {"test_calc.py": DETERMINISTIC})
            det = make_project(base / "det", {"test_calc.py": DETERMINISTIC})
            moving = make_project(base / "moving", {"test_moving.py": MOVING})
            built = {"fresh": (fresh, None), "det": (det, capture(det, env=env)),
                     "moving": (moving, capture(moving, env=env))}
            index.write_text(json.dumps({name: [str(path), iid] for name, (path, iid) in built.items()}))
        listed = json.loads(index.read_text())
    templates = {name: Template(Path(path), iid) for name, (path, iid) in listed.items()}
    return Lab(base, templates, lock)


def calibrate(lab: Lab, key: str) -> Calibration:
    """Run ``key`` once unfaulted on a copy (shim in count mode): duration and op count.
    Once per test run, like the lab: the first worker to need it measures it."""
    if key not in lab.calibration:
        with FileLock(lab.lock, timeout=600):
            path = lab.base / "calibration.json"
            known = json.loads(path.read_text()) if path.is_file() else {}
            if key not in known:
                op = OPS[key]
                project = clone(lab, op, f"calibrate-{key}")
                module, args = op.argv(lab.templates[op.template].incident_id, project)
                started = time.monotonic()
                result, count = run_with_faults(project, op.fault_root(project), "count", module, *args)
                seconds = time.monotonic() - started
                assert result.returncode in (0, 1), result.stdout + result.stderr
                assert count, f"{key}: no file-system operation counted"
                known[key] = [seconds, count]
                path.write_text(json.dumps(known))
        lab.calibration[key] = Calibration(*known[key])
    return lab.calibration[key]


def clone(lab: Lab, op: Op, name: str) -> Path:
    dest = lab.base / "runs" / f"{name}-{os.urandom(3).hex()}"
    dest.parent.mkdir(exist_ok=True)
    project = clone_project(lab.templates[op.template].project, dest)
    (project / "out").mkdir(exist_ok=True)
    return project


# --------------------------------------------------------------------------- checks


@dataclass
class Tally:
    """What the kills of one test did (recorded into the figures)."""

    attempted: int = 0
    landed: int = 0  # the process died of SIGKILL (not finished before the kill)
    mid_operation: int = 0  # landed after the operation changed the disk and before it completed
    replay_window: int = 0  # replay differed right after the kill (documented close-out window)
    resumed: int = 0
    losses: int = 0  # recorded attempts lost or rewritten (asserted 0)

    def record(self, test: str, **extra: object) -> None:
        record_figures(test, attempted=self.attempted, landed=self.landed, mid_operation=self.mid_operation,
                       replay_window=self.replay_window, resumed=self.resumed, losses=self.losses, **extra)


def root_state(project: Path) -> dict[str, dict[int, bytes]]:
    root = project / ".selfheal"
    return {iid: attempt_bytes(root, iid) for iid in incident_ids(root)}


def completed(op: Op, project: Path, incident_id: Optional[str], before: dict[str, dict[int, bytes]]) -> bool:
    """Whether the killed operation had finished its writes."""
    root = project / ".selfheal"
    if op.name == "capture":
        ids = incident_ids(root)
        return bool(ids) and (root / "error_inbox" / ids[0] / "status.txt").read_text().strip() == "planned"
    assert incident_id is not None
    if op.name == "report":
        return (project / "out" / REPORT_NAME).is_file()
    if op.name == "plan":
        events = _events(root, incident_id)
        return any(e.get("event") == "plan_generated" and e.get("forced") for e in events)
    if op.name == "archive":
        return (root / "error_archive" / "escalated" / incident_id).is_dir()
    # loop: closed out
    if (root / "error_inbox" / incident_id).is_dir():
        status = (root / "error_inbox" / incident_id / "status.txt").read_text().strip()
        return "auto_replan_on_no_progress=true" in op.settings and status == "planned" and (
            root / "error_runs" / incident_id / "run_result.json").is_file()
    return True


def _events(root: Path, incident_id: str) -> list[dict[str, object]]:
    for bucket in ("error_inbox", "error_archive/resolved", "error_archive/escalated"):
        path = root / bucket / incident_id / "audit_tail.jsonl"
        if path.is_file():
            out = []
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a torn line
            return out
    return []


def assert_nothing_lost(project: Path, before: dict[str, dict[int, bytes]], context: str) -> None:
    """Attempts are 1..n, and every attempt recorded before is still there, byte for byte."""
    root = project / ".selfheal"
    for iid in incident_ids(root):
        numbers = attempt_numbers(root, iid)
        assert numbers == list(range(1, len(numbers) + 1)), f"{context}: attempts {numbers}"
        now = attempt_bytes(root, iid)
        for number, data in before.get(iid, {}).items():
            assert now.get(number) == data, f"{context}: attempt {number} of {iid} lost or rewritten"
        verified = [e.get("iteration") for e in _events(root, iid) if e.get("event") == "verification_finished"]
        assert len(verified) == len(set(verified)), f"{context}: duplicate verification_finished {verified}"


def replay_code(project: Path, incident_id: str) -> tuple[int, str]:
    code, out, err = cli("replay", incident_id, "--dir", str(project / ".selfheal"))
    assert "Traceback" not in err
    return code, out + err


def check_after_kill(op: Op, project: Path, before: dict[str, dict[int, bytes]], tally: Tally, context: str) -> None:
    """The invariants right after a kill, then the resume, then the invariants again."""
    root = project / ".selfheal"
    expected = sorted(before)
    if root.exists():
        rows = check_root(root, expected)
        # One write per event line: a SIGKILL cannot tear it (only a short write on a full disk can).
        assert check_files_whole(root)["torn"] == 0, f"{context}: a torn event line"
    else:
        rows = []
        assert not expected
    assert_nothing_lost(project, before, context)
    ids = [str(r["incident_id"]) for r in rows]
    if op.name == "capture":
        assert len(ids) <= 1, f"{context}: {ids}"
    for iid in ids:
        code, text = replay_code(project, iid)
        if code != 0:
            assert code == 3, f"{context}: replay exit {code}: {text}"
            tally.replay_window += 1
    if op.name == "report":
        _check_report_output(op, project, context)
        return
    # Resume: what a user does next.
    if op.name == "capture" and not ids:
        # Killed before the incident appeared: a new run captures normally (no stale lock/build).
        new = capture(project)
        ids = [new]
    for iid in ids:
        if (root / "error_inbox" / iid).is_dir():
            if op.name == "archive":
                # docs/store.md: archiving again completes an interrupted archive.
                done = selfheal(project, "archive", iid, "--as", "escalated")
                assert done.returncode == 0, f"{context}: {done.stdout}{done.stderr}"
            else:
                args = ["loop", iid]
                for setting in op.settings:
                    args += ["--set", setting]
                done = selfheal(project, *args)
                assert done.returncode in (0, 1), f"{context}: resume exit {done.returncode}\n{done.stdout}{done.stderr}"
            assert "Traceback" not in done.stderr + done.stdout, f"{context}: {(done.stdout + done.stderr)[-3000:]}"
        tally.resumed += 1
    rows = check_root(root, ids)
    assert_nothing_lost(project, before, f"{context} (after resume)")
    for row in rows:
        iid = str(row["incident_id"])
        code, text = replay_code(project, iid)
        assert code == 0, f"{context}: replay after resume: {text}"
        if op.name in ("loop", "capture", "plan") and row["bucket"] == "inbox":
            # Only a replan leaves the incident open after a loop, as planned with its run result.
            assert row["status"] == "planned" and (root / "error_runs" / iid / "run_result.json").is_file(), (context, row)
        if op.name in ("loop", "capture", "plan"):
            assert (root / "error_runs" / iid / "run_result.json").is_file(), f"{context}: no final stop"


def _check_report_output(op: Op, project: Path, context: str) -> None:
    """The report file is absent or whole (the same bytes as a normal run's); only temp files beside it."""
    out = project / "out"
    for path in walk_written(out):
        if path.name != REPORT_NAME:
            assert path.name.startswith(f".{REPORT_NAME}.") and path.name.endswith(".tmp"), f"{context}: {path.name}"
    target = out / REPORT_NAME
    killed_copy = target.read_bytes() if target.exists() else None
    _, args = op.argv(incident_id_of(project), project)
    done = selfheal(project, *args)  # the rerun a user would do
    assert done.returncode == 0, done.stderr
    if killed_copy is not None:
        assert killed_copy == target.read_bytes(), f"{context}: partial report"


def incident_id_of(project: Path) -> str:
    ids = incident_ids(project / ".selfheal")
    assert len(ids) == 1
    return ids[0]


# --------------------------------------------------------------------------- the three kill methods


def kill_at_operation(lab: Lab, key: str, at: int, tally: Tally) -> None:
    """SIGKILL just before the ``at``-th file-system operation of ``key``."""
    op = OPS[key]
    project = clone(lab, op, f"{key}-op{at}")
    incident_id = lab.templates[op.template].incident_id
    before = root_state(project)
    snapshot = tree_snapshot(project / ".selfheal") if (project / ".selfheal").exists() else {}
    module, args = op.argv(incident_id, project)
    result, _ = run_with_faults(project, op.fault_root(project), "kill", module, *args, at=at)
    tally.attempted += 1
    context = f"{key}: killed before file-system operation {at}"
    if result.returncode == -signal.SIGKILL:
        tally.landed += 1
        changed = (tree_snapshot(project / ".selfheal") if (project / ".selfheal").exists() else {}) != snapshot
        if op.name == "report":
            changed = bool(walk_written(project / "out"))
        if (changed or at > 1) and not completed(op, project, incident_id, before):
            tally.mid_operation += 1
    else:
        assert result.returncode in (0, 1), f"{context}: {result.stdout}{result.stderr}"
    check_after_kill(op, project, before, tally, context)


def kill_at_random_instant(lab: Lab, key: str, seed: int, tally: Tally) -> None:
    """A real SIGKILL to the process group after a random delay in [0, a normal run's duration]."""
    op = OPS[key]
    normal = calibrate(lab, key).seconds
    rng = random.Random(seed)
    delay = rng.uniform(0.0, normal)
    project = clone(lab, op, f"{key}-seed{seed}")
    incident_id = lab.templates[op.template].incident_id
    before = root_state(project)
    snapshot = tree_snapshot(project / ".selfheal") if (project / ".selfheal").exists() else {}
    module, args = op.argv(incident_id, project)
    proc = subprocess.Popen([PY, "-m", module, *args], cwd=project, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=run_env(),
                            start_new_session=True)
    time.sleep(delay)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the command and any verification child at once
    except ProcessLookupError:
        pass
    code = proc.wait(timeout=60)
    tally.attempted += 1
    context = f"{key}: seed {seed}, SIGKILL after {delay:.3f}s of a {normal:.2f}s run"
    if code == -signal.SIGKILL:
        tally.landed += 1
        now = tree_snapshot(project / ".selfheal") if (project / ".selfheal").exists() else {}
        changed = now != snapshot or (op.name == "report" and bool(walk_written(project / "out")))
        if changed and not completed(op, project, incident_id, before):
            tally.mid_operation += 1
    check_after_kill(op, project, before, tally, context)


def kill_at_step(lab: Lab, key: str, step: str, tally: Tally) -> None:
    """``SELFHEAL_TEST_KILL_AT=<step>``: the loop SIGKILLs itself at that named step."""
    op = OPS[key]
    project = clone(lab, op, f"{key}-{step.replace(':', '-')}")
    incident_id = lab.templates[op.template].incident_id
    before = root_state(project)
    module, args = op.argv(incident_id, project)
    result = subprocess.run([PY, "-m", module, *args], cwd=project, capture_output=True, text=True, timeout=120,
                            env=run_env({KILL_ENV: step}), stdin=subprocess.DEVNULL)
    tally.attempted += 1
    assert result.returncode == -signal.SIGKILL, f"{key}: step {step} never reached: {result.stdout}{result.stderr}"
    tally.landed += 1
    tally.mid_operation += 1  # every named step is inside the loop, after it started writing
    check_after_kill(op, project, before, tally, f"{key}: killed at {step}")


# --------------------------------------------------------------------------- the tests

# Steps that exist only in a replan close-out, and steps a replan never reaches.
REPLAN_ONLY = ("finalize:after_plan_proposed", "finalize:after_replan_written")
ARCHIVE_ONLY = ("finalize:before_archive",)
STEP_CASES = [("loop", s) for s in KILL_STEPS if s not in REPLAN_ONLY] + [
    ("loop-moving", s) for s in KILL_STEPS if s not in REPLAN_ONLY] + [
    ("loop-replan", s) for s in KILL_STEPS if s not in ARCHIVE_ONLY]
DEFAULT_STEP_CASES = [("loop", "iteration:after_verify"), ("loop-moving", "record:after_attempt"),
                      ("loop", "finalize:after_decision_point"), ("loop-replan", "finalize:after_replan_written")]


def test_every_named_loop_step_is_covered() -> None:
    assert {step for _, step in STEP_CASES} == set(KILL_STEPS)


def _step_id(value: object) -> str:
    return str(value).replace(":", "-")


@pytest.mark.parametrize(("key", "step"), DEFAULT_STEP_CASES, ids=_step_id)
def test_kill_loop_at_named_step(lab: Lab, key: str, step: str) -> None:
    tally = Tally()
    kill_at_step(lab, key, step, tally)
    tally.record("test_fault_injection.py::test_kill_loop_at_named_step", method="named_step", op=key)


@pytest.mark.slow
@pytest.mark.parametrize(("key", "step"), STEP_CASES, ids=_step_id)
def test_slow_kill_loop_at_every_named_step(lab: Lab, key: str, step: str) -> None:
    """Every step of loop.KILL_STEPS, in each scenario that reaches it."""
    tally = Tally()
    kill_at_step(lab, key, step, tally)
    tally.record("test_fault_injection.py::test_slow_kill_loop_at_every_named_step", method="named_step", op=key)


# (op, how many points of the default sample)
OPERATION_SAMPLE = {"capture": 1, "plan": 2, "loop": 1, "loop-moving": 1, "archive": 2, "report": 1}


def kill_before_operations(lab: Lab, key: str, points: list[int], test: str, total: int) -> None:
    tally = Tally()
    for at in points:
        kill_at_operation(lab, key, at, tally)
    assert tally.losses == 0
    tally.record(f"test_fault_injection.py::{test}", method="file_operation", op=key, operations=total)


@pytest.mark.parametrize("key", sorted(OPERATION_SAMPLE))
def test_kill_before_each_file_operation(lab: Lab, key: str) -> None:
    """SIGKILL before the N-th write/rename/mkdir under the root (a sample of N, spread evenly)."""
    total = calibrate(lab, key).ops
    points = sample(range(1, total + 1), OPERATION_SAMPLE[key])
    kill_before_operations(lab, key, points, "test_kill_before_each_file_operation", total)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(OPERATION_SAMPLE))
def test_slow_kill_before_every_file_operation(lab: Lab, key: str) -> None:
    """Every N: "before op 1" is a kill before any write, "before op <last>" the last step,
    so every state a crash can leave on disk is visited once."""
    total = calibrate(lab, key).ops
    kill_before_operations(lab, key, list(range(1, total + 1)), "test_slow_kill_before_every_file_operation", total)


RANDOM_SEEDS = {"capture": 1, "plan": 1, "loop": 1, "loop-moving": 1, "archive": 1, "report": 1}
FULL_RANDOM_SEEDS = {"capture": 30, "plan": 10, "loop": 15, "loop-moving": 15, "archive": 10, "report": 10}
RANDOM_CASES = [(key, 1000 + i) for key, n in sorted(RANDOM_SEEDS.items()) for i in range(n)]
FULL_RANDOM_CASES = [(key, 2000 + i) for key, n in sorted(FULL_RANDOM_SEEDS.items()) for i in range(n)]


@pytest.mark.parametrize(("key", "seed"), RANDOM_CASES)
def test_kill_at_random_instant(lab: Lab, key: str, seed: int) -> None:
    tally = Tally()
    kill_at_random_instant(lab, key, seed, tally)
    tally.record("test_fault_injection.py::test_kill_at_random_instant", method="random_instant", op=key)


@pytest.mark.slow
@pytest.mark.parametrize(("key", "seed"), FULL_RANDOM_CASES)
def test_slow_kill_at_random_instant(lab: Lab, key: str, seed: int) -> None:
    tally = Tally()
    kill_at_random_instant(lab, key, seed, tally)
    tally.record("test_fault_injection.py::test_slow_kill_at_random_instant", method="random_instant", op=key)


# --------------------------------------------------------------------------- disk full, read-only

DISK_MODES = ("enospc", "erofs", "short")  # short: half a write lands, then the disk is full
DISK_ERRORS = {"enospc": "No space left on device", "erofs": "Read-only file system", "short": "No space left on device"}


def middle(total: int) -> list[int]:
    return [max(1, (total + 1) // 2)]


def every(total: int) -> list[int]:
    return list(range(1, total + 1))


CLI_DISK_CASES = [(key, mode) for key in ("plan", "loop", "archive", "report") for mode in DISK_MODES]


@pytest.mark.parametrize(("key", "mode"), CLI_DISK_CASES)
def test_cli_disk_fault_is_one_line_exit_6_and_nothing_half_written(lab: Lab, key: str, mode: str) -> None:
    """ENOSPC / EROFS (injected in-process: we run as root, chmod would not stop a write)
    → ``selfheal: error: cannot … : <reason>`` alone on stderr, exit 6; every file whole, no
    temp file left; once the disk is free again the same command completes. Fault from the
    middle file operation on."""
    cli_disk_faults(lab, key, mode, middle, "test_cli_disk_fault_is_one_line_exit_6_and_nothing_half_written")


@pytest.mark.slow
@pytest.mark.parametrize(("key", "mode"), CLI_DISK_CASES)
def test_slow_cli_disk_fault_at_every_operation(lab: Lab, key: str, mode: str) -> None:
    cli_disk_faults(lab, key, mode, every, "test_slow_cli_disk_fault_at_every_operation")


def cli_disk_faults(lab: Lab, key: str, mode: str, points: Callable[[int], list[int]], test: str) -> None:
    op = OPS[key]
    total = calibrate(lab, key).ops
    cases = 0
    for at in points(total):
        project = clone(lab, op, f"{key}-{mode}-{at}")
        incident_id = lab.templates[op.template].incident_id
        before = root_state(project)
        module, args = op.argv(incident_id, project)
        result, _ = run_with_faults(project, op.fault_root(project), mode, module, *args, at=at)
        context = f"{key}: {mode} from file-system operation {at} of {total}"
        assert result.returncode == 6, f"{context}: exit {result.returncode}\n{result.stdout}{result.stderr}"
        line = one_error_line(result.stderr)
        assert DISK_ERRORS[mode] in line, f"{context}: {line}"
        counts = check_files_whole(project / ".selfheal")
        assert counts["temp"] == 0, f"{context}: a temp file was left behind"
        check_root(project / ".selfheal", sorted(before))
        assert_nothing_lost(project, before, context)
        if key == "report":
            assert walk_written(project / "out") == [], f"{context}: {walk_written(project / 'out')}"
        # The disk is free again: the same command completes, and the events agree with the files.
        again = selfheal(project, *args)
        assert again.returncode in (0, 1), f"{context}: rerun exit {again.returncode}\n{again.stdout}{again.stderr}"
        assert "Traceback" not in again.stderr
        if key != "report":
            code, text = replay_code(project, str(incident_id))
            assert code == 0, f"{context}: {text}"
        cases += 1
    record_figures(f"test_fault_injection.py::{test}", method="disk_fault", op=key, mode=mode, cases=cases,
                   tracebacks=0, half_written=0)


@pytest.mark.parametrize("mode", DISK_MODES)
def test_capture_disk_fault_is_one_summary_line_and_pytest_exit_code_unchanged(lab: Lab, mode: str) -> None:
    capture_disk_faults(lab, mode, middle, "test_capture_disk_fault_is_one_summary_line_and_pytest_exit_code_unchanged")


@pytest.mark.slow
@pytest.mark.parametrize("mode", DISK_MODES)
def test_slow_capture_disk_fault_at_every_operation(lab: Lab, mode: str) -> None:
    capture_disk_faults(lab, mode, every, "test_slow_capture_disk_fault_at_every_operation")


def capture_disk_faults(lab: Lab, mode: str, points: Callable[[int], list[int]], test: str) -> None:
    op = OPS["capture"]
    total = calibrate(lab, "capture").ops
    cases = 0
    for at in points(total):
        project = clone(lab, op, f"capture-{mode}-{at}")
        root = project / ".selfheal"
        result, _ = run_with_faults(project, root, mode, "pytest", *PYTEST_SELFHEAL, at=at)
        context = f"capture: {mode} from file-system operation {at} of {total}"
        assert result.returncode == 1, f"{context}: pytest's own exit code changed\n{result.stdout}{result.stderr}"
        assert "Traceback" not in result.stdout + result.stderr, context
        errors = [ln for ln in result.stdout.splitlines() if ln.startswith("selfheal: ")]
        assert len(errors) == 1 and errors[0].startswith("selfheal: error: "), f"{context}: {errors}"
        assert DISK_ERRORS[mode] in errors[0], context
        if root.exists():
            counts = check_files_whole(root)
            assert counts["temp"] == 0, f"{context}: a temp file was left behind"
            check_root(root)
        # Disk free again. An incident that was published before the fault is whole and open:
        # `selfheal loop` takes it to a final stop. Otherwise the next run captures (a half-made
        # build folder never blocks it).
        ids = incident_ids(root)
        if ids:
            done = selfheal(project, "loop", ids[0])
            assert done.returncode in (0, 1), f"{context}: {done.stdout}{done.stderr}"
            code, text = replay_code(project, ids[0])
            assert code == 0, f"{context}: {text}"
        else:
            capture(project)
        cases += 1
    record_figures(f"test_fault_injection.py::{test}", method="disk_fault", op="capture", mode=mode, cases=cases,
                   tracebacks=0, half_written=0)


def test_reports_root_occupied_by_a_file(lab: Lab) -> None:
    """A regular file where the reports root (or one of its parents) should be."""
    project = clone(lab, OPS["capture"], "blocked")
    (project / "blocker").write_text("not a folder\n")
    cases = 0
    for where in ("blocker", "blocker/sub"):
        result = run_pytest_selfheal(project, f"--selfheal-dir={where}")
        assert result.returncode == 1, result.stdout + result.stderr  # pytest's verdict, unchanged
        assert "Traceback" not in result.stdout + result.stderr
        errors = [ln for ln in result.stdout.splitlines() if ln.startswith("selfheal: ")]
        assert len(errors) == 1 and errors[0].startswith("selfheal: error: "), errors
        assert (project / "blocker").read_text() == "not a folder\n"
        cases += 1
    incident_id = lab.templates["det"].incident_id
    assert incident_id is not None
    det = clone(lab, OPS["report"], "blocked-report")
    (det / "blocker").write_text("x")
    for args, code in (
        (["status", "--dir", "blocker"], 3),
        (["report", incident_id, "--output", "blocker/report.md"], 6),
        (["report", incident_id, "--dir", "blocker"], 4),
        (["loop", incident_id, "--dir", "blocker"], 4),
        (["archive", incident_id, "--as", "escalated", "--dir", "blocker"], 4),
    ):
        result = selfheal(det, *args)
        assert result.returncode == code, f"{args}: {result.returncode} {result.stderr}"
        one_error_line(result.stderr)
        cases += 1
    record_figures("test_fault_injection.py::test_reports_root_occupied_by_a_file", method="root_is_file",
                   cases=cases, tracebacks=0, half_written=0)
