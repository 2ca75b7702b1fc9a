"""Repair scope (pure): the plan's target paths plus the repair.allowed_paths globs."""

from __future__ import annotations

import pytest

from pytest_selfheal.errors import InputError
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.repair.approval import (
    allowed_paths,
    is_test_file,
    normalise,
    out_of_scope,
    plan_target_paths,
)


def plan(*targets: list[str]) -> Plan:
    """A plan with one action per list of target paths."""
    actions = [{"id": f"A{i}", "title": "t", "priority": "high", "risk": "low", "target_paths": paths, "verification": []}
               for i, paths in enumerate(targets, start=1)]
    return Plan.from_json({"incident_id": "incident_20260217_120000_ab12cd", "generated_at": "2026-02-17T12:00:00+00:00",
                           "summary": "s", "root_cause_hypotheses": [], "actions": actions, "verification_commands": [],
                           "done_criteria": []}, "test plan")


PLAN = plan(["src/calc.py", "tests/test_calc.py"], ["./src/calc.py", "src\\util.py"], [])


def test_plan_target_paths_union_normalised_in_order() -> None:
    assert plan_target_paths(PLAN) == ["src/calc.py", "tests/test_calc.py", "src/util.py"]
    assert plan_target_paths(plan()) == []
    assert plan_target_paths(plan(["", ".", "a.py"])) == ["a.py"]
    # A plan whose target paths are not strings never reaches the scope check: the record refuses it.
    with pytest.raises(InputError, match=r"field actions\[0\]\.target_paths\[0\]: expected string"):
        plan([1])  # type: ignore[list-item]


@pytest.mark.parametrize(
    "raw, norm",
    [("a/b.py", "a/b.py"), ("./a/b.py", "a/b.py"), ("a\\b.py", "a/b.py"), ("a//b/../c.py", "a/c.py"),
     ("../x.py", "../x.py"), ("", ""), (".", ""), ("dir/", "dir")],
)
def test_normalise(raw: str, norm: str) -> None:
    assert normalise(raw) == norm


def is_allowed(path: str, targets: list[str], globs: tuple[str, ...] | list[str] = ()) -> bool:
    """The scope's decision for one file (test files aside)."""
    return not out_of_scope([path], targets, globs, allow_test_edits=True)


def test_target_paths_are_exact() -> None:
    targets = plan_target_paths(PLAN)
    assert is_allowed("src/calc.py", targets)
    assert is_allowed("./src/calc.py", targets)
    assert not is_allowed("src/calc_other.py", targets)
    assert not is_allowed("src", targets)
    assert out_of_scope(["", "."], targets) == []  # no file: nothing to ask about


def test_globs() -> None:
    assert is_allowed("docs/a/b.md", [], ["docs/"])  # a directory: everything below it
    assert is_allowed("src/pkg/deep/x.py", [], ["src/*"])  # * crosses /
    assert is_allowed("setup.cfg", [], ["*.cfg"])
    assert is_allowed("a/b.cfg", [], ["./a/*.cfg"])
    assert not is_allowed("other.py", [], ["src/*", "", "   "])
    assert not is_allowed("SRC/x.py", [], ["src/*"])  # case-sensitive everywhere


def test_out_of_scope_lists_each_offender_once_in_order() -> None:
    targets = plan_target_paths(PLAN)
    changed = ["src/calc.py", "other.py", "setup.cfg", "other.py", "./docs/x.md", "../outside.py"]
    assert out_of_scope(changed, targets, ["docs/"]) == ["other.py", "setup.cfg", "../outside.py"]
    assert out_of_scope(["src/calc.py"], targets) == []
    assert out_of_scope([], targets) == []


def test_escaping_paths_never_match_ordinary_globs() -> None:
    assert out_of_scope(["../secret.py"], ["secret.py"], ["*.cfg"]) == ["../secret.py"]


def test_allowed_paths_for_the_prompt() -> None:
    targets, globs = allowed_paths(PLAN, ["docs/", "", 3])  # type: ignore[list-item]
    assert targets == ["src/calc.py", "tests/test_calc.py", "src/util.py"]
    assert globs == ["docs/"]


@pytest.mark.parametrize(("path", "is_test"), [
    ("tests/test_x.py", True), ("test_x.py", True), ("pkg/x_test.py", True), ("conftest.py", True),
    ("tests/fixtures/data.json", True), ("src/pkg/testing/helpers.py", True),
    ("src/pkg/mod.py", False), ("testutils.py", False), ("contest.py", False), ("src/latest/mod.py", False),
])
def test_is_test_file(path: str, is_test: bool) -> None:
    assert is_test_file(path) is is_test


def test_test_files_named_by_the_plan_are_out_of_scope_unless_allowed() -> None:
    targets = ["calc.py", "test_calc.py"]
    assert out_of_scope(["calc.py", "test_calc.py"], targets) == ["test_calc.py"]
    assert out_of_scope(["calc.py", "test_calc.py"], targets, allow_test_edits=True) == []
    assert out_of_scope(["tests/conftest.py"], [], ["tests/*"]) == []  # an explicit glob lets it in
