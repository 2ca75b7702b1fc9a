"""Secrets found by their context rather than their own shape, and the regex helpers the
``redact`` package shares (pure; each pass runs only when its literal occurs)."""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Iterable

from pytest_selfheal.records.redacted import REDACTED, URL_MASK

_Replacer = Callable[["re.Match[str]", str], str]


def lazy(pattern: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """``pattern``, compiled on first use: a text needs few of them, compiling all costs every capture."""
    return functools.lru_cache(maxsize=None)(lambda: re.compile(pattern, flags))


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def lower_same_length(text: str) -> str:
    """Lower-case ``text`` keeping every index (``str.lower`` may grow "İ" into 2 chars)."""
    folded = text.lower()
    return folded if len(folded) == len(text) else text.translate(_ASCII_LOWER)


def spliced(out: list[str], text: str, last: int) -> str:
    """``text`` rebuilt from ``out`` (its first ``last`` characters, replaced) and the rest."""
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def sub_spans(regex: re.Pattern[str], scanned: str, text: str, repl: _Replacer) -> str:
    """``regex.sub`` matching on ``scanned`` (``text`` folded, same length)."""
    out: list[str] = []
    last = 0
    for m in regex.finditer(scanned):
        out.append(text[last : m.start()])
        out.append(repl(m, text))
        last = m.end()
    return spliced(out, text, last)


# netrc entries: ``machine host login user password VALUE``, any layout, on the lower-cased text.
_NETRC = lazy(r"(?P<label>(?:login|machine|account)\s{1,10}\S{1,256}\s{1,10}password\s{1,10})(?P<value>\S+)")


# Command lines carry a password by position (``curl -u user:PASS``, ``mysql -pPASS``): each
# option only on a line that runs its command (elsewhere ``-p`` is a pytest plugin), in a
# shell line or a Python argv list (``['curl', '-u', 'user:PASS']``).


def _sep(group: str, glued: bool = False) -> str:
    """Between an option and its value: blanks, ``=``, an argv repr's ``', '`` (or nothing),
    then the value's opening quote if it has one (``-p 'PASS'``)."""
    return rf"(?:[ \t]+|=|(?P<{group}>[\"']),[ \t]*(?P={group}){'|' if glued else ''})[\"']?"


_COMMANDS: tuple[tuple[Callable[[], re.Pattern[str]], Callable[[], re.Pattern[str]]], ...] = (
    (lazy(r"mysql|mariadb"), lazy(r"(?<![\w-])(?P<label>-p[\"']?)(?![\s\-'\",])(?!\[REDACTED\])(?P<value>[^\s'\"]+)")),
    (lazy(r"curl"), lazy(r"(?<![\w-])(?P<label>(?:-[uU]" + _sep("q1", glued=True) + r"|--(?:proxy-)?user" + _sep("q2") + r")"
                         r"[^\s'\":]{0,256}:)(?P<value>[^\s'\"]+)")),
    (lazy(r"sshpass"), lazy(r"(?<![\w-])(?P<label>-p" + _sep("q", glued=True) + r")(?![-,])(?P<value>[^\s'\"]+)")),
    (lazy(r"(?:docker|podman|buildah|skopeo|nerdctl|oras|helm)\b[^\n]{0,64}?\blogin\b"),
     lazy(r"(?<![\w-])(?P<label>(?:-p|--password)" + _sep("q") + r")(?![-,])(?P<value>[^\s'\"]+)")),
)


# One search before the commands' own (each compiled only when its command occurs).
_ANY_COMMAND = lazy(r"mysql|mariadb|curl|sshpass|docker|podman|buildah|skopeo|nerdctl|oras|helm")


def command_pass(text: str) -> str:
    """The password options of the commands above, on the rest of each line that runs one."""
    folded = lower_same_length(text)
    if _ANY_COMMAND().search(folded) is None:
        return text
    for client, option in _COMMANDS:
        out: list[str] = []
        last = 0
        for run in client().finditer(folded):
            if run.start() < last:
                continue
            end = text.find("\n", run.end())
            end = len(text) if end == -1 else end
            out.append(text[last : run.end()])
            out.append(option().sub(lambda m: m.group("label") + REDACTED, text[run.end() : end]))
            last = end
        if out:
            text = spliced(out, text, last)
            folded = lower_same_length(text)
    return text


# Options carrying a secret (``--api-key VALUE``, ``['--password', 'VALUE']``; not ``-p``: too
# ambiguous); the value must not look like another option.
_OPTION_SECRET = lazy(
    r"(?P<label>(?<![\w-])--?(?:api[_-]?key|[a-z]*[_-]?token|(?:[a-z]+-)?pass(?:word|wd)?|secret|[a-z]*[_-]?secret)"
    r"(?:[ \t]+|(?P<q>[\"']),[ \t]*(?P=q)))"
    r"(?!-|\[REDACTED\])(?P<value>[^\s\"']+)",
    re.IGNORECASE,
)


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
    return spliced(out, text, last)


def command_line_pass(text: str) -> str:
    """The command-line, shortened-item and AWS-pair passes (each only when its literal occurs)."""
    if "--" in text or " -" in text:
        text = _OPTION_SECRET().sub(lambda m: m.group("label") + REDACTED, text)
    if "-p" in text or "-u" in text or "-U" in text or "--" in text:
        text = command_pass(text)
    if "...'" in text or '..."' in text or "'..." in text or '"...' in text:
        text = sub_spans(_SHORTENED_ITEM(), text, text, _shortened_repl)
    if "AKIA" in text or "ASIA" in text:
        text = aws_pair_pass(text)
    return text


# pytest shortens a long item of an assertion diff by cutting its head (``'...v2H4s9ZAs1kmrv'``),
# label and prefix lost: a run of 12 or more token characters in such an item is redacted.
_SHORTENED_ITEM = lazy(r"(?P<q>[\"'])\.\.\.(?P<body>[^\"'\n]{0,4096})(?P=q)")
_TOKEN_RUN = lazy(r"[A-Za-z0-9+/=_\-]{12,}")


def _shortened_repl(m: re.Match[str], text: str) -> str:
    body = _TOKEN_RUN().sub(REDACTED, m.group("body"))
    return f"{m.group('q')}...{body}{m.group('q')}"


# ('Authorization', 'Basic dXNlcjpwYXNz'): a header as a (name, value) tuple or list item,
# also as ASGI writes it, in bytes: (b'cookie', b'session=...').
_TUPLE_HEADER = lazy(
    r"(?P<label>b?(?P<q>[\"'])(?:proxy-authorization|authorization|cookie|set-cookie"
    r"|[a-z0-9\-]{0,32}(?:api-?key|token|secret|password))"
    r"(?P=q)\s{0,4},\s{0,4}b?(?P<q2>[\"']))(?P<value>[^\"'\n]{1,4096})(?P=q2)"
)
#: Words one of which a header tuple's name holds (its pass runs only then).
_HEADER_WORDS = ("authorization", "cookie", "key", "token", "secret", "password")


def _tuple_header_repl(m: re.Match[str], text: str) -> str:
    """Keep the header name (as written: ``m`` matched the folded text) and the quotes, hide the value."""
    return text[m.start():m.end("label")] + REDACTED + m.group("q2")


# https%3A%2F%2Fuser%3Apass%40host: URL credentials inside a percent-encoded URL (a query value).
_ENCODED_URL = lazy(r"%3a%2f%2f(?P<user>[^%\s/@]{0,256})%3a(?P<value>[^\s/@&]{1,1024}?)%40")


def _encoded_url_repl(m: re.Match[str], text: str) -> str:
    """Keep the user, hide the password (as the plain URL pass does)."""
    start, end = m.span("value")
    return text[m.start():start] + "***" + text[end:m.end()]


# URL credentials: ``scheme://user:password@host``, the password whatever its characters, or a
# long user-only token (``https://<token>@host``: 20+ characters with a digit and a letter).
# Anchored on "://" so the scan has a literal prefix; :func:`_userinfo_end` finds the end.
_URL = lazy(
    r"://(?:"
    r"(?P<user>\[REDACTED\]|[^\s:/@\[\]\"'<>]{0,256}):"
    r"|(?=[A-Za-z_\-]{0,255}[0-9])(?=[0-9_\-]{0,255}[A-Za-z])(?P<only>[A-Za-z0-9_\-]{20,256})@"
    r")"
)
# The rest of the URL after ``user:``, scanned up to the next "://" only (a password holds
# none, and a nested URL is its own match): each character is scanned once.
_REST = lazy(r"[^\s\"'<>]{1,1024}")
_MAX_REST = 1024
# What follows the ``@`` that ends a userinfo: a host, a port, then the end of the authority.
_HOST_AFTER = lazy(r"(?:\[[0-9A-Fa-f:.]{2,64}\]|[A-Za-z0-9._~%\-]{1,253})(?::[0-9]{0,5})?(?:[/?#\\),;\]}|]|$)")
# host:port/path, not user:password (``http://localhost:8080/users/bob@example.com``).
_PORT_THEN_PATH = lazy(r"[0-9]{0,5}[/?#]")


def _userinfo_end(rest: str) -> int:
    """The index of the ``@`` that ends the password in ``rest`` (after ``user:``), or -1: the
    last ``@`` followed by a host before the first such host's query (``p@ss/w0rd@db/app``,
    ``?email=a@b.com``), else the last ``@`` (the safe direction)."""
    if "@" not in rest or _PORT_THEN_PATH().match(rest):
        return -1
    hosts: list[int] = []
    ats: list[int] = []
    at = rest.find("@")
    while at != -1:
        if rest[at - 1 : at] != "/":
            ats.append(at)
            if _HOST_AFTER().match(rest, at + 1):
                hosts.append(at)
        at = rest.find("@", at + 1)
    if not hosts:
        return ats[-1] if ats else -1
    query = min((i for i in (rest.find("?", hosts[0]), rest.find("#", hosts[0])) if i != -1), default=len(rest))
    return max(at for at in hosts if at < query)


def url_pass(text: str, secret_user: Callable[[str], bool]) -> str:
    """URL credentials: the password becomes ``***`` (host and path stay), and the user too
    when ``secret_user`` says it is itself a secret."""
    out: list[str] = []
    last = pos = 0
    regex = _URL()
    while (m := regex.search(text, pos)) is not None:
        if m.group("only") is not None:
            out.append(text[last : m.start()] + f"://{URL_MASK}@")
            last = pos = m.end()
            continue
        nested = text.find("://", m.end(), m.end() + _MAX_REST)
        rest = _REST().match(text, m.end(), nested if nested != -1 else len(text))
        end = _userinfo_end(rest.group(0)) if rest is not None else -1
        if end <= 0:  # no "@" that ends a userinfo, or no password before it
            pos = m.start() + 3
            continue
        user = m.group("user")
        if user and user != URL_MASK and (REDACTED in user or secret_user(user)):
            user = URL_MASK
        out.append(text[last : m.start()] + f"://{user}:{URL_MASK}@")
        last = pos = m.end() + end + 1
    return spliced(out, text, last)


# Query parameters that carry a credential by their name (signed URLs, API keys, tokens).
QUERY_SECRET = lazy(
    r"(?P<label>[?&](?:amp;)?(?:x-amz-(?:signature|credential|security-token)|x-goog-(?:signature|credential)"
    r"|sig|signature|key|apikey|api[_-]key|(?:access|refresh|id|auth|private)?[_-]?token|client_secret|secret"
    r"|password|passwd|pass|pwd|auth|jwt|code_verifier)=)(?P<value>[^&#\s\"'<>\\]+)"
)


def _label_repl(m: re.Match[str], text: str) -> str:
    """The label as written (``m`` matched the folded text) and the marker."""
    return text[m.start("label") : m.end("label")] + REDACTED


# Webhook URLs: the path is the secret. A host named hooks.* (Slack, Zapier), or a path
# segment named webhook(s) (Discord's /api/webhooks/ID/TOKEN, Teams' webhookb2, any
# …/webhook/<secret>); only inside a URL, so a source path src/webhook/x.py stays.
_WEBHOOK = lazy(
    r"(?P<label>://(?:hooks\.(?!slack\.com/)[a-z0-9.\-]{1,253}(?::[0-9]{1,5})?"
    r"|[a-z0-9.\-]{1,253}(?::[0-9]{1,5})?(?:/[^\s/\"'<>?#]{1,256}){0,8}?/webhooks?[a-z0-9]{0,4})/)"
    r"(?P<value>[^\s\"'<>?#\\]+)"
)
# Slack's own, also without a scheme.
_SLACK_WEBHOOK = lazy(r"(?P<label>hooks\.slack\.com/(?:services|workflows|triggers)/)(?P<value>[A-Za-z0-9/_\-]+)")


def written_forms(values: Iterable[str]) -> set[str]:
    """The forms an env secret takes when written out: as is, JSON- and repr-escaped, and
    base64 (standard and URL-safe, with and without padding)."""
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


def url_and_header_pass(text: str, folded: str, secret_user: Callable[[str], bool]) -> str:
    """The netrc, query, URL, header tuple and webhook passes; ``folded``: ``text`` lower-cased
    before the labels pass (the literals it holds decide which passes run)."""
    if "password" in folded:
        text = sub_spans(_NETRC(), lower_same_length(text), text, _label_repl)
    if "=" in text and ("?" in text or "&" in text):
        text = sub_spans(QUERY_SECRET(), lower_same_length(text), text, _label_repl)
    if "://" in text and "@" in text:
        text = url_pass(text, secret_user)
    if "%3a%2f%2f" in folded:
        text = sub_spans(_ENCODED_URL(), lower_same_length(text), text, _encoded_url_repl)
    if "," in text and any(word in folded for word in _HEADER_WORDS):
        text = sub_spans(_TUPLE_HEADER(), lower_same_length(text), text, _tuple_header_repl)
    if "hook" in folded:
        text = sub_spans(_SLACK_WEBHOOK(), text, text, _label_repl)
        if "://" in text:
            text = sub_spans(_WEBHOOK(), lower_same_length(text), text, _label_repl)
    return text
