"""Secrets redaction: everything written to disk or posted goes through here (pure).

A :class:`Redactor` is built once from the config and the environment; docs/redaction.md
lists what it replaces with ``[REDACTED]``. Over-redaction is the safe direction: no
pattern needs a word boundary on its left.

Logs run to megabytes: each pass is skipped unless its literal occurs, labels are matched
on a lower-cased copy of the same length, and every repetition is bounded, so hostile input
cannot backtrack catastrophically. Replacing a secret can create a new match next to the
marker, so :meth:`Redactor.redact` repeats the passes until a fixpoint: it is idempotent.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional

from pytest_selfheal.records.models import TestCaseResult
from pytest_selfheal.records.redacted import REDACTED, URL_MASK
from pytest_selfheal.redact.context import (
    command_line_pass,
    lazy,
    lower_same_length,
    spliced,
    url_and_header_pass,
    written_forms,
)
from pytest_selfheal.redact.formats import ANY_TOKEN, ANY_TOKEN_NEEDLE, TOKEN_KINDS, pem_pass, token_pass

DEFAULT_ENV_NAMES: tuple[str, ...] = ("*TOKEN*", "*SECRET*", "*PASSWORD*", "*KEY*")

#: Environment values shorter than this are never redacted (a ``*KEY*`` variable set to "1"
#: must not turn every "1" of the log into the marker).
MIN_ENV_VALUE_LENGTH = 4

# Values that are obviously not secrets even when the variable is named like one
# (``USE_KEYRING=true``): redacting them would wreck the log for nothing.
_NON_SECRET_VALUES = frozenset({"true", "false", "none", "null", "yes", "no", "on", "off"})

_MAX_PASSES = 4  # until a fixpoint; 2 are enough in practice
_MEMO_MAX_CHARS = 512  # results remembered per redactor: for strings up to this long,
_MEMO_ENTRIES = 8192  # at most this many


def _quote_aware(value: str) -> str:
    """The replacement for a label's value: quotes (escaped ones too) are kept around the marker."""
    quote = value[: len(value) - len(value.lstrip("\\")) + 1]
    if quote[-1:] in ("\"", "'") and len(value) >= 2 * len(quote) and value.endswith(quote):
        return quote + REDACTED + quote
    return REDACTED


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
# garble assertion messages and their fingerprints; "::" separates the parts of a node id
# (``test_auth.py::TestToken::test_refresh`` names a test, it assigns nothing).
_COLON = r":(?!:)"
_OP = r"(?:=>|:=|" + _COLON + r"|=(?!=))"

