"""Classification rules (pure): a rule, the one validator of rules from config and hooks, the
rules of a run; the config's validation needs no classifier."""

from __future__ import annotations

import functools
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from re import Pattern
from typing import TYPE_CHECKING, Any, Optional

from pytest_selfheal.errors import ConfigError, describe_value
from pytest_selfheal.records import models
from pytest_selfheal.records.vocab import FAILURE_TYPES, FailureClass

if TYPE_CHECKING:  # the hook payload's shape; hookspecs (and pluggy) are not loaded to validate
    from pytest_selfheal.hookspecs import ClassificationRule

# (code_fixable, transient, failure_class) of each failure type, unless a rule says otherwise.
TYPE_DEFAULTS: dict[str, tuple[bool, bool, FailureClass]] = {
    models.TEST_ASSERTION: (True, False, models.FAILURE_CLASS_DETERMINISTIC),
    models.DOCTEST_MISMATCH: (True, False, models.FAILURE_CLASS_DETERMINISTIC),
    models.TYPECHECK: (True, False, models.FAILURE_CLASS_DETERMINISTIC),
    models.LINT: (True, False, models.FAILURE_CLASS_DETERMINISTIC),
    models.BUILD_COMPILE: (True, False, models.FAILURE_CLASS_DETERMINISTIC),
    models.TOOLING_ENV: (False, False, models.FAILURE_CLASS_ENVIRONMENT),
    models.TIMEOUT: (False, True, models.FAILURE_CLASS_TRANSIENT),
    models.UNKNOWN: (False, False, models.FAILURE_CLASS_DETERMINISTIC),
}

FAILURE_CLASSES: tuple[FailureClass, ...] = tuple(FailureClass)


@functools.lru_cache(maxsize=512)
def compiled(pattern: str) -> Pattern[str]:
    return re.compile(pattern, re.MULTILINE)


@dataclass(frozen=True)
class Rule:
    """One classification rule: ``pattern`` matched means ``failure_type``; ``None`` flags: the type's defaults."""

    name: str
    pattern: str
    failure_type: str
    code_fixable: Optional[bool] = None
    transient: Optional[bool] = None
    failure_class: Optional[str] = None
    # Speed hint: when non-empty, the pattern is only searched if one of these lowercase
    # substrings occurs in the lowercased text. Every alternative of the pattern must
    # contain one of them (tests/test_classify.py checks the default rules).
    keywords: tuple[str, ...] = ()
    # Derived once at construction (rules are matched thousands of times).
    result: models.Classification = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.failure_type not in TYPE_DEFAULTS:
            raise ValueError(f"rule {self.name!r}: unknown failure type {self.failure_type!r}")
        fixable, transient, failure_class = TYPE_DEFAULTS[self.failure_type]
        if self.failure_class is not None:
            failure_class = FailureClass(self.failure_class)
        elif self.transient:
            failure_class = models.FAILURE_CLASS_TRANSIENT
        object.__setattr__(self, "result", models.Classification(  # a frozen dataclass
            failure_type=self.failure_type,
            code_fixable=fixable if self.code_fixable is None else self.code_fixable,
            transient=transient if self.transient is None else self.transient,
            failure_class=failure_class,
            rule=self.name,
        ))

    @property
    def regex(self) -> Pattern[str]:
        """The compiled pattern, on first use: most rules never get past their keywords."""
        return compiled(self.pattern)


# Each key of a rule object: its type and what an error says was expected.
RULE_KEYS: dict[str, tuple[type, str]] = {
    "name": (str, "a non-empty string"),
    "pattern": (str, "a regular expression"),
    "failure_type": (str, "one of " + ", ".join(FAILURE_TYPES)),
    "code_fixable": (bool, "a boolean (true or false)"),
    "transient": (bool, "a boolean (true or false)"),
    "failure_class": (str, "one of " + ", ".join(FAILURE_CLASSES)),
    "keywords": (list, "a list of non-empty strings"),
}


def _valid(key: str, value: Any) -> bool:
    kind = RULE_KEYS[key][0]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        return False
    if isinstance(value, list):  # keywords
        return all(isinstance(k, str) and k for k in value)
    if key in ("failure_type", "failure_class"):
        return value in (TYPE_DEFAULTS if key == "failure_type" else FAILURE_CLASSES)
    return bool(value) or key != "name"


# A pattern is searched in every failure's text: one longer or with more variable repeats costs too much.
MAX_PATTERN_CHARS = 1000
MAX_PATTERN_REPEATS = 20


