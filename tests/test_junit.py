"""junit.py: streaming reader of junit XML from any runner, and its refusals."""

from __future__ import annotations

import errno
import io
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from pytest_selfheal.errors import InputError
from pytest_selfheal.junit.reader import (
    MAX_TEXT,
    dedupe,
    iter_testcases,
    latest_failing,
    map_failing,
)
from pytest_selfheal.records import models

GOLDEN = Path(__file__).parent / "golden"


def failing_cases(source: Any, warnings: Optional[list[str]] = None) -> list[models.TestCaseResult]:
    """The failing testcases as the live path reads them (``map_failing`` keeping each case)."""
    return map_failing(source, lambda case: case, warnings=warnings)


def read(xml: str, warnings: Optional[list[str]] = None) -> list[models.TestCaseResult]:
    return list(iter_testcases(io.BytesIO(xml.encode("utf-8")), warnings=warnings))


def case(name: str, outcome: str = models.OUTCOME_PASSED, message: str = "") -> models.TestCaseResult:
    return models.TestCaseResult(classname="m", name=name, outcome=outcome, message=message)


# -- dialects -------------------------------------------------------------------------------


def test_outcomes_messages_and_attributes() -> None:
    cases = read(
        """<?xml version="1.0" encoding="utf-8"?>
        <testsuites><testsuite name="pytest">
          <testcase classname="pkg.test_a" name="test_ok" file="pkg/test_a.py" line="4" time="0.5"/>
          <testcase classname="pkg.test_a" name="test_bad[1-2]" time="1,234.5">
            <failure message="assert 1 == 2&#10; +  where …" type="AssertionError">traceback here</failure>
          </testcase>
          <testcase classname="pkg.test_a" name="test_setup">
            <error message='failed on setup with "ValueError: boom"'>E   ValueError: boom</error>
          </testcase>
          <testcase classname="pkg.test_a" name="test_skip"><skipped message="not today"/></testcase>
          <testcase classname="" name="test_collect" line="x"><error message="collection failure"/></testcase>
        </testsuite></testsuites>"""
    )
    assert [(c.test, c.outcome) for c in cases] == [
        ("pkg.test_a::test_ok", "passed"),
        ("pkg.test_a::test_bad[1-2]", "failed"),
        ("pkg.test_a::test_setup", "error"),
        ("pkg.test_a::test_skip", "skipped"),
        ("test_collect", "error"),
    ]
    ok, bad, setup, skip, collect = cases
    assert (ok.file, ok.line, ok.time) == ("pkg/test_a.py", 4, 0.5)
    assert bad.message == "assert 1 == 2\n +  where …"
    assert (bad.exc_type, bad.text, bad.time) == ("AssertionError", "traceback here", 1234.5)
    assert setup.message == 'failed on setup with "ValueError: boom"'
    assert skip.message == "not today"
    assert collect.line is None  # a garbage line attribute is not an error


def test_root_testsuite_nested_suites_and_cdata() -> None:
    cases = read(
        """<testsuite name="outer"><testsuite name="inner">
             <testcase classname="A" name="a"><failure><![CDATA[Error: <b> & co]]></failure></testcase>
           </testsuite><testcase classname="B" name="b"/></testsuite>"""
    )
    assert [(c.test, c.outcome, c.text) for c in cases] == [
        ("A::a", "failed", "Error: <b> & co"),
        ("B::b", "passed", ""),
    ]


def test_surefire_rerun_and_flaky_children_are_not_the_outcome() -> None:
    cases = read(
        """<testsuite>
          <testcase classname="T" name="flaky">
            <flakyFailure message="Read timed out" type="java.net.SocketTimeoutException">
              <stackTrace>trace</stackTrace></flakyFailure>
          </testcase>
          <testcase classname="T" name="always">
            <failure message="boom" type="java.lang.IllegalStateException">first</failure>
            <rerunFailure message="boom" type="java.lang.IllegalStateException"><stackTrace>x</stackTrace></rerunFailure>
          </testcase>
        </testsuite>"""
    )
    assert [(c.name, c.outcome, c.message, c.text) for c in cases] == [
        ("flaky", "passed", "", ""),
        ("always", "failed", "boom", "first"),
    ]


def test_first_failure_of_a_testcase_speaks_and_system_out_is_ignored() -> None:
    (only,) = read(
        """<testsuite><testcase classname="T" name="t">
             <system-out>noise</system-out>
             <failure message="first">one</failure><error message="second">two</error>
             <skipped/>
           </testcase></testsuite>"""
    )
    assert (only.outcome, only.message, only.text) == ("failed", "first", "one")


def test_a_skipped_testcase_after_a_failing_one_has_no_text_of_it() -> None:
    failed, skipped = read(
        """<testsuite><testcase classname="T" name="f"><failure message="m">TRACE</failure></testcase>
           <testcase classname="T" name="s"><skipped message="not today">why</skipped></testcase></testsuite>"""
    )
    assert (failed.outcome, failed.text) == ("failed", "TRACE")
    assert (skipped.outcome, skipped.message, skipped.text) == ("skipped", "not today", "")


