"""The shared history is untrusted input (docs/history.md "Segments are untrusted input").

Real bare repositories as the remote, real clones, the git binary: a segment is imported or
pushed only when its name is the hash of its bytes and its records are plausible; a blob
over the bound is never read; a refused segment is said once and never read again; only
merged code writes the shared history, and ``selfheal ci`` shares only what it recorded.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from fake_github import FakeGitHub
from helpers import cli, make_project, run_env
from test_ci import actions_env, outputs_of, run_ci

from pytest_selfheal.config.keys import HistorySettings
from pytest_selfheal.errors import EXIT_OK, EXIT_REFUSED, EXIT_UNRESOLVED
from pytest_selfheal.gitrepo import run_git
from pytest_selfheal.history import records as hr
from pytest_selfheal.history import share
from pytest_selfheal.history.db import HistoryDB
from pytest_selfheal.history.recording import record_and_triage, run_info
from pytest_selfheal.history.segments import (
    MAX_SEGMENT_BYTES,
    Segment,
    SegmentRun,
    decode,
    encode,
    local_segments,
    segment_name,
    segments_dir,
    tree_path,
    write_segment,
)
from pytest_selfheal.history.sources import ActionsContext

BUG = "def test_bug():\n    assert 1 + 1 == 3\n"
REPO = "octo-org/hello-world"


def remote_and_clone(tmp_path: Path, name: str = "clone") -> tuple[Path, Path]:
    seed = make_project(tmp_path / "seed", {"test_bug.py": BUG})
    bare = tmp_path / "remote.git"
    if not bare.exists():
        run_git(tmp_path, ["clone", "--quiet", "--bare", str(seed), str(bare)])
    clone = tmp_path / name
    run_git(tmp_path, ["clone", "--quiet", str(bare), str(clone)])
    return bare, clone


def segment(*, at: str = "2026-01-01T00:00:00+00:00", branch: str = "main", key: str = "capture:run_x",
            outcome: str = hr.PASSED_ON_RERUN, runs: int = 1) -> bytes:
    """A segment whose runs say ``test_bug.py::test_bug`` passed on re-run (a flake)."""
    items = tuple(SegmentRun(hr.RunInfo(f"{key}{n}", at, hr.CAPTURE, branch=branch, repository=REPO),
                             (hr.TestOutcome("test_bug.py::test_bug", outcome, "fp", "deterministic"),))
                  for n in range(runs))
    return encode(Segment(items))


def plant(clone: Path, files: dict[str, bytes]) -> None:
    """Commit ``files`` (tree path: bytes) onto the remote's refs/selfheal/history with plain
    git, as anyone who may push to the repository could."""
    parent = share.fetch(share.Repo(clone), "origin")
    env = {"GIT_INDEX_FILE": str(clone / ".git" / "plant-index")}
    run_git(clone, ["read-tree", parent] if parent else ["read-tree", "--empty"], env=env)
    for path, data in files.items():
        blob = run_git(clone, ["hash-object", "-w", "--stdin"], stdin=data).decode().strip()
        run_git(clone, ["update-index", "--add", "--cacheinfo", f"100644,{blob},{path}"], env=env)
    tree = run_git(clone, ["write-tree"], env=env).decode().strip()
    commit = run_git(clone, ["commit-tree", tree, *(["-p", parent] if parent else []), "-m", "planted"]).decode().strip()
    run_git(clone, ["push", "--quiet", "origin", f"{commit}:{share.HISTORY_REF}"])


def test_crafted_segments_are_refused_once_and_a_big_blob_is_never_read(tmp_path: Path) -> None:
    """Before: a segment named ``abab…``, one recorded in 9999 (in every flake window forever),
    one with a free-text branch were imported; every blob was read whole (a 120 MB blob: 258 MB
    peak); a segment that could not be read was downloaded again on every pull."""
    _, writer = remote_and_clone(tmp_path, "writer")
    good = segment(outcome=hr.FAILED)
    future = segment(at="9999-12-31T00:00:00+00:00", runs=3)
    branchy = segment(branch="main\n## injected", key="capture:run_b")
    big = b" " * (MAX_SEGMENT_BYTES + 1024)  # whitespace: git stores it small, reading it costs its size
    plant(writer, {
        tree_path(segment_name(good), compacted=False): good,
        tree_path("ab" * 20, compacted=False): segment(runs=3, key="capture:run_a"),  # not its hash
        tree_path(segment_name(future), compacted=False): future,
        tree_path(segment_name(branchy), compacted=False): branchy,
        tree_path(segment_name(big), compacted=True): big,
    })
    _, reader = remote_and_clone(tmp_path, "reader")
    root = reader / ".selfheal"
    tracemalloc.start()
    try:
        first = share.pull(reader, root)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MAX_SEGMENT_BYTES, f"{peak:,} bytes at peak: the big blob was read"
    assert (first.segments, first.runs) == (1, 1)
    reasons = sorted(line.split(": ", 1)[1] for line in first.problems)
    assert len(reasons) == 4, first.problems
    assert any("its name is not the hash of its bytes" in r for r in reasons)
    assert any("is in the future" in r for r in reasons)
    assert any("is not a branch name" in r for r in reasons)
    assert any("over the bound" in r and "not read" in r for r in reasons)
    # Remembered: the next pull says nothing and reads nothing of them.
    second = share.pull(reader, root)
    assert (second.segments, second.problems) == (0, ())
    with HistoryDB.open(root) as db:
        assert len(db.refused_segments()) == 4
    # The deterministic bug stays a bug: no planted flake rate makes it flaky.
    ci = ActionsContext(ref_name="main")
    result = record_and_triage(root, HistorySettings(), run_info(run_key="r", kind=hr.CAPTURE, project_root=reader,
                                                                 actions=ci),
                               [hr.TestOutcome("test_bug.py::test_bug", hr.FAILED, "fp")], project_root=reader,
                               actions=ci)
    assert result.triage["test_bug.py::test_bug"].label == "known"  # the one good segment: failed on main


@pytest.mark.slow  # ~3 s to write and hash 120 MB; by default the same bound with 16 MiB + 1 KiB
def test_a_120_mb_blob_costs_no_memory(tmp_path: Path) -> None:
    _, writer = remote_and_clone(tmp_path, "writer")
    big = b"\n" * (120 * 1024 * 1024)
    plant(writer, {tree_path(segment_name(big), compacted=False): big})
    _, reader = remote_and_clone(tmp_path, "reader")
    tracemalloc.start()
    try:
        pulled = share.pull(reader, reader / ".selfheal")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024 and len(pulled.problems) == 1 and "not read" in pulled.problems[0]


@pytest.mark.parametrize("name, event, ref", [
    ("merge_group", {"merge_group": {"base_sha": "0" * 40}}, "refs/heads/gh-readonly-queue/main/pr-1"),
    ("pull_request_review", {"pull_request": {"number": 1}}, "refs/pull/1/merge"),
    ("issue_comment", {"issue": {"number": 1, "pull_request": {}}}, "refs/heads/main"),
    ("workflow_dispatch", {"ref": "refs/heads/feature"}, "refs/heads/feature"),
    ("push", {"ref": "refs/heads/feature"}, "refs/heads/feature"),
    ("push", {"ref": "refs/heads/main"}, "refs/heads/main"),  # the payload names no default branch
    ("pull_request_target", {"pull_request": {"number": 1}}, "refs/heads/main"),
])
def test_events_that_test_unmerged_code_never_write_the_shared_history(tmp_path: Path, name: str,
                                                                        event: dict[str, object], ref: str) -> None:
    """Before: push and compact refused on pull_request and pull_request_target only."""
    bare, clone = remote_and_clone(tmp_path)
    write_segment(clone / ".selfheal", decode(segment(outcome=hr.FAILED)))
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps({**event, "repository": {"full_name": REPO, "default_branch": "main"}}
                                     if "main" not in ref or name != "push" else event))
    env = run_env({"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": name, "GITHUB_EVENT_PATH": str(event_file),
                   "GITHUB_REF": ref, "GITHUB_REPOSITORY": REPO})
    for action in (["push"], ["compact", "--older-than", "0"]):
        done = cli("history", *action, cwd=clone, env=env)
        assert done.returncode == EXIT_REFUSED, (action, done.stdout, done.stderr)
        assert done.stderr.startswith("selfheal: error: selfheal history ") and "never writes it" in done.stderr
    assert run_git(bare, ["for-each-ref", share.HISTORY_REF]) == b""


def test_the_default_branch_and_a_schedule_write(tmp_path: Path) -> None:
    bare, clone = remote_and_clone(tmp_path)
    write_segment(clone / ".selfheal", decode(segment(outcome=hr.FAILED)))
    event_file = tmp_path / "event.json"
    event_file.write_text(json.dumps({"ref": "refs/heads/main", "repository": {"full_name": REPO,
                                                                               "default_branch": "main"}}))
    for name in ("push", "schedule"):
        env = run_env({"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": name, "GITHUB_EVENT_PATH": str(event_file),
                       "GITHUB_REF": "refs/heads/main", "GITHUB_REPOSITORY": REPO})
        done = cli("history", "push", cwd=clone, env=env)
        assert done.returncode == EXIT_OK, done.stderr
    assert run_git(bare, ["for-each-ref", share.HISTORY_REF]) != b""


DROPPER = """
import json, os
from pathlib import Path

