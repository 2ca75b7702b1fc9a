"""Stable fingerprints of failures (pure; docs/fingerprints.md): the test identity and the
failure's *first stable line*, normalised so that what changes between runs and machines
does not change the fingerprint:

    signature   = "<failure_type> | <classname::name> | <normalised first line>"
    fingerprint = sha256(f"{SCHEME}:{signature}")[:12]

Bump :data:`SCHEME` whenever a change here can change any signature.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Sequence
from re import Match, Pattern
from typing import NamedTuple, Union

from pytest_selfheal.analysis.doctests import doctest_line, strip_worker_header
from pytest_selfheal.records import models

SCHEME = 2  # version of the normalisation scheme, stored with every fingerprint (2: unordered reprs)
HASH_LENGTH = 12  # hex characters of sha256 kept

MAX_LINE = 1000  # characters of the first stable line that are normalised
MAX_NORMALISED = 500  # characters of the normalised line kept in the signature

# Messages that say nothing about the failure: look into the text instead.
_GENERIC_MESSAGES = frozenset({
    "", "failure", "error", "errored", "test failed", "exception",
    "failed",  # go-junit-report, gotestsum
    "build error",  # go-junit-report: a package that did not compile
    "runtime error",  # go-junit-report: a panic outside a test
    "collection failure",  # pytest collection errors
})

TEXT_SCAN = 64 * 1024  # characters of failure text searched for the failure line

# pytest: <error message='failed on setup with "ValueError: boom"'>
_PYTEST_PHASE = re.compile(r'^failed on (?:setup|teardown|call) with "(.*?)"?\s*$', re.DOTALL)

_EXC_NAME = r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failed|Warning)\b"

# A pytest longrepr exception line: "E   ModuleNotFoundError: No module named 'x'".
_PYTEST_E_LINE = re.compile(rf"^E\s+({_EXC_NAME}.*)$", re.MULTILINE)
# The last line of a Python traceback: the exception, unindented.
_PY_EXC_LINE = re.compile(rf"^({_EXC_NAME}.*)$", re.MULTILINE)
# go test's own log lines: "    calc_test.go:21: Divide(7, 2) = 3; want 3.5".
_GO_TEST_LINE = re.compile(r"^\s*([\w.-]+_test\.go:\d+: \S.*)$", re.MULTILINE)
# Lines of free text that look like the error ("Error Trace:" is testify's header, not the error).
_ERRORISH = re.compile(
    r"\w*(?:Error|Exception)\b(?!\s+Trace)|error:|\bFAIL\b|panic:|\bassert|[Ee]xpected|Timeout"
)
_RUNNER_NOISE = ("=== RUN", "=== PAUSE", "=== CONT", "--- FAIL:", "Traceback (most recent")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _text_line(text: str, exc_type: str) -> str:
    head = text[:TEXT_SCAN]
    # pytest longrepr: the last "E   SomeError: …" line is the exception raised.
    found = _PYTEST_E_LINE.findall(head)
    if found:
        return str(found[-1]).strip()
    python_traceback = "Traceback (most recent call last)" in head
    if exc_type:
        # The line starting with the exception type: Java prints it first, Python last.
        starts = (exc_type, exc_type.rsplit(".", 1)[-1])
        typed = [stripped for stripped in (line.strip() for line in head.splitlines()) if stripped.startswith(starts)]
        if typed:
            return typed[-1] if python_traceback else typed[0]
    if python_traceback:
        found = _PY_EXC_LINE.findall(head)
        if found:
            return str(found[-1]).strip()
    go_line = _GO_TEST_LINE.search(head)
    if go_line:
        return go_line.group(1).strip()
    fallback = ""
    for line in head.splitlines():
        stripped = line.strip()
        if stripped and _ERRORISH.search(stripped):
            if not stripped.startswith(_RUNNER_NOISE):
                return stripped
            fallback = fallback or stripped
    return fallback or _first_line(head)


def first_stable_line(case: models.TestCaseResult) -> str:
    """The one line that identifies a failure, before normalisation (docs/fingerprints.md)."""
    doctest = doctest_line(case.message) or doctest_line(case.text[:TEXT_SCAN])
    if doctest is not None:
        return doctest
    message = strip_worker_header(case.message.strip()).strip()
    phase = _PYTEST_PHASE.match(message)
    if phase:
        message = phase.group(1).strip()
    line = _first_line(message)
    exc_type = case.exc_type.strip()
    if line.lower() not in _GENERIC_MESSAGES:
        if exc_type and not line.startswith((exc_type, exc_type.rsplit(".", 1)[-1])):
            return f"{exc_type}: {line}"
        return line
    if case.text.strip():
        return _text_line(strip_worker_header(case.text), exc_type)
    return exc_type or line


# Normalisation. Each rule is (pattern, replacement); order matters and is documented in
# docs/fingerprints.md. Placeholders are <UPPER> words: no rule matches inside them.

Replacement = Union[str, Callable[[Match[str]], str]]
_MMSS = r":[0-5]\d:[0-5]\d"
_TS_TIME = rf"\d{{1,2}}{_MMSS}(?:[.,]\d+)?"
_TS_ZONE = r"(?:\s?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2})(?![\w<]))?"
_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_WEEKDAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"

# Characters that may appear in a path segment (no spaces: messages rarely quote them).
_SEG = r"[\w.@%+~=-]+"


def _ip(match: Match[str]) -> str:
    # A port follows the address: "1.2.3.4:80" or "[::1]:80" (IPv6 colons are inside []).
    found = match.group(0)
    return "<IP>:<PORT>" if ":" in found[found.rfind("]") + 1:] else "<IP>"


# What may stand before ":<line>" in a file reference: "x.py", "Foo.java", "<frozen x>".
_FILE_BEFORE = re.compile(r"(?:\w\.[A-Za-z]\w{0,9}|>)\Z")


def _file_line(match: Match[str]) -> str:
    start = match.start()
    if not _FILE_BEFORE.search(match.string, max(0, start - 12), start):
        return match.group(0)
    return ":<N>" * match.group(0).count(":")


def _duration_or_number(match: Match[str]) -> str:
    return "<N>" if match.group("dur") is None else "<DUR>"


def _hash(match: Match[str]) -> str:
    found = match.group(0)
    # Only a mix of digits and letters is an id ("deadbeefcafe" is not; numbers: their own rule).
    if found.isdigit() or not any(c.isdigit() for c in found):
        return found
    return "<HASH>"


class _Rule(NamedTuple):
    """One normalisation, tried only when cheap necessary conditions hold (most lines need a few)."""

    chars: frozenset[str]  # characters a match always contains
    needles: tuple[str, ...]  # one of these substrings occurs in a match (empty: no condition)
    digits: bool  # a match always contains a digit
    pattern: Callable[[], Pattern[str]]  # the compiled regex, compiled on first use
    replacement: Replacement


def _keep_group_then(placeholder: str) -> Callable[[Match[str]], str]:
    """Replacement keeping group 1: much cheaper than re's template expansion, run per match."""

    def replace(match: Match[str]) -> str:
        return match.group(1) + placeholder

    return replace


