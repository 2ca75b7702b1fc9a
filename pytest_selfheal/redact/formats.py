"""Secrets found by their own shape: token formats with a literal prefix, and PEM private
key blocks, whole or cut (pure).

A token may be wrapped over lines: what the next line adds is kept only when it can be the
rest of the value, up to the format's fixed length (``ghp_`` + 36) or, for a format of no
fixed length, a next line that holds nothing else (it ends its line, or a quote or bracket
closes it). A word that starts the next line is never taken for the end of a token.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Optional

from pytest_selfheal.records.redacted import REDACTED
from pytest_selfheal.redact.context import lazy, spliced

# Line breaks a wrapped value may cross (each counts as one unit of a repetition).
_EXTRA_BREAKS = 8
# What may follow the last line of a wrapped value of no fixed length.
_CLOSERS = frozenset("\"'`)]}>,;\\")


def _wrapping(cls: str, low: int, high: int) -> str:
    """``[cls]{low,high}`` that may also cross a line break between two of its characters."""
    return rf"(?:[{cls}]|\r?\n(?=[{cls}])){{{low},{high + _EXTRA_BREAKS}}}"


class TokenKind:
    """A token format: its literal needles (its pass runs only when one occurs), its regex
    (``head`` and a run of ``[cls]{low,high}`` that may wrap, or ``regex`` whole), and a
    fixed length and its prefix's. (A plain class: a NamedTuple costs every capture at import.)"""

    __slots__ = ("fixed", "kind", "needles", "prefix", "regex")

    def __init__(self, kind: str, needles: tuple[str, ...], head: str, cls: str = "", low: int = 0, high: int = 0,
                 fixed: Optional[int] = None, prefix: int = 0, *, regex: str = "") -> None:
        self.kind, self.needles, self.fixed, self.prefix = kind, needles, fixed, prefix
        self.regex = regex or head + _wrapping(cls, low, high)


_B64URL = "A-Za-z0-9_\\-"

TOKEN_KINDS: tuple[TokenKind, ...] = (
    # GitHub: classic PAT, OAuth, user-to-server, server-to-server, refresh (36 characters);
    # fine-grained PAT (82).
    TokenKind("github_token", ("gh",), "gh[pousr]_", "A-Za-z0-9", 10, 255, 36, 4),
    TokenKind("github_token", ("github_pat_",), "github_pat_", "A-Za-z0-9_", 10, 255, 82, 11),
    # OpenAI-style secret keys (sk-..., sk-proj-...).
    TokenKind("sk_key", ("sk-",), "sk-(?:proj-|svcacct-)?", _B64URL, 20, 255),
    # AWS access key ids (long-term AKIA, temporary ASIA) and Google API keys.
    TokenKind("aws_key_id", ("AKIA", "ASIA"), "A[KS]IA", "0-9A-Z", 16, 16, 16, 4),
    TokenKind("google_api_key", ("AIza",), "AIza", _B64URL, 35, 35, 35, 4),
    # Slack bot/user/app/refresh tokens.
    TokenKind("slack_token", ("xox", "xapp-"), "x(?:ox[abprse]-|app-[0-9]-)", "A-Za-z0-9-", 10, 255),
    # JWTs: base64url header and payload both start with '{"' -> "eyJ".
    TokenKind("jwt", ("eyJ",), "", regex=r"eyJ" + _wrapping(_B64URL, 2, 8192) + r"\.(?:\r?\n)?eyJ"
              + _wrapping(_B64URL, 2, 65536) + r"\.(?:\r?\n)?" + _wrapping(_B64URL, 0, 8192)),
    TokenKind("pypi_token", ("pypi-AgE",), "pypi-AgE", _B64URL, 20, 512),
    TokenKind("npm_token", ("npm_",), "npm_", "A-Za-z0-9", 36, 36, 36, 4),
    TokenKind("stripe_key", ("k_live_", "k_test_"), "[sr]k_(?:live|test)_", "0-9A-Za-z", 16, 255),
    # GitLab personal/project/group access tokens.
    TokenKind("gitlab_token", ("glpat-",), "glpat-", _B64URL, 20, 255),
    # Hugging Face access tokens: "hf_" + 34 letters and digits (no "_": identifiers stay).
    TokenKind("huggingface_token", ("hf_",), "hf_", "A-Za-z0-9", 30, 255, 34, 3),
    # SendGrid API keys: "SG." + 22 + "." + 43.
    TokenKind("sendgrid_key", ("SG.",), "", regex=r"SG\.[A-Za-z0-9_\-]{16,64}\.[A-Za-z0-9_\-]{16,128}"),
)

_TOKEN_PASSES: tuple[tuple[TokenKind, Callable[[], re.Pattern[str]]], ...] = tuple(
    (kind, lazy(kind.regex)) for kind in TOKEN_KINDS
)
#: Whether a text holds a token format at all (a URL user name that is itself a secret).
ANY_TOKEN = lazy("|".join(kind.regex for kind in TOKEN_KINDS))
ANY_TOKEN_NEEDLE = lazy("|".join(re.escape(n) for kind in TOKEN_KINDS for n in kind.needles))
_BREAK = lazy(r"\r?\n")


def _kept_end(kind: TokenKind, text: str, start: int, end: int) -> int:
    """Where a match that crossed line breaks ends (module docstring)."""
    breaks = list(_BREAK().finditer(text, start, end))
    if kind.kind == "jwt":
        # The header and payload are delimited: only the signature's own lines are in doubt.
        last_dot = text.rfind(".", start, end)
        breaks = [b for b in breaks if b.start() > last_dot]
        if not breaks:
            return end
    first = breaks[0].start()
    if kind.fixed is not None:
        missing = kind.fixed - (first - start - kind.prefix)
        pos = first
        while missing > 0 and pos < end:
            if text[pos] not in "\r\n":
                missing -= 1
            pos += 1
        # Short of the fixed length, what follows is not the value's rest.
        return pos if missing <= 0 else first
    kept = first
    for i in range(len(breaks)):
        if i + 1 < len(breaks):  # a whole line of the value's alphabet
            kept = breaks[i + 1].start()
        elif end == len(text) or text[end] in "\r\n" or text[end] in _CLOSERS:
            kept = end
    return kept


