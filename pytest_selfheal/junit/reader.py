"""Streaming, hostile-input-safe reader of junit XML from any runner (docs/fingerprints.md).

One pass with expat behind the byte filter of ``junit/bounded.py``, no tree: each
``<testcase>`` becomes a :class:`models.TestCaseResult` at its end tag, so memory stays
bounded on files of hundreds of MB. A DOCTYPE or ENTITY declaration is refused before
anything in it is expanded; a file cut mid-write yields its complete testcases and a
warning; the root must be ``<testsuites>``/``<testsuite>``, suites may nest at any depth.

Reruns appear as several records of one identity (the last is the final attempt) or as
``<rerunFailure>``/``<flakyFailure>``/... children recording earlier attempts; only
``<failure>``/``<error>``/``<skipped>`` decide the outcome.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Optional, TypeVar, Union
from xml.parsers import expat

from pytest_selfheal.errors import InputError
from pytest_selfheal.junit.bounded import MAX_ATTR, BoundedFeed, MarkupTooLong, TagCounter
from pytest_selfheal.records import models
from pytest_selfheal.records.redacted import bounded_name

# Bytes read and fed to expat per call. Large: expat < 2.6 scans an unfinished token again
# on every call, and the byte filter walks a few tokens per chunk in Python.
CHUNK_SIZE = 1024 * 1024
MAX_TEXT = 64 * 1024  # characters of element text kept per testcase: the head is what matters
MAX_FAILURES = 10_000  # failing tests kept per document by map_failing/latest_failing; the rest counted
MAX_DEPTH = 1000  # real junit nests a handful of levels; expat keeps every open tag
ROOT_TAGS = ("testsuites", "testsuite")

# pytest writes a test that failed in its call *and* errored in teardown as two records:
# the failure, then 'failed on teardown with "…"'. The call failure is the one to keep.
_TEARDOWN_PREFIX = "failed on teardown with"

Source = Union[Path, str, "IO[bytes]"]
T = TypeVar("T")


class _Refused(Exception):
    """Raised from inside expat's handlers: expat stops at once."""


def _parse(convert: Callable[[str], T], value: Optional[str], default: T) -> T:
    try:
        return convert(value) if value else default
    except ValueError:
        return default


def _keeps_previous(previous_outcome: str, new: models.TestCaseResult) -> bool:
    """Whether an earlier failing record of a test stands against a later failing one."""
    return (
        previous_outcome == models.OUTCOME_FAILED
        and new.outcome == models.OUTCOME_ERROR
        and new.message.startswith(_TEARDOWN_PREFIX)
    )


class _Latest:
    """The latest failing record of each test (:func:`latest_failing`'s rules), for at most
    ``limit`` tests, each held as ``keep(record)``."""

    def __init__(self, limit: Optional[int], keep: Callable[[models.TestCaseResult], Any]) -> None:
        self.limit = MAX_FAILURES if limit is None else limit
        self.keep = keep
        self.kept: dict[str, tuple[str, Any]] = {}  # test id -> (outcome, keep(record))
        self.not_kept = 0  # failing records beyond the limit, counted only

    def add(self, case: models.TestCaseResult) -> bool:
        """Take the next record; False for the first failing test beyond the limit (counted)."""
        previous = self.kept.get(case.test)
        if case.outcome not in models.FAILING_OUTCOMES:  # a failing test that passed on rerun is not failing
            self.kept.pop(case.test, None)
        elif previous is None and len(self.kept) >= self.limit:
            self.not_kept += 1
            return False
        elif previous is None or not _keeps_previous(previous[0], case):
            # Assigning an existing key keeps its place: order of first appearance.
            self.kept[case.test] = (case.outcome, self.keep(case))
        return True

    def warn(self, warnings: Optional[list[str]], label: str = "") -> None:
        if self.not_kept:
            _warn(warnings, f"{label}{self.not_kept} more failures not kept (at most {self.limit} per document)")


