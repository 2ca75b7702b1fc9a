"""Unusual ids and inputs are verified or refused at a bound, each once a finding: a shell
character in a node id made selfheal refuse its own plan; a committed ``.selfheal`` symlink
sent every write outside the project; deeply nested junit cost ~1 GB for 52 MB; a 200 KB node
id could not be verified and was reported as ``repeated_fingerprint``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from helpers import capture, make_project, run_pytest_selfheal, selfheal

from pytest_selfheal.errors import InputError
from pytest_selfheal.junit.reader import MAX_DEPTH, iter_testcases
from pytest_selfheal.loop.verify import synthetic_failure
from pytest_selfheal.records.redacted import MAX_NAME, TRUNCATED, bounded_nodeid, runnable_nodeid
from pytest_selfheal.store.root import Store

SHELLY_IDS = """
    import pytest

    @pytest.mark.parametrize("cmd", ["$(id)", "`id`"])
    def test_cmd(cmd):
        assert cmd == "safe"
"""


def test_a_node_id_holding_shell_characters_is_verified_not_refused(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_cmd.py": SHELLY_IDS})
    incident_id = capture(project)
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == 1, result.stdout + result.stderr  # verified, still failing: not refused (5)
    assert Store(project / ".selfheal").count_attempts(incident_id) >= 1


def test_a_reports_root_linked_out_of_the_project_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    project = make_project(tmp_path / "p", {"test_a.py": "def test_a():\n    assert 0\n"})
    (project / ".selfheal").symlink_to(outside, target_is_directory=True)
    result = run_pytest_selfheal(project)
    assert result.returncode == 1  # the plugin never changes pytest's outcome
    assert ".selfheal is a symbolic link leading out of the project" in result.stdout + result.stderr
    assert list(outside.iterdir()) == []
    # A link that stays beside it (the user's own layout) still works.
    (project / ".selfheal").unlink()
    (project / "build").mkdir()
    (project / ".selfheal").symlink_to(project / "build", target_is_directory=True)
    capture(project)
    assert any((project / "build" / "error_inbox").iterdir())


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 200_000])
def test_deeply_nested_junit_is_refused_at_a_bound(depth: int) -> None:
    document = b"<testsuites>" + b"<a>" * depth + b"</a>" * depth + b"</testsuites>"
    with pytest.raises(InputError, match=f"nested deeper than {MAX_DEPTH} levels"):
        list(iter_testcases(io.BytesIO(document)))


def test_junit_nested_within_the_bound_is_read() -> None:
    inner = b'<testcase classname="t" name="x"><failure message="m">boom</failure></testcase>'
    document = b"<testsuites>" + b"<testsuite>" * 50 + inner + b"</testsuite>" * 50 + b"</testsuites>"
    assert [case.name for case in iter_testcases(io.BytesIO(document))] == ["x"]


def test_a_verification_that_cannot_start_is_the_environment_not_a_repeat() -> None:
    """A 200 KB node id is over the kernel's limit for one argument (E2BIG): the run cannot
    start, which is TOOLING_ENV (stop tooling_env), never a failure that repeats."""
    failure = synthetic_failure("/usr/bin/python3: cannot start: [Errno 7] Argument list too long", "", [])
    assert failure.failure_type == "TOOLING_ENV"


HUGE_ID = """
    import os
    import pytest

    BIG = "x" * 200_000

    @pytest.mark.parametrize("value", [BIG], ids=[BIG])
    def test_big(value):
        assert os.path.exists("fixed.flag")

    def test_ok():
        assert True
"""


def test_a_200_kb_node_id_is_verified_through_its_runnable_parent(tmp_path: Path) -> None:
    """pytest writes the whole 200 KB id into junit; the kept id is its first 4 KiB, marked,
    and the plan runs ``test_big.py::test_big`` (every parameter): the verdict is the test's."""
    project = make_project(tmp_path / "p", {"test_big.py": HUGE_ID})
    incident_id = capture(project)
    root = project / ".selfheal"
    incident = json.loads((root / "error_inbox" / incident_id / "incident.json").read_text())
    (nodeid,) = incident["nodeids"]
    assert nodeid.startswith("test_big.py::test_big[xxx") and nodeid.endswith(TRUNCATED)
    assert len(nodeid) < 5000
    plan = json.loads((root / "error_plans" / incident_id / "plan.json").read_text())
    assert plan["verification_commands"] == ["python -m pytest -q test_big.py::test_big"]

    still = selfheal(project, "loop", incident_id)
    assert still.returncode == 1, still.stdout + still.stderr
    attempt = json.loads((root / "error_runs" / incident_id / "attempt_01.json").read_text())
    assert attempt["outcomes"][nodeid] == "failed", attempt["outcomes"]
    # The same failure as at capture, not a run that could not start.
    assert [f["fingerprint"] for f in attempt["failures"]] == incident["fingerprints"]


def test_a_fix_resolves_an_incident_whose_node_id_was_cut(tmp_path: Path) -> None:
    """The plugin's own next run (agent mode) knows the test by its cut id too."""
    project = make_project(tmp_path / "p", {"test_big.py": HUGE_ID})
    incident_id = capture(project)
    (project / "fixed.flag").write_text("")
    done = run_pytest_selfheal(project)
    assert done.returncode == 0, done.stdout + done.stderr
    root = project / ".selfheal"
    attempt = json.loads((root / "error_runs" / incident_id / "attempt_01.json").read_text())
    assert set(attempt["outcomes"].values()) == {"passed"}, attempt["outcomes"]
    assert (root / "error_archive" / "resolved" / incident_id).is_dir()


def test_an_over_long_test_name_selects_its_file_or_class() -> None:
    long_name = "t" * (MAX_NAME + 10)
    assert runnable_nodeid(bounded_nodeid(f"a/test_x.py::TestC::{long_name}")) == "a/test_x.py::TestC"
    assert runnable_nodeid(bounded_nodeid(f"a/test_x.py::{long_name}[1]")) == "a/test_x.py"
    params = "p" * (MAX_NAME + 10)
    assert runnable_nodeid(bounded_nodeid(f"a/test_x.py::test_y[{params}]")) == "a/test_x.py::test_y"
    assert bounded_nodeid("a/test_x.py::test_y[1]") == "a/test_x.py::test_y[1]"


@pytest.mark.parametrize("nodeid", [
    "tests/test_x.py::test_y[" + "ab[c]::d" * 1000 + "]",
    "t.py::TestC::test_y[" + "é\x00" * 3000 + "]",
    "t.py::TestC::" + "t" * 5000 + "[" + "x" * 10 + "]",
    "a/t.py::" + "t" * 4090 + "[" + "x" * 10 + "]",  # the cut falls inside the parametrize id's first word
    "a/t.py::" + "t" * 4100,
])
def test_a_cut_id_runs_through_a_prefix_of_the_real_one(nodeid: str) -> None:
    cut = bounded_nodeid(nodeid)
    assert cut != nodeid and bounded_nodeid(cut) == cut and len(cut) < 4200
    runnable = runnable_nodeid(cut)
    assert runnable is not None and nodeid.startswith(runnable) and TRUNCATED not in runnable
    assert "[" not in runnable  # no parametrize id: the test, its class or its file
