"""Evidence, not noise: what the capture records and how the plan words it (through pytester)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import git_commit_all

from pytest_selfheal.config.files import load_config
from pytest_selfheal.loop.localise import read_spectrum, read_written, wanted, why_not
from pytest_selfheal.names import LOCALISE_ENV, VERIFYING_ENV
from pytest_selfheal.store.root import Store

# A wrong value computed by a helper; the failing assertion's explanation calls
# Money.__repr__ (and, through it, Money.amount), which no test of the helper needs.
MONEY = '''
def _cents(text):
    whole, _, frac = text.partition(".")
    return int(whole) * 100 + int(frac or 0) * 10  # the bug: "1.05" is 150


class Money:
    def __init__(self, text):
        self.cents = _cents(text)

    @property
    def amount(self):
        return sum(c for c in [self.cents])

    def __eq__(self, other):
        return isinstance(other, Money) and self.cents == other.cents

    def __repr__(self):
        return f"Money({self.amount})"
'''

TESTS = '''
from money import Money

def test_cents():
    assert Money("1.05") == Money("1.050")

def test_whole():
    assert Money("2") == Money("2.0")

def test_amount():
    assert Money("3").amount == 300
'''


def _spectrum(pytester: pytest.Pytester) -> list[dict[str, Any]]:
    pytester.makepyfile(money=MONEY, test_money=TESTS)
    result = pytester.runpytest("--selfheal", "--selfheal-spectrum", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=2)
    (incident,) = (pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json")
    (failure,) = json.loads(incident.read_text())["failures"]
    found: list[dict[str, Any]] = failure["root_cause"]["spectrum"]
    return found


def test_what_only_explains_a_failed_assertion_is_not_evidence(pytester: pytest.Pytester) -> None:
    """The rewritten assertion's repr of its operands runs Money.__repr__ only because the
    test failed (and Money.amount through it): neither is in the spectrum, where __repr__,
    run by the failing test alone, ranked first."""
    assert {s["name"] for s in _spectrum(pytester)} == {"Money.__eq__", "Money.__init__", "_cents"}


def test_a_function_is_keyed_by_its_def_line(pytester: pytest.Pytester) -> None:
    """A property is the line of its def, not of @property; a generator expression is the
    function it is written in, at that function's def."""
    pytester.makepyfile(test_amount_fails='''
from money import Money

def test_amount_of_cents():
    assert Money("1.05").amount == 105
''')
    names = {s["name"]: s["line"] for s in _spectrum_of(pytester, failed=2, passed=2)}
    lines = MONEY.lstrip("\n").splitlines()
    assert lines[names["Money.amount"] - 1].strip() == "def amount(self):"
    assert lines[names["_cents"] - 1].startswith("def _cents")
    assert not any("<genexpr>" in n for n in names)


