"""classify.py: data-driven failure classification."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, Optional

import pytest

from pytest_selfheal.analysis.classify import (
    DEFAULT_RULES,
    Rule,
    classify,
)
from pytest_selfheal.analysis.rules import TYPE_DEFAULTS, rules_from_config
from pytest_selfheal.config.settings import ConfigLayer, merge_layers
from pytest_selfheal.errors import ConfigError
from pytest_selfheal.records import models
from pytest_selfheal.records.vocab import FAILURE_TYPES


def tc(message: str = "", exc_type: str = "", text: str = "") -> models.TestCaseResult:
    return models.TestCaseResult(
        classname="m", name="t", outcome="failed", message=message, exc_type=exc_type, text=text
    )


CASES = [
    # TEST_ASSERTION: assertions, expectation matchers, runtime exceptions in code under test.
    (tc("assert 3 == 4\n +  where 3 = f()"), "TEST_ASSERTION", "assertion"),
    (tc("3.5 != 3", "AssertionError"), "TEST_ASSERTION", "assertion"),
    (tc("", text="Error: expect(received).toBe(expected) // Object.is equality"), "TEST_ASSERTION", "assertion"),
    (tc("expected: <3> but was: <2>", "org.opentest4j.AssertionFailedError"), "TEST_ASSERTION", "assertion"),
    (tc("expected 100 to equal 107", "AssertionError"), "TEST_ASSERTION", "assertion"),
    (tc("Failed: DID NOT RAISE <class 'ValueError'>"), "TEST_ASSERTION", "assertion"),
    (tc("[XPASS(strict)] known bug"), "TEST_ASSERTION", "assertion"),
    (tc("Failed", text="    calc_test.go:21: Divide(7, 2) = 3; want 3.5"), "TEST_ASSERTION", "go_test_failure"),
    (tc("Failed", text="    x_test.go:9: expected 3, got 2"), "TEST_ASSERTION", "expected_actual"),
    (tc("TypeError: 'NoneType' object is not subscriptable"), "TEST_ASSERTION", "runtime_exception"),
    (tc("KeyError: 'missing'"), "TEST_ASSERTION", "runtime_exception"),
    (tc("Cannot invoke \"String.length()\"", "java.lang.NullPointerException"), "TEST_ASSERTION", "runtime_exception"),
    (tc("Runtime error", text="panic: runtime error: index out of range [3] with length 3"),
     "TEST_ASSERTION", "runtime_exception"),
    (tc("OrderRejected: total below minimum", "shop.OrderRejectedError"), "TEST_ASSERTION", "uncaught_exception"),
    # TYPECHECK: static checkers only.
    (tc("src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'."), "TYPECHECK", "typecheck"),
    (tc("app.py:3: error: Incompatible return value type (got \"int\", expected \"str\")  [return-value]"),
     "TYPECHECK", "typecheck"),
    # LINT.
    (tc("src/app.py:1:80: E501 line too long (88 > 79 characters)"), "LINT", "lint_code"),
    (tc("would reformat src/app.py"), "LINT", "lint_tool"),
    (tc("", text="  3:10  error  'x' is assigned a value but never used  no-unused-vars"), "LINT", "eslint_stylish"),
    # BUILD_COMPILE: syntax, imports of names, collection errors, compilers.
    (tc("collection failure", text="E     File \"t.py\", line 1\nE   SyntaxError: invalid syntax"),
     "BUILD_COMPILE", "syntax_error"),
    (tc("ImportError: cannot import name 'x' from 'pkg' (/a/pkg/__init__.py)"), "BUILD_COMPILE", "import_name_error"),
    (tc("collection failure", text="E   ZeroDivisionError: division by zero"), "BUILD_COMPILE", "pytest_collection_error"),
    (tc("failed on setup with \"file /a/t.py, line 3\n  fixture 'db' not found\""), "BUILD_COMPILE",
     "pytest_fixture_not_found"),
    (tc("Build error", text="./broken.go:5:2: undefined: helper"), "BUILD_COMPILE", "compile_error"),
    (tc("", text="[ERROR] /src/A.java:[3,8] cannot find symbol"), "BUILD_COMPILE", "compile_error"),
    (tc("Error: Cannot find module './cart'"), "BUILD_COMPILE", "relative_module_missing"),
    # TOOLING_ENV: missing module/command/credentials, services, permissions, disk.
    (tc("ModuleNotFoundError: No module named 'numpy'"), "TOOLING_ENV", "missing_module"),
    (tc("Error: Cannot find module 'stripe'"), "TOOLING_ENV", "missing_node_module"),
    (tc("FileNotFoundError: [Errno 2] No such file or directory: 'docker'"), "TOOLING_ENV", "missing_command"),
    (tc("", text="/bin/sh: 1: terraform: not found"), "TOOLING_ENV", "missing_command"),
    (tc("botocore.exceptions.NoCredentialsError: Unable to locate credentials"), "TOOLING_ENV", "missing_credentials"),
    (tc("HTTPError: 401 Unauthorized for url https://api.example.com"), "TOOLING_ENV", "missing_credentials"),
    (tc("ConnectionRefusedError: [Errno 111] Connection refused"), "TOOLING_ENV", "service_unreachable"),
    (tc("Error: connect ECONNREFUSED 127.0.0.1:5432"), "TOOLING_ENV", "service_unreachable"),
    (tc("Failed", text="    db_test.go:9: dial tcp 127.0.0.1:5432: connect: connection refused"),
     "TOOLING_ENV", "service_unreachable"),
    (tc("PermissionError: [Errno 13] Permission denied: '/var/lib/app'"), "TOOLING_ENV", "permission_denied"),
    (tc("OSError: [Errno 28] No space left on device"), "TOOLING_ENV", "disk_full"),
    (tc("ConnectionResetError: [Errno 104] Connection reset by peer"), "TOOLING_ENV", "network_transient"),
    # TIMEOUT.
    (tc("Failed: Timeout >5.0s"), "TIMEOUT", "pytest_timeout"),
    (tc("", text='thrown: "Exceeded timeout of 5000 ms for a test.'), "TIMEOUT", "jest_timeout"),
    (tc("Timeout of 2000ms exceeded. For async tests", "Error"), "TIMEOUT", "mocha_timeout"),
    (tc("Runtime error", text="panic: test timed out after 10m0s"), "TIMEOUT", "go_test_timeout"),
    (tc("TimeoutError: operation timed out"), "TIMEOUT", "timeout"),
    (tc("Read timed out", "java.net.SocketTimeoutException"), "TIMEOUT", "timeout"),
    (tc("Failed", text="    x_test.go:61: context deadline exceeded"), "TIMEOUT", "timeout"),
    # UNKNOWN.
    (tc("something odd happened"), "UNKNOWN", ""),
    (tc(""), "UNKNOWN", ""),
]


@pytest.mark.parametrize("case, failure_type, rule", CASES)
def test_default_rules(case: models.TestCaseResult, failure_type: str, rule: str) -> None:
    result = classify(case)
    assert (result.failure_type, result.rule) == (failure_type, rule)
    fixable, transient, failure_class = TYPE_DEFAULTS[failure_type]
    if rule != "network_transient":
        assert (result.code_fixable, result.transient, result.failure_class) == (fixable, transient, failure_class)


def test_flags_and_failure_classes() -> None:
    assert asdict(classify(tc("assert 1 == 2"))) == {
        "failure_type": "TEST_ASSERTION", "code_fixable": True, "transient": False,
        "failure_class": "deterministic", "rule": "assertion",
    }  # fmt: skip
    env = classify(tc("ModuleNotFoundError: No module named 'x'"))
    assert (env.code_fixable, env.transient, env.failure_class) == (False, False, "environment")
    timeout = classify(tc("Failed: Timeout >1.0s"))
    assert (timeout.code_fixable, timeout.transient, timeout.failure_class) == (False, True, "transient")
    reset = classify(tc("ECONNRESET"))
    assert (reset.failure_type, reset.transient, reset.failure_class) == ("TOOLING_ENV", True, "transient")
    unknown = classify(tc("???"))
    assert (unknown.code_fixable, unknown.transient, unknown.failure_class) == (False, False, "deterministic")


def test_headline_wins_over_incidental_words_in_the_traceback() -> None:
    text = "def test_x():\n    requests.get(url, timeout=5)\n>   assert r.ok\nE   assert False"
    assert classify(tc("assert False", text=text)).failure_type == "TEST_ASSERTION"
    # With nothing in the headline, the text decides.
    assert classify(tc("", text="step 3 timed out")).failure_type == "TIMEOUT"


def test_extra_rules_come_first() -> None:
    mine = Rule("my_module", r"No module named 'myproj", models.BUILD_COMPILE)
    case = tc("ModuleNotFoundError: No module named 'myproj.core'")
    assert classify(case).failure_type == "TOOLING_ENV"
    result = classify(case, [mine])
    assert (result.failure_type, result.rule, result.code_fixable) == ("BUILD_COMPILE", "my_module", True)


def test_rule_overrides_and_transient_implies_class() -> None:
    rule = Rule("flaky_api", r"503", models.TEST_ASSERTION, code_fixable=False, transient=True)
    result = classify(tc("AssertionError: got 503"), [rule])
    assert (result.code_fixable, result.transient, result.failure_class) == (False, True, "transient")
    pinned = Rule("x", r"x", models.TIMEOUT, failure_class="environment")
    assert classify(tc("x"), [pinned]).failure_class == "environment"
    with pytest.raises(ValueError, match="unknown failure type"):
        Rule("bad", "x", "NOPE")


def test_rules_from_config() -> None:
    rules = rules_from_config(
        [
            {"name": "vendor_down", "pattern": "(?i)vendor api unavailable", "failure_type": "TOOLING_ENV",
             "transient": True, "keywords": ["Vendor API"]},
            {"name": "golden", "pattern": r"golden file \S+ differs", "failure_type": "TEST_ASSERTION",
             "code_fixable": True},
        ]
    )  # fmt: skip
    assert [r.name for r in rules] == ["vendor_down", "golden"]
    assert rules[0].keywords == ("vendor api",)
    result = classify(tc("RuntimeError: Vendor API unavailable"), rules)
    assert (result.rule, result.failure_class) == ("vendor_down", "transient")


@pytest.mark.parametrize(
    "rules, message",
    [
        ({"name": "x"}, "classification.rules: expected a list of rules, got dict"),
        (["x"], 'classification.rules[0]: expected a rule object {name, pattern, failure_type}, got "x"'),
        ([{"name": "x", "pattern": "x"}], "classification.rules[0]: missing required key 'failure_type'"),
        ([{"name": "x", "pattern": "x", "failure_type": "LINT", "colour": 1}],
         "classification.rules[0].colour: unknown key; known keys: name, pattern, failure_type, code_fixable, "
         "transient, failure_class, keywords"),
        ([{"name": "x", "pattern": "x", "failure_type": "LINT", "transient": "yes"}],
         'classification.rules[0].transient: expected a boolean (true or false), got "yes"'),
        ([{"name": 3, "pattern": "x", "failure_type": "LINT"}], "classification.rules[0].name: expected a non-empty string, got 3"),
        ([{"name": "x", "pattern": "x", "failure_type": "FLAKY"}],
         "classification.rules[0].failure_type: expected one of TEST_ASSERTION, DOCTEST_MISMATCH, TYPECHECK, LINT, BUILD_COMPILE, "
         "TOOLING_ENV, TIMEOUT, UNKNOWN, got \"FLAKY\""),
        ([{"name": "x", "pattern": "x", "failure_type": "LINT", "failure_class": "weird"}],
         "classification.rules[0].failure_class: expected one of deterministic, transient, environment, got \"weird\""),
        ([{"name": "x", "pattern": "x", "failure_type": "LINT", "keywords": [""]}],
         "classification.rules[0].keywords: expected a list of non-empty strings, got a list"),
    ],
)
def test_rules_from_config_errors(rules: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        rules_from_config(rules)
    assert str(info.value) == message


def test_rules_from_config_bad_regex() -> None:
    with pytest.raises(ConfigError, match=r'^classification.rules\[0\].pattern: expected a valid regular expression, '
                                          r'got "\(unclosed": missing \)'):
        rules_from_config([{"name": "x", "pattern": "(unclosed", "failure_type": "LINT"}])


@pytest.mark.parametrize(
    "rule",
    [
        {"name": "", "pattern": "x", "failure_type": "LINT"},  # hooks used to accept an empty name
        {"name": "x", "pattern": "x", "failure_type": "LINT", "keywords": "db"},
        {"name": "x", "pattern": "(", "failure_type": "LINT"},
        {"name": "x", "pattern": "x", "failure_type": "LINT", "transient": 1},
    ],
)
def test_config_and_hook_rules_share_one_validator(rule: dict[str, Any]) -> None:
    """A rule the config refuses is refused from a hook too, with the same words."""
    with pytest.raises(ConfigError) as from_hook:
        rules_from_config([rule])
    with pytest.raises(ConfigError) as from_config:
        merge_layers([ConfigLayer.of("project.json", {"classification": {"rules": [rule]}})])
    assert str(from_config.value) == f"project.json: ralf_lite.{from_hook.value}"


def test_config_rules_may_carry_keywords_like_hook_rules() -> None:
    rule = {"name": "db", "pattern": "locked", "failure_type": "TIMEOUT", "keywords": ["locked"]}
    effective = merge_layers([ConfigLayer.of("project.json", {"classification": {"rules": [rule]}})])
    assert effective.get("classification.rules") == [rule]
    assert rules_from_config(effective.get("classification.rules"))[0].keywords == ("locked",)


# -- keyword pre-filter consistency ---------------------------------------------------------


def _alternatives(pattern: str) -> list[str]:
    """Top-level ``|`` alternatives of a regex (escapes, classes and groups respected)."""
    parts, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


_GROUP = re.compile(r"^(?:\\b|\^|\s)*\((?:\?:|\?i:)?(.*)\)(?:\\b|\$)*$", re.DOTALL)


def _uncovered(pattern: str, keywords: tuple[str, ...]) -> Optional[str]:
    for alternative in _alternatives(pattern):
        group = _GROUP.match(alternative)
        if group and len(_alternatives(group.group(1))) > 1:
            missing = _uncovered(group.group(1), keywords)
            if missing:
                return missing
            continue
        # Look-arounds hold no required text: drop them, then unescape punctuation.
        literal = re.sub(r"\(\?<?[!=](?:\\.|[^)])*\)", "", alternative)
        literal = re.sub(r"\\([^A-Za-z0-9])", r"\1", literal).lower()
        if not any(k in literal for k in keywords):
            return alternative
    return None


@pytest.mark.parametrize("rule", DEFAULT_RULES, ids=lambda r: r.name)
def test_every_alternative_of_a_default_rule_has_a_keyword(rule: Rule) -> None:
    assert rule.keywords, "default rules carry keywords (speed)"
    assert all(k == k.lower() for k in rule.keywords)
    assert _uncovered(rule.pattern, rule.keywords) is None


@pytest.mark.parametrize("case, failure_type, rule", CASES)
def test_keywords_never_hide_a_match(case: models.TestCaseResult, failure_type: str, rule: str) -> None:
    # The same verdict with the keyword pre-filter switched off.
    plain = [Rule(r.name, r.pattern, r.failure_type, r.code_fixable, r.transient, r.failure_class) for r in DEFAULT_RULES]
    unfiltered = classify(case, plain)
    assert (unfiltered.failure_type, unfiltered.rule) == (failure_type, rule)


def test_the_default_rules_give_every_failure_type_but_unknown() -> None:
    assert {r.result.failure_type for r in DEFAULT_RULES} == set(FAILURE_TYPES) - {models.UNKNOWN}
    assert all(r.result.rule == r.name for r in DEFAULT_RULES)
