"""Write a junit document of the failing tests of a pytest run (pure).

Switching on pytest's own junitxml for every run costs ~10% wall time on large green
suites, so the plugin records only the failing reports and writes them here, in pytest's
own junit dialect (same classname/name mangling, same message attributes), so that a
failure gets the same fingerprint from this document, from ``--junitxml`` and from
``selfheal fingerprint``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

# Characters that XML 1.0 cannot carry; escaped visibly as pytest does (#xNN).
_ILLEGAL_XML = re.compile(
    "[^\u0009\u000a\u000d\u0020-\u007e\u0080-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)
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

    @property
    def outcome(self) -> str:
        """junit element: <failure> for a failing test body, <error> otherwise."""
        return "failure" if self.when == "call" else "error"


def xml_escape_visible(text: str) -> str:
    """Replace characters XML cannot hold by a visible ``#xNN`` form."""

    def repl(match: "re.Match[str]") -> str:
        code = ord(match.group())
        return f"#x{code:02X}" if code <= 0xFF else f"#x{code:04X}"

    return _ILLEGAL_XML.sub(repl, text)


def mangle_nodeid(nodeid: str, prefix: str = "") -> Tuple[str, str]:
    """pytest's junit (classname, name) for a node id.

    ``tests/test_a.py::TestX::test_b[1]`` → (``tests.test_a.TestX``, ``test_b[1]``).
    """
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    classnames = names[:-1]
    if prefix:
        classnames.insert(0, prefix)
    return ".".join(classnames), names[-1]


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
    failures = sum(1 for r in reports if r.outcome == "failure")
    errors = len(reports) - failures
    suite = ET.Element(
        "testsuite",
        {
            "name": suite_name,
            "tests": str(tests),
            "failures": str(failures),
            "errors": str(errors),
            "skipped": str(skipped),
            "time": f"{duration:.3f}",
        },
    )
    for report in reports:
        classname, name = mangle_nodeid(report.nodeid, prefix)
        attrs = {"classname": classname, "name": name, "time": f"{report.duration:.3f}"}
        if report.file:
            attrs["file"] = report.file
        if report.line is not None:
            attrs["line"] = str(report.line)
        case = ET.SubElement(suite, "testcase", attrs)
        child = ET.SubElement(
            case, report.outcome, {"message": xml_escape_visible(junit_message(report))}
        )
        child.text = xml_escape_visible(report.text)
    root = ET.Element("testsuites")
    root.append(suite)
    body: bytes = ET.tostring(root, encoding="utf-8")
    return b'<?xml version="1.0" encoding="utf-8"?>\n' + body + b"\n"


def nodeid_by_identity(nodeids: Sequence[str], prefix: str = "") -> "dict[str, str]":
    """Map the junit identity ``classname::name`` back to node ids."""
    mapping = {}
    for nodeid in nodeids:
        classname, name = mangle_nodeid(nodeid, prefix)
        mapping[f"{classname}::{name}" if classname else name] = nodeid
    return mapping


__all__: List[str] = [
    "FailedReport",
    "build_junit",
    "junit_message",
    "mangle_nodeid",
    "nodeid_by_identity",
    "xml_escape_visible",
]
