"""Hostile XML at linear cost: the bounded feed in front of expat, the
failures kept per document, and ``selfheal ci``'s copy of its child's output.

Correctness at small sizes, memory as a tracemalloc bound with a wide margin; the large
figures (64/150 MB attributes, 1.06 M failures, a 512 MB line) are benchmarks/bench_hostile_xml.py's.
"""

from __future__ import annotations

import io
import json
import re
import sys
import tracemalloc
from pathlib import Path
from typing import Optional
from xml.sax.saxutils import unescape

import pytest
from helpers import cli
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_selfheal.errors import InputError
from pytest_selfheal.github import ci
from pytest_selfheal.junit import reader
from pytest_selfheal.junit.bounded import MAX_ATTR, MAX_MARKUP, BoundedFeed, marker
from pytest_selfheal.junit.reader import iter_testcases, latest_failing, map_failing
from pytest_selfheal.records import models
from pytest_selfheal.records.redacted import MAX_NAME, TRUNCATED

GOLDEN = Path(__file__).parent / "golden"
MARKER = re.compile(r" \[\.\.\. truncated by selfheal: (\d+) bytes\]$")


def failing_doc(value: bytes, text: bytes = b"t") -> bytes:
    return (b'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="s">'
            b'<testcase classname="m" name="t"><failure message="' + value + b'">' + text
            + b"</failure></testcase></testsuite></testsuites>")


def read(data: bytes, warnings: Optional[list[str]] = None) -> list[models.TestCaseResult]:
    stream = io.BytesIO(data)
    stream.name = "report.xml"
    return list(iter_testcases(stream, warnings=warnings))


def filtered(data: bytes, chunk: int) -> bytes:
    feed = BoundedFeed()
    out = [feed.feed(data[i:i + chunk], False) for i in range(0, len(data), chunk)]
    return b"".join(out) + feed.feed(b"", True)


