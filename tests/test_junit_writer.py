from __future__ import annotations

import io

import pytest
from _pytest.junitxml import mangle_test_address
from helpers import as_pytest_writes_it, failed_report

from pytest_selfheal.junit.nodeids import mangle_nodeid, nodeid_by_identity, xml_escape_visible
from pytest_selfheal.junit.reader import iter_testcases
from pytest_selfheal.junit.writer import junit_case, junit_message

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
    assert junit_message(failed_report(when="call", **base)) == "ValueError: boom"
    assert junit_message(failed_report(when="setup", **base)) == 'failed on setup with "ValueError: boom"'
    assert junit_message(failed_report(when="teardown", **base)) == 'failed on teardown with "ValueError: boom"'
    assert junit_message(failed_report(when="collect", **base)) == "collection failure"


def test_the_case_is_what_the_reader_reads_from_pytests_junit() -> None:
    reports = [
        failed_report("tests/test_a.py::test_b", "call", "assert 1 == 2\x1b[31m", "E  assert 1 == 2\x00\r\nE  x\ry",
                      "tests/test_a.py", 3, 0.12345),
        failed_report("tests/test_a.py::TestX::test_c[1]", "setup", "RuntimeError: <db> & co\r\n", "tb\tx"),
        failed_report("tests/test_a.py::test_d", "teardown", "OSError: gone", "x" * 70_000),
        failed_report("tests/test_broken.py", "collect", "SyntaxError", "E   def test_x(:"),
    ]
    for report in reports:
        (read,) = iter_testcases(io.BytesIO(as_pytest_writes_it(report, prefix="pre")))
        assert junit_case(report, report.nodeid, prefix="pre") == read
    case = junit_case(reports[0], reports[0].nodeid)
    assert (case.outcome, case.message, case.text) == ("failed", "assert 1 == 2#x1B[31m", "E  assert 1 == 2#x00\nE  x\ny")
    assert junit_case(reports[1], reports[1].nodeid).outcome == "error"


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