# Needles: substrings that a match must contain.
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_COLON_MINUTES = tuple(f":{d}" for d in "012345")
_DOT_DIGITS = tuple(f".{d}" for d in "0123456789")


def _rule(
    chars: str, needles: tuple[str, ...], digits: bool, pattern: str, replacement: Replacement
) -> _Rule:
    # Compiled when first needed: most lines meet the conditions of a few rules only.
    return _Rule(frozenset(chars), needles, digits, functools.lru_cache(maxsize=None)(lambda: re.compile(pattern)), replacement)


# Conventions of the patterns below:
# * Each starts with a literal or a class, word-boundary checks as look-behinds after it
#   (_start): the engine skips ahead in C to the positions that can start a match.
# * A placeholder counts as a word for boundaries (_END): a replacement never turns its
#   neighbours into new matches, so one pass is enough and normalise is idempotent.
_END = r"(?!\w)(?!<[A-Z])"


def _start(first: str) -> str:
    """``first`` (one character or class) not preceded by a word or a placeholder."""
    return rf"{first}(?<!\w{first})(?<![A-Z]>{first})"


_HEX = "[0-9a-fA-F]"
# Before a path: not inside a word, a relative path, a URL or right after a placeholder.
_PATH_BEFORE = r"(?<![\w.:/\\~$-]{c})(?<![A-Z]>{c})"
_S_DIGIT = _start(r"\d")
_S_HEX = _start(_HEX)
_PB_SLASH = _PATH_BEFORE.format(c="/")
_PB_LETTER = _PATH_BEFORE.format(c="[A-Za-z]")
_PB_BACKSLASH = _PATH_BEFORE.format(c=r"\\")
_TS_TAIL = rf"\s{_TS_TIME}{_TS_ZONE}(?:\s\d{{4}})?{_END}"