_LABELS = lazy(
    # Authorization headers: HTTP, curl -H, dict reprs, JSON; the scheme word is kept.
    r"(?P<auth_label>(?:proxy-)?authorization[\"']?\s{0,10}(?:" + _COLON + r"|=)\s{0,10}[\"']?"
    r"(?:(?:bearer|basic|token|digest|negotiate|bot)\s{1,10})?)"
    r"(?P<auth_value>\[redacted\]|[^\s\"',;]+)"
    # Cookie headers: every cookie of the header is a session credential.
    r"|(?P<cookie_label>(?:set-)?cookie[\"']?[ \t]{0,10}" + _COLON + r"[ \t]{0,10}[\"']?)"
    r"(?P<cookie_value>\[redacted\]|[^\n\"']+)"
    # AWS secret access keys after their label.
    r"|(?P<aws_label>(?:aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key)"
    r"[\"']?\s{0,10}" + _OP + r"\s{0,10}[\"']?)"
    r"(?P<aws_value>\[redacted\]|[a-z0-9/+=]{30,80})"
    # A bare bearer token (no header label), long enough not to be English prose.
    r"|(?P<bearer_label>bearer\s{1,10})(?P<bearer_value>[a-z0-9._~+/=_\-]{16,})"
    # Assignments: password=..., "password": "...", token=... The label's suffix
    # (password_hash) is bounded (else a long word of keywords makes the scan quadratic),
    # matched atomically (lookahead + backreference) so a failed label is not retried at every
    # shorter suffix, and holds no "." (``tokenize.py:12`` is a traceback line).
    # A bare "pass" (DB_PASS=) only right before its operator ("passed: 3" stays); "pwd"
    # (ODBC) only before "=" and not before a path ("PWD=/home/x"). The label may end in an
    # escaped quote (JSON inside JSON).
    r"|(?P<assign_label>(?:pass(?:word|wd|phrase)|secret|token|a(?:pi|ccess|uth|ccount)[_-]?key"
    r"|private[_-]?key|client[_-]?key|signing[_-]?key|session[_-]?(?:id|key)"
    r"|pass(?=\\{0,4}[\"']?[ \t]{0,10}" + _OP + r")|pwd(?=[ \t]{0,10}=(?!=)[ \t]{0,10}[^/~\s]))"
    r"(?=(?P<suffix>[a-z0-9_\-]{0,40}))(?P=suffix)\\{0,4}[\"']?\s{0,10}" + _OP + r"\s{0,10})"
    r"(?P<assign_value>" + _VALUE + r")"
)
# Where a label can start: each alternative starts with a literal, so ``re`` skips every other
# position in C, and the slow ``_LABELS`` runs anchored at each candidate only.
_LABEL_TRIGGER = lazy(
    r"a(?:uth|ws|pi|ccess|ccount)|bearer|pass|secret|token|private|client|signing|cookie|session|pwd"
)
# The labels pass runs only when one of these occurs in the lower-cased text.
_ANY_LABEL_NEEDLE = lazy("authorization|bearer|pass|secret|token|key|cookie|session|pwd")

_LABEL_KINDS = ("auth", "cookie", "aws", "bearer", "assign")
# The longest a label can be from its keyword to its value (keyword, suffix, quote, spaces,
# operator, spaces, quote, scheme word): bounds the search for a label hidden in a value.
_MAX_LABEL_SPAN = 100


def _label_kind(m: re.Match[str]) -> str:
    return next(kind for kind in _LABEL_KINDS if m.start(f"{kind}_label") != -1)


def _labels_repl(m: re.Match[str], text: str, end: int) -> str:
    """The label (original case) and the marker; quotes kept unless the value was extended
    over a label it swallowed (``end`` > ``m.end()``)."""
    kind = _label_kind(m)
    label = text[m.start(f"{kind}_label") : m.end(f"{kind}_label")]
    if kind == "assign" and end == m.end():
        return label + _quote_aware(text[m.start("assign_value") : m.end("assign_value")])
    return label + REDACTED


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
    "command_line_password",
    "signed_url_parameter",
    "webhook_url",
    "header_tuple",
    "aws_secret_next_to_key_id",
    "shortened_item",
) + tuple(dict.fromkeys(kind.kind for kind in TOKEN_KINDS))

def _labels_in(folded: str, start: int = 0, end: Optional[int] = None) -> Iterator[re.Match[str]]:
    for candidate in _LABEL_TRIGGER().finditer(folded, start, len(folded) if end is None else end):
        m = _LABELS().match(folded, candidate.start())
        if m is not None:
            yield m


def _extend_over_swallowed_labels(folded: str, value_start: int, end: int) -> int:
    """Where the redaction of a value must end: past the value of a label that starts inside
    it (in ``PASSWD=DB_PASSWORD='x'`` the value ``DB_PASSWORD=`` would leave ``'x'`` bare)."""
    while (nested := next((n for n in _labels_in(folded, max(value_start, end - _MAX_LABEL_SPAN), end)
                           if n.end() > end), None)) is not None:
        value_start, end = nested.start(f"{_label_kind(nested)}_value"), nested.end()
    return end


_WORD_BEFORE = lazy(r"[a-z0-9_\-]{0,64}$")
_WORD_AFTER = lazy(r"[a-z0-9_\-]{0,64}(?P<operator>[ \t]*[:=])?")


