"""Suspects: the buggy function first, one action per fault, `file:line` and code in the plan.

A one-character bug in a cache's shared ``__setitem__`` (its eviction bound, the first
mutant of the localisation benchmark's corpus) surfaces as ``IndexError`` in two
``popitem``s, as ``KeyError`` in ``__missing__`` and as wrong lengths in the tests
themselves: many symptoms, one buggy function.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

import pytest
from helpers import INCIDENT_REQUIRED, build_plan_doc, capture, run_env, selfheal

from pytest_selfheal.cli.main import main
from pytest_selfheal.loop.localise import read_spectrum, read_written, with_spectra
from pytest_selfheal.mcp_server.digest import incident_blocks
from pytest_selfheal.names import LOCALISE_ENV, VERIFYING_ENV
from pytest_selfheal.plan.build import build_plan, replan
from pytest_selfheal.plan.groups import group_by_root_cause
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.plan.suspects import (
    excerpt,
    failing_kin,
    ochiai,
    rank_groups,
    spectrum_evidence,
    spectrum_scores,
)
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.plan import Excerpt, Plan
from pytest_selfheal.records.vocab import EvidenceKind
from pytest_selfheal.repair.prompt import build_prompt
from pytest_selfheal.report.incident_view import incident_view, root_causes
from pytest_selfheal.store.root import Store

CORPUS = Path(__file__).resolve().parent.parent / "benchmarks" / "localisation" / "corpus.py"


def _corpus() -> ModuleType:
    """The localisation benchmark's corpus (its projects and mutants): the one home of the
    cache hierarchy these tests and the benchmark both break."""
    spec = importlib.util.spec_from_file_location("selfheal_localisation_corpus", CORPUS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # NamedTuple looks its module up
    spec.loader.exec_module(module)
    return module


corpus = _corpus()
SETITEM_BUG = corpus.MUTANTS[0]  # the eviction bound of Cache.__setitem__: maxsize - 1
PERCENT_BUG = next(m for m in corpus.MUTANTS if m.function == "percent")


def mutated(project: Path, mutant: Any) -> None:
    """Write the corpus project of ``mutant`` below ``project`` with the mutant injected."""
    for rel, text in corpus.PROJECTS[mutant.project].items():
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"))
    target = project / mutant.path
    target.write_text(target.read_text().replace(mutant.old, mutant.new))


def ref(path: str, name: str, line: Optional[int] = None) -> dict[str, Any]:
    return {"path": path, "name": name, **({"line": line} if line is not None else {})}


def failure(nodeid: str, message: str, **evidence: Any) -> dict[str, Any]:
    return {"nodeid": nodeid, "test": nodeid, "failure_type": "TEST_ASSERTION", "message": message,
            "signature": f"TEST_ASSERTION | {nodeid} | {message}", "fingerprint": nodeid[-8:],
            "code_fixable": True, "root_cause": evidence}


def grouped(failures: list[dict[str, Any]]) -> list[Any]:
    """``group_by_root_cause`` of failure documents, keyed by message when they have no evidence."""
    return group_by_root_cause([Failure.from_json(f, "failure") for f in failures], lambda f: f.message)


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
    before = grouped(SHARED_CALLEE)
    assert len(before) == 3  # two popitem frames and the classes' most shared call: three actions for one bug
    ranked = rank_groups(before)
    assert len(ranked) == 1
    (only,) = ranked
    assert len(only.group.members) == 5
    top = only.suspects[0]
    assert (top.path, top.name, top.line, top.evidence) == ("cache.py", "Cache.__setitem__", 10, EvidenceKind.STACK)
    assert top.failures == 5 and top.score == pytest.approx(ochiai(3 + 2 * 0.5, 5))
    # The classes the tests build stand for their methods: never suspects themselves.
    assert [s.name for s in only.suspects[1:]] == ["Cache.popitem", "LRUCache.popitem"]


def test_a_class_alone_is_never_a_suspect() -> None:
    """Tests that build a Version and compare it name the class and its __init__: the
    suspect is the method, with its def line, never the class."""
    calls = [ref("version.py", "Version"), ref("version.py", "Version.__init__", 40)]
    failures = [failure(f"t.py::test_{n}", "assert 1 == 2", calls=calls) for n in ("rc", "pre")]
    (only,) = rank_groups(grouped(failures))
    assert [(s.name, s.line) for s in only.suspects] == [("Version.__init__", 40)]
    assert (only.group.name, only.group.evidence) == ("Version.__init__", EvidenceKind.CALLS)
    # A class with no method to name leaves no suspect, not the class.
    (bare,) = rank_groups(grouped([failure("t.py::test_x", "assert 1 == 2", calls=[ref("version.py", "Version")])]))
    assert bare.suspects == ()


def test_a_frame_never_votes_for_the_test_s_other_calls() -> None:
    """A test that calls add and sub and fails inside sub says nothing against add."""
    failures = [
        failure("t.py::test_x", "boom", frame=ref("m.py", "sub", 3), calls=[ref("m.py", "add", 1), ref("m.py", "sub", 2)]),
        failure("t.py::test_y", "wrong", calls=[ref("m.py", "add", 1)]),
        failure("t.py::test_z", "wrong", calls=[ref("m.py", "add", 1)]),
    ]
    ranked = rank_groups(grouped(failures))
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
    assert [e.name for e in evidence.top["f1"]] == ["C.__setitem__", "C.popitem"]
    assert [e.to_json() for e in evidence.top["f2"]] == [
        {"path": "c.py", "name": "C.__setitem__", "line": 5, "score": 0.816}]
    assert evidence.scores == scores


def test_a_failing_test_unlike_the_others_lends_nothing_to_the_helper_they_share() -> None:
    """A tokenizer fault fails three tests, which build their input with ``parse``; a fourth
    test, in another file, fails in the renderer for another reason and shares only ``parse``
    with them. Every passing test of the tokenizer runs ``parse`` and ``tokenize`` alike: the
    fourth failure alone would put ``parse`` ahead; told apart, ``tokenize`` is its equal.
    Failing tests of one file stay kin however little they share (a narrow test and a broad one)."""
    parse, tokenize, lex = ("m.py", "parse", 1), ("m.py", "tokenize", 10), ("m.py", "lex", 20)
    renderer = {("r.py", f"render{n}", n) for n in range(12)}
    f1, f2, f3, other = "t_tok.py::f1", "t_tok.py::f2", "t_tok.py::f3", "t_render.py::other"
    covered = {f1: {parse, tokenize}, f2: {parse, tokenize, lex}, f3: {parse, tokenize, lex},
               other: {parse, *renderer}, **{f"p{n}": {parse, tokenize} for n in range(4)}, "p9": renderer}
    failed, passed = {f1, f2, f3, other}, {"p0", "p1", "p2", "p3", "p9"}
    assert sorted(map(sorted, failing_kin(covered, sorted(failed)))) == [[other], [f1, f2, f3]]
    scores = spectrum_scores(covered, failed, passed)
    assert scores[parse] == scores[tokenize] == pytest.approx(ochiai(3, 4, 4))
    assert scores[("r.py", "render0", 0)] == pytest.approx(ochiai(1, 4, 1))
    assert len(failing_kin({**covered, "t_tok.py::f4": {parse, *renderer}}, [f1, "t_tok.py::f4"])) == 1


def test_a_function_the_evidence_names_keeps_its_score_past_the_kept_few() -> None:
    """One failing test runs seven functions that many passing tests run too; the traceback
    names the one most passing tests run, outside the spectrum's five: it is still scored,
    and its frame leads the plan where the spectrum cannot tell the others apart."""
    parse = ("p.py", "parser.parse", 10)
    helpers = [("p.py", f"helper{n}", 100 + n) for n in range(6)]
    covered: dict[str, set[tuple[str, str, int]]] = {"f": {parse, *helpers}}
    for n in range(60):  # every passing test runs parse, and all helpers but one
        covered[f"p{n}"] = {parse, *(h for i, h in enumerate(helpers) if i != n % 6)}
    spectrum = spectrum_evidence(covered, {"f"}, {f"p{n}" for n in range(60)})
    assert ("p.py", "parser.parse") not in [(r.path, r.name) for r in spectrum.top["f"]]
    entry = Failure.from_json(failure("f", "TypeError", frame=ref("p.py", "parser.parse", 12)), "failure")
    refs = spectrum.for_failure("f", entry.root_cause)
    assert [r.name for r in refs][:5] == [r.name for r in spectrum.top["f"]]
    assert (refs[-1].name, refs[-1].line, refs[-1].score) == ("parser.parse", 10, round(1 / 61 ** 0.5, 3))
    (merged,) = with_spectra([entry], spectrum)
    (only,) = rank_groups(group_by_root_cause([merged], lambda f: f.message))
    assert only.suspects[0].name == "parser.parse" and only.suspects[0].line == 12  # the frame's line


def test_with_a_spectrum_it_decides_and_the_evidence_tips_close_calls() -> None:
    """One failing test: the calls name timer and get, the spectrum ranks __iter__ and get
    (tied) and __lt__ lower. The spectrum's order stands; get, which the test also names,
    wins the tie; timer, which the spectrum does not keep, comes last, scored below it."""
    spectrum = [{**ref("c.py", "C.__iter__", 30), "score": 0.447}, {**ref("c.py", "C.get", 12), "score": 0.447},
                {**ref("c.py", "C.__lt__", 40), "score": 0.3}]
    failures = [failure("t.py::test_x", "wrong", calls=[ref("c.py", "C.timer", 3), ref("c.py", "C.get", 12)],
                        spectrum=spectrum)]
    (only,) = rank_groups(grouped(failures))
    assert [s.name for s in only.suspects] == ["C.get", "C.__iter__", "C.__lt__", "C.timer"]
    assert [s.score for s in only.suspects[:3]] == pytest.approx([0.9 * 0.447 + 0.1 * ochiai(0.8, 1), 0.9 * 0.447,
                                                                  0.9 * 0.3])
    assert only.suspects[-1].score < only.suspects[-2].score


def test_with_one_failing_test_the_function_that_raised_leads() -> None:
    """toolz's merge_sorted: the one failing test calls merge_sorted, no passing test does,
    and the helper it calls raises, run by one passing test. Ochiai ranks the wrapper first
    (1.0 against 0.707); with one failing test the raise is the surer sign. With two failing
    tests the spectrum decides again."""
    spectrum = [{**ref("t.py", "merge_sorted", 107), "score": 1.0},
                {**ref("t.py", "_merge_sorted_binary", 141), "score": 0.707}]
    raised = dict(frame=ref("t.py", "_merge_sorted_binary", 149), stack=[ref("t.py", "merge_sorted", 120)])
    (only,) = rank_groups(grouped([failure("a.py::test_m", "IndexError", spectrum=spectrum, **raised)]))
    assert [s.name for s in only.suspects] == ["_merge_sorted_binary", "merge_sorted"]
    assert only.suspects[0].line == 149 and only.suspects[0].score == pytest.approx(0.9 * 1.0 + 0.1 * ochiai(1, 1))
    two = [failure(f"a.py::test_{n}", "IndexError", spectrum=spectrum, **raised) for n in "mn"]
    (both,) = rank_groups(grouped(two))
    assert [s.name for s in both.suspects] == ["merge_sorted", "_merge_sorted_binary"]


def test_with_one_failing_test_a_raise_the_spectrum_left_out_does_not_lead() -> None:
    """A renderer's error handler re-raises the parser's error, so the traceback's innermost
    project frame is the handler; the spectrum left it out (it ran only to deliver the
    error), and its own ranking stands: the parser first."""
    spectrum = [{**ref("r.py", "parse_tag", 40), "score": 0.707}, {**ref("r.py", "render", 10), "score": 0.5}]
    raised = dict(frame=ref("r.py", "handle_error", 80), stack=[ref("r.py", "render", 12)])
    (only,) = rank_groups(grouped([failure("a.py::test_tag", "RenderError", spectrum=spectrum, **raised)]))
    assert [s.name for s in only.suspects][:2] == ["parse_tag", "render"]


def test_an_excerpt_is_bounded_and_marks_the_line() -> None:
    lines = [f"line {n}" for n in range(1, 11)] + ["x" * 500]
    assert excerpt("m.py", lines, 1) == Excerpt("m.py", 1, 1, ("line 1", "line 2", "line 3"))
    cut = excerpt("m.py", lines, 11)
    assert cut is not None and cut.start == 9 and len(cut.lines[-1]) == 160
    assert excerpt("m.py", lines, 12) is None  # the file changed since the run


def test_the_plan_says_where_with_code_around_the_top_suspect() -> None:
    source = str(corpus.CACHES).lstrip("\n").replace(SETITEM_BUG.old, SETITEM_BUG.new).splitlines()
    plan = build_plan_doc({"incident_id": "incident_20260101_000000_abc", "failures": SHARED_CALLEE},
                      generated_at="2026-01-01T00:00:00+00:00",
                      source=lambda path: source if path == "cache.py" else None)
    (action,) = plan["actions"]
    assert action["where"] == "cache.py:10"
    assert action["root_cause"] == {"evidence": "stack", "path": "cache.py", "name": "Cache.__setitem__"}
    assert action["suspects"][0] == {"path": "cache.py", "name": "Cache.__setitem__", "line": 10,
                                     "score": round(ochiai(4, 5), 3), "evidence": "stack", "failures": 5}
    assert action["excerpt"]["start"] == 8 and "maxsize - 1" in action["excerpt"]["lines"][1]
    built = Plan.from_json(plan, "plan")
    md = render_plan_md(built)
    assert "- Where: cache.py:10 in Cache.__setitem__ (stack, 5 failure(s), score 0.89)" in md
    assert "   9 |             while len(self._data) >= self.maxsize - 1:" in md
    assert "> 10 |                 self.popitem()" in md


# wcwidth's `_bisearch` (`>` made `>=`) behind its public `wcswidth`: the spectrum scores
# them 0.734 and 0.738, which is no verdict.
WIDTH_SOURCE = [
    "def _bisearch(ucs, table):",
    "    lbound, ubound = 0, len(table) - 1",
    "    while ubound >= lbound:",
    "        mid = (lbound + ubound) // 2",
    "        if ucs >= table[mid][1]:",
    "            lbound = mid + 1",
    "",
    "def wcswidth(pwcs, n=None):",
    "    return sum(wcwidth(c) for c in pwcs[:n])",
]


def _width_incident(second: float) -> Incident:
    spectrum = [{**ref("wcwidth.py", "wcswidth", 8), "score": 0.738},
                {**ref("wcwidth.py", "_bisearch", 1), "score": second}]
    failures = [failure(f"tests/test_core.py::test_{n}", "assert 2 == 1", spectrum=spectrum) for n in ("cjk", "emoji")]
    return Incident.from_json({**INCIDENT_REQUIRED, "incident_id": "incident_20260101_000000_abc",
                               "failures": failures}, "incident")


def test_two_suspects_within_the_margin_are_equals_on_every_surface() -> None:
    """Scores 0.01 apart name both suspects, with their code, in plan.md, the prompt (which
    asks to check both), `selfheal show` and the digest's cause line; 0.03 apart, one leads."""
    plan = build_plan(_width_incident(0.728), generated_at="2026-01-01T00:00:00+00:00",
                      source=lambda path: WIDTH_SOURCE if path == "wcwidth.py" else None)
    (action,) = plan.actions
    assert (action.where, action.also_where) == ("wcwidth.py:8", "wcwidth.py:1")
    assert action.also_excerpt is not None and action.also_excerpt.lines[0] == "def _bisearch(ucs, table):"
    assert Plan.from_json(plan.to_json(), "plan") == plan
    md = render_plan_md(plan)
    assert ("- Where, two equal suspects (scores within 0.02): wcwidth.py:8 in wcswidth (spectrum, 2 failure(s), "
            "score 0.66); wcwidth.py:1 in _bisearch (spectrum, 2 failure(s), score 0.66). Check both") in md
    assert "> 1 | def _bisearch(ucs, table):" in md and "> 8 | def wcswidth(pwcs, n=None):" in md
    assert "Other suspects" not in md
    prompt = build_prompt(incident=_width_incident(0.728), plan=plan, attempts=[], iteration=1, max_iterations=3,
                          log_tail="", allowed_paths=["wcwidth.py"], remaining_budget=2)
    assert "Check both before choosing where to fix" in prompt and "code around its equal:" in prompt
    (cause,) = root_causes(_width_incident(0.728), plan)
    assert cause.where_line() == "where: wcwidth.py:8 or wcwidth.py:1, equal suspects: check both"
    assert cause.also_excerpt is not None and cause.others == ()
    apart = build_plan(_width_incident(0.70), generated_at="2026-01-01T00:00:00+00:00",
                       source=lambda path: WIDTH_SOURCE if path == "wcwidth.py" else None)
    (alone,) = apart.actions
    assert alone.also_where is None and alone.also_excerpt is None
    assert "- Where: wcwidth.py:8 in wcswidth" in render_plan_md(apart)


