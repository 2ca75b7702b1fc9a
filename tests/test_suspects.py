"""Suspects: the buggy function first, one action per fault, `file:line` and code in the plan.

A one-character bug in a cache's shared ``__setitem__`` (its eviction bound) surfaces as
``IndexError`` in two ``popitem``s, as ``KeyError`` in ``__missing__`` and as wrong lengths
in the tests themselves: many symptoms, one buggy function.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from pytest_selfheal.cli.main import main
from pytest_selfheal.mcp_server.digest import incident_blocks
from pytest_selfheal.plan.build import build_plan, render_plan_md
from pytest_selfheal.plan.groups import group_by_root_cause
from pytest_selfheal.repair.prompt import build_prompt
from pytest_selfheal.report.incident_view import incident_view
from pytest_selfheal.store.root import Store
from pytest_selfheal.plan.suspects import (
    EvidenceKind,
    excerpt,
    ochiai,
    rank_groups,
    spectrum_evidence,
    spectrum_scores,
)

CACHE = '''
class Cache:
    def __init__(self, maxsize):
        self.maxsize = maxsize
        self._data = {}
        self._order = []

    def __setitem__(self, key, value):
        if key not in self._data:
            while len(self._data) >= self.maxsize - 1:  # the bug: the bound is maxsize
                self.popitem()
            self._order.append(key)
        self._data[key] = value

    def __getitem__(self, key):
        if key in self._data:
            return self._data[key]
        return self.__missing__(key)

    def __missing__(self, key):
        raise KeyError(key)

    def __len__(self):
        return len(self._data)

    def get(self, key, default=None):
        return self._data.get(key, default)

    def popitem(self):
        key = self._order.pop(0)
        return key, self._data.pop(key)


class LRUCache(Cache):
    def popitem(self):
        key = self._order.pop()
        return key, self._data.pop(key)


class FIFOCache(Cache):
    pass


def percent(value):
    """The value as a percentage.

    >>> percent(0.5)
    '50%'
    """
    return f"{value * 10:.0f}%"
'''

TESTS = '''
import pytest
from cache import Cache, FIFOCache, LRUCache, percent

@pytest.mark.parametrize("cls", [LRUCache, FIFOCache])
def test_one_slot(cls):
    c = cls(1)
    c["a"] = 1
    assert c["a"] == 1

@pytest.mark.parametrize("cls", [Cache, LRUCache, FIFOCache])
def test_full_keeps_all(cls):
    c = cls(2)
    c["a"] = 1
    c["b"] = 2
    assert len(c) == 2

def test_lookup_after_fill():
    c = FIFOCache(2)
    c["a"] = 1
    c["b"] = 2
    assert c["a"] == 1

def test_small_fill_passes():
    c = Cache(10)
    c["a"] = 1
    assert c.get("a") == 1

def test_empty_get_passes():
    assert Cache(3).get("x") is None

def test_percent_of_a_whole():
    assert percent(1) == "100%"
'''


def ref(path: str, name: str, line: Optional[int] = None) -> Dict[str, Any]:
    return {"path": path, "name": name, **({"line": line} if line is not None else {})}


def failure(nodeid: str, message: str, **evidence: Any) -> Dict[str, Any]:
    return {"nodeid": nodeid, "test": nodeid, "failure_type": "TEST_ASSERTION", "message": message,
            "signature": f"TEST_ASSERTION | {nodeid} | {message}", "fingerprint": nodeid[-8:],
            "code_fixable": True, "root_cause": evidence}


# The cheap evidence of the same fault: popitem frames under __setitem__, and tests that only
# name a subclass of Cache.
SHARED_CALLEE = [
    failure("tests/test_c.py::test_lru", "IndexError: pop from empty list",
            frame=ref("cache.py", "LRUCache.popitem", 34), stack=[ref("cache.py", "Cache.__setitem__", 10)]),
    failure("tests/test_c.py::test_fifo", "IndexError: pop from empty list",
            frame=ref("cache.py", "Cache.popitem", 29), stack=[ref("cache.py", "Cache.__setitem__", 10)]),
    failure("tests/test_c.py::test_base", "IndexError: pop from empty list",
            frame=ref("cache.py", "Cache.popitem", 29), stack=[ref("cache.py", "Cache.__setitem__", 10)]),
    failure("tests/test_c.py::test_len_lru", "assert 1 == 2",
            calls=[{**ref("cache.py", "LRUCache"), "bases": ["cache.py::Cache"]}]),
    failure("tests/test_c.py::test_len_fifo", "assert 1 == 2",
            calls=[{**ref("cache.py", "FIFOCache"), "bases": ["cache.py::Cache"]}]),
]


def test_a_shared_callee_on_every_path_is_the_one_suspect_of_one_group() -> None:
    before = group_by_root_cause(SHARED_CALLEE, lambda f: f["message"])
    assert len(before) == 3  # two popitem frames and the classes' most shared call: three actions for one bug
    ranked = rank_groups(before)
    assert len(ranked) == 1
    (only,) = ranked
    assert len(only.group.members) == 5
    top = only.suspects[0]
    assert (top.path, top.name, top.line, top.evidence) == ("cache.py", "Cache.__setitem__", 10, EvidenceKind.STACK)
    assert top.failures == 5 and top.score == pytest.approx(ochiai(3 + 2 * 0.5, 5))
    assert [s.name for s in only.suspects[1:]] == ["Cache.popitem", "LRUCache.popitem", "LRUCache", "FIFOCache"]


def test_a_frame_never_votes_for_the_test_s_other_calls() -> None:
    """A test that calls add and sub and fails inside sub says nothing against add."""
    failures = [
        failure("t.py::test_x", "boom", frame=ref("m.py", "sub", 3), calls=[ref("m.py", "add", 1), ref("m.py", "sub", 2)]),
        failure("t.py::test_y", "wrong", calls=[ref("m.py", "add", 1)]),
        failure("t.py::test_z", "wrong", calls=[ref("m.py", "add", 1)]),
    ]
    ranked = rank_groups(group_by_root_cause(failures, lambda f: f["message"]))
    # Two faults, the larger first.
    assert [(r.group.name, len(r.group.members)) for r in ranked] == [("add", 2), ("sub", 1)]


def test_the_spectrum_ranks_what_failing_tests_ran_and_passing_ones_did_not() -> None:
    setitem, popitem, get = ("c.py", "C.__setitem__", 5), ("c.py", "C.popitem", 20), ("c.py", "C.get", 12)
    covered = {"f1": {setitem, popitem}, "f2": {setitem}, "p1": {get}, "p2": {get, setitem}}
    scores = spectrum_scores(covered, {"f1", "f2"}, {"p1", "p2"})
    assert scores[setitem] == pytest.approx(2 / (2 * 3) ** 0.5)  # ef 2, ep 1, F 2
    assert scores[popitem] == pytest.approx(1 / (2 * 1) ** 0.5)
    assert get not in scores  # no failing test ran it
    evidence = spectrum_evidence(covered, {"f1", "f2"}, {"p1", "p2"})
    assert [e["name"] for e in evidence["f1"]] == ["C.__setitem__", "C.popitem"]
    assert evidence["f2"] == [{"path": "c.py", "name": "C.__setitem__", "line": 5, "score": 0.816}]


def test_an_excerpt_is_bounded_and_marks_the_line() -> None:
    lines = [f"line {n}" for n in range(1, 11)] + ["x" * 500]
    assert excerpt(lines, 1) == {"start": 1, "line": 1, "lines": ["line 1", "line 2", "line 3"]}
    cut = excerpt(lines, 11)
    assert cut is not None and cut["start"] == 9 and len(cut["lines"][-1]) == 160
    assert excerpt(lines, 12) is None  # the file changed since the run


def test_the_plan_says_where_with_code_around_the_top_suspect() -> None:
    source = textwrap.dedent(CACHE).splitlines()
    plan = build_plan({"incident_id": "incident_20260101_000000_abc", "failures": SHARED_CALLEE},
                      generated_at="2026-01-01T00:00:00+00:00",
                      source=lambda path: source if path == "cache.py" else None)
    (action,) = plan["actions"]
    assert action["where"] == "cache.py:10"
    assert action["root_cause"] == {"evidence": "stack", "path": "cache.py", "name": "Cache.__setitem__"}
    assert action["suspects"][0] == {"path": "cache.py", "name": "Cache.__setitem__", "line": 10,
                                     "score": round(ochiai(4, 5), 3), "evidence": "stack", "failures": 5}
    assert action["excerpt"]["start"] == 8 and "maxsize - 1" in action["excerpt"]["lines"][2]
    md = render_plan_md(plan)
    assert "- Where: cache.py:10 in Cache.__setitem__ (stack, 5 failure(s), score 0.89)" in md
    assert "> 10 |             while len(self._data) >= self.maxsize - 1:" in md


# ---------------------------------------------------------------- end to end (pytester)


def _capture(pytester: pytest.Pytester, *args: str) -> Dict[str, Any]:
    pytester.makepyfile(cache=CACHE)
    pytester.mkdir("tests")
    pytester.path.joinpath("tests", "test_cache.py").write_text(TESTS)
    pytester.makeini("[pytest]\npythonpath = .\naddopts = --doctest-modules\n")
    result = pytester.runpytest("--selfheal", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(failed=8, passed=2)
    plans = list((pytester.path / ".selfheal" / "error_plans").glob("*/plan.json"))
    assert len(plans) == 1
    plan: Dict[str, Any] = json.loads(plans[0].read_text())
    return plan


def _names(plan: Dict[str, Any]) -> List[Any]:
    return [(a["root_cause"].get("name"), len(a["nodeids"])) for a in plan["actions"]]


def test_with_the_spectrum_one_fault_is_one_action_and_its_doctest_joins_its_code_failure(
    pytester: pytest.Pytester,
) -> None:
    plan = _capture(pytester, "--selfheal-spectrum")
    # The cache's bug (6 tests through IndexError, KeyError and wrong lengths) is one action
    # whose first suspect is the buggy function; the percent bug (a test and its doctest) another.
    assert _names(plan) == [("Cache.__setitem__", 6), ("percent", 2)]
    cache, percent = plan["actions"]
    # Ranked by the spectrum; the line is the traceback's where one passed through it.
    assert cache["where"] == "cache.py:10" and cache["suspects"][0]["evidence"] == "stack"
    incident = json.loads(next((pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json")).read_text())
    doctest = next(f for f in incident["failures"] if f["nodeid"].endswith("cache.percent"))
    assert doctest["root_cause"]["spectrum"][0] == {"path": "cache.py", "name": "percent", "line": 43, "score": 0.5}
    assert any("maxsize - 1" in line for line in cache["excerpt"]["lines"])
    assert cache["assertion"].startswith("tests/test_cache.py:")
    assert percent["suspects"][0]["name"] == "percent" and percent["target_paths"][0] == "cache.py"
    assert any(n.endswith("cache.py::cache.percent") for n in percent["nodeids"])


def test_every_surface_says_where(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    """plan.md, `selfheal show`, the MCP digest, the repair prompt and the report (the PR
    comment's markdown) carry the top suspect's path:line; all but the report its code."""
    _capture(pytester, "--selfheal-spectrum")
    root = pytester.path / ".selfheal"
    store = Store(root)
    (incident_id,) = store.incident_ids()
    bug = "while len(self._data) >= self.maxsize - 1:"
    assert "- Where: cache.py:10 in Cache.__setitem__" in store.read_plan_md(incident_id) and bug in store.read_plan_md(incident_id)
    capsys.readouterr()
    assert main(["show", incident_id, "--dir", str(root)]) == 0
    shown = capsys.readouterr().out
    assert "- where: cache.py:10 (assertion tests/test_cache.py:" in shown
    assert f" 9 |             {bug}" in shown and "> 10 |                 self.popitem()" in shown  # indented as in the file
    digest = "\n".join(incident_blocks(incident_view(store, incident_id)))
    assert "where: cache.py:10 (assertion tests/test_cache.py:" in digest and bug in digest
    prompt = build_prompt(incident=store.read_incident(incident_id), plan=store.read_plan(incident_id), attempts=[],
                          iteration=1, max_iterations=3, log_tail="", allowed_paths=["cache.py"], remaining_budget=2)
    assert "  - Where: cache.py:10 in Cache.__setitem__" in prompt and bug in prompt
    assert main(["report", incident_id, "--dir", str(root), "--format", "md"]) == 0
    assert "at `cache.py:10`" in capsys.readouterr().out


def test_without_the_spectrum_the_traceback_s_shared_callee_still_merges_symptoms(
    pytester: pytest.Pytester,
) -> None:
    plan = _capture(pytester)
    names = _names(plan)
    # The popitem symptoms and the wrong lengths of Cache's subclasses are one action led by
    # __setitem__; the KeyError raised in __missing__ (its traceback never passes the bug) stays apart.
    assert names[0] == ("Cache.__setitem__", 5)
    assert ("Cache.__missing__", 1) in names
    assert plan["actions"][0]["where"] == "cache.py:10"
