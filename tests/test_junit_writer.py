from __future__ import annotations

import io
import xml.etree.ElementTree as ET

import pytest
from _pytest.junitxml import mangle_test_address
from junitparser import JUnitXml

from pytest_selfheal.junit.nodeids import mangle_nodeid, nodeid_by_identity, xml_escape_visible
from pytest_selfheal.junit.reader import iter_testcases
from pytest_selfheal.junit.writer import FailedReport, build_junit, junit_message

NODEIDS = [
    "tests/test_a.py::test_b",
    "tests/test_a.py::TestX::test_b[1-2]",
    "tests/sub/test_c.py::test_d[a::b.py]",
    "test_top.py::test_e[x y]",
    "tests/test_mod.py",
]


@pytest.mark.parametrize("nodeid", NODEIDS)
def test_mangle_matches_pytest(nodeid: str) -> None:
    names = mangle_test_address(nodeid)
    assert mangle_nodeid(nodeid) == (".".join(names[:-1]), names[-1])


def test_identity_maps_back_to_nodeid() -> None:
    mapping = nodeid_by_identity(NODEIDS)
    for nodeid in NODEIDS:
        classname, name = mangle_nodeid(nodeid)
        assert mapping[f"{classname}::{name}" if classname else name] == nodeid


def test_messages_follow_pytest_junitxml() -> None:
    base = dict(nodeid="t.py::x", message="ValueError: boom", text="tb")
    assert junit_message(FailedReport(when="call", **base)) == "ValueError: boom"
    assert junit_message(FailedReport(when="setup", **base)) == 'failed on setup with "ValueError: boom"'
    assert junit_message(FailedReport(when="teardown", **base)) == 'failed on teardown with "ValueError: boom"'
    assert junit_message(FailedReport(when="collect", **base)) == "collection failure"


def test_build_junit_is_parseable_and_escapes_control_chars() -> None:
    reports = [
        FailedReport("tests/test_a.py::test_b", "call", "assert 1 == 2\x1b[31m", "E  assert 1 == 2\x00", "tests/test_a.py", 3),
        FailedReport("tests/test_a.py::test_c", "setup", "RuntimeError: <db> & co", "tb"),
    ]
    doc = build_junit(reports, tests=10, skipped=1, duration=1.5)
    root = ET.fromstring(doc)
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.attrib["tests"] == "10"
    assert suite.attrib["failures"] == "1" and suite.attrib["errors"] == "1"
    cases = suite.findall("testcase")
    assert [c.attrib["name"] for c in cases] == ["test_b", "test_c"]
    failure = cases[0].find("failure")
    assert failure is not None and failure.attrib["message"] == "assert 1 == 2#x1B[31m"
    assert failure.text == "E  assert 1 == 2#x00"
    error = cases[1].find("error")
    assert error is not None and error.attrib["message"] == 'failed on setup with "RuntimeError: <db> & co"'
    assert cases[0].attrib["file"] == "tests/test_a.py" and cases[0].attrib["line"] == "3"


def test_escape_keeps_legal_text() -> None:
    assert xml_escape_visible("héllo\tworld\n") == "héllo\tworld\n"
    assert xml_escape_visible("\x07") == "#x07"


def test_escape_replaces_exactly_what_xml_1_0_cannot_carry() -> None:
    # XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]
    # (pytest also escapes #x7F); the edges of every range on both sides.
    legal = [(0x9, 0xA), (0xD, 0xD), (0x20, 0x7E), (0x80, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x10FFFF)]
    edges = sorted({c for lo, hi in legal for c in (lo - 1, lo, hi, hi + 1) if 0 <= c <= 0x10FFFF})
    for code in edges:
        expected = any(lo <= code <= hi for lo, hi in legal)
        escaped = xml_escape_visible(chr(code))
        assert (escaped == chr(code)) is expected, hex(code)
        if not expected:
            assert escaped == (f"#x{code:02X}" if code <= 0xFF else f"#x{code:04X}")


def test_build_junit_reads_back_through_junitparser_and_our_reader() -> None:
    reports = [
        FailedReport("tests/test_a.py::TestX::test_b[1]", "call", "", "E  boom", duration=0.12345),
        FailedReport("tests/test_a.py::test_c", "teardown", "OSError: gone", "tb"),
    ]
    doc = build_junit(reports, tests=5, skipped=2, duration=2.0, prefix="pre")
    suites = list(JUnitXml.fromstring(doc))
    assert [(s.name, s.tests, s.failures, s.errors, s.skipped, s.time) for s in suites] == [
        ("pytest", 5, 1, 1, 2, 2.0)
    ]
    cases = list(suites[0])
    assert [(c.classname, c.name, c.time) for c in cases] == [
        ("pre.tests.test_a.TestX", "test_b[1]", 0.123),
        ("pre.tests.test_a", "test_c", 0.0),
    ]
    first = cases[0].result[0]
    assert first._tag == "failure" and first.message == "" and first.text == "E  boom"
    second = cases[1].result[0]
    assert second._tag == "error" and second.message == 'failed on teardown with "OSError: gone"'
    read = list(iter_testcases(io.BytesIO(doc)))
    assert [(c.classname, c.name, c.outcome, c.message, c.text) for c in read] == [
        ("pre.tests.test_a.TestX", "test_b[1]", "failed", "", "E  boom"),
        ("pre.tests.test_a", "test_c", "error", 'failed on teardown with "OSError: gone"', "tb"),
    ]
