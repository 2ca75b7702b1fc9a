"""Write a junit document of the failing tests of a pytest run (pure).

Switching on pytest's own junitxml for every run costs ~10% wall time on large green
suites, so the plugin records only the failing reports and writes them here, in pytest's
own junit dialect (same classname/name mangling, same message attributes), so that a
failure gets the same fingerprint from this document, from ``--junitxml`` and from
``selfheal fingerprint``. The document is built with junitparser; reading junit is
``junit/reader.py``'s streaming parser (docs/decisions.md "Dependencies").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

from junitparser import Attr, Error, Failure, IntAttr, JUnitXml, TestCase, TestSuite

from pytest_selfheal.records.frozen import Frozen, dataclass
from pytest_selfheal.records.incident import RootCause
from pytest_selfheal.records.redacted import bounded_name

# Characters that XML 1.0 cannot carry; escaped visibly as pytest does (#xNN). pytest
# writes the complement of the legal ranges ([^\x09\x0a\x0d\x20-\x7e\x80-\ud7ff
# \ue000-\ufffd\U00010000-\U0010ffff]); this is the same set spelled as its few illegal
# ranges, which compiles in a tenth of the time (~5 ms saved on every capture).
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
MESSAGE_BUDGET = 500  # pytest's budget for the message attribute


@dataclass(frozen=True, eq=False, repr=False)
class FailedReport(Frozen):
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


def xml_escape_visible(text: str) -> str:
    """Replace characters XML cannot hold by a visible ``#xNN`` form."""

    def repl(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"#x{code:02X}" if code <= 0xFF else f"#x{code:04X}"

    return _ILLEGAL_XML.sub(repl, text)


def mangle_nodeid(nodeid: str, prefix: str = "") -> tuple[str, str]:
    """pytest's junit (classname, name) for a node id.

    ``tests/test_a.py::TestX::test_b[1]`` → (``tests.test_a.TestX``, ``test_b[1]``). Each
    part is cut as the junit reader cuts it (``records.redacted.bounded_name``).
    """
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    classnames = names[:-1]
    if prefix:
        classnames.insert(0, prefix)
    # A file or test name may hold a control character XML cannot carry (`test_\x01.py`).
    return bounded_name(xml_escape_visible(".".join(classnames))), bounded_name(xml_escape_visible(names[-1]))


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


def nodeid_by_identity(nodeids: Sequence[str], prefix: str = "") -> dict[str, str]:
    """Map the junit identity ``classname::name`` back to node ids."""
    mapping = {}
    for nodeid in nodeids:
        classname, name = mangle_nodeid(nodeid, prefix)
        mapping[f"{classname}::{name}" if classname else name] = nodeid
    return mapping


__all__: list[str] = [
    "FailedReport",
    "build_junit",
    "junit_message",
    "mangle_nodeid",
    "nodeid_by_identity",
    "xml_escape_visible",
]
