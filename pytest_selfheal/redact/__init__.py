"""Secrets redaction: everything written to disk or posted goes through here.

Pure: no I/O. A :class:`Redactor` is built once (from the config and the environment) and
then applied to log tails, context, prompts, reports, the job summary and the PR comment.
docs/redaction.md lists every pattern.

What is replaced with ``[REDACTED]``:

- well-known token formats (GitHub, AWS key ids, Slack, JWTs, PEM private key blocks, ...);
- the value after a label: ``Authorization: Bearer <x>``, ``password=<x>``,
  ``"api_key": "<x>"``, ``secret: <x>`` (the label is kept so the text still reads);
- the password of URL credentials: ``https://user:<x>@host`` -> ``https://user:***@host``;
- the values (>= 4 characters) of environment variables whose names match ``env_names``
  (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``, ``*KEY*`` by default, case-insensitive);
- matches of the user's own ``redaction.patterns``.

Speed (10 MB logs): Python's ``re`` is fast only when a pattern starts with a literal, so
the token formats are several small passes, each skipped unless its literal occurs at all.
The case-insensitive labels (``Authorization``, ``password``...) are matched on a
lower-cased copy of the text (same length, same indexes) with a case-sensitive pattern,
several times faster than ``(?i)``. Every repetition is bounded or over a character class
that cannot overlap what follows, so hostile input cannot trigger catastrophic backtracking.

No pattern needs a word boundary on its left: a secret glued to other text is still found
(over-redaction is the safe direction).

Idempotent: ``redact(redact(x)) == redact(x)``. Replacing a secret can create a new match
next to the marker (``ABCDpassword=x`` with ``ABCD`` an env value), so :meth:`Redactor.redact`
repeats the passes until the text no longer changes (bounded).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, Protocol

from pytest_selfheal.errors import ConfigError
from pytest_selfheal.records.models import TestCaseResult
from pytest_selfheal.records.redacted import REDACTED, URL_MASK, is_redacted, runnable_nodeid
from pytest_selfheal.redact.context import (
    ENCODED_URL,
    NETRC,
    SHORTENED_ITEM,
    TUPLE_HEADER,
    aws_pair_pass,
    encoded_url_repl,
    fold,
    lazy,
    mysql_pass,
    netrc_repl,
    shortened_repl,
    sub_spans,
    tuple_header_repl,
    written_forms,
)

DEFAULT_ENV_NAMES: tuple[str, ...] = ("*TOKEN*", "*SECRET*", "*PASSWORD*", "*KEY*")

#: Environment values shorter than this are never redacted (a ``*KEY*`` variable set to "1"
#: must not turn every "1" of the log into the marker).
MIN_ENV_VALUE_LENGTH = 4

# Values that are obviously not secrets even when the variable is named like one
# (``USE_KEYRING=true``): redacting them would wreck the log for nothing.
_NON_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off"})

# Passes of the substitution until a fixpoint; 2 are enough in practice (see module doc).
_MAX_PASSES = 4
# Results remembered per redactor for strings up to this long, at most this many.
_MEMO_MAX_CHARS = 512
_MEMO_ENTRIES = 8192



def _quote_aware(value: str) -> str:
    """The replacement for a label's value: quotes (escaped ones too) are kept around the marker."""
    quote = value[: len(value) - len(value.lstrip("\\")) + 1]
    if quote[-1:] in ("\"", "'") and len(value) >= 2 * len(quote) and value.endswith(quote):
        return quote + REDACTED + quote
    return REDACTED


# --- token formats: case-sensitive, each with a literal prefix -------------------------------

