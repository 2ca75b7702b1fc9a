"""Root cause, not message, end to end: a real `pytest --selfheal`
capture (a subprocess) in a real git repository resolves each failure's evidence, the plan
has one action per root cause whose target paths name the defining module, and a real agent
command (a small script) that fixes that module in the worktree gets `success`."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import capture, make_project, selfheal

from pytest_selfheal.errors import EXIT_OK
from pytest_selfheal.plan.markdown import MAX_PLAN_MD_BYTES

INI = "pythonpath = .\n"

# The "agent": WORKTREE PROMPT_FILE PATH OLD NEW. It refuses (exit 9) unless the prompt
# offers PATH as a file to edit, then replaces OLD by NEW in PATH inside the worktree.
AGENT = textwrap.dedent(
    """
    import pathlib, sys
    worktree, prompt, path, old, new = sys.argv[1:6]
    allowed = [l for l in pathlib.Path(prompt).read_text().splitlines() if l.startswith("- Only edit these files")]
    if not allowed or f"`{path}`" not in allowed[0]:
        sys.exit(9)
    target = pathlib.Path(worktree, path)
    target.write_text(target.read_text().replace(old, new))
    """
)


def plan_of(project: Path, incident_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project / ".selfheal" / "error_plans" / incident_id / "plan.json").read_text())
    return data


def incident_of(project: Path, incident_id: str) -> dict[str, Any]:
    path = project / ".selfheal" / "error_inbox" / incident_id / "incident.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def agent_command(tmp_path: Path, path: str, old: str, new: str) -> str:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    return json.dumps([sys.executable, str(script), "{worktree}", "{prompt_file}", path, old, new])


def run_result(project: Path, incident_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (project / ".selfheal" / "error_runs" / incident_id / "run_result.json").read_text())
    return data


# --------------------------------------------------------------------------- (a) six shapes, one bug

WINDOW = """
    def window(items, size):
        \"\"\"The first `size` items (off by one: drops the last).\"\"\"
        return items[:size - 1]
"""

SIX_SHAPES = """
    import pytest
    from lib.window import window

    CASES = range(5)

    @pytest.mark.parametrize("n", CASES)
    def test_length(n):
        assert len(window(list(range(10)), n + 2)) == n + 2

    @pytest.mark.parametrize("n", CASES)
    def test_equal(n):
        assert window(list(range(10)), n + 2) == list(range(n + 2))

    @pytest.mark.parametrize("n", CASES)
    def test_last(n):
        assert window(list(range(10)), n + 2)[-1] == n + 1, f"last item of {n + 2}"

    @pytest.mark.parametrize("n", CASES)
    def test_index(n):
        window(list(range(10)), n + 1)[n]

    @pytest.mark.parametrize("n", CASES)
    def test_text(n):
        assert "".join(window(list("abcdefgh"), n + 2)) == "abcdefgh"[: n + 2]

    @pytest.mark.parametrize("n", CASES)
    def test_contains(n):
        assert n + 1 in window(list(range(10)), n + 2)
"""


def test_thirty_failures_of_one_bug_in_six_assertion_shapes_are_one_action(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"lib/__init__.py": "", "lib/window.py": WINDOW,
                                            "tests/test_window.py": SIX_SHAPES}, ini=INI)
    incident_id = capture(project)
    incident = incident_of(project, incident_id)
    assert len(incident["failures"]) == 30
    assert all([(c["path"], c["name"]) for c in f["root_cause"]["calls"]] == [("lib/window.py", "window")] for f in incident["failures"])
    plan = plan_of(project, incident_id)
    [action] = plan["actions"]
    assert action["root_cause"] == {"evidence": "calls", "path": "lib/window.py", "name": "window"}
    assert action["target_paths"] == ["lib/window.py"] and action["test_paths"] == ["tests/test_window.py"]
    assert len(action["nodeids"]) == 30
    # However many, the command selects every node id (never the test file).
    assert shlex.split(plan["verification_commands"][0])[4:] == action["nodeids"]
    shown = selfheal(project, "show", incident_id)
    assert shown.returncode == EXIT_OK, shown.stderr
    assert "30 in 1 root cause(s)" in shown.stdout
    assert "A1: lib/window.py::window (evidence: calls), 30 failing test(s)" in shown.stdout
    assert "target paths (fix here): lib/window.py" in shown.stdout and "test paths: tests/test_window.py" in shown.stdout
    data = json.loads(selfheal(project, "show", incident_id, "--json").stdout)
    assert [c["nodeids"] for c in data["root_causes"]] == [action["nodeids"]]
    # Without a plan, show computes the same grouping from incident.json.
    shutil.rmtree(project / ".selfheal" / "error_plans" / incident_id)
    shown = selfheal(project, "show", incident_id)
    assert shown.returncode == EXIT_OK, shown.stderr
    assert "lib/window.py::window (evidence: calls), 30 failing test(s)" in shown.stdout and "plan        none" in shown.stdout


# --------------------------------------------------------------------------- (b) a re-exporting package

CORE = """
    __all__ = ["area", "perimeter"]

    def area(w, h):
        return w * h + 1

    def perimeter(w, h):
        if w < 0 or h < 0:
            raise ValueError("negative side")
        return 2 * (w + h)
"""

SHAPE_TESTS = """
    import shapes
    from shapes import area, perimeter

    def test_area():
        assert area(2, 3) == 6

    def test_area_square():
        assert shapes.area(2, 2) == 4, "a square"

    def test_perimeter():
        assert perimeter(1, 2) == 6
