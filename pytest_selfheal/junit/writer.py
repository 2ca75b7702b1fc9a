"""The junit testcase of a failing pytest report (pure).

A failure gets the same fingerprint from the capture, from ``--junitxml`` and from
``selfheal fingerprint``: :func:`junit_case` is the case the junit reader reads from the
document pytest's junitxml writes for the report, built in memory from the report itself
(switching on pytest's junitxml would cost large green suites a tenth of their time).
"""

from __future__ import annotations

from typing import Any

from pytest_selfheal.junit.nodeids import mangle_nodeid, xml_escape_visible
from pytest_selfheal.junit.reader import cut_text
from pytest_selfheal.records.models import OUTCOME_ERROR, OUTCOME_FAILED, TestCaseResult

MESSAGE_BUDGET = 500  # pytest's budget for the message attribute


def failure_text(report: Any) -> str:
    """The full text of pytest's failing ``report`` (a TestReport or a CollectReport)."""
    return str(report.longreprtext or "")


def junit_message(report: Any) -> str:
    """The message attribute pytest's junitxml writes for ``report``: its crash message, cut."""
    if report.when == "collect":
        return "collection failure"
    reprcrash = getattr(report.longrepr, "reprcrash", None)
    if reprcrash is not None and getattr(reprcrash, "message", None):
        message = str(reprcrash.message)
    else:  # collection errors carry no reprcrash: the last "E   " line holds the exception
        lines = failure_text(report).splitlines()
        message = next((ln[1:].strip() for ln in reversed(lines) if ln.startswith("E ")), None) or next(
            (ln.strip() for ln in lines if ln.strip()), "")
    message = message[:MESSAGE_BUDGET]
    return f'failed on {report.when} with "{message}"' if report.when in ("setup", "teardown") else message


def junit_case(report: Any, nodeid: str, prefix: str = "") -> TestCaseResult:
    """The junit testcase of pytest's failing ``report`` as the junit reader reads it from
    pytest's junitxml; ``nodeid``: the report's node id as the documents hold it (cut and
    redacted). A failing test body is a <failure>, any other phase an <error>."""
    classname, name = mangle_nodeid(nodeid, prefix)
    # An XML parser reads a CR or CRLF of element text as LF; an attribute keeps them (the
    # writer escapes them as character references).
    text = xml_escape_visible(failure_text(report)).replace("\r\n", "\n").replace("\r", "\n")
    location = getattr(report, "location", None)
    return TestCaseResult(
        classname=classname, name=name, outcome=OUTCOME_FAILED if report.when == "call" else OUTCOME_ERROR,
        message=xml_escape_visible(junit_message(report)), text=cut_text(text, len(text)),
        file=xml_escape_visible(location[0]) if location and location[0] else None,
        line=location[1] + 1 if location and location[1] is not None else None,
        time=float(f"{float(getattr(report, 'duration', 0.0) or 0.0):.3f}"),
    )