# (kind, needles (pass skipped unless one occurs), regex). The whole match is replaced.
_TOKEN_KINDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # GitHub: classic PAT, OAuth, user-to-server, server-to-server, refresh; fine-grained PAT.
    ("github_token", ("gh", "github_pat_"), r"g(?:h[pousr]_[A-Za-z0-9]{10,255}|ithub_pat_[A-Za-z0-9_]{10,255})"),
    # OpenAI-style secret keys (sk-..., sk-proj-...).
    ("sk_key", ("sk-",), r"sk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,255}"),
    # AWS access key ids (long-term AKIA, temporary ASIA) and Google API keys.
    ("aws_key_id", ("AKIA", "ASIA"), r"AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}"),
    ("google_api_key", ("AIza",), r"AIza[0-9A-Za-z_\-]{35}"),
    # Slack bot/user/app/refresh tokens.
    ("slack_token", ("xox", "xapp-"), r"x(?:ox[abprse]-[A-Za-z0-9-]{10,255}|app-[0-9]-[A-Za-z0-9-]{10,255})"),
    # JWTs: base64url header and payload both start with '{"' -> "eyJ".
    ("jwt", ("eyJ",), r"eyJ[A-Za-z0-9_\-]{2,8192}\.eyJ[A-Za-z0-9_\-]{2,65536}\.[A-Za-z0-9_\-]{0,8192}"),
    ("pypi_token", ("pypi-AgE",), r"pypi-AgE[A-Za-z0-9_\-]{20,512}"),
    ("npm_token", ("npm_",), r"npm_[A-Za-z0-9]{36}"),
    ("stripe_key", ("k_live_", "k_test_"), r"[sr]k_(?:live|test)_[0-9A-Za-z]{16,255}"),
    # GitLab personal/project/group access tokens.
    ("gitlab_token", ("glpat-",), r"glpat-[A-Za-z0-9_\-]{20,255}"),
    # Hugging Face access tokens: "hf_" + 34 letters and digits (no "_": identifiers stay).
    ("huggingface_token", ("hf_",), r"hf_[A-Za-z0-9]{30,255}"),
    # SendGrid API keys: "SG." + 22 + "." + 43.
    ("sendgrid_key", ("SG.",), r"SG\.[A-Za-z0-9_\-]{16,64}\.[A-Za-z0-9_\-]{16,128}"),
)

_TOKEN_PASSES: tuple[tuple[str, tuple[str, ...], Callable[[], re.Pattern[str]]], ...] = tuple(
    (kind, needles, lazy(rx)) for kind, needles, rx in _TOKEN_KINDS
)
# Used to decide whether a URL user name is itself a secret.
_ANY_TOKEN = lazy("|".join(rx for _, _, rx in _TOKEN_KINDS))

# --- structured kinds: case-sensitive, own replacement ---------------------------------------

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


_ESCAPED_NEWLINE = lazy(r"\\+n")


def _pem_repl(m: re.Match[str], text: str) -> str:
    # A block inside a repr keeps its escaped line breaks: the repr stays one line.
    block = m.group(0)
    escaped = _ESCAPED_NEWLINE().search(block) if "\n" not in block else None
    sep = escaped.group(0) if escaped is not None else "\n"
    return f"{m.group('begin')}{sep}{REDACTED}{sep}{m.group('end') or ''}"


# URL credentials: scheme://user:password@host, or a long user-only token
# (https://<token>@host: at least 20 characters with a digit and a letter, so not a user
# name). Anchored on "://" (the scheme is left alone) so the scan has a literal prefix.
_URL = lazy(
    r"://(?:"
    r"(?P<user>[^\s:/@\[\]\"'<>]{0,256}):(?P<pw>[^\s/@\"'<>]{1,1024})@"
    r"|(?=[A-Za-z_\-]{0,255}[0-9])(?=[0-9_\-]{0,255}[A-Za-z])(?P<only>[A-Za-z0-9_\-]{20,256})@"
    r")"
)


def _url_repl(m: re.Match[str], text: str) -> str:
    if m.group("only") is not None:
        return f"://{URL_MASK}@"
    user = m.group("user")
    # A user name that is itself a token (https://ghp_x:x-oauth-basic@...) goes too.
    if user and user != URL_MASK and (_ANY_TOKEN().search(user) or REDACTED in user):
        user = URL_MASK
    return f"://{user}:{URL_MASK}@"