_RULES: tuple[_Rule, ...] = (
    # 1. A home directory on its own (a file below it is a path: next rules).
    _rule("/", ("/home/", "/Users/", "/root"), False,
          r"/(?<![\w.:/\\~-]/)(?<![A-Z]>/)(?:home/|Users/)[\w.-]+(?![\w.-]*[/\\])(?!<[A-Z])"
          r"|/(?<![\w.:/\\~-]/)(?<![A-Z]>/)root(?![\w/\\])(?!<[A-Z])", "<HOME>"),
    _rule("\\", ("\\Users\\",), False,
          r"[A-Za-z](?<![\w.:/\\~-][A-Za-z])(?<![A-Z]>[A-Za-z]):\\Users\\[\w.-]+(?![\w.-]*[/\\])(?!<[A-Z])", "<HOME>"),
    # 2. file:// URIs and absolute paths (POSIX, ~/, $HOME/, Windows, UNC; tmp dirs too): the
    #    directory part becomes <PATH>/, the file name stays so different files differ.
    _rule(":/", ("file:",), False, rf"{_start('f')}ile:/+(?:{_SEG}/)*", "<PATH>/"),
    _rule("/", ("~/", "$HOME/"), False, rf"(?<![\w.:/\\~$-])(?<![A-Z]>)(?:~|\$HOME)/(?:{_SEG}/)*", "<PATH>/"),
    _rule("/", (), False, rf"/{_PB_SLASH}(?:{_SEG}/)+", "<PATH>/"),
    _rule(":", (":\\", ":/"), False, rf"[A-Za-z]{_PB_LETTER}:[\\/](?:{_SEG}[\\/])*", "<PATH>/"),
    _rule("\\", ("\\\\",), False, rf"\\{_PB_BACKSLASH}\\{_SEG}\\(?:{_SEG}\\)*", "<PATH>/"),
    # 3. Random names of tempfile (tmpXXXXXXXX) and pytest/xdist numbered dirs.
    _rule("tmp", ("tmp",), False, rf"{_start('t')}mp[a-z0-9_]{{8}}{_END}", "<TMP>"),
    _rule("", ("pytest-", "gw"), True, rf"({_start('p')}ytest-|{_start('p')}open-gw|{_start('g')}w)\d+{_END}",
          _keep_group_then("<N>")),
    # 4. Timestamps and dates: ISO 8601 (and bare dates), RFC 2822 / syslog, bare times.
    _rule("-", ("-0", "-1"), True,  # the month
          rf"{_S_DIGIT}\d{{3}}-[01]\d-[0-3]\d(?:[T ]{_TS_TIME})?{_TS_ZONE}{_END}", "<TS>"),
    # Weekday first, day first, month first.
    _rule(": ", _MONTHS, True,
          rf"{_start(_WEEKDAY)},?\s(?:\d{{1,2}}\s{_MONTH}|{_MONTH}\s+\d{{1,2}})(?:\s\d{{4}})?{_TS_TAIL}"
          rf"|{_S_DIGIT}\d?\s{_MONTH}(?:\s\d{{4}})?{_TS_TAIL}"
          rf"|{_start(_MONTH)}\s+\d{{1,2}}(?:\s\d{{4}})?{_TS_TAIL}", "<TS>"),
    _rule(":", _COLON_MINUTES, True, rf"{_S_DIGIT}\d?{_MMSS}(?:[.,]\d+)?{_END}", "<TS>"),
    # 5. UUIDs (before hex hashes and numbers).
    _rule("-", (), False, rf"{_S_HEX}{_HEX}{{7}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}{_END}", "<UUID>"),
    # 6. Memory addresses (0x7f3a…): 6+ hex digits, so small hex constants stay.
    _rule("0x", ("0x",), True, rf"{_start('0')}x{_HEX}{{6,}}{_END}", "<ADDR>"),
    # 7. Hex hashes and ids: 8+ hex characters with at least one digit and one letter.
    _rule("", (), True, rf"{_S_HEX}{_HEX}{{7,}}{_END}", _hash),
    # 8. IPs and ports: IPv4 (+port), bracketed IPv6 (+port), localhost:N, "port 5432".
    _rule(".", _DOT_DIGITS, True, rf"{_S_DIGIT}\d{{0,2}}\.\d{{1,3}}\.\d{{1,3}}\.\d{{1,3}}(?::\d{{1,5}})?{_END}", _ip),
    _rule("[:]", (), False, rf"\[(?:{_HEX}{{0,4}}:){{2,7}}{_HEX}{{0,4}}\](?::\d{{1,5}}(?!\d))?", _ip),
    _rule(":", ("localhost:", ".local:"), True, rf"(?<![\w-])(?<![A-Z]>)(localhost|[\w-]+\.local):\d{{1,5}}{_END}",
          _keep_group_then(":<PORT>")),
    _rule("ort", ("ort",), True, rf"({_start('[Pp]')}ort[\s=:#]*)\d{{1,5}}{_END}", _keep_group_then("<PORT>")),
    # 9. PIDs.
    _rule("", ("pid", "PID", "Pid"), True, rf"({_start('[pP]')}(?:id|ID)[\s=:#]*)\d+{_END}", _keep_group_then("<PID>")),
    _rule("rocess", ("rocess",), True, rf"({_start('[Pp]')}rocess\s+)\d+{_END}", _keep_group_then("<PID>")),
    # 10. Line numbers in words: "line 42", "lines 3-5".
    _rule("ine", ("ine",), True, rf"({_start('[Ll]')}ines?\s+)\d+(?:\s*-\s*\d+)?", _keep_group_then("<N>")),
    # 11. Durations (1.23s, 2m30s) and 12. any remaining number of 5+ digits: one regex,
    #     one scan (a unit makes a duration).
    _rule("", (), True,
          rf"{_S_DIGIT}\d*(?:(?P<dur>(?:\.\d+)?\s?(?:ns|us|µs|ms|s|sec|secs|seconds?|mins?"
          rf"|minutes?|h|hrs?|hours?)|m\d+(?:\.\d+)?s|h\d+m(?:\d+(?:\.\d+)?s)?)|(?<=\d{{5}})){_END}",
          _duration_or_number),
    # 13. Line (and column) numbers of file references: "x.py:42", "x.js:5:17" (last).
    _rule(":", (), True, rf":\d+(?::\d+)*{_END}", _file_line),
)