class _Reader:
    """expat's handlers, turning each ``<testcase>`` into a TestCaseResult at its end tag.
    Without ``latest`` every case goes to ``done``; with it only the latest failing record of
    each test is held, and past its limit the rest is only counted from the bytes
    (:class:`TagCounter`): a Python call per element costs as much as expat's whole parse."""

    def __init__(self, latest: Optional[_Latest] = None) -> None:
        self.parser = parser = expat.ParserCreate()
        parser.StartElementHandler = self.start
        parser.EndElementHandler = self.end
        # Any DTD is refused before its contents are looked at: no entity is ever declared,
        # so none can be expanded (internal or external).
        parser.StartDoctypeDeclHandler = parser.EntityDeclHandler = self.refuse_doctype
        parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        parser.buffer_text = True
        parser.buffer_size = MAX_TEXT
        self.latest = latest
        self.done: list[models.TestCaseResult] = []
        self.counter: Optional[TagCounter] = None  # set when only counting
        self.count_from = 0  # index in the fed bytes where counting starts
        self.count = 0  # complete testcases read
        self.depth = 0
        self.root_seen = self.root_closed = False
        self.case_depth = self.text_depth = -1  # of the open <testcase>, of the result whose text is kept
        self.attrs: dict[str, str] = {}
        self.outcome = models.OUTCOME_PASSED
        self.message = self.exc_type = ""
        self.parts: list[str] = []
        self.text_len = 0

    def start(self, name: str, attrs: dict[str, str]) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Refused(f"elements nested deeper than {MAX_DEPTH} levels; no junit writer nests that deep")
        if self.depth == 1:
            if name not in ROOT_TAGS:
                raise _Refused(f"root element is <{name[:60]}>, not <testsuites> or <testsuite>: not junit XML")
            self.root_seen = True
        elif self.case_depth < 0:
            if name == "testcase":
                self.case_depth, self.attrs, self.outcome = self.depth, attrs, models.OUTCOME_PASSED
        elif self.depth == self.case_depth + 1:
            # A direct child of the open <testcase>: the first failure or error speaks;
            # rerunFailure/flakyFailure and friends are earlier attempts, not the outcome.
            if name in ("failure", "error") and self.outcome not in models.FAILING_OUTCOMES:
                self.outcome = models.OUTCOME_FAILED if name == "failure" else models.OUTCOME_ERROR
                self.parts, self.text_len, self.text_depth = [], 0, self.depth
                # Text is only wanted here: whitespace between elements costs no Python call.
                self.parser.CharacterDataHandler = self.chars
            elif name == "skipped" and self.outcome == models.OUTCOME_PASSED:
                self.outcome = models.OUTCOME_SKIPPED
            else:
                return
            self.message, self.exc_type = attrs.get("message", ""), attrs.get("type", "")

    def end(self, name: str) -> None:
        depth = self.depth
        self.depth -= 1
        if depth == self.text_depth:
            self.text_depth = -1
            self.parser.CharacterDataHandler = None
        elif depth == self.case_depth:
            self.case_depth = -1
            self.count += 1
            if self.latest is None:
                self.done.append(self._result())
            elif self.outcome in models.FAILING_OUTCOMES:
                if not self.latest.add(self._result()):
                    self._count_only()
            elif self.latest.kept:
                self.latest.kept.pop(_test_id(self.attrs), None)
        elif depth == 1:
            self.root_closed = True

    def _count_only(self) -> None:
        parser = self.parser
        parser.StartElementHandler = parser.EndElementHandler = parser.CharacterDataHandler = None
        self.counter = TagCounter()
        self.count_from = parser.CurrentByteIndex + 1  # past the '<' of this </testcase>

    def _result(self) -> models.TestCaseResult:
        attrs = self.attrs
        failing = self.outcome in models.FAILING_OUTCOMES
        text = cut_text("".join(self.parts), self.text_len) if failing else ""
        passed = self.outcome == models.OUTCOME_PASSED
        return models.TestCaseResult(
            classname=bounded_name(attrs.get("classname", "")), name=bounded_name(attrs.get("name", "")),
            outcome=self.outcome, message="" if passed else self.message, exc_type="" if passed else self.exc_type,
            text=text, file=attrs.get("file"), line=_parse(int, attrs.get("line"), None),
            time=_parse(lambda t: float(t.replace(",", "")), attrs.get("time"), 0.0),  # Surefire writes "1,234.5"
        )

    def chars(self, data: str) -> None:
        if self.text_len < MAX_TEXT:
            self.parts.append(data[:MAX_TEXT - self.text_len])
        self.text_len += len(data)  # counted on for the marker

    def refuse_doctype(self, *_args: Any) -> None:
        raise _Refused("refusing XML with a DOCTYPE/entity declaration (possible entity-expansion attack)")