def _in_path(folded: str, start: int) -> bool:
    """Whether the word holding a label keyword at ``start`` is a file name ending a path
    (``'/etc/passwd': expected``). A word right before ``=`` or ``:`` is a label wherever it
    stands (``…/password=hunter2``): a secret is worth more than a word."""
    word = _WORD_BEFORE().search(folded, max(0, start - 64), start)
    begin = word.start() if word is not None else start
    after = _WORD_AFTER().match(folded, start)
    labelled = after is not None and after.group("operator") is not None
    return begin > 0 and folded[begin - 1] == "/" and not labelled


# A label's suffix naming a property of the secret, not the secret: ``token_type: bearer``,
# ``token_count: 1``, ``password_file: /run/x``, ``tokenize.TokenError: (...)``.
_PROPERTY_SUFFIXES = frozenset(
    "count counts type types kind length len size limit min max url uri urls endpoint host file files path dir"
    " name names expiry expires expires_at expires_in expiration ttl lifetime timeout policy hint reset strength"
    " format version scope scopes source error errors exception warning required enabled".split()
)
# An unquoted value that is code: a dotted name called, or called or subscripted with a
# string (a traceback's source line ``password = form.cleaned_data["password"]``, pytest's
# ``where 'passwd' = os.path.basename('/etc/passwd')``).
_CODE_VALUE = lazy(r"[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+(?:\(\)|[\[(](?=[\"']))")


def _names_no_value(m: re.Match[str], folded: str) -> bool:
    """Whether a matched label is a name rather than a secret's label (see above); a bare
    ``pass`` before a number is a count (``pass: 12, fail: 3``)."""
    if m.start("assign_label") == -1:
        return False
    if m.group("suffix").lstrip("_-") in _PROPERTY_SUFFIXES:
        return True
    code = _CODE_VALUE().match(folded, m.start("assign_value"))
    if code is not None and code.end() == m.end("assign_value"):
        return True
    value = m.group("assign_value")
    start = m.start("assign_label")
    # Only a word of its own: DB_PASS=123456 is a password.
    alone = start == 0 or not (folded[start - 1].isalnum() or folded[start - 1] in "_-")
    return alone and folded[start : m.start("suffix")] == "pass" and value.isdigit()


def _labels_pass(text: str, folded: str) -> str:
    """Label values replaced, matching on ``folded`` (``text`` lower-cased, same length)."""
    out: list[str] = []
    last = 0
    for candidate in _LABEL_TRIGGER().finditer(folded):
        start = candidate.start()
        # Not inside a value already replaced: a value can run to the end of the text, and
        # matching each label in it again would take quadratic time.
        if start < last or (m := _LABELS().match(folded, start)) is None or _in_path(folded, start):
            continue
        # Prefer the label nearest its value: "TOKENAuthorization: Bearer x" is an
        # Authorization header, not token="Authorization:" (the suffix swallowed a label).
        while m.start("assign_label") != -1 and (
                nearer := next(_labels_in(folded, start + 1, m.start("assign_value")), None)) is not None:
            start, m = nearer.start(), nearer
        if _names_no_value(m, folded):
            continue
        end = _extend_over_swallowed_labels(folded, m.start(f"{_label_kind(m)}_value"), m.end())
        out.append(text[last:start])
        out.append(_labels_repl(m, text, end))
        last = end
    return spliced(out, text, last)


def _builtin_pass(text: str) -> str:
    text = command_line_pass(text)
    if "-----" in text:
        text = pem_pass(text)
    # Token formats before the labels: a token split by a line break after its label is
    # replaced whole, not its first line as the label's value.
    if ANY_TOKEN_NEEDLE().search(text):
        text = token_pass(text)
    folded = lower_same_length(text)
    if _ANY_LABEL_NEEDLE().search(folded):
        text = _labels_pass(text, folded)
    return url_and_header_pass(text, folded, lambda user: ANY_TOKEN().search(user) is not None)


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
    """``text`` with each lone surrogate written as its escape (``\\udcff``): it encodes as UTF-8."""
    if not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _custom_sub(regex: re.Pattern[str], text: str) -> str:
    """A user pattern's matches redacted; with groups only the first group's."""
    if regex.groups == 0:
        return regex.sub(REDACTED, text)

    def repl(m: re.Match[str]) -> str:
        if m.group(1) is None:
            return m.group(0)
        whole, base = m.group(0), m.start(0)
        return whole[: m.start(1) - base] + REDACTED + whole[m.end(1) - base :]

    return regex.sub(repl, text)


