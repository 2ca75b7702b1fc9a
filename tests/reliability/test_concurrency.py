"""Several processes on one reports root at once ("concurrent runs on the same root
are serialised by a lock").

- 4 ``pytest --selfheal`` processes, each in its own project with its own failures, all
  writing to ONE shared ``--selfheal-dir``, released at the same instant → 4 incidents,
  each failure captured exactly once, every file valid; and the same with ``-n 2`` each;
- two ``selfheal loop`` on the same incident → one proceeds, the other is refused (exit 5),
  nothing corrupted; two loops on different incidents of one root both proceed.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from helpers import FULL, PY, PYTEST_SELFHEAL, capture, cli, make_project, run_env
from schema_check import assert_valid

from .conftest import attempt_numbers, check_root, one_error_line, record_figures

# Each failing test waits for the start flag, so the processes reach their captures together.
WAITING_FAILURES = """
    import os, time

    GO = {go!r}

    def _wait():
        open(GO + ".ready.%d.%d" % ({n}, os.getpid()), "a").close()
        deadline = time.time() + 60
        while not os.path.exists(GO) and time.time() < deadline:
            time.sleep(0.005)

    def test_ok_{n}():
        assert True

    def test_first_{n}():
        _wait()
        assert {n} + 1 == 100, "first failure of process {n}"

    def test_second_{n}():
        _wait()
        raise ValueError("second failure of process {n}")
