"""A byte filter in front of expat that bounds every markup token (docs/fingerprints.md "Bounds").

expat holds a whole start tag, comment or processing instruction in its buffer until the
token ends and (before expat 2.6) scans it again from its start on every ``Parse`` call:
one 150 MB attribute value costs its size in memory and time quadratic in it. Text and
CDATA content are handed over in pieces as they come, so they cost nothing of the kind.

:class:`BoundedFeed` sees the bytes first and passes on a document in which no token is
long: an attribute value over :data:`MAX_ATTR` bytes keeps its head and ends with
``[... truncated by selfheal: N bytes]``; comments are dropped (junit means nothing by
them); a tag longer than :data:`MAX_MARKUP` outside its attribute values, or a
processing instruction that long, is refused (:class:`MarkupTooLong`). Every other byte
passes unchanged, so a document without long tokens reads exactly as before.

Cost: one C-level regular expression search per chunk finds the ``<`` that start a long
run or a comment/CDATA/declaration/processing instruction; only those tokens (and the
one cut by the chunk's end) are walked in Python, so an ordinary file costs a few calls
per chunk. Documents in UTF-16/UTF-32 (a byte-order mark or a NUL in the first bytes)
are passed on unfiltered: the scanner reads ASCII-compatible bytes only.
"""

from __future__ import annotations

import re
from typing import Union

# What _run passes on: a range of the chunk, or bytes of its own (a marker).
Piece = Union[tuple[int, int], bytes]

MAX_ATTR = 64 * 1024  # bytes of one attribute value passed on; the rest becomes the marker
MAX_TAG_VALUES = 1024 * 1024  # bytes of attribute values passed on in one tag
MAX_MARKUP = 64 * 1024  # bytes of a tag outside its values, or of a processing instruction

# Bytes kept back at the end of a chunk: a '-->' or ']]>' split by the chunk's end, a UTF-8
# character or an entity reference ('&#x10FFFF;') at a cut are decided with the next one.
_HOLD = 16

_TEXT, _TAG, _ATTR, _COMMENT, _CDATA, _PI = range(6)

# A '<' that needs a look: it opens a comment, CDATA, declaration or processing
# instruction, or is followed by MAX_MARKUP bytes without another '<' (an element tag
# holds no '<', so a tag shorter than that never matches).
_LOOK = re.compile(rb"<(?:[!?]|[^<]{%d})" % MAX_MARKUP)
_SPECIAL = re.compile(rb"<[!?]")  # twice as fast as _LOOK when no long run is possible
_TAG_STOP = re.compile(rb"[>\"']")


class MarkupTooLong(ValueError):
    """A tag (outside its attribute values) or processing instruction over MAX_MARKUP bytes."""


def _assemble(buf: bytes, out: list[Piece]) -> bytes | memoryview:
    """The pieces as one bytes-like object: adjacent ranges merge, so an untouched chunk
    is a view of ``buf`` (no copy of a megabyte per chunk)."""
    merged: list[Piece] = []
    for piece in out:
        if isinstance(piece, tuple):
            if piece[0] == piece[1]:
                continue
            last = merged[-1] if merged else None
            if isinstance(last, tuple) and last[1] == piece[0]:
                merged[-1] = (last[0], piece[1])
                continue
        merged.append(piece)
    view = memoryview(buf)
    if len(merged) == 1 and isinstance(merged[0], tuple):
        return view[merged[0][0]:merged[0][1]]
    return b"".join(view[p[0]:p[1]] if isinstance(p, tuple) else p for p in merged)


def _look(buf: bytes, start: int, end: int) -> re.Match[bytes] | None:
    """``_LOOK.search(buf, start, end)``, cheaper: when every aligned window of
    MAX_MARKUP/2 bytes before the first ``<!``/``<?`` holds a '<' (a few ``find`` calls),
    no run of MAX_MARKUP bytes without one can start there, and the first special token
    is the answer."""
    special = _SPECIAL.search(buf, start, end)
    stop = end if special is None else special.start()
    half = MAX_MARKUP // 2
    for at in range(start, stop - half + 1, half):
        if buf.find(b"<", at, at + half) < 0:
            return _LOOK.search(buf, start, end)
    return special


