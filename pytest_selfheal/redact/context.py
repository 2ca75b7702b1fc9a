"""Secrets found by their context rather than their own shape (part of the ``redact`` package).

A netrc ``password``, a MySQL ``-pSECRET``, an AWS secret next to its key id, a token that
pytest's assertion diff cut at its head, a header written as a Python tuple, URL credentials
percent-encoded, and the written forms of an env secret (escaped, base64). Pure; each pass
runs only when its literal occurs.
Also the small regex helpers both modules share.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Iterable

from pytest_selfheal.records.redacted import REDACTED

_Replacer = Callable[["re.Match[str]", str], str]


def lazy(pattern: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """``pattern``, compiled on first use. Each pass runs only when its literal occurs, so a
    text needs few of these regexes; compiling them all cost every capture ~4 ms."""
    return functools.lru_cache(maxsize=None)(lambda: re.compile(pattern, flags))


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def fold(text: str) -> str:
    """Lower-case ``text`` keeping every index (``str.lower`` may grow "İ" into 2 chars)."""
    folded = text.lower()
    return folded if len(folded) == len(text) else text.translate(_ASCII_LOWER)


def sub_spans(regex: re.Pattern[str], scanned: str, text: str, repl: _Replacer) -> str:
    """Like ``regex.sub`` but matching on ``scanned`` (same length as ``text``) and keeping
    ``text`` between the matches."""
    out: list[str] = []
    last = 0
    for m in regex.finditer(scanned):
        out.append(text[last : m.start()])
        out.append(repl(m, text))
        last = m.end()
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


# netrc entries: ``machine host login user password VALUE`` (whitespace-separated, any
# layout), matched on the lower-cased text. The value is any run of non-space characters.
NETRC = lazy(r"(?P<label>(?:login|machine|account)\s{1,10}\S{1,256}\s{1,10}password\s{1,10})(?P<value>\S+)")


def netrc_repl(m: re.Match[str], text: str) -> str:
    return text[m.start("label") : m.end("label")] + REDACTED


# MySQL/MariaDB clients take the password glued to ``-p`` (``mysql -uroot -pSECRET``). Only
# on a line that runs one of them: elsewhere ``-pno:cacheprovider`` is a pytest option.
_MYSQL_CLIENT = lazy(r"mysql|mariadb")
_MYSQL_PASSWORD = lazy(r"(?<![\w-])-p(?![\s-])(?!\[REDACTED\])\S+")


def mysql_pass(text: str) -> str:
    out: list[str] = []
    last = 0
    for client in _MYSQL_CLIENT().finditer(fold(text)):
        if client.start() < last:
            continue
        end = text.find("\n", client.end())
        end = len(text) if end == -1 else end
        out.append(text[last : client.end()])
        out.append(_MYSQL_PASSWORD().sub("-p" + REDACTED, text[client.end() : end]))
        last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


# An AWS secret access key has no format of its own, but it travels with its key id: a
# 40-character run of its alphabet within this many characters of an ``AKIA``/``ASIA`` id
# is taken for the pair's secret (a git SHA there is redacted too: the safe direction).
_AWS_PAIR_WINDOW = 200
_AWS_KEY_ID = lazy(r"A[KS]IA[0-9A-Z]{16}")
_AWS_SECRET = lazy(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")


def aws_pair_pass(text: str) -> str:
    windows: list[tuple[int, int]] = []
    for key_id in _AWS_KEY_ID().finditer(text):
        start, end = max(0, key_id.start() - _AWS_PAIR_WINDOW), key_id.end() + _AWS_PAIR_WINDOW
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], end)
        else:
            windows.append((start, end))
    out: list[str] = []
    last = 0
    for start, end in windows:
        out.append(text[last:start])
        out.append(_AWS_SECRET().sub(REDACTED, text[start:end]))
        last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


# pytest shortens a long item of an assertion diff by cutting its head: ``'...v2H4s9ZAs1kmrv'``.
# What is left has lost its label or prefix, so nothing above recognises it. A run of 12 or
# more token characters inside a quoted item that starts with ``...`` is redacted
# (docs/redaction.md "Shortened values" says what this leaves).
SHORTENED_ITEM = lazy(r"(?P<q>[\"'])\.\.\.(?P<body>[^\"'\n]{0,4096})(?P=q)")
_TOKEN_RUN = lazy(r"[A-Za-z0-9+/=_\-]{12,}")


def shortened_repl(m: re.Match[str], text: str) -> str:
    body = _TOKEN_RUN().sub(REDACTED, m.group("body"))
    return f"{m.group('q')}...{body}{m.group('q')}"


# ('Authorization', 'Basic dXNlcjpwYXNz'): a header as a (name, value) tuple or list item.
TUPLE_HEADER = lazy(
    r"(?P<label>(?P<q>[\"'])(?:proxy-)?(?:authorization|cookie|set-cookie|x-api-key|x-auth-token|api-key)"
    r"(?P=q)\s{0,4},\s{0,4}(?P<q2>[\"']))(?P<value>[^\"'\n]{1,4096})(?P=q2)"
)


def tuple_header_repl(m: re.Match[str], text: str) -> str:
    """Keep the header name (as written: ``m`` matched the folded text) and the quotes, hide the value."""
    return text[m.start():m.end("label")] + REDACTED + m.group("q2")


# https%3A%2F%2Fuser%3Apass%40host: URL credentials inside a percent-encoded URL (a query value).
ENCODED_URL = lazy(r"%3a%2f%2f(?P<user>[^%\s/@]{0,256})%3a(?P<value>[^\s/@&]{1,1024}?)%40")


def encoded_url_repl(m: re.Match[str], text: str) -> str:
    """Keep the user, hide the password (as the plain URL pass does)."""
    start, end = m.span("value")
    return text[m.start():start] + "***" + text[end:m.end()]


def written_forms(values: Iterable[str]) -> set[str]:
    """The forms an env secret takes when written out: as is, JSON- and repr-escaped (a
    backslash or a quote doubled), and base64 (standard and URL-safe, with and without
    padding). Each is hidden like the value itself."""
    forms: set[str] = set()
    for value in values:
        forms.add(value)
        forms.add(json.dumps(value, ensure_ascii=False)[1:-1])
        forms.add(repr(value)[1:-1])
        forms.add(value.replace("\\", "\\\\"))
        raw = value.encode("utf-8", "surrogatepass")
        for encoded in (base64.b64encode(raw), base64.urlsafe_b64encode(raw)):
            text = encoded.decode("ascii")
            forms.update((text, text.rstrip("=")))
    return {form for form in forms if len(form) >= 4}