def test_failure_text_is_bounded_to_its_head() -> None:
    head = "E   RuntimeError: the head\n"
    (only,) = read(
        f'<testsuite><testcase classname="T" name="t"><failure>{head}{"x" * (3 * MAX_TEXT)}'
        "</failure></testcase></testsuite>"
    )
    dropped = len(head) + 3 * MAX_TEXT - MAX_TEXT
    assert only.text == (head + "x" * (3 * MAX_TEXT))[:MAX_TEXT] + f"\n[... truncated by selfheal: {dropped} characters]"


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.xml")))
def test_every_golden_file_reads_without_warnings(name: str) -> None:
    warnings: list[str] = []
    cases = list(iter_testcases(GOLDEN / name, warnings=warnings))
    assert cases and warnings == []


def test_xdist_junit_has_the_same_cases_as_a_plain_run() -> None:
    plain = {(c.test, c.outcome) for c in iter_testcases(GOLDEN / "pytest_xunit2.xml")}
    xdist = {(c.test, c.outcome) for c in iter_testcases(GOLDEN / "pytest_xdist.xml")}
    assert plain == xdist


# -- reruns ---------------------------------------------------------------------------------


def test_rerun_records_keep_the_last_outcome() -> None:
    cases = [
        case("always"),
        case("flaky", models.OUTCOME_FAILED, "boom"),
        case("always"),
        case("flaky"),
        case("always", models.OUTCOME_FAILED, "final"),
        case("steady"),
    ]
    assert [(c.name, c.outcome, c.message) for c in dedupe(cases)] == [
        ("always", "failed", "final"),
        ("flaky", "passed", ""),
        ("steady", "passed", ""),
    ]
    assert [(c.name, c.message) for c in latest_failing(cases)] == [("always", "final")]


def test_pytest_call_failure_plus_teardown_error_keeps_the_failure() -> None:
    cases = [
        case("t", models.OUTCOME_FAILED, "assert 0 == 1"),
        case("t", models.OUTCOME_ERROR, 'failed on teardown with "OSError: lock"'),
    ]
    assert [c.message for c in dedupe(cases)] == ["assert 0 == 1"]
    assert [c.message for c in latest_failing(cases)] == ["assert 0 == 1"]
    # A setup error after a failure is a later attempt: it wins.
    rerun = [cases[0], case("t", models.OUTCOME_ERROR, 'failed on setup with "X"')]
    assert [c.outcome for c in latest_failing(rerun)] == ["error"]


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.xml")))
def test_map_failing_equals_latest_failing_of_all_cases(name: str) -> None:
    path = GOLDEN / name
    assert failing_cases(path) == latest_failing(iter_testcases(path))
    assert map_failing(path, lambda c: c.test) == [c.test for c in failing_cases(path)]


def test_golden_rerunfailures_duplicates_collapse() -> None:
    failing = failing_cases(GOLDEN / "pytest_rerunfailures.xml")
    assert [c.test for c in failing] == ["tests.test_api::test_always_fails"]


def test_golden_teardown_double_record_keeps_the_call_failure() -> None:
    records = [
        c for c in iter_testcases(GOLDEN / "pytest_xunit2.xml") if c.name == "test_fails_then_teardown_error"
    ]
    assert [c.outcome for c in records] == ["failed", "error"]
    (kept,) = [c for c in failing_cases(GOLDEN / "pytest_xunit2.xml") if c.name == records[0].name]
    assert kept.outcome == "failed"


# -- bad input ------------------------------------------------------------------------------


def error_of(data: bytes, name: str = "report.xml") -> str:
    stream = io.BytesIO(data)
    stream.name = name
    with pytest.raises(InputError) as info:
        list(iter_testcases(stream))
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("data", [b"", b"   \n\t  "])
def test_empty_file(data: bytes) -> None:
    assert error_of(data) == "report.xml: empty file, not junit XML"


@pytest.mark.parametrize(
    "data",
    [b"hello world", bytes(range(256)) * 4, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"{\"json\": true}"],
)
def test_not_xml(data: bytes) -> None:
    message = error_of(data)
    assert message.startswith("report.xml: not XML (line 1, column ")


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol9 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<testsuite><testcase classname="a" name="&lol9;"/></testsuite>"""

EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE testsuite [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<testsuite><testcase classname="a" name="b"><failure message="&x;"/></testcase></testsuite>"""

PLAIN_DOCTYPE = b"""<?xml version="1.0"?><!DOCTYPE testsuite SYSTEM "junit.dtd"><testsuite/>"""


@pytest.mark.parametrize("data", [BILLION_LAUGHS, EXTERNAL_ENTITY, PLAIN_DOCTYPE])
def test_doctype_and_entities_are_refused(data: bytes) -> None:
    assert error_of(data) == (
        "report.xml: refusing XML with a DOCTYPE/entity declaration (possible entity-expansion attack)"
    )