_DIGIT = re.compile(r"\d")


def _apply_rules(text: str) -> str:
    # The conditions are decided once, on the input: replacements add no character or
    # substring a later rule could use.
    chars = frozenset(text)
    has_digit = _DIGIT.search(text) is not None
    for needs, needles, digits, pattern, replacement in _RULES:
        if (digits and not has_digit) or not needs <= chars:
            continue
        if needles:
            for needle in needles:
                if needle in text:
                    break
            else:
                continue
        text = pattern().sub(replacement, text)
    return text


_OPENERS = {"[": "]", "{": "}", "(": ")"}
_MAX_ITEMS = 200  # a longer literal is left as it is: bounded work per line


def _literals(text: str) -> list[tuple[int, int, str, list[str]]]:
    """Top-level bracketed literals of ``text``: ``(start, end, opener, items split at its commas)``."""
    found: list[tuple[int, int, str, list[str]]] = []
    stack: list[tuple[int, str, list[int]]] = []  # (start, opener, comma positions at depth 1)
    quote = ""
    index = 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in _OPENERS:
            stack.append((index, char, []))
        elif char in ")]}":
            if not stack or _OPENERS[stack[-1][1]] != char:
                return found  # unbalanced: not a repr, leave the line alone
            start, opener, commas = stack.pop()
            if not stack and len(commas) < _MAX_ITEMS:
                bounds = [start, *commas, index]
                items = [text[bounds[i] + 1:bounds[i + 1]].strip() for i in range(len(bounds) - 1)]
                found.append((start, index + 1, opener, [item for item in items if item]))
        elif char == "," and len(stack) == 1:
            stack[-1][2].append(index)
        index += 1
    return found


