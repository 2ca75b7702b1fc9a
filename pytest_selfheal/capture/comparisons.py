"""A pass that proves nothing (edge: a pytest plugin in the runs that may be a verdict).

Code under repair can make a failing ``assert add(2, 3) == 5`` pass without computing 5: it
returns a value whose ``__eq__`` says yes to everything. A verification run rewrites its
asserts with pytest's ``enable_assertion_pass_hook``, so pytest hands every passing
comparison's operands to ``pytest_assertrepr_compare`` of this module, which the run loads
with ``-p`` (never the entry-point plugin, so never registered twice). There, a value (or an
item of a list, tuple, set or dict operand) whose class the code under repair defines, and
which equals an object it has never seen or is unequal to itself, fails the test.
unittest's ``assertEqual``, ``assertNotEqual``, ``assertIn`` and ``assertNotIn`` are judged
the same way after they pass.

Only the code under repair's classes are judged: a test's own matcher (``unittest.mock.ANY``,
a class in a test file) equals anything by design, and is sealed with the tests.
"""

from __future__ import annotations

import functools
import operator
import os
import sys
import unittest
from collections.abc import Callable, Iterator
from typing import Any, Optional

import pytest

from pytest_selfheal.analysis.frames import is_test_file

_ITEMS_LIMIT = 1000  # items of container operands looked at per comparison
_INSTALLED = ("site-packages", "dist-packages")


def _lies(value: object) -> bool:
    """``value`` equals an object it has never seen, or is unequal to itself."""
    unseen = object()  # no honest value equals it
    try:
        return bool(value == unseen) or not bool(value != unseen) or bool(value != value)
    except Exception:  # an array's ambiguous truth, a comparison that raises: no lie told
        return False


def _values(operand: object) -> Iterator[object]:
    """``operand`` and the items of the builtin containers inside it, at most a thousand."""
    pending, seen = [operand], 0
    while pending and seen < _ITEMS_LIMIT:
        value = pending.pop()
        seen += 1
        yield value
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            pending.extend(value)


_UNDER_REPAIR: dict[type, bool] = {}


def _under_repair(cls: type, rootdir: str) -> bool:
    """``cls`` is defined in a module of the rootdir that is no test file and not installed."""
    known = _UNDER_REPAIR.get(cls)
    if known is None:
        prefix = os.path.join(os.path.realpath(rootdir), "")
        path = getattr(sys.modules.get(cls.__module__), "__file__", None)
        real = os.path.realpath(path) if isinstance(path, str) else ""
        rel = real[len(prefix):] if real.startswith(prefix) else ""
        known = _UNDER_REPAIR[cls] = bool(rel) and not is_test_file(rel) \
            and not any(part in _INSTALLED for part in rel.split(os.sep))
    return known


def liar(left: object, right: object, rootdir: str) -> Optional[object]:
    """The first value of either operand that the code under repair made answer alike to anything."""
    for operand in (left, right):
        for value in _values(operand):
            if _under_repair(type(value), rootdir) and _lies(value):
                return value
    return None


_HOLDS: dict[str, Callable[[Any, Any], object]] = {
    "==": operator.eq, "!=": operator.ne, "in": lambda a, b: a in b, "not in": lambda a, b: a not in b}


def judge(op: str, left: object, right: object, rootdir: str) -> None:
    """Fail a comparison ``left op right`` that passed only because a liar took part."""
    holds = _HOLDS.get(op)
    try:
        passed = holds is not None and bool(holds(left, right))
    except Exception:
        return
    value = liar(left, right, rootdir) if passed else None
    if value is not None:
        cls = type(value)
        raise AssertionError(
            f"selfheal: this comparison passes only because {cls.__qualname__} (from {cls.__module__}) "
            "answers a comparison the same whatever it is compared with: the pass proves nothing")


@pytest.hookimpl(tryfirst=True)
def pytest_assertrepr_compare(config: pytest.Config, op: str, left: Any, right: Any) -> Optional[list[str]]:
    """Called on a passing comparison too (the pass hook)."""
    judge(op, left, right, str(config.rootpath))
    return None


def pytest_assertion_pass() -> None:
    """Nothing: implemented so that pytest shows this plugin every passing comparison."""


# unittest's comparing asserts, judged after they pass: pytest does not rewrite them.
_UNITTEST = {"assertEqual": "==", "assertNotEqual": "!=", "assertIn": "in", "assertNotIn": "not in"}
_ORIGINALS: dict[str, Callable[..., None]] = {}


def _judged(method: Callable[..., None], op: str, rootdir: str) -> Callable[..., None]:
    @functools.wraps(method)
    def judged(self: unittest.TestCase, first: object, second: object, *args: Any, **kwargs: Any) -> None:
        method(self, first, second, *args, **kwargs)
        judge(op, first, second, rootdir)
    return judged


def pytest_configure(config: pytest.Config) -> None:
    for name, op in _UNITTEST.items():
        _ORIGINALS[name] = getattr(unittest.TestCase, name)
        setattr(unittest.TestCase, name, _judged(_ORIGINALS[name], op, str(config.rootpath)))


def pytest_unconfigure() -> None:
    for name, method in _ORIGINALS.items():
        setattr(unittest.TestCase, name, method)
    _ORIGINALS.clear()
