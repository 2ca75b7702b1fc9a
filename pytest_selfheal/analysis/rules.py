"""Classification rules (pure): what a rule is, the one validator of rules from config and
hooks, and the rules of a run. The matching itself is ``classify.py``'s; the config's
validation needs only this module (a green ``pytest --selfheal`` run imports no classifier).
"""

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
    """One classification rule: if ``pattern`` matches, the failure is ``failure_type``.

    ``pattern`` is a Python regular expression searched with ``re.MULTILINE`` (use
    ``(?i)`` for case-insensitive). ``None`` flags take the failure type's defaults
    (:data:`TYPE_DEFAULTS`); a rule with ``transient=True`` and no ``failure_class``
    gets ``transient``.
    """

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
        # A frozen dataclass: derived attributes are set through object.__setattr__.
        object.__setattr__(self, "result", self._classification())

    @property
    def regex(self) -> Pattern[str]:
        """The compiled pattern, compiled on first use (memoised by :func:`compiled`).

        Most rules never get past their keywords, and compiling all the default rules
        up front cost every failing ``pytest --selfheal`` run. Patterns from config
        and hooks are compiled when validated (``rules.regex_problem``).
        """
        return compiled(self.pattern)

    def classification(self) -> models.Classification:
        """The classification this rule gives when it matches."""
        return self.result

    def _classification(self) -> models.Classification:
        fixable, transient, failure_class = TYPE_DEFAULTS[self.failure_type]
        if self.code_fixable is not None:
            fixable = self.code_fixable
        if self.transient is not None:
            transient = self.transient
        if self.failure_class is not None:
            failure_class = FailureClass(self.failure_class)
        elif self.transient:
            failure_class = models.FAILURE_CLASS_TRANSIENT
        return models.Classification(
            failure_type=self.failure_type,
            code_fixable=fixable,
            transient=transient,
            failure_class=failure_class,
            rule=self.name,
        )


RULE_KEYS = {
    "name": str,
    "pattern": str,
    "failure_type": str,
    "code_fixable": bool,
    "transient": bool,
    "failure_class": str,
    "keywords": list,
}
_REQUIRED_KEYS = ("name", "pattern", "failure_type")
_EXPECTED = {
    "name": "a non-empty string",
    "pattern": "a regular expression",
    "failure_type": "one of " + ", ".join(FAILURE_TYPES),
    "code_fixable": "a boolean (true or false)",
    "transient": "a boolean (true or false)",
    "failure_class": "one of " + ", ".join(FAILURE_CLASSES),
    "keywords": "a list of non-empty strings",
}


def regex_problem(pattern: str) -> Optional[str]:
    """Why ``pattern`` is not a usable regular expression, or None when it is."""
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
    """The one validator of a classification rule, from config or from a hook.

    ``entry`` is ``{name, pattern, failure_type, code_fixable?, transient?,
    failure_class?, keywords?}``. Raises :class:`errors.ConfigError` naming ``at`` and the
    key for a missing or unknown key, a wrong type, an empty name, an unknown failure type
    or class, or a pattern that is not a valid regular expression.
    """
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{at}: expected a rule object {{name, pattern, failure_type}}, got {describe_value(entry)}")
    for key in entry:
        if key not in RULE_KEYS:
            import difflib  # only on this error path: a green run never loads it
            close = difflib.get_close_matches(str(key), list(RULE_KEYS), n=1)
            hint = f'did you mean "{close[0]}"?' if close else f"known keys: {', '.join(RULE_KEYS)}"
            raise ConfigError(f"{at}.{key}: unknown key; {hint}")
    for key in _REQUIRED_KEYS:
        if key not in entry:
            raise ConfigError(f"{at}: missing required key {key!r}")
    for key, value in entry.items():
        expected = RULE_KEYS[key]
        if not isinstance(value, expected) or (expected is not bool and isinstance(value, bool)):
            raise ConfigError(f"{at}.{key}: expected {_EXPECTED[key]}, got {describe_value(value)}")
    if not entry["name"]:
        raise ConfigError(f"{at}.name: expected {_EXPECTED['name']}, got {describe_value(entry['name'])}")
    if entry["failure_type"] not in TYPE_DEFAULTS:
        raise ConfigError(
            f"{at}.failure_type: expected one of {', '.join(FAILURE_TYPES)}, "
            f"got {describe_value(entry['failure_type'])}"
        )
    if "failure_class" in entry and entry["failure_class"] not in FAILURE_CLASSES:
        raise ConfigError(
            f"{at}.failure_class: expected one of {', '.join(FAILURE_CLASSES)}, "
            f"got {describe_value(entry['failure_class'])}"
        )
    keywords = entry.get("keywords", [])
    if not all(isinstance(k, str) and k for k in keywords):
        raise ConfigError(f"{at}.keywords: expected {_EXPECTED['keywords']}")
    problem = regex_problem(entry["pattern"])
    if problem is not None:
        raise ConfigError(
            f"{at}.pattern: expected a valid regular expression, got {describe_value(entry['pattern'])}: {problem}"
        )
    return Rule(
        name=entry["name"],
        pattern=entry["pattern"],
        failure_type=entry["failure_type"],
        code_fixable=entry.get("code_fixable"),
        transient=entry.get("transient"),
        failure_class=entry.get("failure_class"),
        keywords=tuple(k.lower() for k in keywords),
    )


def rules_from_config(rules: Any, where: str = "classification.rules") -> list[Rule]:
    """Validate a list of rules (the config key ``classification.rules``, or hook rules)."""
    if not isinstance(rules, list):
        raise ConfigError(f"{where}: expected a list of rules, got {type(rules).__name__}")
    return [rule_from_mapping(entry, f"{where}[{index}]") for index, entry in enumerate(rules)]


def parse_hook_rules(hooked: Sequence[ClassificationRule]) -> list[Rule]:
    """The rules ``pytest_selfheal_classification_rules`` returned (hook payloads), validated
    like the config's; parsed once per run, where the hook is called."""
    return rules_from_config(list(hooked))


def rules_for_run(configured: Sequence[Rule], hooked: Sequence[Rule] = ()) -> list[Rule]:
    """The extra rules of a run: hook-provided first (:func:`parse_hook_rules`), then the
    configured ones (``Settings.classification_rules``, validated by the config merge).

    Capture and every verification run build their rules here, so one failure gets one
    type (and one fingerprint) on every surface.
    """
    return [*hooked, *configured]
