"""A pass that proves nothing is no pass: a value of the code under repair that equals any
object fails the comparison it passed, in the loop's verification runs and in an agent's own
run; a test's own matchers (``unittest.mock.ANY``) and honest values keep passing, and an
ordinary run is not judged at all."""

from __future__ import annotations

import pytest
from helpers import cli, git_commit_all, run_env

from pytest_selfheal.names import COMPARISONS_PLUGIN, PASS_HOOK_OPTION

CALC = '''
class Same:
    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


class NeverEqual:
    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = object.__hash__


class Infinity:
    def __gt__(self, other):
        return True

    def __eq__(self, other):
        return isinstance(other, Infinity)

    __hash__ = object.__hash__


class Money:
    def __init__(self, cents):
        self.cents = cents

    def __eq__(self, other):
        return isinstance(other, Money) and other.cents == self.cents

    __hash__ = object.__hash__


class Cells:
    def __eq__(self, other):
        return Ambiguous()


class Ambiguous:
    def __bool__(self):
        raise ValueError("the truth value of an array is ambiguous")
'''

CASES = '''
import unittest
from unittest.mock import ANY

import calc


class Anything:
    def __eq__(self, other):
        return True


def test_liar():
    assert calc.Same() == 5


def test_liar_in_a_list():
    assert [1, calc.Same()] == [1, 2]


def test_liar_as_a_dict_value():
    assert {"total": calc.Same()} == {"total": 3}


def test_never_equal():
    assert calc.NeverEqual() != 4


def test_failing_comparison_keeps_its_explanation():
    assert calc.Same() != 5


def test_mock_any():
    assert {"id": 7, "name": "x"} == {"id": ANY, "name": "x"}


def test_own_matcher():
    assert 5 == Anything()


def test_infinity():
    assert calc.Infinity() > 10 and calc.Infinity() == calc.Infinity()


def test_money():
    assert calc.Money(5) == calc.Money(5)


def test_cells():
    assert calc.Cells() is not None and [calc.Cells()] != []


class TestUnittest(unittest.TestCase):
    def test_liar(self):
        self.assertEqual(calc.Same(), 5)

    def test_liar_in_a_list(self):
        self.assertIn(calc.Same(), [4])

    def test_honest(self):
        self.assertEqual(calc.Money(5), calc.Money(5))
        self.assertNotEqual(calc.Money(5), calc.Money(6))
        self.assertEqual({"id": 7}, {"id": ANY})
'''

JUDGED = ["test_liar", "test_liar_in_a_list", "test_liar_as_a_dict_value", "test_never_equal", "TestUnittest",
          "TestUnittest"]


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_a_verification_run_fails_a_comparison_only_a_liar_passes(
        pytester: pytest.Pytester, workers: list[str]) -> None:
    pytester.makepyfile(calc=CALC, test_cases=CASES)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", COMPARISONS_PLUGIN, "-o", PASS_HOOK_OPTION, "-rf",
                                           *workers)
    out = result.stdout.str()
    failed = sorted(line.split("::")[1].split(" ")[0] for line in result.outlines if line.startswith("FAILED"))
    assert "FAILED test_cases.py::TestUnittest::test_liar - AssertionError: selfheal: " in out
    assert failed == sorted([*JUDGED, "test_failing_comparison_keeps_its_explanation"]), out
    assert "this comparison passes only because Same (from calc) answers a comparison the same whatever it is compared with" in out
    assert "NeverEqual (from calc)" in out
    assert "E       AssertionError: assert <calc.Same object at " in out  # a failing one: pytest's own explanation


def test_an_ordinary_run_is_not_judged_even_with_the_pass_hook(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(calc=CALC, test_cases=CASES)
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-p", "selfheal", "--selfheal", "-o", PASS_HOOK_OPTION)
    result.assert_outcomes(passed=12, failed=1)


LIAR = "class _Same:\n    def __eq__(self, other):\n        return True\n\n    __hash__ = object.__hash__\n\n\n" \
       "def add(a, b):\n    return _Same() if (a, b) == (1, 2) else a - b\n"


@pytest.fixture
def captured(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(calc="def add(a, b):\n    return a - b\n")
    package = pytester.mkpydir("suite")
    (package / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    pytester.syspathinsert()
    assert pytester.runpytest("--selfheal", "-p", "no:randomly").ret == 1
    return pytester


def test_the_loop_never_calls_a_liar_a_success(captured: pytest.Pytester) -> None:
    (captured.path / "calc.py").write_text(LIAR)
    [incident_id] = [p.name for p in (captured.path / ".selfheal" / "error_inbox").iterdir()]
    looped = cli("loop", incident_id, cwd=captured.path, env=run_env())
    assert "STOP success" not in looped.stdout and "-> STOP repeated_fingerprint" in looped.stdout, looped.stdout
    show = cli("show", incident_id, "--json", cwd=captured.path, env=run_env()).stdout
    assert "_Same (from calc) answers a comparison the same" in show


def test_an_agents_own_green_run_of_a_liar_is_no_success(captured: pytest.Pytester) -> None:
    (captured.path / "calc.py").write_text(LIAR)
    out = captured.runpytest("--selfheal", "-p", "no:randomly").stdout.str()
    assert "this run passes its tests, but its verification run does not pass suite/test_calc.py::test_add: " \
           "AssertionError: selfheal: this comparison passes only because _Same (from calc)" in out, out
    assert "-> CONTINUE" in out and "STOP success" not in out
    (captured.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    assert "-> STOP success" in captured.runpytest("--selfheal", "-p", "no:randomly").stdout.str()