# Slack incoming webhooks: the path is the secret.
_SLACK_WEBHOOK = lazy(r"(?P<pre>hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_\-]+")


def _slack_repl(m: re.Match[str], text: str) -> str:
    return m.group("pre") + REDACTED


# --- labels: matched case-insensitively on a lower-cased copy --------------------------------

# The value after a label: the marker (listed first, so an already redacted value is matched
# whole: idempotence), a quoted string (kept quoted), an unquoted run, or a quoted value cut
# short (no closing quote). Written lower-case: it runs on the lower-cased text.
_VALUE = (
    r"(?:\[redacted\]"
    # Quoted strings matched atomically (lookahead + backreference): an unterminated quote
    # over megabytes must not be retried at every shorter length.
    r"|\"(?=(?P<dq>[^\"\\\n]*(?:\\.[^\"\\\n]*)*))(?P=dq)\""
    r"|'(?=(?P<sq>[^'\\\n]*(?:\\.[^'\\\n]*)*))(?P=sq)'"
    # A string escaped inside another one (JSON in JSON: \"password\": \"x\"), kept quoted.
    r"|(?P<bq>\\{1,4}[\"'])(?=(?P<eq>[^\"'\\\n]*))(?P=eq)(?P=bq)"
    r"|\\{0,4}[\"']?[^\s\"'`,;&]+)"
)
# Assignment operators; "==" is a comparison (``assert tokens == [...]``): redacting it would
# garble assertion messages and their fingerprints.
_OP = r"(?:=>|:=|:|=(?!=))"

_LABELS = lazy(
    # Authorization headers: HTTP, curl -H, dict reprs, JSON; the scheme word is kept.
    r"(?P<auth_label>(?:proxy-)?authorization[\"']?\s{0,10}[:=]\s{0,10}[\"']?"
    r"(?:(?:bearer|basic|token|digest|negotiate|bot)\s{1,10})?)"
    r"(?P<auth_value>\[redacted\]|[^\s\"',;]+)"
    # Cookie headers: every cookie of the header is a session credential.
    r"|(?P<cookie_label>(?:set-)?cookie[\"']?[ \t]{0,10}:[ \t]{0,10}[\"']?)"
    r"(?P<cookie_value>\[redacted\]|[^\n\"']+)"
    # AWS secret access keys after their label.
    r"|(?P<aws_label>(?:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key)"
    r"[\"']?\s{0,10}" + _OP + r"\s{0,10}[\"']?)"
    r"(?P<aws_value>\[redacted\]|[a-z0-9/+=]{30,80})"
    # A bare bearer token (no header label), long enough not to be English prose.
    r"|(?P<bearer_label>bearer\s{1,10})(?P<bearer_value>[a-z0-9._~+/=_\-]{16,})"
    # Assignments: password=..., "password": "...", secret: ..., api_key=..., token=...
    # The label may carry a suffix (password_hash, secret_access_key) of bounded length
    # (unbounded, a long word full of keywords makes the scan quadratic), matched atomically
    # (lookahead + backreference: Python < 3.11 has no atomic groups) so a failed label is
    # not retried at every shorter suffix, and without "." (``tokenize.py:12`` is a
    # traceback line, not an assignment).
    # A bare "pass" (DB_PASS=, SMTP_PASS:) only right before its operator, so "passed: 3"
    # and a Python "pass" statement stay; "pwd" (ODBC) only before "=" and not before a
    # path ("PWD=/home/x" is the working directory). The label may end in an escaped quote
    # (JSON inside JSON: \"password\": ...).
    r"|(?P<assign_label>(?:pass(?:word|wd|phrase)|secret|token|a(?:pi|ccess|uth|ccount)[_-]?key"
    r"|private[_-]?key|client[_-]?key|signing[_-]?key|session[_-]?(?:id|key)"
    r"|pass(?=\\{0,4}[\"']?[ \t]{0,10}" + _OP + r")|pwd(?=[ \t]{0,10}=(?!=)[ \t]{0,10}[^/~\s]))"
    r"(?=(?P<suffix>[a-z0-9_\-]{0,40}))(?P=suffix)\\{0,4}[\"']?\s{0,10}" + _OP + r"\s{0,10})"
    r"(?P<assign_value>" + _VALUE + r")"
)
# Where a label can start. Each alternative starts with a literal, so ``re`` skips every other
# position in C; the full (slower) ``_LABELS`` pattern then runs anchored at each candidate
# only. Scanning 10 MB with ``_LABELS`` itself costs seconds.
_LABEL_TRIGGER = lazy(
    r"a(?:uth|ws|pi|ccess|ccount)|bearer|pass|secret|token|private|client|signing|cookie|session|pwd"
)
# The labels pass is skipped unless one of these occurs in the lower-cased text.
_LABEL_NEEDLES: tuple[str, ...] = ("authorization", "bearer", "pass", "secret", "token", "key", "cookie", "session", "pwd")


