"""Root-cause groups (plan/groups.py): one action per root cause, not per message;
target paths from the evidence, test paths apart; selections and plan.md that stay small."""

from __future__ import annotations

import shlex
from typing import Any, Optional

import pytest
from helpers import build_plan_doc
from schema_check import assert_valid
from test_plan import INCIDENT_ID, NOW, failure, incident

from pytest_selfheal.plan.build import DONE_CRITERIA, readable_command, verification_argv
from pytest_selfheal.plan.groups import group_by_root_cause, selected_by
from pytest_selfheal.plan.markdown import MAX_PLAN_MD_BYTES, render_plan_md
from pytest_selfheal.records.incident import Failure
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.repair.approval import allowed_paths, out_of_scope

# Six assertion shapes of one off-by-one.
SHAPES = (
    "assert 3 == 4",
    "assert [1, 2] == [1, 2, 3]",
    "AssertionError: expected 4 items, got 3",
    "IndexError: list index out of range",
    "assert 'abc' == 'abcd'",
    "assert None is not None",
)


def ref(path: str, name: str, line: Optional[int] = None) -> dict[str, Any]:
    data: dict[str, Any] = {"path": path, "name": name}
    if line is not None:
        data["line"] = line
    return data


def with_evidence(
    item: dict[str, Any], *, frame: Optional[dict[str, Any]] = None, calls: Optional[list[dict[str, Any]]] = None
) -> dict[str, Any]:
    evidence: dict[str, Any] = {}
    if frame is not None:
        evidence["frame"] = frame
    if calls:
        evidence["calls"] = calls
    item["root_cause"] = evidence
    return item


def test_thirty_failures_of_one_bug_in_six_shapes_are_one_action() -> None:
    failures = [
        with_evidence(failure(f"tests/test_core.py::test_{i}", SHAPES[i % 6]), calls=[ref("pkg/core.py", "window")])
        for i in range(30)
    ]
    plan = build_plan_doc(incident(*failures), generated_at=NOW)
    assert_valid("plan", plan)
    [action] = plan["actions"]
    assert action["root_cause"] == {"evidence": "calls", "path": "pkg/core.py", "name": "window"}
    assert action["target_paths"] == ["pkg/core.py"] and action["test_paths"] == ["tests/test_core.py"]
    assert len(action["nodeids"]) == 30 and len(action["fingerprints"]) == 30
    assert "6 messages" in action["title"] and "(30 tests)" in action["title"]


def test_a_frame_groups_whatever_the_message_and_a_call_of_its_function_joins_it() -> None:
    failures = [
        with_evidence(failure("tests/test_s.py::test_pop", "IndexError: pop from empty list"),
                      frame=ref("src/stack.py", "Stack.pop", 7), calls=[ref("src/stack.py", "Stack")]),
        with_evidence(failure("tests/test_s.py::test_pop2", "ValueError: bad"),
                      frame=ref("src/stack.py", "Stack.pop", 9)),
        # A wrong return value of the same class: no frame, but it calls Stack.
        with_evidence(failure("tests/test_s.py::test_peek", "assert 1 == 2"), calls=[ref("src/stack.py", "Stack")]),
        with_evidence(failure("tests/test_q.py::test_q", "assert 1 == 2"), calls=[ref("src/queue.py", "Queue")]),
    ]
    entries = [Failure.from_json(f, "failure") for f in failures]
    groups = group_by_root_cause(entries, lambda f: f.message)
    assert [(g.evidence, g.path, g.name, len(g.members)) for g in groups] == [
        ("frame", "src/stack.py", "Stack.pop", 3),
        ("calls", "src/queue.py", "Queue", 1),
    ]


def test_the_definition_most_failing_tests_call_is_the_suspect() -> None:
    helpers = ["make_items", "fixture_data", "describe", "fmt"]
    failures = [
        with_evidence(
            failure(f"tests/test_p{i % 7}.py::test_{i}", f"assert {i} == {i + 1}"),
            calls=[ref(f"src/util{i % 4}.py", helpers[i % 4]), ref("src/pages.py", "paginate")],
        )
        for i in range(161)
    ]
    plan = build_plan_doc(incident(*failures), generated_at=NOW)
    [action] = plan["actions"]
    assert action["root_cause"]["name"] == "paginate"
    assert action["target_paths"][0] == "src/pages.py"
    # The verification command selects the 161 node ids themselves, never their 7 files.
    argv = verification_argv(Plan.from_json(plan, "plan"))[0]
    assert argv[4:] == action["nodeids"] and len(argv[4:]) == 161
    md = render_plan_md(Plan.from_json(plan, "plan"))
    assert len(md.encode()) < 8 * 1024 and "… 158 more" in md


