"""The byte filter in front of expat that bounds every markup token (docs/fingerprints.md "Bounds").

expat holds a whole start tag, comment or processing instruction in its buffer until the
token ends (and before expat 2.6 scans it again on every ``Parse`` call): one 150 MB
attribute value costs its size in memory and time quadratic in it.

:class:`BoundedFeed` passes on a document in which no token is long: an attribute value
over :data:`MAX_ATTR` bytes keeps its head and ends with a marker; comments are dropped; a
tag over :data:`MAX_MARKUP` bytes outside its values, or a processing instruction that
long, is refused (:class:`MarkupTooLong`). One C-level search per chunk finds the few
``<`` worth a look; only those tokens are walked in Python. UTF-16/UTF-32 documents pass
unfiltered: the scanner reads ASCII-compatible bytes only.
"""

from __future__ import annotations

import re
from typing import Union

MAX_ATTR = 64 * 1024  # bytes of one attribute value passed on; the rest becomes the marker
MAX_TAG_VALUES = 1024 * 1024  # bytes of attribute values passed on in one tag
MAX_MARKUP = 64 * 1024  # bytes of a tag outside its values, or of a processing instruction

# Bytes kept back at the end of a chunk: a '<![CDATA[', '-->' or ']]>' cut by the chunk's
# end, a UTF-8 character or an entity reference ('&#x10FFFF;') are decided with the next one.
_HOLD = 16
_LOOK = re.compile(rb"<(?:[!?]|[^<]{%d})" % MAX_MARKUP)
_OPENER = re.compile(rb"<[!?]")  # twice as fast as _LOOK where no long run can be
_TAG_STOP = re.compile(rb"[>\"']")
_TEXT, _TAG, _VALUE, _UNTIL = range(4)  # _UNTIL: in a comment, CDATA or PI, up to its end
# Opener -> (terminator, passed on, refused past MAX_MARKUP as).
_SPECIAL = ((b"<!--", b"-->", False, ""), (b"<![CDATA[", b"]]>", True, ""),
            (b"<?", b"?>", True, "a processing instruction"))

Bytes = Union[bytes, memoryview]


class MarkupTooLong(ValueError):
    """A tag (outside its attribute values) or processing instruction over MAX_MARKUP bytes."""


def _look(buf: bytes, start: int, end: int) -> re.Match[bytes] | None:
    """``_LOOK.search(buf, start, end)``, cheaper: when every aligned window of MAX_MARKUP/2
    bytes before the first ``<!``/``<?`` holds a '<', no long run starts there."""
    opener = _OPENER.search(buf, start, end)
    half = MAX_MARKUP // 2
    for at in range(start, (end if opener is None else opener.start()) - half + 1, half):
        if buf.find(b"<", at, at + half) < 0:
            return _LOOK.search(buf, start, end)
    return opener


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
    return amp if amp >= 0 and buf.find(b";", amp, cut) < 0 else cut


