"""Write a junit document of the failing tests of a pytest run (pure).

Switching on pytest's own junitxml for every run costs ~10% wall time on large green
suites, so the plugin records only the failing reports and writes them here, in pytest's
own junit dialect (same classname/name mangling, same message attributes), so that a
failure gets the same fingerprint from this document, from ``--junitxml`` and from
``selfheal fingerprint``. The document is built with junitparser; reading junit is
``junit/reader.py``'s streaming parser (docs/decisions.md "Dependencies").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from junitparser import Attr, Error, Failure, IntAttr, JUnitXml, TestCase, TestSuite

from pytest_selfheal.junit.nodeids import mangle_nodeid, xml_escape_visible
from pytest_selfheal.records.incident import RootCause

MESSAGE_BUDGET = 500  # pytest's budget for the message attribute


@dataclass(frozen=True)
class FailedReport:
    """A failing pytest report reduced to plain data."""

    nodeid: str
    when: str  # setup | call | teardown | collect
    message: str  # pytest's crash message (reprcrash.message) or a derived one
    text: str  # the full longrepr text
    file: Optional[str] = None
    line: Optional[int] = None
    duration: float = 0.0
    root_cause: Optional[RootCause] = None  # evidence resolved inside pytest (capture/evidence.py)

    @property
    def outcome(self) -> str:
        """junit element: <failure> for a failing test body, <error> otherwise."""
        return "failure" if self.when == "call" else "error"


def junit_message(report: FailedReport) -> str:
    """The message attribute pytest's junitxml would write for this report."""
    if report.when == "collect":
        return "collection failure"
    message = report.message[:MESSAGE_BUDGET]
    if report.when == "setup":
        return f'failed on setup with "{message}"'
    if report.when == "teardown":
        return f'failed on teardown with "{message}"'
    return message


class PytestTestCase(TestCase):
    """junitparser's testcase plus the ``file``/``line`` attributes pytest's junitxml writes."""

    file = Attr()
    line = IntAttr()


def _testcase(report: FailedReport, prefix: str) -> PytestTestCase:
    classname, name = mangle_nodeid(report.nodeid, prefix)
    case = PytestTestCase(classname=classname, name=name, time=round(report.duration, 3))
    if report.file:
        case.file = xml_escape_visible(report.file)
    if report.line is not None:
        case.line = report.line
    result = Failure() if report.outcome == "failure" else Error()
    result.message = xml_escape_visible(junit_message(report))  # set even when empty, as pytest does
    result.text = xml_escape_visible(report.text)
    case.result = [result]
    return case


def build_junit(
    reports: Sequence[FailedReport],
    *,
    tests: int,
    skipped: int = 0,
    duration: float = 0.0,
    prefix: str = "",
    suite_name: str = "pytest",
) -> bytes:
    """A junit document (bytes) with one testcase per failing report plus run counts."""
    suite = TestSuite(suite_name)
    # All at once: add_testcase recounts the suite after each case (quadratic).
    suite.add_testcases([_testcase(report, prefix) for report in reports])
    # The counts are the run's, not the failing cases'.
    failures = sum(1 for r in reports if r.outcome == "failure")
    suite.tests = tests
    suite.failures = failures
    suite.errors = len(reports) - failures
    suite.skipped = skipped
    suite.time = round(duration, 3)
    document = JUnitXml()
    document.add_testsuite(suite)
    # tostring, not write(file object): that needs junitparser 4. tostring is unannotated there.
    body: bytes = document.tostring()  # type: ignore[no-untyped-call]
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + body + b"\n"


__all__: list[str] = [
    "FailedReport",
    "build_junit",
    "junit_message",
]