def test_the_built_plan_is_the_record_its_json_reads_back() -> None:
    """build_plan makes the records itself: each value has the type and the value a read gives."""
    source = str(corpus.CACHES).lstrip("\n").splitlines()
    spectrum = {**ref("cache.py", "Cache.get", 12), "score": 0.5}
    failures = [*SHARED_CALLEE, failure("tests/test_c.py::test_get", "assert 1 == 2", spectrum=[spectrum]),
                {"nodeid": None, "test": "t::x", "message": "E", "target_paths": ["src/a.py", "tests/test_a.py"]}]
    doc = {**INCIDENT_REQUIRED, "incident_id": "incident_20260101_000000_abc", "failures": failures}
    built = build_plan(Incident.from_json(doc, "incident"), generated_at="2026-01-01T00:00:00+00:00",
                       source=lambda path: source if path == "cache.py" else None)
    assert built.actions[0].excerpt is not None and built.actions[0].suspects and len(built.actions) == 3
    assert Plan.from_json(built.to_json(), "plan") == built
    again = replan(built, [])
    assert Plan.from_json(again.to_json(), "plan") == again


# ---------------------------------------------------------------- end to end (pytester)


def _capture(pytester: pytest.Pytester, mutant: Any, *args: str, failed: int, passed: int) -> dict[str, Any]:
    mutated(pytester.path, mutant)
    shutil.rmtree(pytester.path / ".selfheal", ignore_errors=True)  # a fresh capture, not the next iteration
    result = pytester.runpytest("--selfheal", "-p", "no:cacheprovider", *args)
    result.assert_outcomes(failed=failed, passed=passed)
    plans = list((pytester.path / ".selfheal" / "error_plans").glob("*/plan.json"))
    assert len(plans) == 1
    plan: dict[str, Any] = json.loads(plans[0].read_text())
    return plan