class BoundedFeed:
    """Stateful filter: :meth:`feed` each chunk in order, ``final=True`` with the last."""

    def __init__(self) -> None:
        self.state = _TEXT
        self.carry = b""
        self.sniffed = False
        self.passthrough = False  # not ASCII-compatible: bytes go through unchanged
        self.quote = b'"'  # of the open attribute value
        self.until: tuple[bytes, bool, str] = (b"", True, "")  # terminator, passed on, refused as
        self.value_len = self.dropped = 0  # bytes of the open attribute value read, not passed on
        self.tag_len = self.tag_values = 0  # bytes of the open token outside values, of values passed
        self.truncated = 0  # attribute values cut so far
        self.changed = False  # bytes of this chunk dropped or added: else it passes as a view

    def feed(self, data: bytes, final: bool) -> Bytes:
        """The filtered bytes of ``data`` (some may be held back until the next call)."""
        if not self.sniffed:
            data = self.carry + data
            if len(data) < 4 and not final:
                self.carry = data
                return b""
            self.sniffed, self.carry = True, b""
            self.passthrough = data[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in data[:4]
        if self.passthrough:
            return data
        buf = self.carry + data if self.carry else data
        out: list[Bytes] = []
        self.changed = False
        pos = self._run(buf, len(buf) if final else max(0, len(buf) - _HOLD), out, final)
        self.carry = buf[pos:]
        return b"".join(out) if self.changed else memoryview(buf)[:pos]  # no copy of an untouched chunk

    def _run(self, buf: bytes, limit: int, out: list[Bytes], final: bool) -> int:
        """Filter ``buf`` from the start towards ``limit``; the position reached."""
        view = memoryview(buf)
        pos = 0
        while pos < limit:
            if self.state == _TEXT:
                found = _look(buf, pos, limit)
                start = found.start() if found else buf.rfind(b"<", pos, limit)  # a tag the end may cut
                if start < 0:
                    out.append(view[pos:limit])
                    return limit
                out.append(view[pos:start])
                pos = self._open(buf, start, out)
            elif self.state == _TAG:
                found = _TAG_STOP.search(buf, pos, limit)
                stop = found.start() if found else limit
                self._grow(stop - pos, "a tag")
                if not found:
                    out.append(view[pos:limit])
                    return limit
                out.append(view[pos:stop + 1])
                pos = stop + 1
                if buf[stop] == 0x3E:  # '>'
                    self.state = _TEXT
                else:
                    self.state, self.quote, self.value_len, self.dropped = _VALUE, buf[stop:stop + 1], 0, 0
            elif self.state == _VALUE:
                pos, done = self._value(buf, pos, limit, out, final)
                if not done:
                    return pos
            else:
                close, keep, what = self.until
                end = buf.find(close, pos)
                stop = limit if end < 0 else end + len(close)
                if what:
                    self._grow(stop - pos, what)
                if keep:
                    out.append(view[pos:stop])
                self.changed |= not keep
                if end < 0:
                    return limit
                pos, self.state = stop, _TEXT
        return pos

    def _grow(self, size: int, what: str) -> None:
        self.tag_len += size
        if self.tag_len > MAX_MARKUP:
            outside = " outside its attribute values" if what == "a tag" else ""
            raise MarkupTooLong(f"{what} longer than {MAX_MARKUP} bytes{outside}")

    def _open(self, buf: bytes, start: int, out: list[Bytes]) -> int:
        """Enter the token starting with the '<' at ``start``; the position after its opener."""
        self.tag_len = self.tag_values = 0
        for opener, close, keep, what in _SPECIAL:
            if buf.startswith(opener, start):
                self.state, self.until = _UNTIL, (close, keep, what)
                if keep:
                    out.append(opener)
                self.changed |= not keep
                return start + len(opener)
        self.state = _TAG  # element, end tag or declaration (expat refuses a DOCTYPE)
        out.append(b"<")
        return start + 1

    def _value(self, buf: bytes, pos: int, limit: int, out: list[Bytes], final: bool) -> tuple[int, bool]:
        """Pass on (the head of) the open attribute value: the position reached, and whether it ended."""
        close = buf.find(self.quote, pos, limit)
        stop = limit if close < 0 else close
        room = min(MAX_ATTR - self.value_len, MAX_TAG_VALUES - self.tag_values)
        if stop - pos > room:
            keep, consumed = _safe_cut(buf, pos, pos + max(0, room)), stop
        elif close < 0 and not final:
            keep = consumed = _safe_cut(buf, pos, stop)  # goes on in the next chunk: a clean cut
        else:
            keep = consumed = stop
        out.append(memoryview(buf)[pos:keep])
        self.value_len += consumed - pos
        self.tag_values += keep - pos
        self.dropped += consumed - keep
        self.changed |= consumed > keep
        if close < 0:
            return consumed, False
        if self.dropped:
            self.changed = True
            out.append(b" " + marker(self.dropped))
            self.truncated += 1
        out.append(self.quote)
        self.state = _TAG
        return close + 1, True


# What TagCounter counts: failing result elements and testcase start tags (those with
# bytes.count, faster than a pattern; no junit element starts with "testcase" else).
_FAILING_TAG = re.compile(rb"<(?:failure|error)[\s/>]")
_MAX_TAIL = 4 * 1024 * 1024  # longer than any tag the feed passes on


class TagCounter:
    """Counts ``<failure>``/``<error>`` elements and complete ``<testcase>`` elements in
    filtered bytes at C speed: the reader's count of what it no longer keeps (from the
    bytes, not parsed: an upper bound)."""

    def __init__(self) -> None:
        self.tail = b""  # from the last '<' of the bytes fed: a tag a chunk's end may cut
        self.failing = 0
        self.started = 0  # testcase start tags
        self.open_case = False  # the last testcase started has not ended

    @property
    def complete(self) -> int:
        return self.started - self.open_case

    def feed(self, data: Bytes) -> None:
        tail, buf = self.tail, self.tail + data
        # A match wholly inside the tail was counted with the previous chunk.
        self.failing += len(_FAILING_TAG.findall(buf)) - len(_FAILING_TAG.findall(tail))
        self.started += buf.count(b"<testcase") - tail.count(b"<testcase")
        start, end = buf.rfind(b"<testcase"), buf.rfind(b"</testcase")
        if start > end and buf[start + 9:start + 10] in (b" ", b"\t", b"\r", b"\n", b"/", b">"):
            close = buf.find(b">", start)  # the start tag's end (writers escape '>' in values)
            self.open_case = close < 0 or buf[close - 1:close] != b"/"
        elif end > start:
            self.open_case = False
        last = buf.rfind(b"<")
        self.tail = buf[last:last + _MAX_TAIL] if last >= 0 else b""
