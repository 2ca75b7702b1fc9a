"""The shared history: segments on refs/selfheal/history of a real local bare repository.

Every clone is a real git clone of a bare repository (the "remote"); pushes and pulls run
the git binary through ``gitrepo.run_git``, as in CI."""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Optional

import pytest
from helpers import PY, capture, cli, make_project, run_env

from pytest_selfheal.config.keys import HistorySettings
from pytest_selfheal.errors import EXIT_IO, EXIT_OK, EXIT_REFUSED, EXIT_USAGE
from pytest_selfheal.gitrepo import run_git
from pytest_selfheal.history import records as hr
from pytest_selfheal.history import share
from pytest_selfheal.history.db import APPLICATION_ID, MIGRATIONS, HistoryDB
from pytest_selfheal.history.recording import record_and_triage, run_info
from pytest_selfheal.history.segments import (
    MAX_OUTCOMES,
    Segment,
    SegmentError,
    SegmentRun,
    accept,
    decode,
    encode,
    local_segments,
    segment_name,
    single_run,
    write_segment,
)
from pytest_selfheal.history.sources import ActionsContext

FAILING_TESTS = {
    "test_a.py": "def test_a():\n    assert 1 == 2\n",
    "test_b.py": "def test_b():\n    raise KeyError('b')\n",
    "test_c.py": "def test_c():\n    raise ValueError('c')\n",
    "test_d.py": "def test_d():\n    raise TypeError('d')\n",
}


def remote_with_clones(tmp_path: Path, count: int, files: dict[str, str]) -> list[Path]:
    """A bare repository holding a committed project on ``main``, and ``count`` clones of it."""
    seed = make_project(tmp_path / "seed", files)
    bare = tmp_path / "remote.git"
    run_git(tmp_path, ["clone", "--quiet", "--bare", str(seed), str(bare)])
    clones = []
    for n in range(count):
        clone = tmp_path / f"clone{n}"
        run_git(tmp_path, ["clone", "--quiet", str(bare), str(clone)])
        clones.append(clone)
    return clones


def shared_tree(clone: Path) -> list[str]:
    """The files of the remote's refs/selfheal/history, as a fresh ls-remote + fetch sees them."""
    commit = share.fetch(share.Repo(clone), "origin")
    if commit is None:
        return []
    return run_git(clone, ["ls-tree", "-r", "--name-only", commit]).decode().split()


def record(root: Path, project: Path, key: str, failing: list[hr.TestOutcome], *, branch: str = "main",
           at: str = "") -> None:
    ci = ActionsContext(ref_name=branch, sha="c0ffee" * 6 + "c0ff")
    now = dt.datetime.fromisoformat(at) if at else None
    record_and_triage(root, HistorySettings(), run_info(run_key=key, kind=hr.CAPTURE, project_root=project, actions=ci,
                                                        now=now),
                      failing, project_root=project, actions=ci)


def failed(nodeid: str, fingerprint: str, failure_class: Optional[str] = None) -> hr.TestOutcome:
    return hr.TestOutcome(nodeid, hr.FAILED, fingerprint, failure_class)


def recorded_runs(root: Path) -> dict[str, list[str]]:
    with HistoryDB.open(root, create=False) as db:
        return {run.run_key: sorted(o.nodeid for o in outcomes) for run, outcomes in db.runs()}