def _names(plan: dict[str, Any]) -> list[Any]:
    return [(a["root_cause"].get("name"), len(a["nodeids"])) for a in plan["actions"]]


def test_a_shared_callee_fault_is_one_action_with_the_spectrum(pytester: pytest.Pytester) -> None:
    """Seven failures through IndexError in two popitems, KeyError in __missing__ and wrong
    lengths: without the spectrum two actions (the KeyError's traceback never passes the
    bug), the largest first and led by the buggy function; with it, one."""
    plan = _capture(pytester, SETITEM_BUG, failed=7, passed=5)
    assert _names(plan) == [("Cache.__setitem__", 4), ("Cache.__missing__", 3)]
    plan = _capture(pytester, SETITEM_BUG, "--selfheal-spectrum", failed=7, passed=5)
    assert _names(plan) == [("Cache.__setitem__", 7)]
    (action,) = plan["actions"]
    assert action["where"] == "caches.py:10" and action["assertion"] == "tests/test_caches.py:7"
    assert [s["name"] for s in action["suspects"][:2]] == ["Cache.__setitem__", "Cache.popitem"]
    assert any("maxsize - 1" in line for line in action["excerpt"]["lines"])


def test_a_doctest_joins_its_code_failure_with_the_spectrum(pytester: pytest.Pytester) -> None:
    """percent's bug fails its doctest, two tests of it and a test of summary, which calls
    it: one action with the spectrum, whatever else the doctest's evidence says."""
    plan = _capture(pytester, PERCENT_BUG, failed=4, passed=5)
    # Without it the test of summary (which names only summary) is an action of its own.
    assert _names(plan)[0][0] == "percent" and ("summary", 1) in _names(plan)
    plan = _capture(pytester, PERCENT_BUG, "--selfheal-spectrum", failed=4, passed=5)
    assert _names(plan) == [("percent", 4)]
    (action,) = plan["actions"]
    assert any(n.endswith("core.py::textfmt.core.percent") for n in action["nodeids"])
    assert action["where"] == "src/textfmt/core.py:1" and action["target_paths"][0] == "src/textfmt/core.py"
    incident = json.loads(next((pytester.path / ".selfheal" / "error_inbox").glob("*/incident.json")).read_text())
    doctest = next(f for f in incident["failures"] if f["nodeid"].endswith("textfmt.core.percent"))
    # Run by the 4 failing tests and by one passing (summary of nothing): 4 / sqrt(4 * 5).
    assert doctest["root_cause"]["spectrum"] == [{"path": "src/textfmt/core.py", "name": "percent", "line": 1,
                                                  "score": 0.894}]


