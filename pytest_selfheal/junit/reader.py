"""Streaming, hostile-input-safe reader of junit XML from any runner (docs/fingerprints.md).

One pass with expat, no tree: each ``<testcase>`` becomes a :class:`models.TestCaseResult`
as soon as its end tag is read, so memory stays bounded on files of hundreds of MB.
DOCTYPE/ENTITY declarations are refused before anything in them is expanded (billion
laughs, external entities). A file cut mid-write yields its complete testcases plus a
warning. Any root other than ``<testsuites>``/``<testsuite>`` is refused; suites may nest
(jest, Surefire) and every ``<testcase>`` at any depth is read.

Reruns (pytest-rerunfailures, flaky, Surefire) appear either as several ``<testcase>``
records of one identity, the last one being the final attempt, or as
``<rerunFailure>``/``<flakyFailure>``/``<rerunError>``/``<flakyError>`` children that
record earlier attempts; only ``<failure>``/``<error>``/``<skipped>`` decide the outcome.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import (
    IO,
    Any,
    Optional,
    TypeVar,
    Union,
)
from xml.parsers import expat

from pytest_selfheal.errors import InputError
from pytest_selfheal.junit.bounded import MAX_ATTR, BoundedFeed, MarkupTooLong, TagCounter
from pytest_selfheal.records import models
from pytest_selfheal.records.redacted import MAX_NAME, bounded_name

# Bytes read and fed to expat per call. Large: expat < 2.6 scans an unfinished token again
# on every call, and the bounded feed walks a few tokens per chunk in Python.
CHUNK_SIZE = 1024 * 1024
MAX_TEXT = 64 * 1024  # characters of element text kept per testcase: the head is what matters
MAX_FAILURES = 10_000  # failing tests kept per document by map_failing/latest_failing; the rest counted

ROOT_TAGS = ("testsuites", "testsuite")
_FAILING_TAGS = ("failure", "error")

# pytest writes a test that failed in its call *and* errored in teardown as two records:
# the failure, then 'failed on teardown with "…"'. The call failure is the one to keep.
_TEARDOWN_PREFIX = "failed on teardown with"

Source = Union[Path, str, "IO[bytes]"]
T = TypeVar("T")


# Real junit nests a handful of levels (testsuites > testsuite > testcase > failure).
MAX_DEPTH = 1000

class _Refused(Exception):
    """Raised from inside expat handlers to stop parsing at once."""


def _parse_time(value: Optional[str]) -> float:
    if not value:
        return 0.0
    try:
        # Surefire writes thousands separators ("1,234.5").
        return float(value.replace(",", ""))
    except ValueError:
        return 0.0


def _parse_line(value: Optional[str]) -> Optional[int]:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _test_id(classname: str, name: str) -> str:
    # Same as models.TestCaseResult.test, without building the object.
    return f"{classname}::{name}" if classname else name


def _keeps_previous(previous_outcome: str, new: models.TestCaseResult) -> bool:
    """Whether an earlier failing record of a test stands against a later failing one."""
    return (
        previous_outcome == models.OUTCOME_FAILED
        and new.outcome == models.OUTCOME_ERROR
        and new.message.startswith(_TEARDOWN_PREFIX)
    )


class _Reader:
    """expat handlers turning ``<testcase>`` elements into TestCaseResult objects.

    Without ``keep`` every case is appended to ``done``. With ``keep`` the reader keeps
    only ``keep(case)`` of the latest failing record per test identity (see
    :func:`latest_failing`): passing cases then cost no object at all, which is most of
    the time spent on big files, and memory holds one small value per failing test.
    """

    def __init__(
        self,
        parser: Any,
        keep: Optional[Callable[[models.TestCaseResult], Any]],
        limit: Optional[int] = None,
    ):
        self.parser = parser
        self.keep = keep
        self.limit = MAX_FAILURES if limit is None else limit  # failing tests kept with ``keep``
        self.not_kept = 0  # failing records of further tests, counted only
        # Set at the first failing test not kept: from there on no handler runs and the
        # rest of the document is counted from its bytes (see count_only).
        self.counter: Optional[TagCounter] = None
        self.count_from = -1  # index in the fed bytes where counting starts
        self.depth = 0
        self.root_seen = False
        self.root_closed = False
        self.count = 0  # complete testcases read
        self.done: list[models.TestCaseResult] = []
        self.failing: dict[str, tuple[str, Any]] = {}  # test id -> (outcome, keep(case))
        self.failing_names: set[str] = set()  # names of tests ever recorded as failing
        # The open <testcase>, if any.
        self.case_depth = -1
        self.case_attrs: dict[str, str] = {}
        self.outcome = models.OUTCOME_PASSED
        self.message = ""
        self.exc_type = ""
        self.collect_depth = -1  # depth of the result element whose text is being kept
        self.parts: list[str] = []
        self.text_len = 0

    def start(self, name: str, attrs: dict[str, str]) -> None:
        self.depth += 1
        depth = self.depth
        if depth > MAX_DEPTH:
            # expat keeps every open tag: 52 MB of nesting cost ~1 GB before this bound.
            raise _Refused(f"elements nested deeper than {MAX_DEPTH} levels; no junit writer nests that deep")
        if depth == 1:
            if name not in ROOT_TAGS:
                raise _Refused(
                    f"root element is <{name[:60]}>, not <testsuites> or <testsuite>:"
                    " not junit XML"
                )
            self.root_seen = True
            return
        if self.case_depth < 0:
            if name == "testcase":
                self.case_depth = depth
                if len(attrs.get("name", "")) > MAX_NAME or len(attrs.get("classname", "")) > MAX_NAME:
                    # A 200 KB parametrize id: every document of the test yields one cut name.
                    attrs = {**attrs, "name": bounded_name(attrs.get("name", "")),
                             "classname": bounded_name(attrs.get("classname", ""))}
                self.case_attrs = attrs
                self.outcome = models.OUTCOME_PASSED
            return
        if depth != self.case_depth + 1:
            return
        # A direct child of the open <testcase>. rerunFailure/flakyFailure and friends are
        # earlier attempts, not the outcome: ignored.
        if name in _FAILING_TAGS:
            if self.outcome in models.FAILING_OUTCOMES:
                return  # several failures in one testcase: the first one speaks
            self.outcome = models.OUTCOME_FAILED if name == "failure" else models.OUTCOME_ERROR
            self.message = attrs.get("message", "")
            self.exc_type = attrs.get("type", "")
            self.parts = []
            self.text_len = 0
            if self._over_limit():
                return  # will be counted, not kept: its text is not wanted
            self.collect_depth = depth
            # Text is only wanted here: whitespace between elements costs no Python call.
            self.parser.CharacterDataHandler = self.chars
        elif name == "skipped" and self.outcome == models.OUTCOME_PASSED:
            self.outcome = models.OUTCOME_SKIPPED
            self.message = attrs.get("message", "")
            self.exc_type = attrs.get("type", "")

    def end(self, name: str) -> None:
        depth = self.depth
        self.depth -= 1
        if depth == self.collect_depth:
            self.collect_depth = -1
            self.parser.CharacterDataHandler = None
        elif depth == self.case_depth:
            self.case_depth = -1
            self.count += 1
            if self.keep is None:
                self.done.append(self._result())
            elif self.outcome in models.FAILING_OUTCOMES:
                if self._over_limit():
                    self.not_kept += 1
                    self._count_only()
                    return
                case = self._result()
                previous = self.failing.get(case.test)
                if previous is None or not _keeps_previous(previous[0], case):
                    # Assigning an existing key keeps its place: order of first appearance.
                    self.failing[case.test] = (case.outcome, self.keep(case))
                    self.failing_names.add(case.name)
            elif self.case_attrs.get("name", "") in self.failing_names:
                # Maybe a later passing/skipped record of a failing test: it passed on
                # rerun. (The name pre-check spares the full identity on most passes.)
                attrs = self.case_attrs
                self.failing.pop(_test_id(attrs.get("classname", ""), attrs.get("name", "")), None)
        elif depth == 1:
            self.root_closed = True

    def _count_only(self) -> None:
        """Stop every handler: the rest of the document is only counted (TagCounter).

        A Python call per element costs as much as expat's whole parse; past the limit
        nothing more is kept, so nothing needs one. (A later rerun record of a kept test
        is then not applied: documented in docs/fingerprints.md "Bounds".)
        """
        parser = self.parser
        parser.StartElementHandler = None
        parser.EndElementHandler = None
        parser.CharacterDataHandler = None
        self.counter = TagCounter()
        self.count_from = parser.CurrentByteIndex + 1  # past the '<' of this </testcase>

    def _over_limit(self) -> bool:
        """Whether the open failing testcase is a test beyond the ``limit`` kept ones."""
        if self.keep is None or len(self.failing) < self.limit:
            return False
        attrs = self.case_attrs
        return _test_id(attrs.get("classname", ""), attrs.get("name", "")) not in self.failing

    def _text(self) -> str:
        text = "".join(self.parts)
        if self.text_len > MAX_TEXT:
            text += "\n" + text_marker(self.text_len - MAX_TEXT)
        return text

    def _result(self) -> models.TestCaseResult:
        attrs = self.case_attrs
        passed = self.outcome == models.OUTCOME_PASSED
        return models.TestCaseResult(
            classname=attrs.get("classname", ""),
            name=attrs.get("name", ""),
            outcome=self.outcome,
            message="" if passed else self.message,
            exc_type="" if passed else self.exc_type,
            text="" if passed else self._text(),
            file=attrs.get("file"),
            line=_parse_line(attrs.get("line")),
            time=_parse_time(attrs.get("time")),
        )

    def chars(self, data: str) -> None:
        if self.text_len < MAX_TEXT:
            room = MAX_TEXT - self.text_len
            self.parts.append(data[:room] if len(data) > room else data)
        self.text_len += len(data)  # counted on for the marker

    def refuse_doctype(self, *_args: Any) -> None:
        raise _Refused(
            "refusing XML with a DOCTYPE/entity declaration (possible entity-expansion attack)"
        )


def text_marker(dropped: int) -> str:
    """The line that ends a failure text cut at MAX_TEXT characters (``dropped`` not kept)."""
    return f"[... truncated by selfheal: {dropped} characters]"


def not_kept_warning(count: int, limit: int) -> str:
    """The line that reports failing tests beyond the ``limit`` kept per document."""
    return f"{count} more failures not kept (at most {limit} per document)"


def _label(source: Source) -> str:
    if isinstance(source, (str, Path)):
        return os.fspath(source)
    return str(getattr(source, "name", "<stream>"))


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
    except IsADirectoryError:
        raise InputError(f"{label}: is a directory, not a junit XML file") from None
    except PermissionError:
        # Windows reports a directory as PermissionError: say which it is.
        if os.path.isdir(source):
            raise InputError(f"{label}: is a directory, not a junit XML file") from None
        raise InputError(f"{label}: permission denied") from None
    except OSError as exc:
        raise InputError(f"{label}: cannot read ({exc.strerror or exc})") from None
    try:
        yield stream
    finally:
        stream.close()


def _parse(
    stream: IO[bytes], label: str, warnings: Optional[list[str]], reader: _Reader
) -> Iterator[models.TestCaseResult]:
    """Feed ``stream`` to expat in chunks, yielding finished cases after each chunk."""
    parser = reader.parser
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    # Refuse any DTD before its contents are looked at: no entity is ever declared, so
    # none can be expanded (internal or external).
    parser.StartDoctypeDeclHandler = reader.refuse_doctype
    parser.EntityDeclHandler = reader.refuse_doctype
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.buffer_text = True
    parser.buffer_size = MAX_TEXT
    if hasattr(parser, "SetReparseDeferralEnabled"):
        # expat >= 2.6: an unfinished token is not scanned again until enough new bytes
        # came (its own guard against the quadratic rescan). It is the default; said here
        # so that no one turns it off for a faster small feed (docs/decisions.md).
        parser.SetReparseDeferralEnabled(True)
    feed = BoundedFeed()
    yield from _feed_all(stream, label, warnings, reader, feed)
    # Said once the document was read (a refused one has its own line).
    if feed.truncated:
        _warn(warnings, f"{label}: {feed.truncated} attribute values over {MAX_ATTR} bytes truncated")
    if reader.not_kept:
        _warn(warnings, f"{label}: {not_kept_warning(reader.not_kept, reader.limit)}")


def _feed_all(
    stream: IO[bytes], label: str, warnings: Optional[list[str]], reader: _Reader, feed: BoundedFeed
) -> Iterator[models.TestCaseResult]:
    parser = reader.parser
    seen_content = False
    fed = 0  # bytes handed to expat before this chunk
    while True:
        try:
            chunk = stream.read(CHUNK_SIZE)
        except OSError as exc:
            raise InputError(f"{label}: cannot read ({exc.strerror or exc})") from None
        final = not chunk
        if final and not seen_content:
            raise InputError(f"{label}: empty file, not junit XML")
        if not seen_content and chunk.strip():
            seen_content = True
        closing = False  # an error while closing the document: it just stops (truncated)
        data: bytes | memoryview = b""
        try:
            data = feed.feed(chunk, final)
            if data:
                parser.Parse(data, False)
                _count(reader, data, fed, len(data))
            if final:
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
            # Hand over what was complete before deciding what the error means.
            yield from reader.done
            reader.done.clear()
            _on_error(exc, reader, label, closing, warnings)
            return
        if reader.done:
            yield from reader.done
            reader.done.clear()
        if final:
            return
        fed += len(data)


def _count(reader: _Reader, data: bytes | memoryview, fed: int, end: int) -> None:
    """Count ``data[:end]`` (``fed`` bytes came before it) once the reader only counts."""
    counter = reader.counter
    if counter is None:
        return
    start = max(0, reader.count_from - fed)
    if start >= end:
        return
    before = counter.failing, counter.complete
    counter.feed(data[start:end] if start or end < len(data) else data)
    reader.not_kept += counter.failing - before[0]
    reader.count += counter.complete - before[1]


def _on_error(
    exc: expat.ExpatError,
    reader: _Reader,
    label: str,
    final: bool,
    warnings: Optional[list[str]],
) -> None:
    where = f"line {exc.lineno}, column {exc.offset}"
    reason = expat.ErrorString(exc.code)
    if not reader.root_seen:
        raise InputError(f"{label}: not XML ({where}: {reason})")
    junk = exc.code == expat.errors.codes[expat.errors.XML_ERROR_JUNK_AFTER_DOC_ELEMENT]
    if reader.root_closed or (reader.counter is not None and junk):
        # e.g. two documents concatenated: everything of the first one was read.
        _warn(warnings, f"{label}: ignoring content after the root element ({where}: {reason})")
        return
    if final:
        # A well-formed prefix that just stops: the writer was killed mid-write.
        _warn(
            warnings,
            f"{label}: truncated at line {exc.lineno}; read {reader.count} complete testcases",
        )
        return
    raise InputError(
        f"{label}: malformed XML ({where}: {reason}); read {reader.count} complete testcases"
    )


def _warn(warnings: Optional[list[str]], message: str) -> None:
    if warnings is not None:
        warnings.append(message)


def iter_testcases(
    source: Source, *, warnings: Optional[list[str]] = None
) -> Iterator[models.TestCaseResult]:
    """Yield every ``<testcase>`` of a junit file, streaming, in document order.

    ``source`` is a path or a binary file object. Raises :class:`errors.InputError` (one
    line, prefixed with the file name) for a missing/unreadable file or a directory, an
    empty file, non-XML, a root other than ``<testsuites>``/``<testsuite>``, any
    DOCTYPE/ENTITY declaration, and XML malformed before its end. A file that simply
    stops (truncated mid-write) yields its complete testcases and appends a warning to
    ``warnings``. Rerun records are yielded as they are: see :func:`dedupe`.
    """
    label = _label(source)
    with _opened(source, label) as stream:
        yield from _parse(stream, label, warnings, _Reader(expat.ParserCreate(), None))


def map_failing(
    source: Source,
    transform: Callable[[models.TestCaseResult], T],
    *,
    warnings: Optional[list[str]] = None,
    limit: Optional[int] = None,
) -> list[T]:
    """``transform`` of each failing testcase of a junit file, reruns de-duplicated.

    Same result as ``[transform(c) for c in latest_failing(iter_testcases(source))]``
    (same errors and warnings), but several times faster on big files: passing testcases
    are never materialised, and memory holds one ``transform`` result per failing test
    (``transform`` may also run for a record that a later rerun supersedes). At most
    ``limit`` (default :data:`MAX_FAILURES`) failing tests are kept: from the first
    failing test beyond them on, the rest of the document is only counted from its bytes
    (no handler runs, reruns are no longer applied; TagCounter) in a ``warnings`` line
    ("N more failures not kept").
    """
    label = _label(source)
    reader = _Reader(expat.ParserCreate(), transform, limit)
    with _opened(source, label) as stream:
        for _ in _parse(stream, label, warnings, reader):
            pass  # with a transform, nothing is yielded
    return [value for _, value in reader.failing.values()]


def read_failing(
    source: Source, *, warnings: Optional[list[str]] = None
) -> list[models.TestCaseResult]:
    """The failing testcases of a junit file after rerun de-duplication (see map_failing)."""
    return map_failing(source, _identity, warnings=warnings)


def _identity(case: models.TestCaseResult) -> models.TestCaseResult:
    return case


def dedupe(cases: Iterable[models.TestCaseResult]) -> list[models.TestCaseResult]:
    """One record per test identity (``classname::name``): the last record wins.

    Reruns appear as several ``<testcase>`` records of one identity; the final attempt
    is the outcome (exception: pytest's call-failure + teardown-error pair keeps the
    failure). Order is that of each identity's first appearance. Holds one record per
    identity; for the failing ones only, in bounded memory, see :func:`latest_failing`.
    """
    by_test: dict[str, models.TestCaseResult] = {}
    for case in cases:
        previous = by_test.get(case.test)
        if previous is None or not (
            previous.outcome in models.FAILING_OUTCOMES and _keeps_previous(previous.outcome, case)
        ):
            by_test[case.test] = case
    return list(by_test.values())


def latest_failing(
    cases: Iterable[models.TestCaseResult],
    *,
    limit: Optional[int] = None,
    warnings: Optional[list[str]] = None,
) -> list[models.TestCaseResult]:
    """The failing records of ``dedupe(cases)`` (the same records), holding failing ones only.

    A later passing (or skipped) record of a failing identity removes it (a flaky test
    that passed on rerun); a later failing record replaces it. At most ``limit`` failing
    tests are kept: from the first failing test beyond them on, failing records are only
    counted (reruns no longer applied), in a ``warnings`` line, as :func:`map_failing` does.
    """
    if limit is None:
        limit = MAX_FAILURES
    failing: dict[str, models.TestCaseResult] = {}
    not_kept = 0
    for case in cases:
        if not_kept:
            # Past the first test not kept, records are only counted, like map_failing does.
            not_kept += case.outcome in models.FAILING_OUTCOMES
            continue
        previous = failing.get(case.test)
        if case.outcome in models.FAILING_OUTCOMES:
            if previous is None and len(failing) >= limit:
                not_kept += 1
            elif previous is None or not _keeps_previous(previous.outcome, case):
                failing[case.test] = case
        elif previous is not None:
            del failing[case.test]
    if not_kept:
        _warn(warnings, not_kept_warning(not_kept, limit))
    return list(failing.values())