@pytest.mark.slow  # ~7 s of racing processes; by default: test_a_push_that_loses_the_race_fetches_again_and_succeeds, test_a_segment_pushed_twice_counts_once
def test_three_shards_push_at_once_and_a_pull_request_clone_sees_every_run_as_known(tmp_path: Path) -> None:
    shards = remote_with_clones(tmp_path, 4, FAILING_TESTS)
    *matrix, fourth = shards
    for clone, test_file in zip(matrix, ("test_a.py", "test_b.py", "test_c.py")):
        capture(clone, test_file, env={"GITHUB_REF_NAME": "main", "GITHUB_JOB": "tests"})
    # The three shards push at the same moment: real processes racing on one ref.
    pushes = [subprocess.Popen([PY, "-m", "pytest_selfheal", "history", "push"], cwd=clone, env=run_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
              for clone in matrix]
    for process in pushes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == EXIT_OK, out + err
        assert out.startswith("pushed 1 segment(s) to origin refs/selfheal/history") and err == ""
    assert len([p for p in shared_tree(fourth) if p.startswith("segments/")]) == 3

    code, out, err = cli("history", "pull", cwd=fourth)
    assert code == EXIT_OK and err == ""
    assert "pulled 3 new segment(s) from origin refs/selfheal/history at " in out and ": 3 run(s), 3 new" in out
    assert cli("history", "pull", cwd=fourth).stdout.startswith("pulled 0 new segment(s)")  # only what is new is read
    code, out, _ = cli("history", "--json", cwd=fourth)
    listed = json.loads(out)
    assert code == EXIT_OK and sorted(o["nodeid"] for run in listed for o in run["outcomes"]) == [
        "test_a.py::test_a", "test_b.py::test_b", "test_c.py::test_c"]
    assert {run["branch"] for run in listed} == {"main"} and {run["job"] for run in listed} == {"tests"}

    # The fourth clone's pull request: a failure any shard saw on main is known, its own is new.
    pr_env = {"GITHUB_BASE_REF": "main", "GITHUB_HEAD_REF": "feature", "GITHUB_EVENT_NAME": "pull_request"}
    incident = capture(fourth, "test_b.py", "test_d.py", env=pr_env)
    data = json.loads(next((fourth / ".selfheal").rglob(f"{incident}/incident.json")).read_text())
    labels = {f["nodeid"]: f["triage"]["label"] for f in data["failures"]}
    assert labels == {"test_b.py::test_b": "known", "test_d.py::test_d": "new"}
    # ... and never writes the shared history.
    before = shared_tree(fourth)
    code, _, err = cli("history", "push", cwd=fourth, env={**run_env(), **pr_env, "GITHUB_ACTIONS": "true"})
    assert code == EXIT_REFUSED, err
    assert err.startswith("selfheal: error: selfheal history push: the pull_request event tests code not merged yet")
    assert shared_tree(fourth) == before


def test_a_push_that_loses_the_race_fetches_again_and_succeeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second, reader = remote_with_clones(tmp_path, 3, {"t.py": ""})
    record(first / ".selfheal", first, "capture:first", [failed("t.py::a", "fa")])
    record(second / ".selfheal", second, "capture:second", [failed("t.py::b", "fb")])
    real_fetch = share.fetch
    raced: list[str] = []

    def fetch_then_lose_the_race(repo: object, remote: str) -> object:
        commit = real_fetch(repo, remote)  # type: ignore[arg-type]
        if not raced:  # between our fetch and our push, another writer gets in
            raced.append("second")
            assert share.push(second, second / ".selfheal").pushed == 1
        return commit

    monkeypatch.setattr(share, "fetch", fetch_then_lose_the_race)
    sleeps: list[float] = []
    result = share.push(first, first / ".selfheal", sleep=sleeps.append)
    monkeypatch.undo()
    assert raced == ["second"] and result.pushed == 1 and result.attempts == 2 and len(sleeps) == 1
    assert len(shared_tree(reader)) == 2
    share.pull(reader, reader / ".selfheal")
    assert recorded_runs(reader / ".selfheal") == {"capture:first": ["t.py::a"], "capture:second": ["t.py::b"]}


def test_a_segment_pushed_twice_counts_once(tmp_path: Path) -> None:
    first, second, reader = remote_with_clones(tmp_path, 3, {"t.py": ""})
    root = first / ".selfheal"
    record(root, first, "capture:one", [failed("t.py::a", "fa"), failed("t.py::b", "fb")])
    assert share.push(first, root).pushed == 1
    again = share.push(first, root)
    assert (again.pushed, again.already) == (0, 1)
    # The same segment reaches the remote from another clone (a re-run job restoring a cache).
    (name, path), = local_segments(root).items()
    (second / ".selfheal" / "history-segments").mkdir(parents=True)
    shutil.copy(path, second / ".selfheal" / "history-segments" / path.name)
    assert share.push(second, second / ".selfheal").pushed == 0
    # The same run inside another segment (with a run of its own) still counts once.
    other = SegmentRun(hr.RunInfo(run_key="capture:two", recorded_at="2026-11-20T10:00:00+00:00", kind="capture"),
                       (hr.TestOutcome("t.py::c", hr.FAILED, "fc"),))
    write_segment(second / ".selfheal", Segment((decode(path.read_bytes()).runs[0], other)))
    assert share.push(second, second / ".selfheal").pushed == 1
    pulled = share.pull(reader, reader / ".selfheal")
    assert (pulled.segments, pulled.runs, pulled.added) == (2, 3, 2)
    assert recorded_runs(reader / ".selfheal") == {"capture:one": ["t.py::a", "t.py::b"], "capture:two": ["t.py::c"]}
    again = share.pull(reader, reader / ".selfheal")
    assert (again.segments, again.added) == (0, 0)  # pulling again reads and adds nothing


def test_compaction_merges_old_segments_and_keeps_every_run(tmp_path: Path) -> None:
    writer, other, reader = remote_with_clones(tmp_path, 3, {"t.py": ""})
    root = writer / ".selfheal"
    for n in range(3):
        record(root, writer, f"capture:old{n}", [failed(f"t.py::old{n}", f"f{n}")],
               at=f"2026-01-0{n + 1}T00:00:00+00:00")
    record(root, writer, "capture:new", [failed("t.py::new", "fn")], at="2026-11-20T00:00:00+00:00")
    shutil.copytree(root / "history-segments", other / ".selfheal" / "history-segments")
    assert share.push(writer, root).pushed == 4
    now = dt.datetime(2026, 11, 26, tzinfo=dt.timezone.utc)
    done = share.compact_shared(writer, older_than_days=30, now=now)
    assert (done.replaced, done.runs) == (3, 3)
    files = shared_tree(reader)
    assert sorted(f.split("/")[0] for f in files) == ["compacted", "replaced", "replaced", "replaced", "segments"]
    pulled = share.pull(reader, reader / ".selfheal")
    assert (pulled.segments, pulled.runs, pulled.added) == (2, 4, 4)
    assert sorted(recorded_runs(reader / ".selfheal")) == ["capture:new", "capture:old0", "capture:old1",
                                                           "capture:old2"]
    # A clone that still holds the old segments does not bring them back.
    assert share.push(other, other / ".selfheal").pushed == 0
    assert shared_tree(reader) == files
    # Compacting again: one compacted segment is nothing to merge.
    assert share.compact_shared(writer, older_than_days=30, now=now).replaced == 0


def test_the_history_command_lists_recent_runs_and_reports_bad_input(tmp_path: Path) -> None:
    clone, = remote_with_clones(tmp_path, 1, {"t.py": ""})
    assert cli("history", cwd=clone).returncode == 4  # nothing recorded yet
    code, out, _ = cli("history", "pull", cwd=clone)
    assert code == EXIT_OK and "pulled 0 new segment(s) from origin refs/selfheal/history (none there yet)" in out
    record(clone / ".selfheal", clone, "capture:1", [failed("t.py::a", "fa1234567890", "deterministic")],
           at="2026-11-20T10:00:00+00:00")
    code, out, _ = cli("history", cwd=clone)
    assert code == EXIT_OK and out.splitlines() == [
        "1 recorded run(s), newest first",
        "  2026-11-20T10:00:00+00:00  capture main c0ffeec0ffee -  1 outcome(s)",
        "    failed           fa1234567890  t.py::a",
    ]
    # The database is a cache of the segments: gone, a pull rebuilds it (this run was never pushed).
    (clone / ".selfheal" / "history.sqlite3").unlink()
    code, out, _ = cli("history", "pull", cwd=clone)
    assert code == EXIT_OK and "pulled 1 new segment(s)" in out and ": 1 run(s), 1 new" in out
    assert recorded_runs(clone / ".selfheal") == {"capture:1": ["t.py::a"]}
    code, _, err = cli("history", "push", "--remote", "nowhere", cwd=clone)
    assert code == EXIT_IO and err.startswith("selfheal: error: git fetch nowhere: ") and err.count("\n") == 1
    # --dir relative to a subfolder: the segments are found where the user means, git runs at the top.
    (clone / "sub").mkdir()
    record(clone / "sub" / "elsewhere", clone, "capture:2", [failed("t.py::b", "fb")])
    code, out, _ = cli("history", "push", "--dir", "elsewhere", cwd=clone / "sub")
    assert code == EXIT_OK and out.startswith("pushed 1 segment(s) to origin refs/selfheal/history"), out
    # Credentials in a remote URL never reach the terminal.
    code, out, err = cli("history", "pull", "--remote", "https://bot:ghp_Secret0123456789abcdefABCDEF0123456789@127.0.0.1:9/x.git",
                         cwd=clone)
    assert code == EXIT_IO and err.startswith("selfheal: error: git fetch ") and "ghp_Secret" not in out + err
    assert cli("history", "push", "--test", "t.py::a", cwd=clone).returncode == EXIT_USAGE
    assert cli("history", "compact", cwd=clone).returncode == EXIT_USAGE  # --older-than is required
    assert cli("history", "--older-than", "3", cwd=clone).returncode == EXIT_USAGE


def test_a_segment_is_content_addressed_and_round_trips() -> None:
    run = hr.RunInfo(run_key="capture:x", recorded_at="2026-11-20T10:00:00+00:00", kind="capture", branch="main",
                     tests_run=3)
    segment = single_run(run, [hr.TestOutcome("t.py::a", hr.FAILED, "fp", "deterministic")])
    assert decode(encode(segment)) == segment and encode(segment) == encode(decode(encode(segment)))
    for bad in (b"", b"{}", b'{"format": "selfheal-history-segment", "version": 2, "runs": []}',
                b'{"format": "selfheal-history-segment", "version": 1, "runs": [{"run": {}, "outcomes": []}]}'):
        with pytest.raises(ValueError):
            decode(bad)


def _run_doc(**fields: object) -> bytes:
    run = {"run_key": "capture:x", "recorded_at": "2026-11-20T10:00:00+00:00", "kind": "capture", **fields}
    return json.dumps({"format": "selfheal-history-segment", "version": 1,
                       "runs": [{"run": run, "outcomes": [["t.py::a", "failed", "fp", None]]}]}).encode()


@pytest.mark.parametrize("fields, why", [
    ({"kind": "deploy"}, "run.kind"),
    ({"commit": "; rm -rf /"}, "run.commit"),
    ({"branch": "main\n## heading"}, "run.branch"),
    ({"branch": "../../etc"}, "run.branch"),
    ({"repository": "a/b/c"}, "run.repository"),
    ({"recorded_at": "yesterday"}, "run.recorded_at"),
    ({"recorded_at": "9999-12-31T00:00:00+00:00"}, "in the future"),
    ({"iteration": -1}, "run.iteration"),
    ({"ci_job": "x" * 9000}, "run.ci_job"),
])
def test_an_implausible_segment_is_refused_with_its_reason(fields: dict[str, object], why: str) -> None:
    data = _run_doc(**fields)
    with pytest.raises(SegmentError, match=re.escape(why)):
        accept(segment_name(data), data)
    good = _run_doc(branch="feature/x", repository="octo/app", commit="ab" * 20)
    assert accept(segment_name(good), good).runs[0].run.repository == "octo/app"
    with pytest.raises(SegmentError, match="not the hash of its bytes"):
        accept("ab" * 20, good)
    many = json.dumps({"format": "selfheal-history-segment", "version": 1, "runs": [
        {"run": json.loads(good)["runs"][0]["run"], "outcomes": [["t", "failed", None, None]] * (MAX_OUTCOMES + 1)}]})
    with pytest.raises(SegmentError, match="over the bound"):
        decode(many.encode())


def test_history_push_takes_only_segment_names(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"t.py": ""})
    done = cli("history", "push", "--segments", "../../etc/passwd", cwd=project)
    assert done.returncode == EXIT_USAGE and "is not a history segment name" in done.stderr
    assert cli("history", "pull", "--segments", "ab" * 20, cwd=project).returncode == EXIT_USAGE
    assert cli("history", "push", "--segments", "", cwd=project).stdout == "no segment of this run to push\n"


