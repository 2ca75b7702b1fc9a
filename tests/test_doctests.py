"""Doctests as first-class failures: a readable message (the failing example,
expected and got), a class of their own (DOCTEST_MISMATCH), grouped with the code failures
that share their cause, never the incident's signature when a code failure exists, and the
same fingerprint with and without pytest-xdist. Real pytest runs for the capture."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import capture, git_commit_all, loop_in_process, make_project

from pytest_selfheal.analysis import testfiles
from pytest_selfheal.analysis.analyse import analyse_case
from pytest_selfheal.analysis.doctests import doctest_line, strip_worker_header
from pytest_selfheal.records import models

MODULE = '''\
"""Numbers.

```pycon
>>> double(2)
4
```
"""


def double(n):
    """Twice n.

    >>> double(3)
    6
    """
    return n + 1


def ratio(a, b):
    """
    >>> ratio(1, 0)
    0
    """
    return a / b
'''
TESTS = "from mod import double\n\n\ndef test_double():\n    assert double(2) == 4\n"
# What pytest writes as the junit message of a failing doctest (the numbered listing).
MISMATCH = (
    "011 Twice n.\n012 \n013     >>> double(3)\nExpected:\n    6\nGot:\n    4\n\n/tmp/p/mod.py:13: DocTestFailure"
)
UNEXPECTED = (
    "019 \n020     >>> ratio(1, 0)\nUNEXPECTED EXCEPTION: ZeroDivisionError('division by zero')\n"
    "Traceback (most recent call last):\n  File \"<doctest mod.ratio[0]>\", line 1, in <module>\n"
    "  File \"/tmp/p/mod.py\", line 24, in ratio\n    return a / b\nZeroDivisionError: division by zero\n"
    "/tmp/p/mod.py:20: UnexpectedException"
)
WORKER = "[gw1] linux -- Python 3.11.4 /usr/local/bin/python3\n"


def case(message: str) -> models.TestCaseResult:
    return models.TestCaseResult("mod", "mod.double", models.OUTCOME_FAILED, message=message, text=message)


def test_a_doctest_mismatch_reads_as_its_example_expected_and_got() -> None:
    failure, classification = analyse_case(case(MISMATCH))
    assert failure.message == "DocTestFailure: >>> double(3) expected: 6 got: 4"
    assert classification.failure_type == models.DOCTEST_MISMATCH and classification.code_fixable
    assert classification.rule == "doctest_mismatch"
    # A multi-line output, and a fenced example whose fence became expected output.
    fenced = "003 ```pycon\n004 >>> double(2)\nExpected:\n    4\n    ```\nGot:\n    3\n\n/p/mod.py:4: DocTestFailure"
    assert doctest_line(fenced) == "DocTestFailure: >>> double(2) expected: 4 \\n ``` got: 3"
    nothing = "004 >>> print()\nExpected:\n    1\nGot nothing\n/p/mod.py:4: DocTestFailure"
    assert doctest_line(nothing) == "DocTestFailure: >>> print() expected: 1 got: nothing"
    assert doctest_line("assert 3 == 4") is None


def test_an_unexpected_exception_is_classified_as_that_exception() -> None:
    failure, classification = analyse_case(case(UNEXPECTED))
    assert failure.message == "ZeroDivisionError: division by zero (doctest >>> ratio(1, 0))"
    assert classification.failure_type == models.TEST_ASSERTION  # a runtime error of the code


def test_the_xdist_worker_line_changes_no_fingerprint() -> None:
    assert strip_worker_header(WORKER + "assert 1 == 2") == "assert 1 == 2"
    plain, _ = analyse_case(case(MISMATCH))
    worker, _ = analyse_case(case(WORKER + MISMATCH))
    assert worker.fingerprint == plain.fingerprint and worker.message == plain.message
    code = models.TestCaseResult("t", "test_x", models.OUTCOME_FAILED, message=WORKER + "ValueError: boom")
    assert analyse_case(code)[0].message == "ValueError: boom"


def _incident(project: Path, incident_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project / ".selfheal" / "error_inbox" / incident_id / "incident.json").read_text())
    return data


def _plan_actions(project: Path, incident_id: str) -> list[dict[str, Any]]:
    plan = json.loads((project / ".selfheal" / "error_plans" / incident_id / "plan.json").read_text())
    actions: list[dict[str, Any]] = plan["actions"]
    return actions


def test_a_doctests_module_is_test_code_only_in_its_docstrings(tmp_path: Path) -> None:
    """A doctest's own module is code under test too: a fix there is no test edit (it stopped
    ``tests_edited``), an example's edit is one; a test file is its bytes, as before."""
    (tmp_path / "mod.py").write_text(MODULE)
    (tmp_path / "test_mod.py").write_text(TESTS)
    recorded = testfiles.digests(tmp_path, testfiles.test_code_paths(["mod.py::mod.double", "test_mod.py::test_double"]))
    assert recorded["mod.py"].startswith(testfiles.DOCTESTS) and not recorded["test_mod.py"].startswith(testfiles.DOCTESTS)
    (tmp_path / "mod.py").write_text(MODULE.replace("return n + 1", "return n * 2"))
    assert testfiles.changed(tmp_path, recorded) == []
    (tmp_path / "mod.py").write_text(MODULE.replace("    >>> double(3)\n    6", "    >>> double(3)\n    4"))
    assert testfiles.changed(tmp_path, recorded) == ["mod.py"]
    # A digest recorded before (the whole file) is compared as it was recorded.
    whole = {"mod.py": hashlib.sha256(MODULE.encode()).hexdigest()}
    (tmp_path / "mod.py").write_text(MODULE.replace("return n + 1", "return n * 2"))
    assert testfiles.changed(tmp_path, whole) == ["mod.py"]


