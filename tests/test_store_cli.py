"""``selfheal status`` / ``show`` / ``archive`` through the console script's ``main`` (in
process; one subprocess case for the exit status): exit codes, one-line errors, never a
traceback."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import CliResult, capture, cli, make_project, selfheal_process

from pytest_selfheal.cli.main import command_names
from pytest_selfheal.errors import (
    EXIT_BAD_INPUT,
    EXIT_IO,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    RefusedError,
)
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.run_result import RunResult
from pytest_selfheal.store import judging
from pytest_selfheal.store.root import Store

GHOST = "incident_20990101_000000_zz"


def one_line_error(result: CliResult | subprocess.CompletedProcess[str]) -> str:
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("selfheal: error: ")
    return result.stderr.strip()


def new_incident(store: Store, step: str = "tests/test_a.py::test_x", day: int = 17) -> str:
    return store.create_incident(
        Incident(
            step=step,
            failure_class="deterministic",
            message="assert 1 == 2\nsecond line",
            error_signature=f"TEST_ASSERTION | {step} | assert 1 == 2",
        ),
        log_tail="E assert 1 == 2\n",
        context=RunContext(),
        now=datetime(2026, 2, day, 12, 0, 0, tzinfo=timezone.utc),
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return tmp_path


def dir_args(project: Path) -> list[str]:
    return ["--dir", str(project / ".selfheal")]


def test_status_without_a_root(project: Path) -> None:
    result = cli("status", cwd=project)  # default --dir: ./.selfheal
    assert result.returncode == EXIT_OK and result.stderr == ""
    assert "no incidents" in result.stdout
    result = cli("status", "--json", *dir_args(project))
    assert result.returncode == EXIT_OK and json.loads(result.stdout) == []
    assert not (project / ".selfheal").exists()


def test_status_lists_every_bucket(project: Path) -> None:
    store = Store(project / ".selfheal")
    a = new_incident(store, day=1)
    b = new_incident(store, day=2)
    c = new_incident(store, day=3)
    store.archive(b, "escalated")
    (store.inbox_dir / c / "status.txt").write_text("bogus\n")
    result = cli("status", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ID", "STATUS", "BUCKET", "ATTEMPTS", "SIGNATURE"]
    assert lines[1].split()[:4] == [a, "new", "inbox", "0"]
    assert lines[1].endswith("TEST_ASSERTION | tests/test_a.py::test_x | assert 1 == 2")
    assert lines[2].split()[:3] == [b, "escalated", "escalated"]
    assert lines[3].split()[:3] == [c, "corrupted", "inbox"] and "unknown status 'bogus'" in lines[3]
    rows: list[dict[str, Any]] = json.loads(cli("status", "--json", *dir_args(project)).stdout)
    assert [(r["incident_id"], r["status"], r["bucket"]) for r in rows] == [
        (a, "new", "inbox"),
        (b, "escalated", "escalated"),
        (c, "corrupted", "inbox"),
    ]


def test_status_root_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    result = cli("status", "--dir", str(tmp_path / "f"))
    assert result.returncode == EXIT_BAD_INPUT
    assert "not a directory" in one_line_error(result)


def write_plan(store: Store, incident_id: str) -> None:
    store.write_plan(
        incident_id,
        Plan.from_json({
            "incident_id": incident_id,
            "generated_at": "2026-02-17T12:01:00+00:00",
            "summary": "1 failing test",
            "root_cause_hypotheses": [],
            "actions": [{"id": "A1", "title": "Fix test_x", "priority": "P0", "risk": "low", "target_paths": [], "verification": []}],
            "verification_commands": ["tests/test_a.py::test_x"],
            "done_criteria": [],
        }, "a test plan"),
        "# plan\n",
    )


def fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        label, _, value = line.partition("  ")
        if label.strip():
            out[label.strip()] = value.strip()
    return out


def test_show_text_and_json(project: Path) -> None:
    store = Store(project / ".selfheal")
    incident_id = new_incident(store)
    write_plan(store, incident_id)
    store.set_status(incident_id, "planned")
    store.set_status(incident_id, "running")
    store.write_attempt(
        incident_id,
        Attempt.from_json({
            "incident_id": incident_id,
            "iteration": 1,
            "started_at": "2026-02-17T12:02:00+00:00",
            "finished_at": "2026-02-17T12:03:00+00:00",
            "actions_applied": [],
            "verification_commands": ["tests/test_a.py::test_x"],
            "verification_passed": False,
            "result": "stop",
            "stop_reason": "max_iterations",
            "error_signature": "sig",
        }, "test attempt"),
    )
    store.write_run_result(
        incident_id,
        RunResult.from_json({"incident_id": incident_id, "final_status": "escalated", "loops_used": 1,
                             "runtime_minutes": 0, "same_error_repeats": 1, "archived_to": None,
                             "stop_reason": "max_iterations"}, "test run result"),
    )
    result = cli("show", incident_id, cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    shown = fields(result.stdout)
    assert shown["incident"] == incident_id
    assert shown["status"] == f"running (inbox: error_inbox/{incident_id})"
    assert shown["message"] == "assert 1 == 2 second line"  # kept on one line
    assert shown["plan"] == "1 failing test (1 actions, 1 verification commands)"
    assert "A1: Fix test_x" in result.stdout
    assert shown["attempts"] == "1"
    assert "#1: failed, stop, stop_reason max_iterations" in result.stdout
    assert shown["run result"] == "escalated after 1 loops, stop_reason max_iterations"
    data = json.loads(cli("show", incident_id, "--json", *dir_args(project)).stdout)
    assert data["incident"]["incident_id"] == incident_id
    assert (data["status"], data["bucket"], data["attempts"]) == ("running", "inbox", 1)
    assert data["run_result"]["final_status"] == "escalated"
    assert data["plan"]["actions"] == [{"id": "A1", "title": "Fix test_x"}]
    assert data["attempt_results"][0]["stop_reason"] == "max_iterations"
    assert data["events"] == 3 and data["warnings"] == []
    (store.incident_dir(incident_id) / "status.txt").write_text("planned\n", encoding="utf-8")  # a hand edit
    data = json.loads(cli("show", incident_id, "--json", *dir_args(project)).stdout)
    assert data["status"] == data["incident"]["status"] == "planned"  # status.txt's, as in the report


def test_show_minimal_incident(project: Path) -> None:
    store = Store(project / ".selfheal")
    incident_id = new_incident(store)
    shown = fields(cli("show", incident_id, *dir_args(project)).stdout)
    assert (shown["plan"], shown["attempts"], shown["run result"], shown["events"]) == ("none", "0", "none", "1")


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["show", "../etc"], EXIT_USAGE, "invalid incident id '../etc'"),
        (["show", "/abs/path"], EXIT_USAGE, "invalid incident id"),
        (["show", "incident_" + "x" * 300], EXIT_USAGE, "invalid incident id"),
        (["show", GHOST], EXIT_NOT_FOUND, f"no incident {GHOST}"),
        (["archive", GHOST, "--as", "resolved"], EXIT_NOT_FOUND, f"no incident {GHOST}"),
        (["archive", "..", "--as", "resolved"], EXIT_USAGE, "invalid incident id"),
        (["archive", GHOST, "--as", "done"], EXIT_USAGE, "invalid choice"),
        (["archive", GHOST], EXIT_USAGE, "--as"),
    ],
)
def test_error_exit_codes(project: Path, args: list[str], code: int, needle: str) -> None:
    result = cli(*args, *dir_args(project))
    assert result.returncode == code
    assert needle in one_line_error(result)
    assert result.stdout == ""
    assert not (project / ".selfheal").exists()  # errors create nothing


@pytest.mark.parametrize(
    "args,code",
    [(["show", "../etc"], EXIT_USAGE), (["show", GHOST], EXIT_NOT_FOUND), (["archive", GHOST, "--as", "x"], EXIT_USAGE)],
)
def test_error_exit_codes_subprocess(project: Path, args: list[str], code: int) -> None:
    # The process boundary: argparse's SystemExit and main's return value as the exit status.
    result = selfheal_process(project, *args)
    assert "Traceback" not in result.stderr
    assert result.returncode == code
    one_line_error(result)


def test_show_corrupted_incident(project: Path) -> None:
    store = Store(project / ".selfheal")
    incident_id = new_incident(store)
    path = store.inbox_dir / incident_id / "incident.json"
    path.write_text(path.read_text()[:40])
    result = cli("show", incident_id, cwd=project)
    assert result.returncode == EXIT_BAD_INPUT
    assert f"{path}: corrupted JSON" in one_line_error(result)


def test_show_corrupted_attempt(project: Path) -> None:
    store = Store(project / ".selfheal")
    incident_id = new_incident(store)
    store.runs_dir(incident_id).mkdir(parents=True)
    (store.runs_dir(incident_id) / "attempt_01.json").write_text("{")
    result = cli("show", incident_id, *dir_args(project))
    assert result.returncode == EXIT_BAD_INPUT
    assert "attempt_01.json: corrupted JSON" in one_line_error(result)


def test_archive_cli(project: Path) -> None:
    store = Store(project / ".selfheal")
    incident_id = new_incident(store)
    # resolved needs a run: refused, nothing moved
    result = cli("archive", incident_id, "--as", "resolved", cwd=project)
    assert result.returncode == EXIT_REFUSED
    assert one_line_error(result) == (
        f"selfheal: error: cannot move incident {incident_id} from new to resolved (allowed from new: planned, escalated)"
    )
    assert store.locate(incident_id)[0] == "inbox"

    result = cli("archive", incident_id, "--as", "escalated", "--json", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    assert json.loads(result.stdout) == {
        "incident_id": incident_id,
        "bucket": "escalated",
        "status": "escalated",
        "previous_status": "new",
        "path": f"error_archive/escalated/{incident_id}",
    }
    assert not (store.inbox_dir / incident_id).exists()
    assert store.locate(incident_id)[0] == "escalated"

    result = cli("archive", incident_id, "--as", "escalated", *dir_args(project))
    assert result.returncode == EXIT_REFUSED
    assert "already archived in error_archive/escalated" in one_line_error(result)


def test_archive_text_output(project: Path) -> None:
    store = Store(project / ".selfheal")
    incident_id = new_incident(store)
    store.set_status(incident_id, "planned")
    store.set_status(incident_id, "running")
    result = cli("archive", incident_id, "--as", "resolved", *dir_args(project))
    assert result.returncode == EXIT_OK
    assert result.stdout == f"archived {incident_id} (running -> resolved) to error_archive/resolved/{incident_id}\n"


def test_archive_io_error(project: Path) -> None:
    store = Store(project / ".selfheal")
    incident_id = new_incident(store)
    lock = project / ".selfheal" / ".lock"
    lock.unlink()
    lock.mkdir()  # the lock file cannot be opened: like an unwritable root
    result = cli("archive", incident_id, "--as", "escalated", cwd=project)
    assert result.returncode == EXIT_IO
    assert "cannot lock" in one_line_error(result)
    assert store.locate(incident_id)[0] == "inbox"


# --------------------------------------------------------------------------- prune


def test_prune_deletes_only_archived_incidents_old_enough(project: Path) -> None:
    store = Store(project / ".selfheal")
    closed = new_incident(store, day=17)
    still_open = new_incident(store, day=18)
    write_plan(store, closed)
    store.write_run_file(closed, "prompt_01.md", "prompt")
    assert cli("archive", closed, "--as", "escalated", cwd=project).returncode == EXIT_OK
    # Archived just now: not older than a day.
    result = cli("prune", "--older-than", "1", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == "pruned 0 archived incident(s) older than 1 day(s)\n"
    assert store.exists(closed)
    result = cli("prune", "--older-than", "0", "--dry-run", "--json", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    report = json.loads(result.stdout)
    assert report["dry_run"] is True and [p["incident_id"] for p in report["pruned"]] == [closed]
    assert store.exists(closed) and store.plans_dir(closed).is_dir()
    result = cli("prune", "--older-than", "0", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout.splitlines()[0].startswith(f"pruned {closed} (escalated, archived ")
    assert not store.exists(closed)
    assert not store.plans_dir(closed).exists() and not store.runs_dir(closed).exists()
    assert store.exists(still_open)  # the inbox is never pruned
    assert store.incident_ids() == [still_open]


def test_prune_keeps_an_incident_whose_stop_said_the_tests_pass_without_a_fix(project: Path) -> None:
    store = Store(project / ".selfheal")
    stopped, other = new_incident(store, day=17), new_incident(store, day=18)
    for incident_id in (stopped, other):
        assert cli("archive", incident_id, "--as", "escalated", cwd=project).returncode == EXIT_OK
    judging.remember_stop(project, judging.RememberedStop(stopped, "tests_edited", "tests/test_a.py", 1, 3))
    result = cli("prune", "--older-than", "0", cwd=project)
    assert result.stdout.splitlines()[0] == (f"kept {stopped}: it stopped tests_edited, which stands until it "
                                             "succeeds or a person takes a new seal"), result.stdout
    assert store.incident_ids() == [stopped]


def test_prune_completes_an_interrupted_prune_and_refuses_an_open_incident(project: Path) -> None:
    store = Store(project / ".selfheal")
    closed = new_incident(store)
    write_plan(store, closed)
    store.archive(closed, "escalated")
    # A prune killed after its first step: the folder renamed, the plan still there.
    (store.escalated_dir / closed).rename(store.archive_root / f".pruning_{closed}")
    assert store.incident_ids() == []
    result = cli("prune", cwd=project)
    assert result.returncode == EXIT_OK, result.stderr
    assert not (store.archive_root / f".pruning_{closed}").exists() and not store.plans_dir(closed).exists()
    still_open = new_incident(store, day=18)
    with pytest.raises(RefusedError, match="is open"):
        store.prune(still_open)
    assert store.exists(still_open)


@pytest.mark.parametrize("days", ["-1", "nan", "soon", "inf"])
def test_prune_rejects_a_bad_age(project: Path, days: str) -> None:
    result = cli("prune", "--older-than", days, cwd=project)
    assert result.returncode == EXIT_USAGE
    assert one_line_error(result) == f"selfheal: error: --older-than: expected a number of days >= 0, got {days!r}"


def test_show_lists_the_failures_grouped_by_root_cause(tmp_path: Path) -> None:
    tests = "".join(f"def test_{n}():\n    assert {n} == 0\n\n" for n in ("one", "two", "three", "four", "five", "six"))
    project = make_project(tmp_path / "p", {"test_many.py": "one, two, three, four, five, six = range(1, 7)\n\n" + tests})
    incident_id = capture(project)
    code, out, err = cli("show", incident_id, "--json", cwd=project)
    assert code == EXIT_OK, err
    data = json.loads(out)
    causes = data["root_causes"]
    # The root causes are the plan's actions and partition the failures.
    assert [c["action"] for c in causes] == [a["id"] for a in data["plan"]["actions"]]
    grouped = [n for c in causes for n in c["nodeids"]]
    assert sorted(grouped) == sorted(f["nodeid"] for f in data["incident"]["failures"]) and len(grouped) == 6
    code, text, _ = cli("show", incident_id, cwd=project)
    assert f"failures    6 in {len(causes)} root cause(s)" in text
    for cause in causes:
        assert f"{cause['action']}: " in text and f"{len(cause['nodeids'])} failing test(s)" in text


def test_help_groups_the_commands_a_newcomer_starts_with_and_says_what_the_loop_is() -> None:
    code, out, _err = cli("--help")
    assert code == 0
    assert "RALF-Lite loop re-runs only its failing tests" in " ".join(out.split())
    start = out.index("Start here:")
    assert start < out.index("Incidents:") < out.index("CI and the failure history:") < out.index("Coding agents:")
    listed = [line.split()[0] for line in out[start:].splitlines() if line[:2] == "  " and line[2:3] != " "]
    assert listed[:5] == ["demo", "status", "show", "loop", "report"]
    assert sorted(listed) == sorted(command_names())  # every command once, none left out


def test_show_bounds_its_root_causes_and_actions(tmp_path: Path) -> None:
    # 25 distinct failures are 25 root causes: the text lists 20 of each and counts the rest,
    # the JSON keeps them all.
    tests = "".join(f"def test_{n}():\n    assert {n} == -1\n\n" for n in range(25))
    project = make_project(tmp_path / "p", {"test_many.py": tests})
    incident_id = capture(project)
    code, out, err = cli("show", incident_id, "--json", cwd=project)
    assert code == EXIT_OK, err
    assert len(json.loads(out)["root_causes"]) == 25
    code, text, _ = cli("show", incident_id, cwd=project)
    assert "failures    25 in 25 root cause(s)" in text
    assert "... and 5 more root cause(s) (--json lists them all)" in text
    assert "... and 5 more action(s) (plan.md, plan.json)" in text
    assert text.count("failing test(s)") == 20