def test_a_version_1_database_is_migrated_with_its_runs(tmp_path: Path) -> None:
    raw = sqlite3.connect(str(tmp_path / "history.sqlite3"))
    for statement in MIGRATIONS[0]:
        raw.execute(statement)
    raw.execute("INSERT INTO runs (run_key, recorded_at, kind) "
                "VALUES ('capture:old', '2026-01-01T00:00:00+00:00', 'capture')")
    raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()
    with HistoryDB.open(tmp_path) as db:
        assert [run.run_key for run, _ in db.runs()] == ["capture:old"] and db.recorded_segments() == set()
        db.record(hr.RunInfo(run_key="capture:new", recorded_at="2026-11-20T00:00:00+00:00", kind="capture"), [],
                  segment="ab" * 20)
        assert db.recorded_segments() == {"ab" * 20}


def test_with_a_token_git_works_in_a_scratch_repository_and_never_reads_the_projects_config(tmp_path: Path) -> None:
    clone, reader = remote_with_clones(tmp_path, 2, {"t.py": ""})
    record(clone / ".selfheal", clone, "capture:1", [failed("t.py::a", "fa")])
    bare = str(tmp_path / "remote.git")
    # What a test could leave in .git/config: every fetch of the remote sent elsewhere.
    run_git(clone, ["config", f"url.{tmp_path / 'elsewhere.git'}.insteadOf", bare])
    assert cli("history", "push", "--remote", bare, cwd=clone).returncode == EXIT_IO  # the project's config: misled
    env = {**run_env(), "SELFHEAL_TEST_TOKEN": "t0ken"}
    code, out, err = cli("history", "push", "--remote", bare, "--token-env", "SELFHEAL_TEST_TOKEN", cwd=clone, env=env)
    assert code == EXIT_OK and out.startswith("pushed 1 segment(s)"), out + err
    code, out, _ = cli("history", "pull", "--remote", bare, "--token-env", "SELFHEAL_TEST_TOKEN", cwd=reader, env=env)
    assert code == EXIT_OK and ": 1 run(s), 1 new" in out
    assert run_git(clone, ["for-each-ref", "refs/selfheal"]) == b""  # nothing written to the project's repository
    assert cli("history", "push", "--token-env", "NOT_SET_ANYWHERE", cwd=clone).returncode == EXIT_USAGE
    code, _, err = cli("history", "pull", "--token-env", "SELFHEAL_TEST_TOKEN", cwd=clone, env=env)  # origin: a name
    assert code == EXIT_USAGE and "--remote must be a URL" in err
    assert share.token_env("abc")["GIT_CONFIG_VALUE_0"] == "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46YWJj"