def test_every_surface_says_where(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    """plan.md, `selfheal show`, the MCP digest, the repair prompt and the report (the PR
    comment's markdown) carry the top suspect's path:line; all but the report its code."""
    _capture(pytester, SETITEM_BUG, "--selfheal-spectrum", failed=7, passed=5)
    root = pytester.path / ".selfheal"
    store = Store(root)
    (incident_id,) = store.incident_ids()
    bug = "while len(self._data) >= self.maxsize - 1:"
    plan_md = store.read_plan_md(incident_id)
    assert "- Where: caches.py:10 in Cache.__setitem__" in plan_md and bug in plan_md
    capsys.readouterr()
    assert main(["show", incident_id, "--dir", str(root)]) == 0
    shown = capsys.readouterr().out
    assert "  where: caches.py:10 (assertion tests/test_caches.py:7)" in shown
    assert f" 9 |             {bug}" in shown and "> 10 |                 self.popitem()" in shown  # indented as in the file
    digest = "\n".join(incident_blocks(incident_view(store, incident_id)))
    assert "where: caches.py:10 (assertion tests/test_caches.py:7)" in digest and bug in digest
    prompt = build_prompt(incident=store.read_incident(incident_id), plan=store.read_plan(incident_id), attempts=[],
                          iteration=1, max_iterations=3, log_tail="", allowed_paths=["caches.py"], remaining_budget=2)
    assert "  - Where: caches.py:10 in Cache.__setitem__" in prompt and bug in prompt
    assert main(["report", incident_id, "--dir", str(root), "--format", "md"]) == 0
    assert "at `caches.py:10`" in capsys.readouterr().out


@pytest.mark.slow  # ~9 s: an xdist run of its own; the spectrum itself is tested by default
def test_the_spectrum_travels_from_xdist_workers(pytester: pytest.Pytester) -> None:
    """Each worker records its tests; the function keys ride on the reports to the controller."""
    plan = _capture(pytester, SETITEM_BUG, "--selfheal-spectrum", "-p", "xdist", "-n", "2", failed=7, passed=5)
    assert _names(plan) == [("Cache.__setitem__", 7)]
    assert plan["actions"][0]["suspects"][1]["name"] == "Cache.popitem"


def test_the_excerpt_is_redacted_like_every_other_plan_field(pytester: pytest.Pytester) -> None:
    token = "ghp_" + "a1" * 18
    pytester.makepyfile(mod=f'def check(x):\n    token = "{token}"\n    raise ValueError(x)\n')
    pytester.makepyfile(test_mod="from mod import check\n\ndef test_check():\n    check(1)\n")
    pytester.runpytest("--selfheal", "-p", "no:cacheprovider").assert_outcomes(failed=1)
    (folder,) = (pytester.path / ".selfheal" / "error_plans").iterdir()
    plan = json.loads((folder / "plan.json").read_text())
    assert plan["actions"][0]["where"] == "mod.py:3" and plan["actions"][0]["excerpt"]["start"] == 1
    for name in ("plan.json", "plan.md"):
        text = (folder / name).read_text()
        assert "raise ValueError(x)" in text and token not in text and "token = " in text


def test_a_localisation_run_writes_the_spectrum_of_its_failing_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The loop's passive run (SELFHEAL_VERIFYING, SELFHEAL_LOCALISE=FILE) captures nothing
    and writes each failing test's spectrum, which the loop adds to the incident."""
    mutated(pytester.path, SETITEM_BUG)
    out = tmp_path / "spectrum.json"
    monkeypatch.setenv(VERIFYING_ENV, "1")
    monkeypatch.setenv(LOCALISE_ENV, str(out))
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(failed=7, passed=5)
    assert not (pytester.path / ".selfheal").exists()
    spectrum = read_spectrum(read_written(out))
    assert len(spectrum.top) == 7
    assert all(refs[0].name == "Cache.__setitem__" for refs in spectrum.top.values())
    assert ("caches.py", "Cache.__missing__") in {key[:2] for key in spectrum.scores}
    first = next(iter(spectrum.top))
    entry = Failure.from_json(failure(first, "boom", frame=ref("caches.py", "x", 1)), "failure")
    (merged,) = with_spectra([entry], spectrum)
    assert merged.root_cause is not None and merged.root_cause.frame is not None
    assert merged.root_cause.spectrum == spectrum.top[first]


@pytest.mark.slow  # ~8 s: a capture, two verify-only loops and a localisation run
def test_the_plan_is_localised_for_a_reader_and_a_verify_only_loop_runs_none(tmp_path: Path) -> None:
    """Captured without --selfheal-spectrum the bug is two actions. A verify-only loop runs
    the failing tests and nothing else (no one reads the ranking); `selfheal plan ID
    --localise`, what a reader runs, makes it one action led by the buggy function."""
    mutated(tmp_path, SETITEM_BUG)
    (tmp_path / ".gitignore").write_text(".selfheal/\n")
    incident_id = capture(tmp_path, "--selfheal-set", "max_iterations=1")
    root = tmp_path / ".selfheal"
    saved = tmp_path.parent / "captured"
    shutil.copytree(root, saved)
    store = Store(root)
    assert len(store.read_plan(incident_id).actions) == 2
    result = selfheal(tmp_path, "loop", incident_id)
    assert "localis" not in result.stdout + result.stderr, result.stdout + result.stderr
    shutil.rmtree(root)
    shutil.copytree(saved, root)
    result = selfheal(tmp_path, "plan", incident_id, "--localise")
    assert "localising" in result.stderr and "- Where: caches.py:10 in Cache.__setitem__" in result.stdout, result.stderr
    plan = store.read_plan(incident_id)
    assert [a.suspects[0].name for a in plan.actions] == ["Cache.__setitem__"], result.stdout + result.stderr
    failures = store.read_incident(incident_id).failures
    assert all(f.root_cause is not None and f.root_cause.spectrum for f in failures)
    again = selfheal(tmp_path, "plan", incident_id, "--localise")
    assert "not localised: its failures have a spectrum already" in again.stderr, again.stderr


# A child's start-up (sitecustomize) that hides selfheal's distribution, entry point and all:
# selfheal run from a checkout (PYTHONPATH), not installed.
NOT_INSTALLED = ("import importlib.metadata\n\n_every = importlib.metadata.distributions\n\n\n"
                 "def _others(**kwargs):\n"
                 "    return (d for d in _every(**kwargs) if d.metadata['Name'] != 'pytest-selfheal')\n\n\n"
                 "importlib.metadata.distributions = _others\n")


@pytest.mark.slow  # ~10 s: every installed plugin loads in both runs
def test_a_plugin_loaded_by_its_module_name_is_loaded_by_the_localisation_run_too(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NOT_INSTALLED)
    outer = os.environ.get("PYTHONPATH")
    env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "", "PYTHONPATH": os.pathsep.join([str(site), *([outer] if outer else [])])}
    seen = subprocess.run([sys.executable, "-c", "import importlib.metadata as m; "
                           "print(sorted(e.value for e in m.entry_points(group='pytest11')))"],
                          env=run_env(env), capture_output=True, text=True, check=True).stdout
    assert "pytest_selfheal" not in seen  # pytest's autoload cannot find it: only `-p` loads it
    project = tmp_path / "project"
    mutated(project, SETITEM_BUG)
    incident_id = capture(project, env=env)  # `-p pytest_selfheal.plugin` on the command line
    result = selfheal(project, "plan", incident_id, "--localise", env=env)
    assert "localising" in result.stderr and "recorded nothing" not in result.stderr, result.stderr
    plan = Store(project / ".selfheal").read_plan(incident_id)
    assert [a.suspects[0].name for a in plan.actions] == ["Cache.__setitem__"], result.stdout + result.stderr


def test_a_plan_that_cannot_be_localised_says_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every test failed: a spectrum of failing tests alone ranks nothing new, so `selfheal
    plan ID --localise` runs nothing and says why; the plan it prints is the capture's."""
    pytester.makepyfile(mod="def double(n):\n    return n * 3\n",
                        test_mod="from mod import double\n\ndef test_two():\n    assert double(1) == 2\n")
    pytester.runpytest("--selfheal", "-p", "no:cacheprovider").assert_outcomes(failed=1)
    monkeypatch.chdir(pytester.path)
    store = Store(pytester.path / ".selfheal")
    (incident_id,) = store.incident_ids()
    before = store.read_plan_md(incident_id)
    capsys.readouterr()
    assert main(["plan", incident_id, "--localise"]) == 0
    out, err = capsys.readouterr()
    assert f"selfheal: incident {incident_id}: not localised: no test passed in the capture" in err
    assert out == before == store.read_plan_md(incident_id)