def _test_id(attrs: dict[str, str]) -> str:
    """``TestCaseResult.test`` of a testcase's attributes."""
    classname, name = bounded_name(attrs.get("classname", "")), bounded_name(attrs.get("name", ""))
    return f"{classname}::{name}" if classname else name


def cut_text(text: str, length: int) -> str:
    """A failure ``text`` of ``length`` characters cut at MAX_TEXT, with a line that says so."""
    if length <= MAX_TEXT:
        return text
    return f"{text[:MAX_TEXT]}\n[... truncated by selfheal: {length - MAX_TEXT} characters]"


@contextlib.contextmanager
def _opened(source: Source, label: str) -> Iterator[IO[bytes]]:
    if not isinstance(source, (str, Path)):
        yield source  # the caller's stream: the caller closes it
        return
    try:
        # Not blocking: opening a FIFO without a writer would wait forever; it is refused below.
        nonblock = getattr(os, "O_NONBLOCK", 0)
        fd = os.open(source, os.O_RDONLY | nonblock)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            what = "is a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
            raise InputError(f"{label}: {what}, not a junit XML file")
        if nonblock:
            os.set_blocking(fd, True)
        stream = open(fd, "rb")
    except FileNotFoundError:
        raise InputError(f"{label}: no such file") from None
    except (IsADirectoryError, PermissionError):
        # Windows reports a directory as PermissionError: say which it is.
        if os.path.isdir(source):
            raise InputError(f"{label}: is a directory, not a junit XML file") from None
        raise InputError(f"{label}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{label}: cannot read ({exc.strerror or exc})") from None
    with stream:
        yield stream


def _read(source: Source, reader: _Reader, warnings: Optional[list[str]]) -> Iterator[models.TestCaseResult]:
    """The finished cases of ``source`` fed through the byte filter to expat, chunk by chunk."""
    label = os.fspath(source) if isinstance(source, (str, Path)) else str(getattr(source, "name", "<stream>"))
    feed, parser = BoundedFeed(), reader.parser
    with _opened(source, label) as stream:
        seen_content, fed = False, 0  # fed: bytes handed to expat before this chunk
        while True:
            try:
                chunk = stream.read(CHUNK_SIZE)
            except OSError as exc:
                raise InputError(f"{label}: cannot read ({exc.strerror or exc})") from None
            if not chunk and not seen_content:
                raise InputError(f"{label}: empty file, not junit XML")
            seen_content = seen_content or bool(chunk.strip())
            data: bytes | memoryview = b""
            closing = False  # an error while closing the document: it just stops (truncated)
            try:
                data = feed.feed(chunk, not chunk)
                parser.Parse(data, False)
                _count(reader, data, fed, len(data))
                if not chunk:
                    closing = True
                    parser.Parse(b"", True)
            except _Refused as exc:
                raise InputError(f"{label}: {exc}") from None
            except MarkupTooLong as exc:
                raise InputError(f"{label}: {exc}: not junit XML") from None
            except (LookupError, ValueError) as exc:  # e.g. encoding="x-no-such-codec" in the declaration
                raise InputError(f"{label}: not readable XML ({exc})") from None
            except expat.ExpatError as exc:
                if not closing:
                    _count(reader, data, fed, parser.ErrorByteIndex - fed)
                yield from reader.done  # what was complete, before deciding what the error means
                _on_error(exc, reader, label, closing, warnings)
                break
            yield from reader.done
            reader.done.clear()
            if not chunk:
                break
            fed += len(data)
    if feed.truncated:
        _warn(warnings, f"{label}: {feed.truncated} attribute values over {MAX_ATTR} bytes truncated")
    if reader.latest is not None:
        reader.latest.warn(warnings, f"{label}: ")


