"""The junit testcase of a failing pytest report (pure).

The capture fingerprints a failure from its junit testcase, read like any other runner's,
so that a failure gets the same fingerprint from the capture, from ``--junitxml`` and from
``selfheal fingerprint``: :func:`junit_case` is the case the junit reader reads from the
document pytest's own junitxml writes for the report (same classname/name mangling, same
message attribute, the same escapes and line ends), built once in memory. Switching on
pytest's junitxml for every run would cost large green suites about a tenth of their time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pytest_selfheal.junit.nodeids import mangle_nodeid, xml_escape_visible
from pytest_selfheal.junit.reader import MAX_TEXT, text_marker
from pytest_selfheal.records.incident import RootCause
from pytest_selfheal.records.models import OUTCOME_ERROR, OUTCOME_FAILED, TestCaseResult

MESSAGE_BUDGET = 500  # pytest's budget for the message attribute


@dataclass(frozen=True)
class FailedReport:
    """A failing pytest report as the capture reads it once (recorder/finish.py), its node id
    cut and redacted as every document holds it."""

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


def junit_case(report: FailedReport, prefix: str = "") -> TestCaseResult:
    """The junit testcase of ``report`` as the junit reader reads it from pytest's junitxml."""
    classname, name = mangle_nodeid(report.nodeid, prefix)
    # An XML parser reads a CR or CRLF of element text as LF; an attribute keeps them (the
    # writer escapes them as character references).
    text = xml_escape_visible(report.text).replace("\r\n", "\n").replace("\r", "\n")
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "\n" + text_marker(len(text) - MAX_TEXT)
    return TestCaseResult(
        classname=classname, name=name, outcome=OUTCOME_FAILED if report.outcome == "failure" else OUTCOME_ERROR,
        message=xml_escape_visible(junit_message(report)), text=text,
        file=xml_escape_visible(report.file) if report.file else None, line=report.line,
        time=float(f"{report.duration:.3f}"),
    )


__all__: list[str] = [
    "FailedReport",
    "junit_message",
    "junit_case",
]