def _quantifier(pattern: str, index: int) -> tuple[int, bool]:
    """``(length, variable?)`` of the repeating quantifier at ``index``; ``(0, False)`` for none."""
    if index >= len(pattern):
        return 0, False
    if pattern[index] in "*+":
        return 1, True
    close = pattern.find("}", index)
    if pattern[index] != "{" or close < 0:
        return 0, False
    low, comma, high = (part.strip() for part in pattern[index + 1:close].partition(","))
    if not (low.isdigit() or (comma and low == "")) or not (high.isdigit() or high == ""):
        return 0, False  # not a quantifier: a literal brace
    if not comma:
        return (close - index + 1, False) if int(low) > 1 else (0, False)
    if high == "" or int(high) > int(low or "0"):
        return close - index + 1, True
    return (close - index + 1, False) if int(high) > 1 else (0, False)


def backtracking_problem(pattern: str) -> Optional[str]:
    """Why searching ``pattern`` may take exponential time, or None (a static bound on its shape)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"longer than {MAX_PATTERN_CHARS} characters"
    groups: list[list[bool]] = [[False, False]]  # per open group: holds a variable repeat, holds an alternation
    repeats = 0
    index = 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "\\":
            index += 1  # an escaped character: a literal or a class like \w
        elif char == "[":
            index += pattern.startswith("^", index)
            index += pattern.startswith("]", index)  # a leading ] is a literal
            while index < len(pattern) and pattern[index] != "]":
                index += 2 if pattern[index] == "\\" else 1
            index += 1
        elif char == "(":
            groups.append([False, False])
        elif char == ")" and len(groups) > 1:
            inner_repeat, inner_alternation = groups.pop()
            width, variable = _quantifier(pattern, index)
            if width and (inner_repeat or inner_alternation):
                what = "a repeat" if inner_repeat else "an alternation"
                return (f"a repeated group holds {what} (nested quantifiers backtrack exponentially; "
                        "repeat the group's content once, or make the alternatives exclusive)")
            groups[-1][0] = groups[-1][0] or inner_repeat or variable
            repeats += variable
            index += width
        elif char == "|":
            groups[-1][1] = True
        else:
            width, variable = _quantifier(pattern, index - 1)
            groups[-1][0] = groups[-1][0] or variable
            repeats += variable
            index += max(width - 1, 0)
        if repeats > MAX_PATTERN_REPEATS:
            return f"more than {MAX_PATTERN_REPEATS} variable repeats"
    return None


def regex_problem(pattern: str) -> Optional[str]:
    """Why ``pattern`` is no usable regular expression (it must compile, at a bounded cost), or None."""
    problem = backtracking_problem(pattern)
    if problem is not None:
        return problem
    try:
        # A FutureWarning ("Possible nested set") would print two extra lines on stderr.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled(pattern)
    except re.error as exc:
        return str(exc)
    except (RecursionError, OverflowError, ValueError, MemoryError):
        return "too complex to compile"
    return None


def rule_from_mapping(entry: Any, at: str) -> Rule:
    """The one validator of a classification rule, from config or a hook (ConfigError naming ``at``)."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{at}: expected a rule object {{name, pattern, failure_type}}, got {describe_value(entry)}")
    for key in entry:
        if key not in RULE_KEYS:
            import difflib  # only on this error path: a green run never loads it
            close = difflib.get_close_matches(str(key), list(RULE_KEYS), n=1)
            hint = f'did you mean "{close[0]}"?' if close else f"known keys: {', '.join(RULE_KEYS)}"
            raise ConfigError(f"{at}.{key}: unknown key; {hint}")
    for key in ("name", "pattern", "failure_type"):
        if key not in entry:
            raise ConfigError(f"{at}: missing required key {key!r}")
    for key, value in entry.items():
        if not _valid(key, value):
            raise ConfigError(f"{at}.{key}: expected {RULE_KEYS[key][1]}, got {describe_value(value)}")
    problem = regex_problem(entry["pattern"])
    if problem is not None:
        raise ConfigError(
            f"{at}.pattern: expected a valid regular expression, got {describe_value(entry['pattern'])}: {problem}"
        )
    return Rule(**{**entry, "keywords": tuple(k.lower() for k in entry.get("keywords", []))})


def rules_from_config(rules: Any, where: str = "classification.rules") -> list[Rule]:
    if not isinstance(rules, list):
        raise ConfigError(f"{where}: expected a list of rules, got {type(rules).__name__}")
    return [rule_from_mapping(entry, f"{where}[{index}]") for index, entry in enumerate(rules)]


def parse_hook_rules(hooked: Sequence[ClassificationRule]) -> list[Rule]:
    """The rules the ``pytest_selfheal_classification_rules`` hooks returned, validated like the config's."""
    return rules_from_config(list(hooked))


def rules_for_run(configured: Sequence[Rule], hooked: Sequence[Rule] = ()) -> list[Rule]:
    """The extra rules of a run, hook-provided first: one failure gets one type on every surface."""
    return [*hooked, *configured]