from pytest_selfheal.history import records as hr
from pytest_selfheal.history.segments import Segment, SegmentRun, encode, segment_name

folder = Path(os.environ["DROP_INTO"])
folder.mkdir(parents=True, exist_ok=True)
flake = encode(Segment((SegmentRun(hr.RunInfo("capture:planted", "2026-01-01T00:00:00+00:00", "capture",
                                               branch="main"),
                                   (hr.TestOutcome("test_calc.py::test_mul", "passed_on_rerun", "fp"),)),)))
(folder / (segment_name(flake) + ".segment")).write_bytes(flake)  # plausible, and named by its hash
(folder / ("ab" * 20 + ".segment")).write_bytes(flake)  # not named by its hash
"""


def test_selfheal_ci_shares_only_the_segments_it_recorded(tmp_path: Path, fake_github: FakeGitHub) -> None:
    """Before: ``history push`` pushed every file of ``history-segments/``, whatever a conftest
    had dropped there (a plausible flake, a file not named by its hash)."""
    bare, clone = remote_and_clone(tmp_path)
    (clone / "calc.py").write_text("def mul(a, b):\n    return a + b\n")
    (clone / "test_calc.py").write_text("from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n")
    (clone / "conftest.py").write_text(DROPPER)
    (clone / "test_bug.py").unlink()
    run_git(clone, ["add", "-A"])
    run_git(clone, ["commit", "--quiet", "-m", "a bug on main"])
    event = {"ref": "refs/heads/main", "repository": {"full_name": fake_github.repository, "default_branch": "main"}}
    env = actions_env(tmp_path, fake_github, event=event, event_name="push")
    env.update({"GITHUB_REF": "refs/heads/main", "GITHUB_REF_NAME": "main",
                "DROP_INTO": str(segments_dir(clone / ".selfheal"))})
    done = run_ci(clone, env, "--set", "max_iterations=1", "--", "-q")
    assert done.returncode == EXIT_UNRESOLVED, done.stdout + done.stderr
    named = outputs_of(env)["history-segments"].split()
    here = local_segments(clone / ".selfheal")
    assert len(here) == len(named) + 2 and set(named) < set(here)  # the two dropped files are not named
    kinds = {json.loads(here[n].read_text())["runs"][0]["run"]["run_key"].split(":")[0] for n in named}
    assert kinds == {"capture", "loop"}
    pushed = cli("history", "push", "--segments", " ".join(named), "--remote", str(bare), cwd=clone, env=env)
    assert pushed.returncode == EXIT_OK, pushed.stderr
    tree = run_git(clone, ["ls-tree", "-r", "--name-only", share.HISTORY_REF]).decode().split()
    assert sorted(Path(p).stem for p in tree) == sorted(named)
    # By hand (no --segments) the file not named by its hash is still never pushed.
    by_hand = cli("history", "push", "--remote", str(bare), cwd=clone, env=env)
    assert by_hand.returncode == EXIT_OK, by_hand.stderr
    assert "(its name is not the hash of its bytes); not pushed" in by_hand.stderr