class Redactor:
    """Replaces secrets in text with ``[REDACTED]``, the values of the ``env`` variables named
    like one of ``env_names`` and the matches of ``patterns`` too."""

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
            if _is_redactable_env_value(v)
            and any(fnmatch.fnmatchcase(k.upper(), name.upper()) for name in self.env_names)
        }
        # Also as written out: JSON/repr-escaped (a value holding \\ or "), base64.
        values = {form for form in written_forms(secrets) if _is_redactable_env_value(form)}
        # Longest first: a value that contains another is replaced whole.
        self._env_values: tuple[str, ...] = tuple(sorted(values, key=lambda v: (-len(v), v)))
        self._env_regex_cache: dict[tuple[str, ...], re.Pattern[str]] = {}
        self._memo: dict[str, str] = {}
        # Checked by the config merge; a FutureWarning ("Possible nested set") would print
        # two lines of Python on stderr of every command.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._custom = tuple(re.compile(raw) for raw in patterns)

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

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced, lone surrogates escaped; idempotent."""
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
            self._memo[done] = done  # what comes out is clean (idempotent): a later write of it scans nothing
        return done

    def _redact(self, text: str) -> str:
        for _ in range(_MAX_PASSES):
            # Built-ins first, then env values: "password=<env value>" keeps its label, and an
            # env value that happens to be a label word cannot hide the secret behind it.
            new = _builtin_pass(text)
            for regex in self._custom:
                new = _custom_sub(regex, new)
            new = self._env_pass(new)
            if new == text:
                return new
            text = new
        return text

    __call__ = redact  # a redactor can be passed where a function is expected

    def _redact_key(self, key: str) -> str:
        # A key that is an identifier is a field name (`incident_id`, `GITHUB_TOKEN`), not
        # data: only the token formats apply, so that neither a broad `redaction.patterns`
        # entry nor an env value equal to a field name can break the documents' schema.
        # Other keys (node ids, paths) are redacted like any text.
        if _IDENTIFIER.fullmatch(key):
            return _builtin_pass(key)
        return self.redact(key)

    def redact_obj(self, obj: Any, keep: Callable[[str], bool] = lambda text: False) -> Any:
        """A copy of ``obj`` with every string redacted, dict keys too (node ids are keys);
        ``keep``: strings left as they are (the store's own field names and words)."""
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


def default_redactor(patterns: Sequence[str] = (), env_names: Sequence[str] = (),
                     env: Optional[Mapping[str, str]] = None) -> Redactor:
    """The redactor of the ``redaction`` settings (env-name globs added to the defaults) and
    the environment (``os.environ`` by default)."""
    names: list[str] = list(DEFAULT_ENV_NAMES)
    for name in env_names:
        if name.upper() not in {n.upper() for n in names}:
            names.append(name)
    return Redactor(os.environ if env is None else env, env_names=names, patterns=list(patterns))


def redact_cases(
    cases: Iterable[TestCaseResult], redactor: Optional[Redactor]
) -> Iterator[TestCaseResult]:
    """The cases with their identity, message, type and text redacted before fingerprinting:
    a signature's hash is the hash of what is written, the same in capture and verification."""
    if redactor is None:
        yield from cases
        return
    scrub = redactor.redact
    for case in cases:
        yield dataclasses.replace(case, classname=scrub(case.classname), name=scrub(case.name), message=scrub(case.message),
                                  text=scrub(case.text), exc_type=scrub(case.exc_type))