def token_pass(text: str) -> str:
    """Every token format replaced with the marker, once per line it spans."""
    for kind, regex in _TOKEN_PASSES:
        if not any(n in text for n in kind.needles):
            continue
        rx = regex()
        out: list[str] = []
        last = pos = 0
        while (m := _next(kind, rx, text, pos)) is not None:
            start, end = m.span()
            if "\n" in m.group(0):
                end = _kept_end(kind, text, start, end)
                # Cut back to one line, the match must still be one on its own.
                if "\n" not in text[start:end] and rx.fullmatch(text, start, end) is None:
                    pos = start + 1
                    continue
            out.append(text[last:start])
            out.append("".join(REDACTED + sep for sep in _BREAK().findall(text, start, end)) + REDACTED)
            last = pos = end
        text = spliced(out, text, last)
    return text


# A JWT's header: the run a failed match at its "eyJ" cannot be retried inside.
_JWT_HEADER = lazy(r"eyJ" + _wrapping(_B64URL, 0, 8192))


def _next(kind: TokenKind, regex: re.Pattern[str], text: str, pos: int) -> Optional[re.Match[str]]:
    """The next match from ``pos``. A JWT not starting at an "eyJ" is not looked for again
    inside its header's run: every "eyJ" there fails alike (``("eyJ" + "a\\n") * N`` stays linear)."""
    if kind.kind != "jwt":
        return regex.search(text, pos)
    while (at := text.find("eyJ", pos)) != -1:
        m = regex.match(text, at)
        if m is not None:
            return m
        run = _JWT_HEADER().match(text, at)
        pos = run.end() if run is not None else at + 3
    return None


# PEM private key blocks, multi-line. The body is the PEM alphabet (base64, whitespace, the
# "Proc-Type:"/"DEK-Info:" headers, and "\\": a block inside a Python repr has its line
# breaks escaped, "\\n", once per level of repr) up to the END line; a block cut short (a log
# tail) is redacted up to where the alphabet stops. Once BEGIN matched the match cannot
# fail, so each character is scanned once.
_PEM = lazy(
    r"(?P<begin>-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)"
    r"[A-Za-z0-9+/=\s:,.\\]*(?:(?:\[REDACTED\]|-(?!----END))[A-Za-z0-9+/=\s:,.\\]*)*"
    r"(?P<end>-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?"
)
_PEM_END = lazy(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_ESCAPED_NEWLINE = lazy(r"\\+n")
# A body line of a block whose BEGIN line was cut: base64 only, or one of its headers.
_PEM_LINE = lazy(r"[A-Za-z0-9+/=]{1,128}|(?:Proc-Type|DEK-Info):[^\n\\]{0,128}|")
# The tail of the line where the body's run stops (a log prefix before the first kept line).
_PEM_TAIL = lazy(r"[A-Za-z0-9+/=]{16,}$")
# The longest line looked at (a body line has 64 characters, a header a few more).
_PEM_MAX_LINE = 256
# How many lines a cut body is followed back (a 16 kbit RSA key has ~200).
_PEM_MAX_LINES = 256


def _pem_repl(m: re.Match[str]) -> str:
    # A block inside a repr keeps its escaped line breaks: the repr stays one line.
    block = m.group(0)
    escaped = _ESCAPED_NEWLINE().search(block) if "\n" not in block else None
    sep = escaped.group(0) if escaped is not None else "\n"
    return f"{m.group('begin')}{sep}{REDACTED}{sep}{m.group('end') or ''}"


def _cut_body_start(text: str, end_at: int) -> Optional[tuple[int, str]]:
    """Where the body of a block whose BEGIN line is gone starts (its END line at ``end_at``),
    and its line break; None when no body line precedes it."""
    escaped = _ESCAPED_NEWLINE().search(text, max(0, end_at - 8), end_at)
    if escaped is not None and escaped.end() == end_at:
        sep = escaped.group(0)
    elif text.endswith("\n", 0, end_at):
        sep = "\r\n" if text.endswith("\r\n", 0, end_at) else "\n"
    else:
        return None
    pos = end_at - len(sep)
    start = None
    for _ in range(_PEM_MAX_LINES):
        brk = text.rfind(sep, max(0, pos - _PEM_MAX_LINE), pos)
        line_start = brk + len(sep) if brk >= 0 else max(0, pos - _PEM_MAX_LINE)
        if _PEM_LINE().fullmatch(text, line_start, pos):
            start = line_start
        else:
            tail = _PEM_TAIL().search(text, line_start, pos)
            if tail is not None:
                start = tail.start()
            break
        if brk < 0:
            break
        pos = brk
    return None if start is None else (start, sep)


def pem_pass(text: str) -> str:
    """PEM private key blocks' bodies replaced, also before an END line whose BEGIN was cut off."""
    if "-----BEGIN" in text:
        text = _PEM().sub(_pem_repl, text)
    if "-----END" not in text:
        return text
    out: list[str] = []
    last = 0
    for m in _PEM_END().finditer(text):
        found = _cut_body_start(text, m.start())
        if found is None or found[0] < last:
            continue
        start, sep = found
        out.append(text[last:start])
        out.append(REDACTED + sep)
        last = m.start()
    return spliced(out, text, last)
