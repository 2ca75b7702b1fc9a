"""A verification runs exactly the failing node ids, however many: a long selection travels
in a selection file under the reports root, read in the child by pytest_selfheal/loop/selection.py."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import capture, loop_in_process, make_project

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.junit.reader import iter_testcases
from pytest_selfheal.loop.verify import (
    MAX_ARGV_SELECTION,
    VerificationRun,
    check_command,
    run_selection,
    selection_words,
    synthetic_failure,
    through_selection_file,
)
from pytest_selfheal.names import SELECTION_FILE, SELECTION_OPTION, SELECTION_PLUGIN
from pytest_selfheal.records.models import TOOLING_ENV
from pytest_selfheal.store.root import Store

# 6 files of N tests; in 3 of them 10 tests fail: 30 failures over 3 of 6 files.
MODULE = """
import pytest

@pytest.mark.parametrize("i", range({size}))
def test_value(i):
    assert i >= {failing}
"""


def _files(size: int) -> dict[str, str]:
    return {f"tests/test_m{n}.py": MODULE.format(size=size, failing=10 if n < 3 else 0) for n in range(6)}


def _selection_doc(path: Path, nodeids: Sequence[str]) -> Path:
    path.write_text(json.dumps({"selfheal_selection": 1, "nodeids": list(nodeids)}))
    return path


@pytest.mark.parametrize("size", [20, pytest.param(100, marks=pytest.mark.slow, id="600-tests")])
def test_the_loop_runs_exactly_the_thirty_failing_node_ids(tmp_path: Path, size: int) -> None:
    project = make_project(tmp_path / "p", {"tests/__init__.py": "", **_files(size)})
    incident_id = capture(project, "--selfheal-set", "ralf_lite.max_iterations=1")
    store = Store(project / ".selfheal")
    assert store.read_incident(incident_id).seal is not None  # the seal is compared at the iteration
    [command] = store.read_plan(incident_id).verification_commands
    failing = [f"tests/test_m{n}.py::test_value[{i}]" for n in range(3) for i in range(10)]
    assert sorted(shlex.split(command)[4:]) == sorted(failing)  # the plan names every node id, not the 3 files
    ran: list[tuple[list[str], list[str], list[str]]] = []

    def counting(argv: Sequence[str], **kwargs: Any) -> VerificationRun:
        run = run_selection(argv, **kwargs)
        selection = json.loads(Path(kwargs["selection_file"]).read_text())["nodeids"]
        ran.append((run.argv, [c.test for c in iter_testcases(run.junit_path)], selection))
        return run

    result = loop_in_process(project, incident_id, verifier=counting)
    [(argv, tests, selection)] = ran
    # Exactly the failing tests ran, none of their passing neighbours in the same 3 files.
    assert len(tests) == 30 and sorted(selection) == sorted(failing)
    assert not any("::" in word for word in argv)  # they went through the file, not the command line
    assert f"{SELECTION_OPTION}={store.runs_dir(incident_id).resolve() / SELECTION_FILE}" in argv
    # The channel is selfheal's own: no harness change, the failures are judged as such.
    assert result["stop_reason"] not in ("harness_changed", "tooling_env"), result
    attempt = store.read_attempts(incident_id)[0]
    assert sorted(attempt.outcomes) == sorted(failing) and set(attempt.outcomes.values()) == {"failed"}
    assert not attempt.harness_changed
    # What is shown and recorded stays short.
    assert "… 27 more node ids" in attempt.verification_commands[0]


def test_a_short_selection_stays_on_the_command_line(tmp_path: Path) -> None:
    argv = ["python", "-m", "pytest", "-q", *[f"t.py::t{i}" for i in range(MAX_ARGV_SELECTION)], "-p", "xdist"]
    assert through_selection_file(argv, tmp_path / SELECTION_FILE) == argv
    assert not (tmp_path / SELECTION_FILE).exists()


def test_a_long_selection_is_moved_where_it_stood(tmp_path: Path) -> None:
    ids = [f"t.py::t{i}" for i in range(MAX_ARGV_SELECTION + 1)]
    # After the selection, an option whose value is optional (--cov): the ids must not follow it.
    argv = ["python", "-m", "pytest", "-q", *ids, "--cov", "-p", "xdist"]
    moved = through_selection_file(argv, tmp_path / SELECTION_FILE)
    assert moved == ["python", "-m", "pytest", "-q", "-p", SELECTION_PLUGIN,
                     f"{SELECTION_OPTION}={(tmp_path / SELECTION_FILE).resolve()}", "--cov", "-p", "xdist"]
    assert json.loads((tmp_path / SELECTION_FILE).read_text()) == {"nodeids": ids, "selfheal_selection": 1}
    # Only words nothing can take for an option's value; another runner keeps its command.
    assert selection_words(["python", "-m", "pytest", "-k", "x", *ids]) == (3, 3)
    assert selection_words(["tox", *ids]) == (1, 1)


def test_the_selection_option_is_refused_from_every_other_source(tmp_path: Path) -> None:
    with pytest.raises(RefusedError, match="selfheal-selection-file"):
        check_command(["python", "-m", "pytest", f"{SELECTION_OPTION}=/etc/passwd"], root=tmp_path,
                      trusted=[f"{SELECTION_OPTION}=/etc/passwd"])


def test_the_child_runs_the_files_node_ids_with_their_folders_conftests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**{"tests/deep/test_x.py": "def test_a(request):\n    assert request.config.getoption('myopt') == '1'\n"
                                                   "def test_b():\n    pass\ndef test_c():\n    pass\n"})
    # A conftest below the rootdir that registers an option: an initial conftest, as on a command line.
    pytester.makeconftest("")
    (pytester.path / "tests" / "deep" / "conftest.py").write_text(
        "def pytest_addoption(parser):\n    parser.addoption('--myopt', default='0')\n")
    doc = _selection_doc(pytester.path / "sel.json", ["tests/deep/test_x.py::test_a", "tests/deep/test_x.py::test_c"])
    result = pytester.runpytest("-p", SELECTION_PLUGIN, f"{SELECTION_OPTION}={doc}", "--myopt=1")
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize("content", [None, "{not json", '{"selfheal_selection": 1, "nodeids": []}',
                                     '{"nodeids": ["t.py::a"]}', '{"selfheal_selection": 1, "nodeids": [""]}'])
def test_a_missing_or_garbled_file_is_one_error_never_the_whole_suite(pytester: pytest.Pytester,
                                                                     content: Optional[str]) -> None:
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    path = pytester.path / "sel.json"
    if content is not None:
        path.write_text(content)
    result = pytester.runpytest("-p", SELECTION_PLUGIN, f"{SELECTION_OPTION}={path}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in result.errlines if line.startswith("ERROR:")]
    assert line.startswith("ERROR: selfheal: the verification's selection file: ") and str(path) in line
    assert "passed" not in result.stdout.str()
    # The loop reads that line as the environment's problem, never as a changed failure.
    assert synthetic_failure(line, line, ()).failure_type == TOOLING_ENV


def test_without_the_plugin_the_option_stops_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a="def test_a():\n    pass\n")
    doc = _selection_doc(pytester.path / "sel.json", ["test_a.py::test_a"])
    result = pytester.runpytest(f"{SELECTION_OPTION}={doc}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "passed" not in result.stdout.str()