def marker(dropped: int) -> bytes:
    """What replaces the ``dropped`` bytes cut from the end of an attribute value."""
    return b"[... truncated by selfheal: %d bytes]" % dropped


def _safe_cut(buf: bytes, start: int, cut: int) -> int:
    """``cut`` moved back so that it splits neither a UTF-8 character nor an entity reference."""
    back = cut
    while back > start and back < len(buf) and (buf[back] & 0xC0) == 0x80 and cut - back < 3:
        back -= 1  # a continuation byte: its character starts before
    if back >= len(buf) or (buf[back] & 0xC0) != 0x80:
        cut = back  # else not UTF-8 (latin-1 bytes): any place is a character boundary
    amp = buf.rfind(b"&", max(start, cut - 12), cut)
    if amp >= 0 and buf.find(b";", amp, cut) < 0:
        cut = amp
    return cut


class BoundedFeed:
    """Stateful filter: :meth:`feed` each chunk in order, ``final=True`` with the last."""

    def __init__(self) -> None:
        self.state = _TEXT
        self.carry = b""
        self.sniffed = False
        self.passthrough = False  # not ASCII-compatible: bytes go through unchanged
        self.quote = b'"'
        self.value_len = 0  # bytes of the open attribute value read
        self.dropped = 0  # of them, not passed on
        self.tag_len = 0  # bytes of the open tag/PI outside attribute values
        self.tag_values = 0  # bytes of attribute values passed on in the open tag
        self.truncated = 0  # attribute values cut so far

    def feed(self, data: bytes, final: bool) -> bytes | memoryview:
        """The filtered bytes of ``data`` (some may be held back until the next call): a
        view of the chunk when nothing in it was cut, else a copy."""
        if not self.sniffed:
            head = self.carry + data
            if len(head) < 4 and not final:
                self.carry = head
                return b""
            self.sniffed = True
            self.carry = b""
            data = head
            self.passthrough = head[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in head[:4]
        if self.passthrough:
            return data
        buf = self.carry + data if self.carry else data
        limit = len(buf) if final else max(0, len(buf) - _HOLD)
        out: list[Piece] = []
        pos = self._run(buf, limit, out, final)
        self.carry = buf[pos:]
        return _assemble(buf, out)

    def _run(self, buf: bytes, limit: int, out: list[Piece], final: bool) -> int:
        pos = 0
        end = len(buf)
        while pos < limit:
            state = self.state
            if state == _TEXT:
                found = _look(buf, pos, limit)
                if found is None:
                    start = buf.rfind(b"<", pos, limit)
                    if start < 0:
                        out.append((pos, limit))
                        return limit
                else:
                    start = found.start()
                out.append((pos, start))
                pos = self._open(buf, start, out)
            elif state == _TAG:
                stop_match = _TAG_STOP.search(buf, pos, limit)
                stop = limit if stop_match is None else stop_match.start()
                self.tag_len += stop - pos
                if self.tag_len > MAX_MARKUP:
                    raise MarkupTooLong(
                        f"a tag longer than {MAX_MARKUP} bytes outside its attribute values"
                    )
                if stop_match is None:
                    out.append((pos, limit))
                    return limit
                out.append((pos, stop + 1))
                pos = stop + 1
                if buf[stop] == 0x3E:  # '>'
                    self.state = _TEXT
                else:
                    self.state = _ATTR
                    self.quote = buf[stop:stop + 1]
                    self.value_len = self.dropped = 0
            elif state == _ATTR:
                pos = self._value(buf, pos, limit, out, final)
                if self.state == _ATTR:
                    return pos
            elif state == _COMMENT:
                close = buf.find(b"-->", pos, end)
                if close < 0:
                    return limit  # dropped
                pos = close + 3
                self.state = _TEXT
            elif state == _CDATA:
                close = buf.find(b"]]>", pos, end)
                if close < 0:
                    out.append((pos, limit))
                    return limit
                out.append((pos, close + 3))
                pos = close + 3
                self.state = _TEXT
            else:  # _PI
                close = buf.find(b"?>", pos, end)
                stop = limit if close < 0 else close + 2
                self.tag_len += stop - pos
                if self.tag_len > MAX_MARKUP:
                    raise MarkupTooLong(f"a processing instruction longer than {MAX_MARKUP} bytes")
                out.append((pos, stop))
                pos = stop
                if close < 0:
                    return pos
                self.state = _TEXT
        return pos

    def _open(self, buf: bytes, start: int, out: list[Piece]) -> int:
        """Enter the token starting with the '<' at ``start``; the position after its opener."""
        self.tag_len = 0
        self.tag_values = 0
        if buf.startswith(b"<!--", start):
            self.state = _COMMENT
            return start + 4  # dropped with its content
        if buf.startswith(b"<![CDATA[", start):
            self.state = _CDATA
            out.append((start, start + 9))
            return start + 9
        if buf.startswith(b"<?", start):
            self.state = _PI
            out.append((start, start + 2))
            return start + 2
        self.state = _TAG  # element, end tag or declaration (expat refuses a DOCTYPE)
        out.append((start, start + 1))
        return start + 1

    def _value(self, buf: bytes, pos: int, limit: int, out: list[Piece], final: bool) -> int:
        """Pass on (the head of) the open attribute value; the position reached."""
        close = buf.find(self.quote, pos, limit)
        stop = limit if close < 0 else close
        room = min(MAX_ATTR - self.value_len, MAX_TAG_VALUES - self.tag_values)
        if stop - pos > room:
            keep = _safe_cut(buf, pos, pos + max(0, room))
            consumed = stop
        elif close < 0 and not final:
            # The value goes on in the next chunk: stop where a later cut stays clean.
            keep = consumed = _safe_cut(buf, pos, stop)
        else:
            keep = consumed = stop
        out.append((pos, keep))
        self.value_len += consumed - pos
        self.tag_values += keep - pos
        self.dropped += consumed - keep
        if close < 0:
            return consumed
        if self.dropped:
            out.append(b" " + marker(self.dropped))
            self.truncated += 1
        out.append((close, close + 1))  # the quote
        self.state = _TAG
        return close + 1


# What ``TagCounter`` counts: failing result elements and testcase start tags (those with
# bytes.count, twice as fast as a pattern; no junit element starts with "testcase" else).
_FAILING_TAG = re.compile(rb"<(?:failure|error)[\s/>]")
_MAX_TAIL = 4 * 1024 * 1024  # longer than any tag the feed passes on


class TagCounter:
    """Counts ``<failure>``/``<error>`` elements and complete ``<testcase>`` elements in
    filtered bytes, chunk by chunk, at C speed: the reader's count of what it no longer
    keeps. Counted from the bytes, not parsed: several failures of one testcase, reruns,
    a failure of a testcase cut by the document's end, or a tag's text inside CDATA each
    count (an upper bound)."""

    def __init__(self) -> None:
        self.tail = b""  # from the last '<' of the bytes fed: a tag a chunk's end may cut
        self.failing = 0
        self.started = 0  # testcase start tags
        self.open_case = False  # the last testcase started has not ended

    @property
    def complete(self) -> int:
        """Complete testcases counted."""
        return self.started - self.open_case

    def feed(self, data: bytes | memoryview) -> None:
        """Count the tags of ``data`` (the tags that end in it, with the last chunk's tail)."""
        buf = self.tail + data
        tail = self.tail
        # A match wholly inside the tail was counted with the previous chunk.
        self.failing += len(_FAILING_TAG.findall(buf)) - len(_FAILING_TAG.findall(tail))
        self.started += buf.count(b"<testcase") - tail.count(b"<testcase")
        start = buf.rfind(b"<testcase")
        end = buf.rfind(b"</testcase")
        if start > end and buf[start + 9:start + 10] in (b" ", b"\t", b"\r", b"\n", b"/", b">"):
            close = buf.find(b">", start)  # the start tag's end (writers escape '>' in values)
            self.open_case = close < 0 or buf[close - 1:close] != b"/"
        elif end > start:
            self.open_case = False
        last = buf.rfind(b"<")
        self.tail = buf[last:last + _MAX_TAIL] if last >= 0 else b""