@pytest.mark.parametrize("root", ["html", "testcase", "results"])
def test_wrong_root(root: str) -> None:
    message = error_of(f"<{root}><testcase classname='a' name='b'/></{root}>".encode())
    assert message == f"report.xml: root element is <{root}>, not <testsuites> or <testsuite>: not junit XML"


def test_malformed_in_the_middle_is_an_error() -> None:
    data = b"<testsuite><testcase classname='a' name='b'/><testcase></testsuite></testsuite>"
    assert error_of(data) == (
        "report.xml: malformed XML (line 1, column 57: mismatched tag); read 1 complete testcases"
    )


def test_content_after_the_root_is_a_warning() -> None:
    warnings: list[str] = []
    cases = read("<testsuite><testcase classname='a' name='b'/></testsuite><testsuite/>", warnings)
    assert [c.name for c in cases] == ["b"]
    assert warnings == [
        "<stream>: ignoring content after the root element (line 1, column 57: junk after document element)"
    ]


def test_truncated_real_file_yields_complete_cases_and_a_warning() -> None:
    data = (GOLDEN / "pytest_xunit2.xml").read_bytes()
    full = list(iter_testcases(io.BytesIO(data)))
    root_end = data.index(b"<testsuite ") + 1
    for cut in sorted({root_end + 5, len(data) // 4, len(data) // 2, len(data) - 40, len(data) - 1}):
        warnings: list[str] = []
        got = list(iter_testcases(io.BytesIO(data[:cut]), warnings=warnings))
        assert got == full[: len(got)], cut
        assert len(warnings) == 1, cut
        assert warnings[0].startswith("<stream>: truncated at line ")
        assert warnings[0].endswith(f"; read {len(got)} complete testcases")
    # Cut inside a multi-byte character and inside an entity reference.
    for marker in ("é".encode(), b"&gt;"):
        cut = data.index(marker) + 1
        warnings = []
        got = list(iter_testcases(io.BytesIO(data[:cut]), warnings=warnings))
        assert got == full[: len(got)]
        assert len(warnings) == 1 and "truncated" in warnings[0]


def test_truncated_map_failing_keeps_what_was_complete() -> None:
    data = (GOLDEN / "pytest_xunit2.xml").read_bytes()
    warnings: list[str] = []
    failing = failing_cases(io.BytesIO(data[: len(data) // 2]), warnings=warnings)
    assert failing == latest_failing(iter_testcases(io.BytesIO(data[: len(data) // 2])))
    assert failing and len(warnings) == 1


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^.*nope\.xml: no such file$"):
        list(iter_testcases(tmp_path / "nope.xml"))
    with pytest.raises(InputError, match=r": is a directory, not a junit XML file$"):
        list(iter_testcases(tmp_path))
    with pytest.raises(InputError, match=r": is a directory, not a junit XML file$"):
        failing_cases(str(tmp_path))


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.xml"
    path.write_text("<testsuite/>")
    path.chmod(0)
    if os.name != "posix" or os.geteuid() == 0:
        # Root reads a mode-0 file (and Windows ignores the mode): give the reader the answer
        # the OS gives an ordinary user.
        real_open = os.open

        def refusing_open(file: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(file, (str, Path)) and Path(file) == path:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(os, "open", refusing_open)
    try:
        with pytest.raises(InputError, match=r"secret\.xml: permission denied$"):
            list(iter_testcases(path))
    finally:
        path.chmod(0o600)


# -- memory ---------------------------------------------------------------------------------


class _GeneratedJunit(io.RawIOBase):
    """A junit document produced on the fly: ``cases`` failing testcases of big text."""

    def __init__(self, cases: int, text_size: int) -> None:
        self._chunks = self._generate(cases, text_size)
        self._buffer = b""
        self.produced = 0

    @staticmethod
    def _generate(cases: int, text_size: int) -> Iterator[bytes]:
        yield b'<?xml version="1.0"?><testsuites><testsuite name="big">'
        body = b"x" * text_size
        for i in range(cases):
            yield (
                f'<testcase classname="big.test_mod" name="test_{i}"><failure message="boom {i}">'.encode()
                + body
                + b"</failure></testcase>"
            )
        yield b"</testsuite></testsuites>"

    def readable(self) -> bool:
        return True

    def readinto(self, target: bytearray | memoryview) -> int:  # type: ignore[override]
        while len(self._buffer) < len(target):
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buffer += chunk
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        self.produced += size
        return size


def test_streaming_memory_is_bounded_on_a_big_document() -> None:
    source = _GeneratedJunit(cases=1500, text_size=70_000)  # ~100 MB of XML
    tracemalloc.start()
    try:
        count = 0
        for result in iter_testcases(io.BufferedReader(source)):
            count += 1
            assert len(result.text) == MAX_TEXT + 1 + len(f"[... truncated by selfheal: {70_000 - MAX_TEXT} characters]")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 1500
    assert source.produced > 100_000_000
    # One testcase's bounded text plus parser buffers, never the document.
    assert peak < 8 * 1024 * 1024, peak
