"""A junit document of an incident's tests with their re-runs (pure; junitparser's xunit2).

The Surefire re-run convention CI reporters read: a test that passed on re-run with no
code change is a passing ``<testcase>`` carrying each failed run as ``<flakyFailure>``; a
quarantined failure carries the property ``selfheal.quarantined`` with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from junitparser import Failure, JUnitXml, Skipped
from junitparser.xunit2 import FlakyFailure, TestCase, TestSuite

from pytest_selfheal.junit.nodeids import mangle_nodeid, xml_escape_visible
from pytest_selfheal.records.models import OUTCOME_FAILED, OUTCOME_SKIPPED

QUARANTINED_PROPERTY = "selfheal.quarantined"


@dataclass(frozen=True)
class FailedRun:
    """One failed run of a test: the junit ``message``, ``type`` and text."""

    message: str
    type: str
    text: str = ""


@dataclass(frozen=True)
class RerunCase:
    """One test of the incident: its final outcome and its failed runs, oldest first."""

    nodeid: str
    outcome: str  # passed | failed | skipped: the latest run that ran it
    failed_runs: tuple[FailedRun, ...]
    flaky: bool = False  # passed on re-run with no code change in between
    quarantine_reason: Optional[str] = None


def _case(case: RerunCase) -> TestCase:
    classname, name = mangle_nodeid(case.nodeid)
    element = TestCase(name=name, classname=classname)
    if case.outcome == OUTCOME_FAILED and case.failed_runs:
        last = case.failed_runs[-1]
        result = Failure(xml_escape_visible(last.message), xml_escape_visible(last.type))
        result.text = xml_escape_visible(last.text)
        element.result = [result]
    elif case.outcome == OUTCOME_SKIPPED:
        element.result = [Skipped()]
    elif case.flaky:
        for run in case.failed_runs:
            flaky = FlakyFailure(xml_escape_visible(run.message), xml_escape_visible(run.type))
            if run.text:
                flaky.stack_trace = xml_escape_visible(run.text)
            element.add_interim_result(flaky)
    if case.quarantine_reason is not None:
        element.add_property(QUARANTINED_PROPERTY, xml_escape_visible(case.quarantine_reason))
    return element


def rerun_junit(cases: Sequence[RerunCase], *, suite_name: str) -> bytes:
    """The junit document (bytes) of ``cases`` in one test suite."""
    suite = TestSuite(suite_name)  # type: ignore[no-untyped-call]
    suite.add_testcases([_case(case) for case in cases])
    suite.tests = len(cases)
    suite.failures = sum(1 for c in cases if c.outcome == OUTCOME_FAILED)
    suite.errors = 0
    suite.skipped = sum(1 for c in cases if c.outcome == OUTCOME_SKIPPED)
    document = JUnitXml()
    document.add_testsuite(suite)
    body: bytes = document.tostring()  # type: ignore[no-untyped-call]
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + body + b"\n"
