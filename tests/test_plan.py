"""The remediation plan (plan.py): contract fields, groups, commands, markdown, replan."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import attempt_record, build_plan_doc
from hypothesis import given
from hypothesis import strategies as st
from schema_check import assert_valid

from pytest_selfheal.errors import InputError
from pytest_selfheal.plan.build import (
    group_failures,
    normalised_message,
    pytest_command,
    replan,
    verification_argv,
)
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.records.incident import Failure
from pytest_selfheal.records.plan import Plan

ROOT = Path(__file__).resolve().parent.parent
NOW = "2026-02-17T03:15:00+00:00"
INCIDENT_ID = "incident_20260217_031500_run1"


def failure(
    nodeid: Optional[str],
    message: str,
    *,
    test: Optional[str] = None,
    failure_type: str = "TEST_ASSERTION",
    fingerprint: Optional[str] = None,
    code_fixable: bool = True,
    transient: bool = False,
    failure_class: str = "deterministic",
    target_paths: Optional[list[str]] = None,
) -> dict[str, Any]:
    test = test or (nodeid or "x").replace("/", ".").replace(".py::", "::")
    return {
        "nodeid": nodeid,
        "test": test,
        "outcome": "failed",
        "fingerprint": fingerprint or f"fp-{test}",
        "signature": f"{failure_type} | {test} | {message}",
        "scheme": 1,
        "failure_type": failure_type,
        "code_fixable": code_fixable,
        "transient": transient,
        "failure_class": failure_class,
        "message": message,
        "target_paths": target_paths if target_paths is not None else [],
    }


def incident(*failures: dict[str, Any]) -> dict[str, Any]:
    first = failures[0]
    return {
        "incident_id": INCIDENT_ID,
        "status": "new",
        "step": first["nodeid"] or first["test"],
        "failure_class": first["failure_class"],
        "message": first["message"],
        "error_signature": first["signature"],
        "failures": list(failures),
    }


THREE = incident(
    failure("tests/test_calc.py::test_add", "assert 3 == 4", target_paths=["tests/test_calc.py", "src/calc.py"]),
    failure("tests/test_calc.py::test_sub", "assert 3 == 4", target_paths=["tests/test_calc.py", "src/calc.py"]),
    failure(
        "tests/test_io.py::test_read",
        "ModuleNotFoundError: No module named 'yaml'",
        failure_type="TOOLING_ENV",
        code_fixable=False,
        failure_class="environment",
    ),
)


def test_contract_fields_and_schema() -> None:
    plan = build_plan_doc(THREE, generated_at=NOW)
    for key in (
        "incident_id",
        "generated_at",
        "summary",
        "root_cause_hypotheses",
        "actions",
        "verification_commands",
        "done_criteria",
    ):
        assert key in plan
    assert plan["incident_id"] == INCIDENT_ID and plan["generated_at"] == NOW and plan["revision"] == 1
    for action in plan["actions"]:
        assert {"id", "title", "priority", "risk", "target_paths", "verification"} <= set(action)
        assert {"fingerprint", "fingerprints", "signature", "failure_type", "nodeids"} <= set(action)
    for hyp in plan["root_cause_hypotheses"]:
        assert {"id", "confidence", "reason"} <= set(hyp)
    assert "Target error no longer reproduces" in plan["done_criteria"]
    assert "Listed verification commands pass" in plan["done_criteria"]
    json.dumps(plan)
    assert_valid("plan", plan)


def test_one_action_per_fingerprint_group() -> None:
    plan = build_plan_doc(THREE, generated_at=NOW)
    assert [a["id"] for a in plan["actions"]] == ["A1", "A2"]
    a1, a2 = plan["actions"]
    assert a1["nodeids"] == ["tests/test_calc.py::test_add", "tests/test_calc.py::test_sub"]
    assert a1["fingerprints"] == ["fp-tests.test_calc::test_add", "fp-tests.test_calc::test_sub"]
    assert a1["signature"] == "TEST_ASSERTION | assert 3 == 4"
    assert a1["failure_type"] == "TEST_ASSERTION"
    assert a2["nodeids"] == ["tests/test_io.py::test_read"]
    # The group fingerprint is stable and test-independent.
    assert a1["fingerprint"] == build_plan_doc(THREE, generated_at=NOW)["actions"][0]["fingerprint"]
    assert a1["fingerprint"] != a2["fingerprint"]


def test_same_message_different_type_are_different_groups() -> None:
    inc = incident(
        failure("t.py::a", "boom"),
        failure("t.py::b", "boom", failure_type="UNKNOWN", code_fixable=False),
    )
    assert len(build_plan_doc(inc, generated_at=NOW)["actions"]) == 2


def test_verification_commands() -> None:
    plan = build_plan_doc(THREE, generated_at=NOW)
    assert plan["actions"][0]["verification"] == [
        "python -m pytest -q tests/test_calc.py::test_add tests/test_calc.py::test_sub"
    ]
    assert plan["verification_commands"] == [
        "python -m pytest -q tests/test_calc.py::test_add tests/test_calc.py::test_sub tests/test_io.py::test_read"
    ]
    assert verification_argv(Plan.from_json(plan, "plan")) == [
        [
            "python",
            "-m",
            "pytest",
            "-q",
            "tests/test_calc.py::test_add",
            "tests/test_calc.py::test_sub",
            "tests/test_io.py::test_read",
        ]
    ]


def test_custom_python_is_quoted() -> None:
    plan = build_plan_doc(THREE, generated_at=NOW, python="/opt/my python/bin/python3")
    assert verification_argv(Plan.from_json(plan, "plan"))[0][0] == "/opt/my python/bin/python3"


def test_parametrised_ids_round_trip() -> None:
    ids = ["tests/test_p.py::test_x[a b]", "tests/test_p.py::test_x[it's]", 'tests/test_p.py::test_x["q" | $HOME;]']
    inc = incident(*[failure(n, "assert False", fingerprint=f"f{i}") for i, n in enumerate(ids)])
    plan = build_plan_doc(inc, generated_at=NOW)
    assert verification_argv(Plan.from_json(plan, "plan")) == [["python", "-m", "pytest", "-q", *ids]]
    assert shlex.split(plan["actions"][0]["verification"][0])[4:] == ids


@given(st.lists(st.text(min_size=1, max_size=30).filter(lambda s: "\x00" not in s), min_size=1, max_size=5))
def test_any_nodeid_survives_shlex(nodeids: list[str]) -> None:
    command = pytest_command(nodeids)
    assert shlex.split(command) == ["python", "-m", "pytest", "-q", *nodeids]


def test_nodeid_fallback_to_test_identity() -> None:
    inc = incident(failure(None, "assert 1 == 2", test="tests.test_x.TestA::test_b"))
    plan = build_plan_doc(inc, generated_at=NOW)
    assert plan["actions"][0]["nodeids"] == ["tests.test_x.TestA::test_b"]
    assert plan["verification_commands"] == ["python -m pytest -q tests.test_x.TestA::test_b"]
    # A junit identity has no file part: no made-up target path.
    assert plan["actions"][0]["target_paths"] == []


def test_target_paths_union_and_test_paths_apart() -> None:
    inc = incident(
        failure("tests/test_a.py::test_1", "E", target_paths=["src/a.py", "tests/test_a.py"]),
        failure("tests/sub/test_b.py::TestB::test_2[x]", "E", target_paths=["src/b.py", "src/a.py", "src/c.py"]),
    )
    action = build_plan_doc(inc, generated_at=NOW)["actions"][0]
    # Without root-cause evidence: the traceback's source files; the failing tests' files apart.
    assert action["target_paths"] == ["src/a.py", "src/b.py", "src/c.py"]
    assert action["test_paths"] == ["tests/test_a.py", "tests/sub/test_b.py"]
    assert action["root_cause"] == {"evidence": "fingerprint"}
    assert action["risk"] == "medium"


def test_unsafe_test_file_is_not_a_target() -> None:
    inc = incident(failure("../evil.py::test_x", "E"), failure("/abs/test_y.py::test_y", "E"))
    assert build_plan_doc(inc, generated_at=NOW)["actions"][0]["target_paths"] == []


@pytest.mark.parametrize(
    "kwargs,priority",
    [
        ({}, "P0"),
        ({"transient": True, "failure_class": "transient", "code_fixable": False}, "P1"),
        ({"failure_type": "TIMEOUT", "code_fixable": False, "failure_class": "transient", "transient": True}, "P1"),
        ({"failure_type": "UNKNOWN", "code_fixable": False}, "P1"),
        ({"failure_type": "TOOLING_ENV", "code_fixable": False, "failure_class": "environment"}, "P2"),
    ],
)
def test_priority(kwargs: dict[str, Any], priority: str) -> None:
    plan = build_plan_doc(incident(failure("t.py::a", "E", **kwargs)), generated_at=NOW)
    assert plan["actions"][0]["priority"] == priority


def test_risk_by_target_paths() -> None:
    low = incident(failure("tests/t.py::a", "E", target_paths=["src/a.py"]))
    assert build_plan_doc(low, generated_at=NOW)["actions"][0]["risk"] == "low"


def test_hypotheses_by_failure_type() -> None:
    plan = build_plan_doc(THREE, generated_at=NOW)
    h1, h2 = plan["root_cause_hypotheses"]
    assert (h1["id"], h1["confidence"], h1["actions"]) == ("H1", "medium", ["A1"])
    assert "wrong value or the test expectation is outdated" in h1["reason"]
    assert (h2["id"], h2["confidence"], h2["actions"]) == ("H2", "high", ["A2"])
    assert "environment problem" in h2["reason"]
    transient = build_plan_doc(
        incident(failure("t.py::a", "Connection reset", transient=True, failure_class="transient")),
        generated_at=NOW,
    )
    assert transient["root_cause_hypotheses"][0]["confidence"] == "low"


def test_summary() -> None:
    summary = build_plan_doc(THREE, generated_at=NOW)["summary"]
    assert summary.startswith("3 failing tests in 2 root cause groups")
    assert "tests/test_calc.py::test_add" in summary and "assert 3 == 4" in summary


def test_normalised_message_cuts_the_test_exactly() -> None:
    f = failure("t.py::a | b", "x | y")
    f["test"] = "t::a | b"
    f["signature"] = "TEST_ASSERTION | t::a | b | x | y"
    assert normalised_message(Failure.from_json(f, "f")) == "x | y"
    assert normalised_message(Failure(signature="A | t | m | n")) == "m | n"
    assert normalised_message(Failure(message="raw")) == "raw"
    both = [Failure.from_json(failure(n, "m"), "f") for n in ("t.py::a", "t.py::b")]
    assert len(group_failures(both)) == 1


def test_incident_without_failures_list() -> None:
    inc = {
        "incident_id": INCIDENT_ID,
        "step": "tests/test_a.py::test_x",
        "failure_class": "deterministic",
        "failure_type": "TEST_ASSERTION",
        "message": "assert 1 == 2",
        "error_signature": "TEST_ASSERTION | tests.test_a::test_x | assert 1 == 2",
    }
    plan = build_plan_doc(inc, generated_at=NOW)
    assert plan["verification_commands"] == ["python -m pytest -q tests/test_a.py::test_x"]
    inc["step"] = "collection"
    plan = build_plan_doc(inc, generated_at=NOW)
    assert plan["verification_commands"] == ["python -m pytest -q --collect-only"]
    assert plan["actions"][0]["verification"] == ["python -m pytest -q --collect-only"]


def test_missing_incident_id() -> None:
    with pytest.raises(InputError):
        build_plan_doc({"failures": []}, generated_at=NOW)


@pytest.mark.parametrize(
    "plan",
    [
        {},
        {"verification_commands": "python -m pytest"},
        {"verification_commands": [1]},
        {"verification_commands": [""]},
        {"verification_commands": ["python -m pytest 'unclosed"]},
    ],
)
def test_verification_argv_rejects_bad_plans(plan: dict[str, Any]) -> None:
    doc = {k: v for k, v in build_plan_doc(THREE, generated_at=NOW).items() if k != "verification_commands"}
    with pytest.raises(InputError) as info:
        verification_argv(Plan.from_json({**doc, **plan}, "plan.json"))
    assert "plan.json" in str(info.value) and "\n" not in str(info.value)


def test_render_plan_md() -> None:
    plan = build_plan_doc(THREE, generated_at=NOW)
    md = render_plan_md(Plan.from_json(plan, "plan"))
    assert md.startswith(f"# Remediation plan: {INCIDENT_ID}\n")
    headings = ("## Summary", "## Root-cause hypotheses", "## Actions", "## Verification commands", "## Done criteria")
    for heading in headings:
        assert heading in md
    assert "| ID | Priority | Risk | Title | Target paths | Test paths | Tests |" in md
    assert "| A1 | P0 | low |" in md
    assert "```sh\n" + plan["verification_commands"][0] + "\n```" in md
    assert "- [ ] Target error no longer reproduces" in md


def test_render_escapes_table_cells_and_fences() -> None:
    inc = incident(failure("t.py::test[a|b]", "weird ``` message | with pipe\nand newline"))
    md = render_plan_md(Plan.from_json(build_plan_doc(inc, generated_at=NOW), "plan"))
    row = next(line for line in md.splitlines() if line.startswith("| A1 "))
    assert row.count(" | ") == 6  # the pipes inside cells are escaped
    assert "t.py::test[a\\|b]" in row
    inc = incident(failure("t.py::test_x[```]", "E"))
    md = render_plan_md(Plan.from_json(build_plan_doc(inc, generated_at=NOW), "plan"))
    assert "````sh\n" in md


def test_replan() -> None:
    plan = build_plan_doc(THREE, generated_at=NOW)
    attempts = [
        {"iteration": 1, "failures": [{"fingerprint": "fp-a"}], "actions_applied": ["A1"], "error_signature": "s"},
        {"iteration": 2, "failures": [{"fingerprint": "fp-a"}, {"fingerprint": "fp-b"}], "actions_applied": []},
    ]
    records = [attempt_record(**a) for a in attempts]
    new = replan(Plan.from_json(plan, "plan"), records, generated_at="2026-02-17T04:00:00+00:00").to_json()
    assert new["revision"] == 2 and new["generated_at"] == "2026-02-17T04:00:00+00:00"
    assert plan["revision"] == 1  # the input is not modified
    assert "Revision 2: 2 iterations" in new["summary"] and "fp-a, fp-b" in new["summary"]
    assert "actions tried: A1" in new["summary"]
    assert [h["confidence"] for h in new["root_cause_hypotheses"]] == ["low", "medium", "medium"]
    assert "outside its target paths" in new["root_cause_hypotheses"][-1]["reason"]
    assert new["replan_history"] == [{"revision": 1, "iterations": 2, "fingerprints_seen": ["fp-a", "fp-b"]}]
    assert new["actions"] == plan["actions"]
    again_plan = replan(Plan.from_json(new, "plan"), records[:1])
    again = again_plan.to_json()
    assert again["revision"] == 3 and again["generated_at"] == new["generated_at"]
    assert again["summary"].count("Revision") == 1  # only the latest note; history keeps all
    assert len(again["replan_history"]) == 2
    assert "## Previous attempts" in render_plan_md(again_plan) and "revision 3" in render_plan_md(again_plan)


def test_replan_falls_back_to_error_signature() -> None:
    plan = build_plan_doc(THREE, generated_at=NOW)
    new = replan(Plan.from_json(plan, "plan"), [attempt_record(iteration=1, error_signature="sig-1")]).to_json()
    assert new["replan_history"][0]["fingerprints_seen"] == ["sig-1"]