@pytest.mark.slow  # two runs: the digests' rule above stays in the default tier
def test_an_agents_fix_in_a_doctests_module_is_a_success(pytester: pytest.Pytester) -> None:
    module = 'def double(n):\n    """\n    >>> double(3)\n    6\n    """\n    return n + 1\n'
    pytester.makepyfile(mod=module, test_mod=TESTS)
    git_commit_all(pytester.path, "project")
    assert pytester.runpytest("--selfheal", "--doctest-modules").ret == 1
    pytester.makepyfile(mod=module.replace("return n + 1", "return n * 2"))
    out = pytester.runpytest("--selfheal", "--doctest-modules").stdout.str()
    assert "-> STOP success" in out and "tests_edited" not in out, out


def test_doctests_selected_by_the_command_line_are_verified_under_it(tmp_path: Path) -> None:
    """``pytest --selfheal --doctest-modules``: the option is replayed, so the doctest's node
    id names a test in the verification run and the fixed code is verified as fixed (without
    it pytest refuses the whole run: "not found")."""
    module = 'def double(n):\n    """\n    >>> double(3)\n    6\n    """\n    return n + 1\n'
    project = make_project(tmp_path / "p", {"mod.py": module, "test_mod.py": TESTS}, ini="pythonpath = .\n")
    incident_id = capture(project, "--doctest-modules")
    incident = _incident(project, incident_id)
    assert "--doctest-modules" in incident["pytest_options"]
    assert "mod.py::mod.double" in {f["nodeid"] for f in incident["failures"]}
    (project / "mod.py").write_text((project / "mod.py").read_text().replace("return n + 1", "return n * 2"))
    result = loop_in_process(project, incident_id)
    assert (result["final_status"], result["stop_reason"]) == ("resolved", "success"), result


@pytest.mark.parametrize("xdist", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["plain", "xdist"])
def test_captured_doctests_group_with_the_code_failure_never_lead(tmp_path: Path, xdist: bool) -> None:
    """One bug in ``double``: the test and both its doctests are one group; under pytest-xdist
    (slow tier: ~10 s) the same, with the same fingerprints as a plain run's."""
    fingerprints = []
    runs = (("plain", []), ("xdist", ["-p", "xdist", "-n", "2"])) if xdist else (("plain", []),)
    for name, extra in runs:
        project = make_project(tmp_path / name, {"mod.py": MODULE, "test_mod.py": TESTS},
                               ini="pythonpath = .\naddopts = --doctest-modules\n")
        incident_id = capture(project, *extra)
        incident = _incident(project, incident_id)
        assert incident["error_signature"] == "TEST_ASSERTION | test_mod::test_double | assert 3 == 4", name
        by_test = {f["nodeid"]: f for f in incident["failures"]}
        assert by_test["mod.py::mod.double"]["message"] == "DocTestFailure: >>> double(3) expected: 6 got: 4"
        assert by_test["mod.py::mod"]["message"] == "DocTestFailure: >>> double(2) expected: 4 \\n ``` got: 3"
        assert by_test["mod.py::mod.double"]["failure_type"] == "DOCTEST_MISMATCH"
        assert by_test["mod.py::mod.ratio"]["message"] == "ZeroDivisionError: division by zero (doctest >>> ratio(1, 0))"
        # One bug in `double`: the test and both doctests are one root-cause group; `ratio` is its own.
        groups = sorted(sorted(a["nodeids"]) for a in _plan_actions(project, incident_id))
        assert groups == [["mod.py::mod", "mod.py::mod.double", "test_mod.py::test_double"], ["mod.py::mod.ratio"]]
        fingerprints.append({f["nodeid"]: f["fingerprint"] for f in incident["failures"]})
    assert fingerprints[0] == fingerprints[-1]