# One search for every needle instead of a substring test per needle (most texts hold none).
_ANY_LABEL_NEEDLE = lazy("|".join(re.escape(n) for n in _LABEL_NEEDLES))
_ANY_TOKEN_NEEDLE = lazy("|".join(re.escape(n) for _, needles, _ in _TOKEN_KINDS for n in needles))

_LABEL_KINDS = ("auth", "cookie", "aws", "bearer", "assign")
# The longest a label can be from its keyword to its value (keyword, suffix, quote, spaces,
# operator, spaces, quote, scheme word): bounds the search for a label hidden in a value.
_MAX_LABEL_SPAN = 100


def _label_kind(m: re.Match[str]) -> str:
    for kind in _LABEL_KINDS:
        if m.start(f"{kind}_label") != -1:
            return kind
    raise AssertionError("no label group matched")  # pragma: no cover - regex invariant


def _labels_repl(m: re.Match[str], text: str, end: int) -> str:
    """The label (original case) and the marker; ``end`` > ``m.end()`` when the value was
    extended over a label it swallowed (then quotes are not kept)."""
    kind = _label_kind(m)
    label = text[m.start(f"{kind}_label") : m.end(f"{kind}_label")]
    if kind == "assign" and end == m.end():
        return label + _quote_aware(text[m.start("assign_value") : m.end("assign_value")])
    return label + REDACTED


#: Names of the built-in kinds (docs/redaction.md, tests).
BUILTIN_KINDS: tuple[str, ...] = (
    "pem_private_key",
    "authorization_header",
    "aws_secret_access_key",
    "bearer_token",
    "assignment",
    "url_credentials",
    "slack_webhook",
    "cookie_header",
    "netrc_password",
    "mysql_password_option",
    "aws_secret_next_to_key_id",
    "shortened_item",
) + tuple(kind for kind, _, _ in _TOKEN_KINDS)

def _extend_over_swallowed_labels(folded: str, value_start: int, end: int) -> int:
    """Where the redaction of a value must end.

    A value can swallow the start of another label: in ``PASSWD=DB_PASSWORD='x'`` the
    unquoted value of ``PASSWD`` is ``DB_PASSWORD=``, and ``'x'`` would be left bare. A label
    that starts inside the value and ends past it extends the redaction over its own value.
    Only the last _MAX_LABEL_SPAN characters of the value can hold such a label, which keeps
    this linear.
    """
    while True:
        for inner in _LABEL_TRIGGER().finditer(folded, max(value_start, end - _MAX_LABEL_SPAN), end):
            nested = _LABELS().match(folded, inner.start())
            if nested is not None and nested.end() > end:
                value_start = nested.start(f"{_label_kind(nested)}_value")
                end = nested.end()
                break
        else:
            return end