def test_a_class_made_inside_a_function_is_not_a_suspect(pytester: pytest.Pytester) -> None:
    """A factory builds its class each call: the class body runs, but the suspects are the
    factory and the methods, never the class."""
    pytester.makepyfile(sentinel="def make(name):\n    class Sentinel:\n        def __init__(self):\n"
                                 "            self.name = name\n\n    return Sentinel()\n",
                        test_sentinel="import copy\nfrom sentinel import make\n\n"
                                      "def test_copy():\n    s = make('x')\n    assert copy.copy(s) is s\n\n"
                                      "def test_name():\n    assert make('y').name == 'y'\n")
    pytester.runpytest("--selfheal", "--selfheal-spectrum", "-p", "no:cacheprovider").assert_outcomes(failed=1,
                                                                                                        passed=1)
    (incident,) = (pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json")
    (failure,) = json.loads(incident.read_text())["failures"]
    names = {s["name"]: s["line"] for s in failure["root_cause"]["spectrum"]}
    assert names == {"make": 1, "make.<locals>.Sentinel.__init__": 3}


def _spectrum_of(pytester: pytest.Pytester, *, failed: int, passed: int) -> list[dict[str, Any]]:
    pytester.makepyfile(money=MONEY, test_money=TESTS)
    result = pytester.runpytest("--selfheal", "--selfheal-spectrum", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=failed, passed=passed)
    (incident,) = (pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json")
    return [s for f in json.loads(incident.read_text())["failures"] for s in f["root_cause"]["spectrum"]]


def test_an_exception_raised_in_library_code_is_planned_as_such(pytester: pytest.Pytester) -> None:
    """A TypeError raised inside json by the project's call, and an OSError raised by a C
    call in the project: each action says what was raised and where, not "the failing
    assertion"; a failed assert keeps its wording."""
    pytester.makepyfile(mod="import json, os\n\ndef parse(text):\n    return json.loads(text, object_hook=1)\n\n"
                            "def load(path):\n    return os.stat(path)\n\ndef two():\n    return 3\n")
    pytester.makepyfile(test_mod="from mod import load, parse, two\n\ndef test_parse():\n    parse('{\"a\": {}}')\n\n"
                                 "def test_load():\n    load('/nonexistent/x')\n\ndef test_two():\n    assert two() == 2\n")
    pytester.runpytest("--selfheal", "-p", "no:cacheprovider").assert_outcomes(failed=3)
    (plan,) = (pytester.path / ".selfheal" / "error_plans").glob("*/plan.json")
    titles = sorted(a["title"] for a in json.loads(plan.read_text())["actions"])
    assert titles[0] == "Fix the FileNotFoundError in test_mod.py::test_load: raised in mod.py:7 (load)"
    assert titles[1].startswith("Fix the TypeError in test_mod.py::test_parse: raised in json/")
    assert titles[1].endswith(" from mod.py:4 (parse)") and "(JSONDecoder.raw_decode)" in titles[1]
    assert titles[2] == "Fix the failing assertion in test_mod.py::test_two: two in mod.py (assert 3 == 2)"
    (incident,) = (pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json")
    failures = {f["test"].rsplit(":", 1)[-1]: f["root_cause"] for f in json.loads(incident.read_text())["failures"]}
    assert failures["test_load"]["exception"] == "FileNotFoundError" and "raised" not in failures["test_load"]
    assert "exception" not in failures["test_two"]


def test_a_git_ignored_generated_module_is_never_a_target_path(pytester: pytest.Pytester) -> None:
    """A failure with no evidence targets the modules its test imports, behind the package's
    __init__ too: the tracked ones, not the generated, git-ignored _version.py."""
    pytester.makepyfile(**{"pkg/__init__": "from ._version import VERSION\nfrom .core import *\n",
                           "pkg/_version": "VERSION = '1.0'\n", "pkg/core": "LIMIT = 3\n",
                           "test_pkg": "import pkg\n\ndef test_limit():\n    assert pkg.LIMIT == 2\n"})
    (pytester.path / ".gitignore").write_text("pkg/_version.py\n.selfheal/\n")
    git_commit_all(pytester.path)
    pytester.runpytest("--selfheal", "-p", "no:cacheprovider").assert_outcomes(failed=1)
    (plan,) = (pytester.path / ".selfheal" / "error_plans").glob("*/plan.json")
    (action,) = json.loads(plan.read_text())["actions"]
    assert action["target_paths"] == ["pkg/__init__.py", "pkg/core.py"]


def test_what_only_words_a_unittest_failure_is_not_evidence(pytester: pytest.Pytester) -> None:
    """unittest's assertEqual runs Money.__repr__ (and Money.amount) for its message only."""
    pytester.makepyfile(money=MONEY, test_money='''
import unittest
from money import Money

class TestMoney(unittest.TestCase):
    def test_cents(self):
        self.assertEqual(Money("1.05"), Money("1.050"))

    def test_whole(self):
        self.assertEqual(Money("2"), Money("2.0"))

    def test_amount(self):
        self.assertEqual(Money("3").amount, 300)
''')
    result = pytester.runpytest("--selfheal", "--selfheal-spectrum", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=2)
    (incident,) = (pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json")
    (failure,) = json.loads(incident.read_text())["failures"]
    assert {s["name"] for s in failure["root_cause"]["spectrum"]} == {"Money.__eq__", "Money.__init__", "_cents"}


# A lexer whose escape handling is wrong: the failing tests catch its error and word it,
# so the capture traces nothing to the project, and the error's methods run only in them.
LEXER = '''
class LexError(ValueError):
    def __init__(self, position, text):
        super().__init__(text)
        self.position = position

    def __str__(self):
        return f"at {self.position}: {self.args[0]}"


def _until(text, start, quote):
    end = text.index(quote, start + 1)  # the bug: an escaped quote ends the string
    return text[start + 1:end], end + 1


def lex(text):
    if text.startswith(("'", '"')):
        value, end = _until(text, 0, text[0])
        if end != len(text):
            raise LexError(end, "unexpected text after the string")
        return value
    return text
'''

LEXER_TESTS = '''
import pytest
from lexer import lex

@pytest.mark.parametrize("text, value", [("'a'", "a"), ("b", "b"), ('"c"', "c"),
                                         ("'d\\\\'e'", "d\\\\'e"), ('"f\\\\"g"', 'f\\\\"g')])
def test_lex(text, value):
    try:
        got = lex(text)
    except ValueError as e:
        raise AssertionError(f"{text} does not lex: {e}")
    assert got == value
'''


def test_an_exception_class_s_methods_are_not_suspects_and_need_no_evidence(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The two escaped strings fail through LexError, which the tests word: the capture has
    no root-cause evidence, yet a reader's localisation runs, and ranks _until (which the
    failing tests ran with the escape) over LexError.__init__ and __str__, never suspects."""
    pytester.makepyfile(lexer=LEXER, test_lexer=LEXER_TESTS)
    pytester.runpytest("--selfheal", "-p", "no:cacheprovider").assert_outcomes(failed=2, passed=3)
    store = Store(pytester.path / ".selfheal")
    (incident_id,) = store.incident_ids()
    incident = store.read_incident(incident_id)
    assert all(f.root_cause is None or not f.root_cause.frame for f in incident.failures)
    config = load_config(pytester.path)
    assert why_not(incident, config, 0) is None
    assert wanted(incident, config, 0, read=True) and not wanted(incident, config, 0, read=False)  # a reader only
    out = tmp_path / "spectrum.json"
    monkeypatch.setenv(VERIFYING_ENV, "1")
    monkeypatch.setenv(LOCALISE_ENV, str(out))
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(failed=2, passed=3)
    spectrum = read_spectrum(read_written(out))
    assert len(spectrum.top) == 2
    for refs in spectrum.top.values():
        names = [r.name for r in refs]
        assert names[0] == "_until" and not any(n.startswith("LexError.") for n in names), names


# A template renderer whose tag error is worded badly. render() words every error on its way
# out (_locate); _number falls back to _word on a ValueError it handles itself; a missing
# name's KeyError becomes a TemplateError in _convert.
TEMPLATE = '''
class TemplateError(Exception):
    pass


def _number(text):
    try:
        return int(text)
    except ValueError:
        return _word(text)


def _word(text):
    return len(text)


def _parse(text):
    if text.startswith("{"):
        raise TemplateError("bad tag")  # the bug: the message should name the tag
    if text.startswith("$"):
        return {}[text[1:]]
    return _number(text)


def _locate(text, exc):
    exc.args = (f"{exc.args[0]} in {text!r}",)


def _convert(name):
    raise TemplateError(f"no name {name}")


def render(text):
    try:
        return _parse(text)
    except TemplateError as exc:
        _locate(text, exc)
        raise
    except KeyError as exc:
        _convert(exc.args[0])
'''

TEMPLATE_TESTS = '''
import pytest
from template import TemplateError, render

def test_tag_is_named():
    with pytest.raises(TemplateError) as caught:
        render("{x}")
    assert "tag x" in str(caught.value)

def test_tag_renders():
    assert render("{y}") == "y"

def test_number():
    assert render("12") == 12

def test_word():
    assert render("ab") == 2

def test_missing_name():
    with pytest.raises(TemplateError, match="no name"):
        render("$k")
'''


def test_what_only_delivers_an_error_the_tests_saw_is_not_evidence(pytester: pytest.Pytester) -> None:
    """_locate runs only while an error leaves the project for a test (caught there, or
    failing it): not in the failing tests' spectrum nor in the passing ones'. _word, run
    while handling an error the project keeps, and _convert, which raises the error the test
    sees, are evidence like any call."""
    pytester.makepyfile(template=TEMPLATE, test_template=TEMPLATE_TESTS)
    result = pytester.runpytest("--selfheal", "--selfheal-spectrum", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=2, passed=3)
    (incident,) = (pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json")
    for failure in json.loads(incident.read_text())["failures"]:
        names = [s["name"] for s in failure["root_cause"]["spectrum"]]
        assert names[0] == "_parse" and "_locate" not in names, names
    (passing,) = (pytester.path / ".selfheal" / "error_runs").glob("*/spectrum.json")
    ran = {test.rsplit("::", 1)[-1]: {name for _, name, _ in keys}
           for test, keys in json.loads(passing.read_text())["tests"].items()}
    assert ran["test_word"] == {"render", "_parse", "_number", "_word"}
    assert ran["test_missing_name"] == {"render", "_parse", "_convert"}