def _is_dict(items: Sequence[str]) -> bool:
    for item in items:
        depth, quote = 0, ""
        for char in item:
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char in "([{":
                depth += 1
            elif char in ")]}":
                depth -= 1
            elif char == ":" and depth == 0:
                return True
    return False


def unordered(text: str, depth: int = 0) -> str:
    """Sort what hash order decides (docs/fingerprints.md "Unordered reprs")."""
    if depth > 8 or not any(opener in text for opener in "[{("):
        return text
    literals = _literals(text)
    if not literals:
        return text
    replaced: dict[int, str] = {}
    sequences: dict[tuple[str, ...], list[int]] = {}
    for number, (start, end, opener, raw) in enumerate(literals):
        items = [unordered(item, depth + 1) for item in raw]
        literals[number] = (start, end, opener, items)
        is_set = opener == "{" and not _is_dict(items)
        if (opener in "[(" or is_set) and any("..." in item for item in items):
            # pytest elided the middle of a long repr: which items show depends on the order.
            replaced[number] = opener + "..." + _OPENERS[opener]
            continue
        if is_set and items:
            items = sorted(items)
        # "f(1, 2)" and "x[1, 2]" are a call and a subscript, not a tuple and a list.
        elif opener in "[(" and len(items) > 1 and (
                start == 0 or not (text[start - 1].isalnum() or text[start - 1] in "_)]'\"")):
            sequences.setdefault(tuple(sorted(items)), []).append(number)
        if items != raw:
            replaced[number] = opener + ", ".join(items) + _OPENERS[opener]
    for key, numbers in sequences.items():
        if len(numbers) > 1 and len({tuple(literals[n][3]) for n in numbers}) > 1:
            for n in numbers:
                opener = literals[n][2]
                replaced[n] = opener + ", ".join(key) + _OPENERS[opener]
    if not replaced:
        return text
    parts: list[str] = []
    last = 0
    for number, (start, end, _, _) in enumerate(literals):
        if number in replaced:
            parts.append(text[last:start])
            parts.append(replaced[number])
            last = end
    parts.append(text[last:])
    return "".join(parts)


# Failures repeat (one broken fixture fails a hundred tests alike): a bounded memo.
@functools.lru_cache(maxsize=4096)
def normalise(text: str) -> str:
    """``text`` with what varies between runs and machines replaced by placeholders; idempotent."""
    # str.split() splits on exactly what \s matches, and is much cheaper than a regex.
    return unordered(" ".join(_apply_rules(" ".join(text.split())).split()))


def signature_and_hash(failure_type: str, test: str, line: str) -> tuple[str, str]:
    signature = f"{failure_type} | {test} | {normalise(line[:MAX_LINE])[:MAX_NORMALISED]}"
    digest = hashlib.sha256(f"{SCHEME}:{signature}".encode("utf-8", "surrogatepass"))
    return signature, digest.hexdigest()[:HASH_LENGTH]
