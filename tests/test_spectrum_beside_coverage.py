"""The coverage spectrum records beside a tracer the run already has (coverage.py through
pytest-cov, a debugger), and a run that cannot record one says why (capture/spectrum.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_selfheal.loop.localise import read_spectrum, read_written, unrecorded_reason
from pytest_selfheal.names import LOCALISE_ENV, VERIFYING_ENV

# `bound` is wrong; `clamp` is the public wrapper every test calls, `span` one only passing tests run.
MOD = """\
def bound(lo, hi):
    return lo, hi - 1


def clamp(x, lo, hi):
    lo, hi = bound(lo, hi)
    return max(lo, min(x, hi))


def span(lo, hi):
    return hi - lo
"""

TESTS = """\
import sys

from mod import clamp, span


def _traced():
    monitoring = getattr(sys, "monitoring", None)
    return sys.gettrace() is not None or (monitoring is not None and monitoring.get_tool(1) is not None)


def test_under_coverage():
    assert _traced()


def test_high():
    assert clamp(9, 0, 5) == 5


def test_edge():
    assert clamp(5, 0, 5) == 5


def test_low():
    assert clamp(-1, 0, 5) == 0 and span(0, 5) == 5
"""


def _project(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(mod=MOD, test_mod=TESTS)


def test_a_run_under_pytest_cov_still_gets_a_spectrum(pytester: pytest.Pytester) -> None:
    """coverage.py holds the tracer (a passing test checks it does): the spectrum still ranks
    the wrong helper, which only the failing tests reach with a wrong result, first."""
    _project(pytester)
    result = pytester.runpytest("--cov=.", "--cov-report=", "--selfheal", "--selfheal-spectrum", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2, passed=2)
    incident = next((pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json"))
    failures = json.loads(incident.read_text())["failures"]
    assert len(failures) == 2
    for failure in failures:
        names = [s["name"] for s in failure["root_cause"]["spectrum"]]
        assert set(names) == {"bound", "clamp"}, names


# Takes the slot the spectrum records through: every free sys.monitoring tool id on
# Python 3.12+, the profiler before; given back when the run ends (pytester runs in-process).
HOLDER = """\
import sys

HELD = []


def pytest_sessionstart(session):
    if sys.version_info >= (3, 12):
        for tool in range(6):
            if sys.monitoring.get_tool(tool) is None:
                sys.monitoring.use_tool_id(tool, "another tool")
                HELD.append(tool)
    else:
        sys.setprofile(lambda frame, event, arg: None)


def pytest_unconfigure(config):
    for tool in HELD:
        sys.monitoring.free_tool_id(tool)
    sys.setprofile(None)
"""


def test_a_run_that_cannot_record_says_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The loop's localisation run with the recording slot held ranks nothing, and its file
    says why, which the loop's line repeats."""
    _project(pytester)
    pytester.makeconftest(HOLDER)
    out = tmp_path / "spectrum.json"
    monkeypatch.setenv(VERIFYING_ENV, "1")
    monkeypatch.setenv(LOCALISE_ENV, str(out))
    pytester.runpytest("-p", "no:cacheprovider", "-k", "not coverage").assert_outcomes(failed=2, passed=1)
    assert not read_spectrum(read_written(out)).top
    why = unrecorded_reason(read_written(out), timed_out=False, exit_code=1, timeout=60)
    expected = "no free sys.monitoring tool id" if sys.version_info >= (3, 12) else "another profiler"
    assert why.startswith(expected), why
    # A capture asked for the spectrum says it too, in its lines and the incident's warnings.
    monkeypatch.delenv(VERIFYING_ENV, raising=False)  # the plugin took it out of the environment
    monkeypatch.delenv(LOCALISE_ENV, raising=False)
    result = pytester.runpytest("--selfheal", "--selfheal-spectrum", "-p", "no:cacheprovider", "-k", "not coverage")
    result.assert_outcomes(failed=2, passed=1)
    assert f"--selfheal-spectrum recorded no spectrum: {expected}" in result.stdout.str()


@pytest.mark.parametrize(
    ("written", "timed_out", "exit_code", "expected"),
    [
        (None, True, None, "its run timed out after 60 s"),
        (None, False, 4, "its run wrote no spectrum: pytest exited 4"),
        (None, False, None, "its run did not start"),
        ({"spectrum": {}, "scores": [], "unrecorded": "no test failed in it"}, False, 0, "no test failed in it"),
        ("{not json", False, 1, "its run wrote no spectrum: pytest exited 1"),
    ],
)
def test_why_a_localisation_ranked_nothing(
    tmp_path: Path, written: Any, timed_out: bool, exit_code: Any, expected: str
) -> None:
    out = tmp_path / "spectrum.json"
    if written is not None:
        out.write_text(written if isinstance(written, str) else json.dumps(written))
    assert unrecorded_reason(read_written(out), timed_out=timed_out, exit_code=exit_code, timeout=60) == expected
