"""The smaller findings of the second adversarial review (issue 22), each reproduced: a shell
character in a node id made selfheal refuse its own plan; a committed ``.selfheal`` symlink
sent every write outside the project; deeply nested junit cost ~1 GB for 52 MB."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from helpers import capture, make_project, run_pytest_selfheal, selfheal

from pytest_selfheal.errors import InputError
from pytest_selfheal.junit.reader import MAX_DEPTH, iter_testcases
from pytest_selfheal.loop.verify import synthetic_failure
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
    assert "the reports root is a symbolic link leading out of" in result.stdout + result.stderr
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