def _labels_pass(text: str, folded: str) -> str:
    """Replace label values, matching on ``folded`` (lower-cased ``text``, same indexes)."""
    out: list[str] = []
    last = 0
    for candidate in _LABEL_TRIGGER().finditer(folded):
        start = candidate.start()
        if start < last:  # inside a value already replaced
            continue
        m = _LABELS().match(folded, start)
        if m is None:
            continue
        # Prefer the label nearest its value: "TOKENAuthorization: Bearer x" is an
        # Authorization header, not token="Authorization:" (the suffix swallowed a label).
        while m.start("assign_label") != -1:
            for inner in _LABEL_TRIGGER().finditer(folded, start + 1, m.start("assign_value")):
                nearer = _LABELS().match(folded, inner.start())
                if nearer is not None:
                    start, m = inner.start(), nearer
                    break
            else:
                break
        end = _extend_over_swallowed_labels(folded, m.start(f"{_label_kind(m)}_value"), m.end())
        out.append(text[last:start])
        out.append(_labels_repl(m, text, end))
        last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


# Command-line options carrying a secret: ``--api-key VALUE``, ``--token VALUE``, ``-p`` is not
# covered (too ambiguous). The value must not look like another option.
_OPTION_SECRET = lazy(
    r"(?P<label>(?<![\w-])--?(?:api[_-]?key|[a-z]*[_-]?token|pass(?:word|wd)?|secret|[a-z]*[_-]?secret)[ \t]+)"
    r"(?!-|\[REDACTED\])(?P<value>[^\s\"']+)",
    re.IGNORECASE,
)


def _builtin_pass(text: str) -> str:
    if "--" in text or " -" in text:
        text = _OPTION_SECRET().sub(lambda m: m.group("label") + REDACTED, text)
    if " -p" in text:
        text = mysql_pass(text)
    if "...'" in text or '..."' in text or "'..." in text or '"...' in text:
        text = sub_spans(SHORTENED_ITEM(), text, text, shortened_repl)
    if "AKIA" in text or "ASIA" in text:
        text = aws_pair_pass(text)
    if "-----BEGIN" in text:
        text = sub_spans(_PEM(), text, text, _pem_repl)
    folded = fold(text)
    if _ANY_LABEL_NEEDLE().search(folded):
        text = _labels_pass(text, folded)
    if "password" in folded:
        text = sub_spans(NETRC(), fold(text), text, netrc_repl)
    if "://" in text:
        text = sub_spans(_URL(), text, text, _url_repl)
    if "%3a%2f%2f" in folded:
        text = sub_spans(ENCODED_URL(), fold(text), text, encoded_url_repl)
    if "," in text and any(word in folded for word in _HEADER_WORDS):
        text = sub_spans(TUPLE_HEADER(), fold(text), text, tuple_header_repl)
    if "hooks.slack.com/" in text:
        text = sub_spans(_SLACK_WEBHOOK(), text, text, _slack_repl)
    if _ANY_TOKEN_NEEDLE().search(text):
        for _kind, needles, regex in _TOKEN_PASSES:
            if any(n in text for n in needles):
                text = regex().sub(REDACTED, text)
    return text


_HEADER_WORDS = ("authorization", "cookie", "api-key", "auth-token")