def _count(reader: _Reader, data: bytes | memoryview, fed: int, end: int) -> None:
    """Count ``data[:end]`` (after ``fed`` bytes) once the reader only counts."""
    counter, latest, start = reader.counter, reader.latest, max(0, reader.count_from - fed)
    if counter is None or latest is None or start >= end:
        return
    before = counter.failing, counter.complete
    counter.feed(memoryview(data)[start:end])
    latest.not_kept += counter.failing - before[0]
    reader.count += counter.complete - before[1]


def _on_error(exc: expat.ExpatError, reader: _Reader, label: str, closing: bool,
              warnings: Optional[list[str]]) -> None:
    where = f"line {exc.lineno}, column {exc.offset}"
    reason = expat.ErrorString(exc.code)
    if not reader.root_seen:
        raise InputError(f"{label}: not XML ({where}: {reason})")
    junk = exc.code == expat.errors.codes[expat.errors.XML_ERROR_JUNK_AFTER_DOC_ELEMENT]
    if reader.root_closed or (reader.counter is not None and junk):
        # e.g. two documents concatenated: everything of the first one was read.
        _warn(warnings, f"{label}: ignoring content after the root element ({where}: {reason})")
    elif closing:
        # A well-formed prefix that just stops: the writer was killed mid-write.
        _warn(warnings, f"{label}: truncated at line {exc.lineno}; read {reader.count} complete testcases")
    else:
        raise InputError(f"{label}: malformed XML ({where}: {reason}); read {reader.count} complete testcases")


def _warn(warnings: Optional[list[str]], message: str) -> None:
    if warnings is not None:
        warnings.append(message)


def iter_testcases(source: Source, *, warnings: Optional[list[str]] = None) -> Iterator[models.TestCaseResult]:
    """Every ``<testcase>`` of a junit file (a path or a binary stream) in document order;
    :class:`errors.InputError` (one line, naming the file) for what the module refuses."""
    return _read(source, _Reader(), warnings)


def map_failing(
    source: Source,
    transform: Callable[[models.TestCaseResult], T],
    *,
    warnings: Optional[list[str]] = None,
    limit: Optional[int] = None,
) -> list[T]:
    """``[transform(c) for c in latest_failing(iter_testcases(source))]``, several times
    faster: passing testcases are never built, and past ``limit`` failing tests the rest of
    the document is only counted from its bytes (reruns no longer applied)."""
    latest = _Latest(limit, transform)
    for _ in _read(source, _Reader(latest), warnings):
        pass  # with a transform, nothing is yielded
    return [value for _, value in latest.kept.values()]


def dedupe(cases: Iterable[models.TestCaseResult]) -> list[models.TestCaseResult]:
    """One record per test identity (``classname::name``), in order of first appearance: the
    last record wins (the final attempt), but pytest's call failure stands against the
    teardown error that follows it."""
    by_test: dict[str, models.TestCaseResult] = {}
    for case in cases:
        previous = by_test.get(case.test)
        if previous is None or not _keeps_previous(previous.outcome, case):
            by_test[case.test] = case
    return list(by_test.values())


def latest_failing(
    cases: Iterable[models.TestCaseResult],
    *,
    limit: Optional[int] = None,
    warnings: Optional[list[str]] = None,
) -> list[models.TestCaseResult]:
    """The failing records of ``dedupe(cases)``; past ``limit`` failing tests the rest are
    only counted, as :func:`map_failing` does."""
    latest = _Latest(limit, lambda case: case)
    records = iter(cases)
    for case in records:
        if not latest.add(case):
            latest.not_kept += sum(rest.outcome in models.FAILING_OUTCOMES for rest in records)
    latest.warn(warnings)
    return [case for _, case in latest.kept.values()]