# --------------------------------------------------------------------------- the feed


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.xml")))
@pytest.mark.parametrize("chunk", [1, 7, 100, 1 << 20])
def test_a_document_without_long_tokens_passes_unchanged(name: str, chunk: int) -> None:
    data = (GOLDEN / name).read_bytes()
    without_comments = re.sub(rb"<!--.*?-->", b"", data, flags=re.S)
    assert filtered(data, chunk) == without_comments


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.xml")))
def test_small_chunks_read_the_same_cases(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = (GOLDEN / name).read_bytes()
    expected = read(data)
    monkeypatch.setattr(reader, "CHUNK_SIZE", 13)
    assert read(data) == expected


def test_a_huge_attribute_keeps_its_head_and_says_how_much_was_cut() -> None:
    warnings: list[str] = []
    (case,) = read(failing_doc(b"boom " + b"A" * (3 * MAX_ATTR)), warnings)
    dropped = 5 + 3 * MAX_ATTR - MAX_ATTR
    assert case.message == ("boom " + "A" * (3 * MAX_ATTR))[:MAX_ATTR] + " " + marker(dropped).decode()
    assert case.message.endswith(f" [... truncated by selfheal: {dropped} bytes]")
    assert (case.outcome, case.text) == ("failed", "t")
    assert warnings == [f"report.xml: 1 attribute values over {MAX_ATTR} bytes truncated"]


_PIECES = st.sampled_from(["a", "é", "€", "𝄞", "&amp;", "&lt;", "&#233;", "&#x1F600;", "&quot;", " ", "'"])


@settings(max_examples=30, deadline=None)
@given(pieces=st.lists(_PIECES, min_size=1, max_size=40), pad=st.integers(MAX_ATTR - 30, MAX_ATTR + 30),
       chunk=st.sampled_from([17, 1000, 65_537, 1 << 20]))
def test_a_cut_never_splits_a_character_or_an_entity(pieces: list[str], pad: int, chunk: int) -> None:
    # The cut lands among multi-byte characters and entity references at every alignment.
    raw = ("x" * (pad - 20) + "".join(pieces) * 3).encode("utf-8")
    data = failing_doc(raw)
    (case,) = [c for c in iter_testcases(io.BytesIO(data))] if chunk == 1 << 20 else _read_chunked(data, chunk)
    found = MARKER.search(case.message)
    if len(raw) <= MAX_ATTR:
        assert found is None and case.message == unescape(raw.decode(), {"&quot;": '"', "&#233;": "é",
                                                                        "&#x1F600;": "😀"})
        return
    assert found is not None
    kept = len(raw) - int(found.group(1))
    assert MAX_ATTR - 12 <= kept <= MAX_ATTR
    head = unescape(raw[:kept].decode(), {"&quot;": '"', "&#233;": "é", "&#x1F600;": "😀"})
    assert case.message == head + found.group(0)


def _read_chunked(data: bytes, chunk: int) -> list[models.TestCaseResult]:
    saved = reader.CHUNK_SIZE
    reader.CHUNK_SIZE = chunk
    try:
        return read(data)
    finally:
        reader.CHUNK_SIZE = saved


def test_a_single_quoted_value_and_a_value_cut_by_a_tag_budget() -> None:
    value = b"q" * (2 * MAX_ATTR)
    data = (b"<testsuite><testcase classname='m' name='" + value + b"'/></testsuite>")
    assert filtered(data, 1 << 20) == data.replace(value, b"q" * MAX_ATTR + b" " + marker(MAX_ATTR))
    (case,) = read(data)
    assert case.name == "q" * MAX_NAME + TRUNCATED  # and a test name is cut shorter still
    # Many big attributes in one tag: past the tag's budget a value keeps nothing but the marker.
    attrs = b" ".join(b'a%d="%s"' % (i, b"v" * MAX_ATTR) for i in range(20))
    out = filtered(b"<testsuite " + attrs + b"/>", 1 << 20)
    assert out.count(marker(MAX_ATTR)) == 20 - 16  # 16 values of 64 KiB fill the 1 MiB budget
    assert len(out) < 17 * MAX_ATTR


def test_comments_are_dropped_and_cdata_is_text() -> None:
    text = b"E   ValueError: boom\n" + b"z" * (3 * MAX_ATTR)
    data = (b"<testsuites><!-- " + b"<c>" * (MAX_ATTR) + b" --><testsuite><testcase classname='m' name='t'>"
            b"<failure message='m'><![CDATA[" + text + b"]]></failure></testcase></testsuite></testsuites>")
    warnings: list[str] = []
    (case,) = read(data, warnings)
    assert case.text.startswith("E   ValueError: boom\nzzz")
    assert case.text.endswith(f"\n[... truncated by selfheal: {len(text) - reader.MAX_TEXT} characters]")
    assert warnings == []


@pytest.mark.parametrize(("data", "what"), [
    (b"<testsuite><testcase" + b" " * (MAX_MARKUP + 10) + b"/></testsuite>", "a tag longer than"),
    (b"<testsuite" + b"x" * (MAX_MARKUP + 10) + b"/>", "a tag longer than"),
    (b"<?xml version='1.0'?><?pi " + b"p" * (MAX_MARKUP + 10) + b"?><testsuite/>",
     "a processing instruction longer than"),
])
def test_long_markup_outside_values_is_refused_in_one_line(data: bytes, what: str) -> None:
    with pytest.raises(InputError) as info:
        read(data)
    assert str(info.value) == f"report.xml: {what} {MAX_MARKUP} bytes" + (
        " outside its attribute values" if "tag" in what else "") + ": not junit XML"


def test_utf16_documents_pass_through_unfiltered() -> None:
    text = '<?xml version="1.0" encoding="utf-16"?><testsuite><testcase classname="m" name="t">' \
           '<failure message="ünï">x</failure></testcase></testsuite>'
    (case,) = read(text.encode("utf-16"))
    assert (case.test, case.message) == ("m::t", "ünï")


def test_a_huge_attribute_is_read_in_bounded_memory() -> None:
    data = failing_doc(b"A" * (32 * 1024 * 1024))
    stream = io.BytesIO(data)
    tracemalloc.start()
    try:
        (case,) = list(iter_testcases(stream))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(case.message) < MAX_ATTR + 100
    # The feed's chunks and expat's buffer, never the 32 MB value (it was 2-3x its size).
    assert peak < 12 * 1024 * 1024, peak


# --------------------------------------------------------------------------- failures kept


def many_failures(count: int, rerun: str = "") -> bytes:
    cases = "".join(f'<testcase classname="m" name="t{i}"><failure message="boom {i}">x</failure></testcase>'
                    for i in range(count))
    return f"<testsuite>{cases}{rerun}</testsuite>".encode()


def test_failures_beyond_the_limit_are_counted_not_kept() -> None:
    # Before the limit is reached reruns apply (t0 passes on rerun, t1 fails again); from
    # the first test not kept on, records are only counted: t5's rerun pass is not applied.
    data = (b"<testsuite>"
            b'<testcase classname="m" name="t0"><failure message="boom 0">x</failure></testcase>'
            b'<testcase classname="m" name="t1"><failure message="boom 1">x</failure></testcase>'
            b'<testcase classname="m" name="t0"/>'
            b'<testcase classname="m" name="t1"><error message="again">x</error></testcase>'
            b'<testcase classname="m" name="t2"><failure message="boom 2">x</failure></testcase>'
            b'<testcase classname="m" name="t3"><failure message="boom 3">x</failure></testcase>'
            b'<testcase classname="m" name="t4"><failure message="boom 4">x</failure></testcase>'
            b'<testcase classname="m" name="t2"/>'
            b'<testcase classname="m" name="t5"><failure message="boom 5"/></testcase>'
            b"</testsuite>")
    warnings: list[str] = []
    stream = io.BytesIO(data)
    stream.name = "report.xml"
    kept = map_failing(stream, lambda c: (c.test, c.message), warnings=warnings, limit=3)
    assert kept == [("m::t1", "again"), ("m::t2", "boom 2"), ("m::t3", "boom 3")]
    assert warnings == ["report.xml: 2 more failures not kept (at most 3 per document)"]
    # The same through latest_failing (the plugin's capture path).
    listed: list[str] = []
    kept_cases = latest_failing(read(data), limit=3, warnings=listed)
    assert [(c.test, c.message) for c in kept_cases] == kept
    assert listed == ["2 more failures not kept (at most 3 per document)"]


@pytest.mark.parametrize("chunk", [5, 64, 1 << 20])
@pytest.mark.parametrize("cut", [None, -40, -3])
def test_the_count_past_the_limit_is_exact_across_chunks_and_cuts(chunk: int, cut: Optional[int],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data = many_failures(50)
    if cut is not None:
        data = data[:cut]
    monkeypatch.setattr(reader, "CHUNK_SIZE", chunk)
    warnings: list[str] = []
    stream = io.BytesIO(data)
    stream.name = "report.xml"
    assert len(map_failing(stream, lambda c: c, warnings=warnings, limit=7)) == 7
    # Counted from the bytes: the failure of the testcase that -40 cuts counts (an upper bound).
    assert f"report.xml: {50 - 7} more failures not kept (at most 7 per document)" in warnings
    if cut is not None:
        complete = 49 if cut == -40 else 50
        assert f"report.xml: truncated at line 1; read {complete} complete testcases" in warnings


def test_no_line_below_the_limit() -> None:
    warnings: list[str] = []
    assert len(map_failing(io.BytesIO(many_failures(5)), lambda case: case, warnings=warnings)) == 5
    assert warnings == []


def test_selfheal_fingerprint_shows_the_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "MAX_FAILURES", 4)
    path = tmp_path / "many.xml"
    path.write_bytes(many_failures(10))
    code, out, err = cli("fingerprint", "--no-config", str(path))
    assert code == 0 and len(out.splitlines()) == 4
    assert err == f"selfheal: warning: {path}: 6 more failures not kept (at most 4 per document)\n"


def test_failures_beyond_the_limit_cost_no_memory() -> None:
    data = many_failures(60_000)
    tracemalloc.start()
    try:
        kept = map_failing(io.BytesIO(data), lambda c: c, limit=100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == 100
    assert peak < 12 * 1024 * 1024, peak  # ~6.5 MB measured; all 60,000 kept take ~30 MB


# --------------------------------------------------------------------------- selfheal ci output


def test_selfheal_ci_copies_a_line_without_newline_in_bounded_memory(tmp_path: Path) -> None:
    total = 64 * 1024 * 1024
    code = f"import sys\npiece = b'x' * (1 << 20)\nfor _ in range({total >> 20}):\n    sys.stdout.buffer.write(piece)\n"

    class Sink(io.RawIOBase):
        written = 0

        def writable(self) -> bool:
            return True

        def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
            self.written += len(data)
            return len(data)

    sink = Sink()
    stream = io.TextIOWrapper(io.BufferedWriter(sink), encoding="utf-8")
    tracemalloc.start()
    try:
        exit_code = ci.run_pytest([sys.executable, "-c", code], cwd=tmp_path, env={}, stream=stream)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stream.flush()
    assert exit_code == 0 and sink.written == total
    assert peak < total // 8, peak  # pieces of a line, never the line


def test_pytest_selfheal_capture_says_how_many_failures_were_not_kept(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The capture reads junit like any runner's: past the limit the failures are counted
    # and the count is in the terminal summary (the inline run sees the patched limit).
    monkeypatch.setattr(reader, "MAX_FAILURES", 2)
    pytester.makepyfile(test_many="import pytest\n@pytest.mark.parametrize('n', range(5))\n"
                                  "def test_fails(n):\n    assert n < 0\n")
    result = pytester.runpytest("--selfheal", "-p", "no:randomly")
    result.assert_outcomes(failed=5)
    result.stdout.fnmatch_lines(["*warning: 3 more failures not kept (at most 2 per document)*"])
    (incident,) = (pytester.path / ".selfheal" / "error_inbox").iterdir()
    failures = json.loads((incident / "incident.json").read_text())["failures"]
    assert [f["nodeid"] for f in failures] == ["test_many.py::test_fails[0]", "test_many.py::test_fails[1]"]