def test_failures_without_evidence_fall_back_to_type_and_message() -> None:
    failures = [
        failure("tests/test_a.py::test_1", "assert 1 == 2", target_paths=["src/a.py", "tests/test_a.py"]),
        failure("tests/test_b.py::test_2", "assert 1 == 2", target_paths=["src/b.py", "pkg/__init__.py"]),
        failure("tests/test_c.py::test_3", "KeyError: 'x'"),
    ]
    plan = build_plan_doc(incident(*failures), generated_at=NOW)
    assert [a["root_cause"] for a in plan["actions"]] == [{"evidence": "fingerprint"}] * 2
    assert plan["actions"][0]["target_paths"] == ["src/a.py", "src/b.py", "pkg/__init__.py"]
    assert plan["actions"][0]["test_paths"] == ["tests/test_a.py", "tests/test_b.py"]


def test_evidence_in_test_files_is_no_evidence() -> None:
    item = with_evidence(failure("tests/test_a.py::test_1", "boom"), frame=ref("tests/conftest.py", "fx", 3),
                         calls=[ref("tests/helpers.py", "make")])
    [group] = group_by_root_cause([Failure.from_json(item, "failure")], lambda f: f.message)
    assert group.evidence == "fingerprint"


def test_target_paths_name_every_file_the_evidence_points_at_never_a_test() -> None:
    failures = [
        with_evidence(failure("tests/test_o.py::test_1", "assert 1 == 2"),
                      calls=[ref("src/pricing.py", "total"), ref("src/factories.py", "make_order")]),
        with_evidence(failure("tests/test_o.py::test_2", "assert 3 == 2"),
                      frame=ref("src/pricing.py", "total", 4), calls=[ref("src/pricing.py", "total")]),
    ]
    [action] = build_plan_doc(incident(*failures), generated_at=NOW)["actions"]
    assert action["root_cause"]["evidence"] == "frame"
    assert action["target_paths"] == ["src/pricing.py", "src/factories.py"]


def test_a_long_selection_keeps_every_node_id_and_plan_md_shows_it_short() -> None:
    ids = [f"tests/test_a.py::test_{i}" for i in range(25)] + ["tests/sub/test_b.py::TestB::test_x[1]"]
    plan = build_plan_doc(incident(*[failure(n, "assert 1 == 2") for n in ids]), generated_at=NOW)
    # Every node id runs: the command selects each one, never its file.
    [command] = plan["verification_commands"]
    assert shlex.split(command)[4:] == ids
    assert shlex.split(plan["actions"][0]["verification"][0])[4:] == ids
    shown = readable_command(command)
    assert shown == ("python -m pytest -q tests/test_a.py::test_0 tests/test_a.py::test_1 tests/test_a.py::test_2 "
                     "… 23 more node ids")
    assert shown in render_plan_md(Plan.from_json(plan, "plan")) and "test_a.py::test_24" not in render_plan_md(
        Plan.from_json(plan, "plan"))
    # A short command, and a node id given to --deselect, are shown as they are.
    assert readable_command("python -m pytest -q a.py::t") == "python -m pytest -q a.py::t"
    deselected = "python -m pytest " + " ".join(f"--deselect a.py::t{i}" for i in range(12))
    assert readable_command(deselected) == deselected
    assert selected_by("tests/test_a.py::test_1", ["python", "-m", "pytest", "tests/test_a.py"])
    assert not selected_by("tests/test_a.py::test_1", ["python", "-m", "pytest", "tests/test_b.py"])


def test_plan_md_stays_under_its_bound_at_any_size() -> None:
    # 500 distinct failures without evidence (the worst case: one action each), long ids: ~6x the budget.
    failures = [
        failure(f"tests/test_{i % 50}.py::test_{'y' * 120}_{i}", f"ValueError: message number {i} " + "z" * 200,
                target_paths=[f"src/m{i}.py"])
        for i in range(500)
    ]
    plan = build_plan_doc(incident(*failures), generated_at=NOW)
    md = render_plan_md(Plan.from_json(plan, "plan"))
    assert len(md.encode()) <= MAX_PLAN_MD_BYTES
    assert "more actions: see plan.json" in md
    assert md.rstrip().endswith(f"- [ ] {DONE_CRITERIA[-1]}")
    assert md.startswith(f"# Remediation plan: {INCIDENT_ID}\n")


@pytest.mark.parametrize("allow", [False, True])
def test_scope_is_the_target_paths_and_the_tests_only_when_allowed(allow: bool) -> None:
    item = with_evidence(failure("tests/test_core.py::test_1", "assert 1 == 2"), calls=[ref("pkg/core.py", "add")])
    plan = Plan.from_json(build_plan_doc(incident(item), generated_at=NOW), "plan.json")
    targets, globs = allowed_paths(plan, allow_test_edits=allow)
    assert targets == (["pkg/core.py", "tests/test_core.py"] if allow else ["pkg/core.py"])
    assert out_of_scope(["pkg/core.py"], targets, globs, allow_test_edits=allow) == []
    assert out_of_scope(["tests/test_core.py"], targets, globs, allow_test_edits=allow) == (
        [] if allow else ["tests/test_core.py"])
    assert out_of_scope(["pkg/__init__.py"], targets, globs, allow_test_edits=allow) == ["pkg/__init__.py"]
