"""``context.json`` as a record (records/context.py): built by the capture, read by the loop."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_selfheal.capture.context import run_context
from pytest_selfheal.errors import InputError
from pytest_selfheal.gitrepo import clean_tree_hash
from pytest_selfheal.loop.state import capture_diff_hash
from pytest_selfheal.records.context import SNAPSHOT_KEYS, GitContext, RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import fields_of
from pytest_selfheal.redact import default_redactor

GIT = {"root": "/r", "commit": "a" * 40, "branch": None, "dirty": False, "diff_stat": "", "untracked": 0}


def test_the_capture_writes_every_key_in_its_order_with_the_git_part_as_given(tmp_path: Path) -> None:
    secret = "s3cr3t-value-1234"
    env = {"CI": "true", "GITHUB_REF": f"refs/{secret}", "API_TOKEN": secret}
    git = GitContext(root="/r", commit="a" * 40, branch=None, dirty=False, diff_stat="", untracked=0, keys=SNAPSHOT_KEYS)
    context = run_context(tmp_path, ["-q", secret], env, git=git, redactor=default_redactor(env=env))
    doc = context.to_json()
    assert list(doc) == list(tuple(f.key for f in fields_of(RunContext)))
    assert json.dumps(doc["git"]) == json.dumps(GIT)  # null branch and empty diff stat kept, in order
    assert doc["python"] == sys.version.split()[0] and doc["rootdir"] == str(tmp_path)
    assert secret not in json.dumps(doc) and doc["ci"]["CI"] == "true"
    again = RunContext.from_json(json.loads(json.dumps(doc)), "context.json")
    assert json.dumps(again.to_json()) == json.dumps(doc) and again == context


def test_outside_git_the_git_part_is_null_and_an_error_is_kept(tmp_path: Path) -> None:
    assert run_context(tmp_path, [], {}, git=None).to_json()["git"] is None
    failed = run_context(tmp_path, [], {}, git=GitContext.failed("git status: boom"))
    assert failed.git == GitContext(error="git status: boom") and failed.git.clean_commit is None


def test_a_bad_context_names_the_field() -> None:
    with pytest.raises(InputError, match=r"context.json: invalid context: field git.dirty: expected boolean"):
        RunContext.from_json({"git": {"dirty": "no"}}, "context.json")


def test_the_capture_hash_of_a_clean_tree_comes_from_the_git_part() -> None:
    incident = Incident(step="s", failure_class="deterministic", message="m", error_signature="e")
    clean = RunContext.from_json({"git": GIT}, "context.json")
    assert capture_diff_hash(incident, clean) == clean_tree_hash("a" * 40)
    dirty = RunContext.from_json({"git": dict(GIT, dirty=True)}, "context.json")
    assert capture_diff_hash(incident, dirty) is None and capture_diff_hash(incident, RunContext()) is None
    assert capture_diff_hash(incident, None) is None
