"""What a person does with a repair's outcome: review a proposed patch (`selfheal show`), apply
it (`selfheal apply`: approval never covers a test edit), and loop again after a scope denial
(`selfheal loop ID --reopen --approve`). Real git repositories, a real provider command (a
small Python script, tests/test_repair_e2e.py), ``selfheal`` in process (``helpers.cli``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import PY, assert_replay_equals_disk, cli
from test_repair_e2e import AGENT, BUGGY, FIXED, TESTS, Project, job_env

from pytest_selfheal.errors import EXIT_OK, EXIT_REFUSED, EXIT_UNRESOLVED
from pytest_selfheal.store.root import Store

# The agent of test_repair_e2e.py, plus a mode that fixes the code *and* loosens the test.
PROVIDER = Path(PY).name  # the provider command is this interpreter (python, python3…)
REVIEW_AGENT = AGENT + """
if mode == "fix_and_loosen":
    calc.write_text(calc.read_text().replace("a - b", "a + b"))
    tests = pathlib.Path(worktree, "test_calc.py")
    tests.write_text(tests.read_text().replace("== 5", "== 5 or True"))
"""


def stopped_tests_edited(tmp_path: Path) -> Project:
    """An incident whose loop stopped ``tests_edited``: its final.patch edits calc.py and test_calc.py."""
    project = Project(tmp_path)
    project.agent.write_text(REVIEW_AGENT)
    result = project.loop("fix_and_loosen", "--approve", "--allow-test-edits")
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    assert project.run_result()["stop_reason"] == "tests_edited"
    project.loop_output = result.stdout + result.stderr  # type: ignore[attr-defined]
    return project


def test_after_tests_edited_review_comes_first_and_apply_needs_allow_test_edits(tmp_path: Path) -> None:
    project = stopped_tests_edited(tmp_path)
    # The loop's text: review the test diff, allow the test edits deliberately; never "apply it anyway".
    said: str = project.loop_output  # type: ignore[attr-defined]
    assert "apply it anyway" not in said
    assert f"review the test diff first (selfheal show {project.incident_id})" in said
    assert f"selfheal apply {project.incident_id} --allow-test-edits" in said
    outcome = project.run_result()
    assert "test_calc.py" in outcome["repair"]["message"] and outcome["repair"]["applied"] is False
    commands = [option["command"] for option in outcome["decision_point"]["options"]]
    assert f"selfheal apply {project.incident_id}" not in commands
    assert f"selfheal apply {project.incident_id} --allow-test-edits" in commands

    # show: the proposed patch, its test file first.
    shown = cli("show", project.incident_id, cwd=project.top, env=job_env())
    assert shown.returncode == EXIT_OK, shown.stderr
    text = shown.stdout
    assert "(proposed, not applied); edits test files: test_calc.py" in text
    assert text.index("diff --git a/test_calc.py") < text.index("diff --git a/calc.py")
    assert "-    assert add(2, 3) == 5" in text and "+    return a + b" in text
    data = json.loads(cli("show", project.incident_id, "--json", cwd=project.top, env=job_env()).stdout)
    patch = data["proposed_patch"]
    assert patch["test_files"] == ["test_calc.py"] and patch["applied"] is False
    assert patch["text"].startswith("diff --git a/test_calc.py") and patch["shown_lines"] == patch["total_lines"]

    # apply --yes: refused in one line naming the file, nothing changed.
    refused = cli("apply", project.incident_id, "--yes", cwd=project.top, env=job_env())
    assert refused.returncode == EXIT_REFUSED
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("selfheal: error: ")
    assert "edits test files (test_calc.py)" in refused.stderr and "nothing was changed" in refused.stderr
    assert (project.top / "test_calc.py").read_text() == TESTS and (project.top / "calc.py").read_text() == BUGGY
    assert project.run_result()["repair"]["applied"] is False
    # Deliberately allowed on the command line: applied.
    allowed = cli("apply", project.incident_id, "--yes", "--allow-test-edits", cwd=project.top, env=job_env())
    assert allowed.returncode == EXIT_OK, allowed.stderr
    assert (project.top / "calc.py").read_text() == FIXED and "or True" in (project.top / "test_calc.py").read_text()


@pytest.mark.slow  # ~5 s; by default: the --allow-test-edits flag above
def test_apply_with_allow_test_edits_in_the_config(tmp_path: Path) -> None:
    project = stopped_tests_edited(tmp_path)
    config = project.top / ".planning" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"ralf_lite": {"repair": {"allow_test_edits": True}}}))
    applied = cli("apply", project.incident_id, "--yes", cwd=project.top, env=job_env())
    assert applied.returncode == EXIT_OK, applied.stderr
    assert "or True" in (project.top / "test_calc.py").read_text()


def test_show_bounds_and_redacts_the_patch(tmp_path: Path) -> None:
    project = Project(tmp_path)
    secret = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    body = "".join(f"+line {n}\n" for n in range(1000))
    patch = (f"diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,0 +1,1001 @@\n"
             f"+TOKEN = '{secret}'\n{body}")
    project.runs.mkdir(parents=True, exist_ok=True)
    (project.runs / "final.patch").write_text(patch)
    text = cli("show", project.incident_id, cwd=project.top, env=job_env()).stdout
    assert secret not in text and "+TOKEN = " in text
    assert "+line 100\n" in text and "+line 900" not in text
    assert f"(first 200 of 1005 lines; the whole patch: error_runs/{project.incident_id}/final.patch)" in text


@pytest.mark.parametrize("remedy", [
    pytest.param(("--approve",), id="approve"),
    pytest.param(("--set", 'repair.allowed_paths=["other.py"]'), id="allowed_paths", marks=pytest.mark.slow),  # ~8 s
])
def test_a_reopen_with_approval_after_scope_expansion_denied_runs_the_provider(
    tmp_path: Path, remedy: tuple[str, ...]
) -> None:
    project = Project(tmp_path)
    denied = project.loop("out_of_scope")
    assert denied.returncode == EXIT_UNRESOLVED and project.run_result()["stop_reason"] == "scope_expansion_denied"
    assert project.starts() == 1
    # The remedy the report prints: reopen with approval (or a wider scope). A fresh budget, the provider runs.
    again = project.loop("out_of_scope", "--reopen", *remedy)
    said = again.stdout + again.stderr
    assert again.returncode == EXIT_OK, said
    assert project.starts() == 2
    assert f"incident {project.incident_id} iteration 1 of 3: repair: asking command:" in said
    outcome = project.run_result()
    assert (outcome["stop_reason"], outcome["final_status"]) == ("success", "resolved") and project.archived("resolved")
    assert [a["repair"]["scope_denied"] for a in project.attempts()] == [True, False]
    assert_replay_equals_disk(Store(project.top / ".selfheal"), project.incident_id)
    if remedy[0] == "--approve":  # approved up front: the fix reached the working tree, other.py named
        assert "repair: diff (calc.py, other.py) — out of scope, approved up front (--approve or repair.approve): " \
               "other.py" in said
        assert (project.top / "calc.py").read_text() == FIXED and (project.top / "other.py").read_text() == "o = 2\n"
    else:  # in scope, no approval to apply: proposed
        assert (project.top / "calc.py").read_text() == BUGGY and outcome["repair"]["applied"] is False


@pytest.mark.parametrize("approve", [pytest.param(True, id="applied"),
                                     pytest.param(False, id="proposed", marks=pytest.mark.slow)])  # ~4 s
def test_the_report_says_what_the_repair_did_and_what_to_do_next(tmp_path: Path, approve: bool) -> None:
    project = Project(tmp_path)
    assert project.loop("fix", *(("--approve",) if approve else ())).returncode == EXIT_OK
    report = cli("report", project.incident_id, cwd=project.top, env=job_env())
    assert report.returncode == EXIT_OK, report.stderr
    text = report.stdout
    assert f"- Repair: iteration 1: command:{PROVIDER} — diff (calc.py)" in text, text
    assert "Nothing to do" not in text
    next_action = text.split("### Recommended Next Action", 1)[1]
    if approve:
        assert "final.patch: applied to " in text and "(approved up front): 1 file(s): calc.py" in text
        assert "Review the fix the repair applied to your working tree (calc.py)" in next_action
        # show says where the fix is now: the user stashed it away, so it is no longer applied.
        assert "(applied)" in cli("show", project.incident_id, cwd=project.top, env=job_env()).stdout
        subprocess.run(["git", "stash"], cwd=project.top, check=True, capture_output=True)
        shown = cli("show", project.incident_id, cwd=project.top, env=job_env()).stdout
        assert "(applied by the loop, no longer in your working tree)" in shown and "(applied)" not in shown, shown
    else:
        assert "final.patch: proposed, not applied" in text
        assert f"apply it with: selfheal apply {project.incident_id}" in next_action


def test_a_crashed_repair_says_its_exit_code_on_the_line_and_in_the_report(tmp_path: Path) -> None:
    project = Project(tmp_path)
    result = project.loop("crash")
    assert result.returncode == EXIT_UNRESOLVED
    said = result.stdout + result.stderr
    line = "repair: crashed: exit code 3: agent: model quota exceeded — rolled back"
    assert f"iteration 1 of 3: {line}" in said, said
    # Nothing of the repair was kept: the code is the capture's, so the tests are not run again.
    assert "iteration 1 of 3: verification not run: nothing of the repair was kept (crashed), so the code is " \
           "the one the capture ran; its failures stand" in said
    # Iteration 1 ran nothing either: the code is still the one the capture ran.
    assert "iteration 2 of 3: verification not run: nothing of the repair was kept (crashed), so the code is " \
           "the one the capture ran" in said
    assert "running python -m pytest" not in said
    attempts = project.attempts()
    assert [a["verification_commands"] for a in attempts] == [[], []]
    assert [a["not_run"] for a in attempts] == [["test_calc.py::test_add"]] * 2
    assert project.run_result()["stop_reason"] == "no_fix_found"
    assert_replay_equals_disk(Store(project.top / ".selfheal"), project.incident_id)
    report = cli("report", project.incident_id, cwd=project.top, env=job_env()).stdout
    assert f"- Repair: iteration 1: command:{PROVIDER} — crashed: exit code 3: agent: model quota exceeded" in report
    assert "- Repair: patch: no change was proposed" in report
