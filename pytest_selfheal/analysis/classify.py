"""Data-driven failure classification (pure; docs/fingerprints.md): rules are tried against the
*headline* first, then the failure text, so that incidental words deep in a traceback (a
``timeout=`` argument) do not outvote what the failure says."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from itertools import compress
from typing import Optional

from pytest_selfheal.analysis.doctests import DOCTEST_MARK
from pytest_selfheal.analysis.fingerprint import first_stable_line
from pytest_selfheal.analysis.rules import Rule as Rule
from pytest_selfheal.records import models

TEXT_HEAD = 16 * 1024  # characters of the failure text searched by the second tier
MAX_MESSAGE = 4096  # characters of the message attribute in the headline tier

_T = models.TEST_ASSERTION
_TC = models.TYPECHECK
_L = models.LINT
_B = models.BUILD_COMPILE
_E = models.TOOLING_ENV
_TO = models.TIMEOUT

# Exceptions code under test raises at run time: a bug in the code, not the environment.
# Patterns start with a literal (boundaries as look-behinds after it): the engine skips ahead.
_RUNTIME_EXCEPTIONS = (
    "TypeError", "ValueError", "KeyError", "IndexError", "AttributeError", "NameError",
    "ZeroDivisionError", "RuntimeError", "NotImplementedError", "UnboundLocalError",
    "RecursionError", "LookupError", "ArithmeticError", "OverflowError", "StopIteration",
    "FileNotFoundError", "ReferenceError", "RangeError", "NullPointerException",
    "IllegalArgumentException", "IllegalStateException", "ClassCastException",
    "IndexOutOfBoundsException", "UnsupportedOperationException", "NumberFormatException",
    "NoSuchElementException", "ArithmeticException", "ConcurrentModificationException",
)  # fmt: skip

# Ordered: the first matching rule wins, so specific rules come before general ones.
DEFAULT_RULES: tuple[Rule, ...] = (
    # -- DOCTEST_MISMATCH (first: a doctest's expected or got output may hold any text) -----
    Rule("doctest_mismatch", rf"^{DOCTEST_MARK}: >>>", models.DOCTEST_MISMATCH, keywords=("doctestfailure",)),
    # -- TIMEOUT ---------------------------------------------------------------------------
    Rule("pytest_timeout", r"Failed: Timeout >|\+{5,} Timeout \+{5,}", _TO, keywords=("timeout",)),
    Rule("jest_timeout", r"Exceeded timeout of \d+\s?ms", _TO, keywords=("exceeded timeout",)),
    Rule("mocha_timeout", r"Timeout of \d+\s?ms exceeded", _TO, keywords=("timeout of",)),
    Rule("go_test_timeout", r"panic: test timed out after", _TO, keywords=("timed out after",)),
    Rule("timeout", r"TimeoutError|TimeoutException|TimeoutExpired|ReadTimeout|ConnectTimeout"
         r"|DeadlineExceeded|socket\.timeout|t(?<!\wt)imed?[\s-]?out\b|T(?<!\wT)imed?[\s-]?[Oo]ut\b"
         r"|TIMED?[\s-]?OUT\b|context deadline exceeded",
         _TO, keywords=("timeout", "deadlineexceeded", "time", "deadline exceeded")),
    # -- TOOLING_ENV -----------------------------------------------------------------------
    # xdist's workers collected different tests: the error names a worker, not code.
    Rule("xdist_collection_mismatch", r"Different tests were collected between gw\d+ and gw\d+", _E,
         keywords=("different tests were collected",)),
    Rule("missing_module", r"ModuleNotFoundError: No module named|No module named '", _E,
         keywords=("no module named",)),
    Rule("missing_node_module", r"Cannot find module '[^'./]", _E, keywords=("cannot find module",)),
    Rule("missing_command", r"command not found|: not found$|No such file or directory: '[^'/\\.]+'$"
         r"|executable file not found in \$PATH|is not recognized as an internal or external command",
         _E, keywords=("command not found", ": not found", "no such file or directory", "executable file not found",
                       "is not recognized as an internal")),
    Rule("missing_credentials", r"NoCredentialsError|Unable to locate credentials|\b401 Unauthorized\b"
         r"|(?i:authentication failed|invalid credentials|missing credentials|could not read Username)"
         r"|Permission denied \(publickey",
         _E, keywords=("nocredentialserror", "unable to locate credentials", "401 unauthorized",
                       "authentication failed", "invalid credentials", "missing credentials",
                       "could not read username", "permission denied (publickey")),
    Rule("network_transient", r"ECONNRESET|EAI_AGAIN|(?i:connection reset by peer|temporary failure in name resolution)"
         r"|\b50[234] (?:Bad Gateway|Service Unavailable|Gateway Time-?out)\b"
         r"|\b429 Too Many Requests\b|(?i:rate limit exceeded)",
         _E, transient=True, keywords=("connection reset by peer", "econnreset", "temporary failure in name resolution",
                                       "eai_again", "bad gateway", "service unavailable", "gateway time",
                                       "too many requests", "rate limit exceeded")),
    Rule("service_unreachable", r"ConnectionRefusedError|ECONNREFUSED|getaddrinfo ENOTFOUND"
         r"|(?i:connection refused|could not connect to server|name or service not known"
         r"|nodename nor servname|network is unreachable|no route to host)",
         _E, keywords=("connection refused", "connectionrefusederror", "econnrefused", "could not connect to server",
                       "name or service not known", "nodename nor servname", "enotfound",
                       "network is unreachable", "no route to host")),
    Rule("permission_denied", r"PermissionError|EACCES|EPERM\b|(?i:permission denied|operation not permitted)", _E,
         keywords=("permission", "eacces", "operation not permitted", "eperm")),
    Rule("disk_full", r"ENOSPC|\[Errno 28\]|(?i:no space left on device|disk quota exceeded)", _E,
         keywords=("no space left", "enospc", "disk quota exceeded", "[errno 28]")),
    Rule("runtime_version", r"The engine \"node\" is incompatible|Unsupported engine|requires a different Python"
         r"|requires Python ['\"]?[<>=]|UnsupportedClassVersionError",
         _E, keywords=("engine", "requires a different python", "requires python", "classversion")),
    # -- BUILD_COMPILE ---------------------------------------------------------------------
    Rule("syntax_error", r"\b(?:SyntaxError|IndentationError|TabError)\b", _B,
         keywords=("syntaxerror", "indentationerror", "taberror")),
    Rule("import_name_error", r"ImportError: cannot import name|ImportError while importing", _B,
         keywords=("importerror",)),
    Rule("relative_module_missing", r"Cannot find module '\.|Module not found: Error", _B,
         keywords=("cannot find module '.", "module not found: error")),
    Rule("pytest_collection_error", r"^collection failure$|ERROR collecting|\bcollection error", _B,
         keywords=("collection failure", "error collecting", "collection error")),
    Rule("pytest_fixture_not_found", r"fixture '[^']+' not found", _B, keywords=("fixture '",)),
    Rule("compile_error", r"error: could not compile|error\[E\d{4}\]|cannot find symbol|COMPILATION ERROR"
         r"|Compilation failure|\[build failed\]|^\S+\.go:\d+:\d+: |undefined: \w"
         r"|error CS\d{4}|fatal error: .*\.h: No such file|^Build error$",
         _B, keywords=("build error", "could not compile", "error[e", "cannot find symbol", "compilation",
                       "[build failed]", ".go:", "undefined: ", "error cs", "fatal error: ")),
    # -- TYPECHECK (static checkers; a runtime TypeError is a code bug, see below) --------
    Rule("typecheck", r"\berror TS\d{4}\b|Incompatible types|Incompatible return value type"
         r"|: error: .*\[[a-z][a-z-]*\]$|is not assignable to (?:type|parameter)"
         r"|\bmypy\b.*\berror|pyright|reportGeneralTypeIssues|Found \d+ errors? in \d+ files?",
         _TC, keywords=("error ts", "incompatible", ": error: ", "is not assignable to", "mypy", "pyright",
                        "reportgeneraltypeissues", "found ")),
    # -- LINT ------------------------------------------------------------------------------
    # flake8/ruff/pylint "path:line:col: E501 …" lines.
    Rule("lint_code", r":\d+:\d+: [A-Z]{1,3}\d{3,4}\b", _L, keywords=(": ",)),
    Rule("lint_tool", r"\b(?:ruff|flake8|pylint|eslint|stylelint|prettier|isort)\b|would reformat", _L,
         keywords=("ruff", "flake8", "pylint", "eslint", "stylelint", "prettier", "isort", "would reformat")),
    # eslint's "stylish" format: "  1:10  error  'x' is defined but never used  no-unused-vars".
    Rule("eslint_stylish", r"^ *\d+:\d+ *  error  .+  [\w@/-]+$|^ *\d+:\d+ *  warning  .+  [\w@/-]+$", _L,
         keywords=("  error  ", "  warning  ")),
    # -- TEST_ASSERTION --------------------------------------------------------------------
    Rule("assertion", r"AssertionError|AssertionFailedError|ComparisonFailure|AssertionFailure"
         r"|a(?<!\wa)ssert |expect\(.*\)\.|\.toBe\w*\(|\.toEqual\(|\.toStrictEqual\("
         r"|\.toMatch\w*\(|\.toContain\w*\(|\.toThrow\w*\(|\.toHaveBeenCalled\w*\("
         r"|Error Trace:|Not equal:|F(?<![^\n]F)ailed: |DID NOT RAISE|XPASS\(strict\)",
         _T, keywords=("assert", "comparisonfailure", "expect(", "tobe", "toequal", "tostrictequal", "tomatch",
                       "tocontain", "tothrow", "tohavebeencalled", "error trace:", "not equal:", "failed: ",
                       "did not raise", "xpass(strict)")),
    # chai/testify/go style "expected X … got/but was Y".
    Rule("expected_actual", r"[Ee](?<!\w[Ee])xpected\b.*\b(?i:got|but was|but got|to equal|to be|received|actual)\b",
         _T, keywords=("xpected",)),
    Rule("go_test_failure", r"^\s*\w+_test\.go:\d+: |^--- FAIL: ", _T, keywords=("_test.go:", "--- fail: ")),
    Rule("runtime_exception", "|".join(f"{name}\\b" for name in _RUNTIME_EXCEPTIONS)
         + "|panic: |nil pointer dereference|index out of range",
         _T, keywords=("error", "exception", "stopiteration", "panic: ", "nil pointer dereference",
                       "index out of range")),
    # Any other named exception raised by the code under test is a code bug too.
    Rule("uncaught_exception", r"^\s*(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)\b", _T,
         keywords=("error", "exception")),
)

UNKNOWN_CLASSIFICATION = Rule("", "", models.UNKNOWN).result


def _first_match(rules: Sequence[Rule], haystack: str) -> Optional[Rule]:
    lowered = haystack.lower()
    # Cheap substring pre-check: most rules are ruled out without a regex.
    return next((rule for rule in rules if (not rule.keywords or any(k in lowered for k in rule.keywords))
                 and rule.regex.search(haystack)), None)


# The default rules' keywords, checked once per text, and the rules each lets through.
_DEFAULT_KEYWORDS: tuple[str, ...] = tuple(sorted({k for r in DEFAULT_RULES for k in r.keywords}))
_RULES_OF_KEYWORD: dict[str, tuple[int, ...]] = {
    k: tuple(i for i, r in enumerate(DEFAULT_RULES) if k in r.keywords) for k in _DEFAULT_KEYWORDS
}


def _default_match(haystack: str) -> Optional[Rule]:
    lowered = haystack.lower()
    # compress/map keep the 100-odd substring checks in C; a handful of rules remain to try.
    candidates: set[int] = set()
    for keyword in compress(_DEFAULT_KEYWORDS, map(lowered.__contains__, _DEFAULT_KEYWORDS)):
        candidates.update(_RULES_OF_KEYWORD[keyword])
    for index in sorted(candidates):
        rule = DEFAULT_RULES[index]
        if rule.regex.search(haystack):
            return rule
    return None  # every default rule has keywords (tests/test_classify.py)


# Failures repeat (one broken fixture fails a hundred tests alike): a memo of the headline tier.
_default_headline_match = functools.lru_cache(maxsize=4096)(_default_match)


def _match(extra_rules: Sequence[Rule], haystack: str, *, headline: bool) -> Optional[Rule]:
    rule = _first_match(extra_rules, haystack) if extra_rules else None
    return rule or (_default_headline_match(haystack) if headline else _default_match(haystack))


def classify(
    case: models.TestCaseResult,
    extra_rules: Sequence[Rule] = (),
    *,
    headline: Optional[str] = None,
) -> models.Classification:
    """The classification of the first matching rule, else UNKNOWN; ``headline``: the case's first stable line."""
    if headline is None:
        headline = first_stable_line(case)
    message = case.message[:MAX_MESSAGE]
    if headline and message.startswith(headline):
        # pytest: the first line of the message *is* the headline; no need to scan it twice.
        head = f"{case.exc_type}\n{message}"
    else:
        head = f"{case.exc_type}\n{message}\n{headline}"
    rule = _match(extra_rules, head, headline=True)
    if rule is None and case.text:
        rule = _match(extra_rules, case.text[:TEXT_HEAD], headline=False)
    return rule.result if rule is not None else UNKNOWN_CLASSIFICATION