"""

# Fails at capture; a verification run (the loop sets SELFHEAL_VERIFYING) writes a flag and
# takes a few seconds, so a second loop is started while the first one holds the incident.
# The verification run holds the loop until the test releases it (``<flag>.release``), so
# the second loop surely meets a running one, however slowly a loaded machine starts it.
SLOW_VERIFY = """
    import os, time

    FLAG = {flag!r}

    def test_slow():
        if os.environ.get("SELFHEAL_VERIFYING"):
            open(FLAG, "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(FLAG + ".release") and time.monotonic() < deadline:
                time.sleep(0.02)
        assert False, "fails every time"
"""


def release(flag: Path) -> None:
    """Let the held verification run finish."""
    Path(f"{flag}.release").touch()


def start_capture(project: Path, root: Path, extra: Sequence[str] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen([PY, "-m", "pytest", *PYTEST_SELFHEAL, f"--selfheal-dir={root}", *extra],
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=run_env(), stdin=subprocess.DEVNULL)


def check_each_failure_once(root: Path, projects: list[Path], per_project: int) -> dict[str, str]:
    """One incident per project, holding exactly that project's failures, all valid."""
    rows = check_root(root)
    assert len(rows) == len(projects), rows
    by_rootdir: dict[str, str] = {}
    seen: list[str] = []
    for row in rows:
        iid = str(row["incident_id"])
        incident = json.loads((root / row["path"] / "incident.json").read_text())
        assert_valid("incident", incident)
        assert_valid("plan", json.loads((root / "error_plans" / iid / "plan.json").read_text()))
        assert row["status"] == "planned"
        by_rootdir[incident["rootdir"]] = iid
        nodeids = [f["nodeid"] for f in incident["failures"]]
        assert len(nodeids) == per_project, nodeids
        seen.extend(nodeids)
        code, out, err = cli("replay", iid, "--dir", str(root))
        assert code == 0, out + err
    assert sorted(by_rootdir) == sorted(str(p) for p in projects)  # each project captured once
    assert len(seen) == len(set(seen)) == per_project * len(projects)  # each failure once
    return by_rootdir


# The xdist variant (~17 s) runs in the slow tier: the serial one covers the lock by default.
@pytest.mark.parametrize("xdist", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["serial", "xdist-n2"])
def test_four_captures_on_one_root_at_once(tmp_path: Path, xdist: bool) -> None:
    rounds = 3 if FULL else 1
    for round_ in range(rounds):
        root = tmp_path / f"shared-root-{round_}"
        go = tmp_path / f"go-{round_}"
        projects = [
            make_project(tmp_path / f"r{round_}-p{n}", {f"test_p{n}.py": WAITING_FAILURES.format(go=str(go), n=n)})
            for n in range(4)
        ]
        extra = ["-p", "xdist", "-n", "2"] if xdist else []
        procs = [start_capture(p, root, extra) for p in projects]
        # Release them together once every failing test of every process waits at the flag.
        deadline = time.monotonic() + 120
        waiting = len(projects) * (2 if xdist else 1)  # serial: the 2nd failing test runs after the 1st
        while len(list(tmp_path.glob(f"go-{round_}.ready.*"))) < waiting:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a capture did not start"
            time.sleep(0.01)
        go.write_text("")
        for proc in procs:
            out, _ = proc.communicate(timeout=180)
            assert proc.returncode == 1, out  # pytest's verdict: tests failed
            assert "Traceback" not in out and "selfheal: error" not in out and "internal error" not in out, out
        check_each_failure_once(root, projects, per_project=2)
    record_figures("test_concurrency.py::test_four_captures_on_one_root_at_once", processes=4,
                   workers_each=2 if xdist else 1, runs=rounds, incidents=4 * rounds, corrupted=0, duplicates=0)


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_two_loops_on_one_incident(tmp_path: Path) -> None:
    flag = tmp_path / "verifying.flag"
    project = make_project(tmp_path / "slow", {"test_slow.py": SLOW_VERIFY.format(flag=str(flag))})
    incident_id = capture(project)
    root = project / ".selfheal"
    first = subprocess.Popen([PY, "-m", "pytest_selfheal", "loop", incident_id], cwd=project, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=run_env(), stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not flag.exists():  # the first loop holds the incident and is verifying
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.02)
    second = subprocess.run([PY, "-m", "pytest_selfheal", "loop", incident_id], cwd=project, capture_output=True,
                            text=True, env=run_env(), timeout=60, stdin=subprocess.DEVNULL)
    release(flag)
    assert second.returncode == 5, second.stdout + second.stderr
    line = one_error_line(second.stderr)
    assert "a loop is already running" in line
    out, err = first.communicate(timeout=120)
    assert first.returncode == 1, out + err  # escalated: repeated_fingerprint
    assert "Traceback" not in err
    check_root(root, [incident_id])
    assert attempt_numbers(root, incident_id) == [1]
    code, text, _ = cli("replay", incident_id, "--dir", str(root))
    assert code == 0, text
    races = race_two_loops(tmp_path, rounds=5 if FULL else 1)
    record_figures("test_concurrency.py::test_two_loops_on_one_incident", processes=2, runs=1 + races,
                   refused=1 + races, corrupted=0, duplicates=0)


def race_two_loops(tmp_path: Path, rounds: int) -> int:
    """Both loops started at the same instant: exactly one runs the incident; the other is
    refused (exit 5: "already running", or "already archived" when it came second)."""
    flag = tmp_path / "race.flag"
    template = make_project(tmp_path / "race", {"test_slow.py": SLOW_VERIFY.format(flag=str(flag))})
    for n in range(rounds):
        Path(f"{flag}.release").unlink(missing_ok=True)
        incident_id = capture(template)
        root = template / ".selfheal"
        procs = [subprocess.Popen([PY, "-m", "pytest_selfheal", "loop", incident_id], cwd=template,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env(),
                                  stdin=subprocess.DEVNULL) for _ in range(2)]
        deadline = time.monotonic() + 120
        while all(p.poll() is None for p in procs):  # one is refused while the other is held
            assert time.monotonic() < deadline, "neither loop was refused"
            time.sleep(0.02)
        release(flag)
        results = [(p.wait(timeout=120), *p.communicate()) for p in procs]
        codes = sorted(code for code, _, _ in results)
        assert codes == [1, 5], results
        refused = next(err for code, _, err in results if code == 5)
        line = one_error_line(refused)
        assert "already running" in line or "already archived" in line, line
        check_root(root, [incident_id])
        assert attempt_numbers(root, incident_id) == [1], f"round {n}"
        code, text, _ = cli("replay", incident_id, "--dir", str(root))
        assert code == 0, text
    return rounds


def test_loops_on_two_incidents_of_one_root_both_proceed(tmp_path: Path) -> None:
    a = make_project(tmp_path / "a", {"test_a.py": "def test_a():\n    assert 1 == 2\n"})
    b = make_project(tmp_path / "b", {"test_b.py": "def test_b():\n    assert 2 == 3\n"})
    root = tmp_path / "root"
    ids = []
    for project in (a, b):
        before = {r["incident_id"] for r in check_root(root)} if root.exists() else set()
        result = subprocess.run([PY, "-m", "pytest", *PYTEST_SELFHEAL, f"--selfheal-dir={root}"], cwd=project,
                                capture_output=True, text=True, env=run_env(), timeout=120)
        assert result.returncode == 1, result.stdout
        ids.extend(r["incident_id"] for r in check_root(root) if r["incident_id"] not in before)
    procs = [subprocess.Popen([PY, "-m", "pytest_selfheal", "loop", iid, "--dir", str(root)], cwd=project,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=run_env())
             for iid, project in zip(ids, (a, b))]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, out + err
    rows = check_root(root, ids)
    assert sorted(r["bucket"] for r in rows) == ["escalated", "escalated"]
    for iid in ids:
        assert attempt_numbers(root, iid) == [1]