"""


@pytest.mark.slow
def test_a_bug_behind_a_re_export_is_targeted_at_the_defining_module_and_fixed(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"shapes/__init__.py": "from .core import *\n",
                                            "shapes/core.py": CORE, "tests/test_shapes.py": SHAPE_TESTS}, ini=INI)
    incident_id = capture(project)
    plan = plan_of(project, incident_id)
    [action] = plan["actions"]  # two messages, one function
    assert action["target_paths"] == ["shapes/core.py"]  # not shapes/__init__.py, not the test
    assert action["test_paths"] == ["tests/test_shapes.py"]
    assert action["root_cause"] == {"evidence": "calls", "path": "shapes/core.py", "name": "area"}
    md = (project / ".selfheal" / "error_plans" / incident_id / "plan.md").read_text()
    assert "| shapes/core.py | tests/test_shapes.py |" in md
    command = agent_command(tmp_path, "shapes/core.py", "w * h + 1", "w * h")
    result = selfheal(project, "loop", incident_id, "--set", f"repair.command={command}")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    outcome = run_result(project, incident_id)
    assert outcome["final_status"] == "resolved" and outcome["stop_reason"] == "success", outcome
    attempts = sorted((project / ".selfheal" / "error_runs" / incident_id).glob("attempt_*.json"))
    first = json.loads(attempts[0].read_text())
    assert first["repair"]["files_changed"] == ["shapes/core.py"] and not first["repair"].get("scope_denied")
    prompt = (project / ".selfheal" / "error_runs" / incident_id / "prompt_01.md").read_text()
    assert "tests to make pass: `tests/test_shapes.py`" in prompt
    assert "root cause: the failing tests call `shapes/core.py::area`" in prompt


# --------------------------------------------------------------------------- (c) 161 failures, one off-by-one

PAGES = """
    def paginate(items, size):
        \"\"\"Pages of `size` items (off by one: each page holds one item too many).\"\"\"
        return [items[i:i + size + 1] for i in range(0, len(items), size)]

    def page_count(items, size):
        return len(paginate(items, size))
"""

FORMAT = """
    def describe(page):
        return f"{len(page)} items"
"""


def _page_tests(index: int, count: int) -> str:
    helper = ["from lib.fmt import describe", "import lib.fmt as fmt"][index % 2]
    return textwrap.dedent(
        f"""
        import pytest
        {helper}
        from lib.pages import paginate

        @pytest.mark.parametrize("n", range({count}))
        def test_pages_{index}(n):
            pages = paginate(list(range(n + 10)), 3)
            assert len(pages[0]) == 3, describe(pages[0]) if {index % 2} == 0 else fmt.describe(pages[0])

        def test_unrelated_passes_{index}():
            assert True
        """
    )


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_an_off_by_one_failing_161_tests_is_one_small_plan_and_is_fixed(tmp_path: Path) -> None:
    files = {"lib/__init__.py": "", "lib/pages.py": PAGES, "lib/fmt.py": FORMAT}
    counts = [21] * 7 + [14]  # 161 failing tests in 8 files
    for index, count in enumerate(counts):
        files[f"tests/test_pages_{index}.py"] = _page_tests(index, count)
    project = make_project(tmp_path / "p", files, ini=INI)
    incident_id = capture(project)
    assert len(incident_of(project, incident_id)["failures"]) == 161
    plan = plan_of(project, incident_id)
    [action] = plan["actions"]
    assert action["root_cause"]["path"] == "lib/pages.py" and action["root_cause"]["name"] == "paginate"
    assert action["target_paths"][0] == "lib/pages.py" and len(action["nodeids"]) == 161
    md = (project / ".selfheal" / "error_plans" / incident_id / "plan.md").read_bytes()
    assert len(md) < 16 * 1024 < MAX_PLAN_MD_BYTES
    [command] = plan["verification_commands"]
    assert sorted(shlex.split(command)[4:]) == sorted(action["nodeids"])
    # The fix verifies exactly the 161 failing node ids (through the selection file).
    fix = agent_command(tmp_path, "lib/pages.py", "i + size + 1", "i + size")
    result = selfheal(project, "loop", incident_id, "--set", f"repair.command={fix}")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    outcome = run_result(project, incident_id)
    assert outcome["stop_reason"] == "success", outcome
    attempts: list[Path] = sorted((project / ".selfheal" / "error_runs" / incident_id).glob("attempt_*.json"))
    outcomes = json.loads(attempts[-1].read_text())["outcomes"]
    assert sorted(outcomes) == sorted(action["nodeids"]) and set(outcomes.values()) == {"passed"}


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_evidence_travels_from_xdist_workers(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"shapes/__init__.py": "from .core import *\n",
                                            "shapes/core.py": CORE, "tests/test_shapes.py": SHAPE_TESTS}, ini=INI)
    incident_id = capture(project, "-p", "xdist", "-n", "2")
    failures = incident_of(project, incident_id)["failures"]
    assert len(failures) == 2
    assert all(f["root_cause"]["calls"][0]["name"] == "area" and f["root_cause"]["calls"][0]["path"] == "shapes/core.py" for f in failures)
    [action] = plan_of(project, incident_id)["actions"]
    assert action["target_paths"] == ["shapes/core.py"]