def _env_name_matches(name: str, patterns: Sequence[str]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


def _is_redactable_env_value(value: str) -> bool:
    if len(value) < MIN_ENV_VALUE_LENGTH or not value.strip():
        return False
    if value.strip().lower() in _NON_SECRET_VALUES:
        return False
    # A value found inside our own markers would make redaction non-idempotent
    # ("[REDACTED]" -> "[[REDACTED]CTED]" ...), and is no secret worth hiding.
    return value not in REDACTED and value not in URL_MASK


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\udcff``), so that it
    encodes as UTF-8; unchanged (the same object) when it has none."""
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class _CustomPattern:
    """A user pattern: with capturing groups only the first group is replaced (keeps a label
    matched for context), otherwise the whole match."""

    def __init__(self, regex: re.Pattern[str]) -> None:
        self.regex = regex

    def sub(self, text: str) -> str:
        if self.regex.groups == 0:
            return self.regex.sub(REDACTED, text)

        def repl(m: re.Match[str]) -> str:
            if m.group(1) is None:
                return m.group(0)
            base = m.start(0)
            whole = m.group(0)
            return whole[: m.start(1) - base] + REDACTED + whole[m.end(1) - base :]

        return self.regex.sub(repl, text)


class Redactor:
    """Replaces secrets in text with ``[REDACTED]`` (see the module docstring for what).

    ``env`` supplies the values to hide: every variable whose name matches one of
    ``env_names`` (fnmatch, case-insensitive) and whose value has at least 4 characters.
    ``patterns`` are extra regular expressions (invalid ones raise :class:`ConfigError`).
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        env_names: Sequence[str] = DEFAULT_ENV_NAMES,
        patterns: Sequence[str] = (),
    ) -> None:
        self.env_names: tuple[str, ...] = tuple(env_names)
        secrets = {
            v
            for k, v in env.items()
            if isinstance(v, str) and _env_name_matches(k, self.env_names) and _is_redactable_env_value(v)
        }
        # Also as written out: JSON/repr-escaped (a value holding \\ or "), base64.
        values = {form for form in written_forms(secrets) if _is_redactable_env_value(form)}
        self._secret_count = len(secrets)
        # Longest first: a value that contains another is replaced whole.
        self._env_values: tuple[str, ...] = tuple(sorted(values, key=lambda v: (-len(v), v)))
        self._env_regex_cache: dict[tuple[str, ...], re.Pattern[str]] = {}
        self._memo: dict[str, str] = {}
        custom: list[_CustomPattern] = []
        for raw in patterns:
            if not isinstance(raw, str) or not raw:
                raise ConfigError(f"redaction.patterns: expected a non-empty regular expression, got {raw!r}")
            try:
                # As the config's validator compiles them: a FutureWarning ("Possible nested
                # set") would print two lines of Python on stderr of every command.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    custom.append(_CustomPattern(re.compile(raw)))
            except re.error as exc:
                raise ConfigError(f"redaction.patterns: invalid regular expression {raw!r}: {exc}") from None
        self._custom: tuple[_CustomPattern, ...] = tuple(custom)

    @property
    def env_value_count(self) -> int:
        """How many environment values are being hidden (for diagnostics; never the values)."""
        return self._secret_count

    def _env_pass(self, text: str) -> str:
        # Only the values present in this text go into the alternation: a substring test is a
        # fast C search, an alternation of literals is not.
        present = tuple(v for v in self._env_values if v in text)
        if not present:
            return text
        regex = self._env_regex_cache.get(present)
        if regex is None:
            regex = re.compile("|".join(re.escape(v) for v in present))
            if len(self._env_regex_cache) < 64:
                self._env_regex_cache[present] = regex
        return regex.sub(REDACTED, text)

    def _one_pass(self, text: str) -> str:
        # Built-ins first, then env values: "password=<env value>" keeps its label, and an
        # env value that happens to be a label word cannot hide the secret behind it.
        text = _builtin_pass(text)
        for custom in self._custom:
            text = custom.sub(text)
        return self._env_pass(text)

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret replaced; idempotent. Lone surrogates
        (``os.fsdecode`` of undecodable bytes) come out escaped (``\\udcff``): what is
        written must encode as UTF-8."""
        if not text:
            return text
        text = escape_surrogates(text)
        if len(text) > _MEMO_MAX_CHARS:
            return self._redact(text)
        # Short strings repeat across the documents of one run (node ids, messages, status
        # words in the incident, the plan, the events, every attempt): one scan each.
        done = self._memo.get(text)
        if done is None:
            if len(self._memo) >= _MEMO_ENTRIES:
                self._memo.clear()
            done = self._memo[text] = self._redact(text)
        return done

    def _redact(self, text: str) -> str:
        for _ in range(_MAX_PASSES):
            new = self._one_pass(text)
            if new == text:
                return new
            text = new
        return text

    def __call__(self, text: str) -> str:
        """Same as :meth:`redact`, so a redactor can be passed where a function is expected."""
        return self.redact(text)

    def _redact_key(self, key: str) -> str:
        # A key that is an identifier is a field name (`incident_id`, `GITHUB_TOKEN`), not
        # data: only the token formats apply, so that neither a broad `redaction.patterns`
        # entry nor an env value equal to a field name can break the documents' schema.
        # Other keys (node ids, paths) are redacted like any text.
        if _IDENTIFIER.fullmatch(key):
            return _builtin_pass(key)
        return self.redact(key)

    def redact_obj(self, obj: Any, keep: Callable[[str], bool] = lambda text: False) -> Any:
        """Redact every string inside ``obj``: dict keys and values, list/tuple items, recursively.

        Keys too: node ids are keys (``outcomes``), and a parametrize id can hold
        a secret. Two keys that redact to the same text merge, the later value winning.
        ``keep``: whole strings left as they are (the package's own field names, enum
        words and ids: the store passes :func:`pytest_selfheal.store.schema.written_by_selfheal`). Other values are returned
        unchanged. Returns new containers, never mutates ``obj``.
        """
        if isinstance(obj, str):
            return obj if keep(obj) else self.redact(obj)
        if isinstance(obj, dict):
            return {(k if keep(k) else self._redact_key(k)) if isinstance(k, str) else k: self.redact_obj(v, keep)
                    for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.redact_obj(v, keep) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_obj(v, keep) for v in obj)
        return obj


class RedactionSection(Protocol):
    """The ``redaction`` settings (``config.settings.RedactionSettings``), as this module reads them."""

    @property
    def patterns(self) -> Sequence[str]: ...

    @property
    def env_names(self) -> Sequence[str]: ...


def default_redactor(section: Optional[RedactionSection] = None, env: Optional[Mapping[str, str]] = None) -> Redactor:
    """Build the redactor from the ``redaction`` settings and the environment.

    ``section`` is ``Settings.redaction`` (checked by the config merge): extra patterns,
    and environment-name globs that *add to* the defaults ``*TOKEN*``, ``*SECRET*``,
    ``*PASSWORD*``, ``*KEY*``, which cannot be removed. ``env`` defaults to ``os.environ``
    read at call time.
    """
    patterns: Sequence[str] = section.patterns if section is not None else ()
    extra_names: Sequence[str] = section.env_names if section is not None else ()
    names: list[str] = list(DEFAULT_ENV_NAMES)
    for name in extra_names:
        if name.upper() not in {n.upper() for n in names}:
            names.append(name)
    source: Mapping[str, str] = os.environ if env is None else env
    return Redactor(source, env_names=names, patterns=list(patterns))


__all__ = [
    "BUILTIN_KINDS",
    "DEFAULT_ENV_NAMES",
    "MIN_ENV_VALUE_LENGTH",
    "REDACTED",
    "URL_MASK",
    "Redactor",
    "escape_surrogates",
    "default_redactor",
    "is_redacted",
    "runnable_nodeid",
]


def redact_cases(
    cases: Iterable[TestCaseResult], redactor: Optional[Redactor]
) -> Iterator[TestCaseResult]:
    """The cases with secrets removed from their identity (classname, name), message, type and
    text, before fingerprinting: a signature on disk never holds one, its hash is the hash of
    what is written, and the capture and every verification run hash the same identity."""
    if redactor is None:
        yield from cases
        return
    scrub = redactor.redact
    for case in cases:
        yield dataclasses.replace(case, classname=scrub(case.classname), name=scrub(case.name), message=scrub(case.message),
                                  text=scrub(case.text), exc_type=scrub(case.exc_type))
