"""``selfheal mcp`` driven by the SDK's own client over stdio (a real subprocess).

The server runs as ``python -m pytest_selfheal mcp`` in a real project; each test is one or
two client sessions. The pure bound (``digest.fit``) is checked directly at the end.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Optional

import anyio
import pytest
from helpers import PY, cli, incident_ids, make_project, run_env, run_pytest_selfheal
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ElicitResult

from pytest_selfheal.mcp_server.digest import fit, structured_size

LIMIT = 8000

# A package that re-exports its one function from core.py, and 150 tests of one bug there.
REEXPORT = {
    "pkg/__init__.py": "from .core import *\n",
    "pkg/core.py": """\
        __all__ = ["add"]


        def add(a, b):
            return a - b
        """,
    "tests/test_add.py": """\
        import pytest

        from pkg import add


        @pytest.mark.parametrize("n", range(150))
        def test_add(n):
            assert add(n, 1) == n + 1
        """,
}


def _server_env() -> dict[str, str]:
    # The suite's children run without plugin autoload; the server's pytest child loads ours by name.
    return run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"})


@asynccontextmanager
async def session(project: Path, *server_args: str, elicit: Optional[Callable[..., Awaitable[Any]]] = None,
                  mode: str = "auto") -> AsyncIterator[Client]:
    params = StdioServerParameters(command=PY, args=["-m", "pytest_selfheal", "mcp", *server_args],
                                   cwd=str(project), env=_server_env())
    async with Client(params, elicitation_callback=elicit, read_timeout_seconds=300, mode=mode) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    assert len(result.content) == 1
    return str(result.content[0].text)  # type: ignore[union-attr]


def size_of(result: CallToolResult) -> int:
    return len(text_of(result)) + structured_size(result.structured_content)  # what the bound applies to


def tree_state(project: Path) -> str:
    """``git status --porcelain`` of the project, ignoring the reports root."""
    return subprocess.run(["git", "status", "--porcelain"], cwd=project, capture_output=True, text=True,
                          check=True).stdout


# --------------------------------------------------------------------------- the workflow


@pytest.mark.slow
def test_the_agent_workflow_over_stdio(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", REEXPORT)

    async def scenario() -> None:
        async with session(project) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert sorted(tools) == ["apply", "loop", "report", "run_tests", "show", "status"]
            assert set(tools["run_tests"].input_schema["properties"]) == {"selection", "pytest_args"}
            assert tools["run_tests"].input_schema["properties"]["selection"]["anyOf"][0]["type"] == "array"
            for name in ("show", "loop", "apply"):
                assert tools[name].input_schema["required"] == ["incident_id"], name
            assert all(tool.description for tool in tools.values())
            read_only = {name for name, tool in tools.items() if tool.annotations and tool.annotations.read_only_hint}
            assert read_only == {"status", "show", "report"}
            assert tools["apply"].annotations and tools["apply"].annotations.destructive_hint

            first = await client.call_tool("run_tests", {"pytest_args": ["-q", "-p", "no:cacheprovider"]})
            assert not first.is_error, text_of(first)
            verdict = first.structured_content or {}
            incident_id = verdict["captured"]
            assert verdict["decision"] == "CONTINUE" and verdict["incident_id"] == incident_id
            assert verdict["counts"] == {"failed": 150} and verdict["pytest_exit_code"] == 1
            text = text_of(first)
            assert text.startswith(f"CONTINUE: captured incident {incident_id}")
            assert "target paths (fix here): pkg/core.py" in text
            # The structured part carries the digest too: Claude Code gives the model only it.
            digest = verdict["digest"]
            assert digest[0].startswith("## Root cause 1 of 1: A1: pkg/core.py::add") and len(digest) == 1, digest
            assert "target paths (fix here): pkg/core.py" in digest[0] and "- assert -1 == (0 + 1)" in digest[0]
            assert "the digest" in verdict["next"]
            assert size_of(first) <= LIMIT

            shown = await client.call_tool("show", {"incident_id": incident_id})
            digest = text_of(shown)
            assert not shown.is_error and size_of(shown) <= LIMIT
            # One root cause, in the file that defines add, not the package that re-exports it.
            assert "## Root cause 1 of 1: A1: pkg/core.py::add" in digest
            assert "where: pkg/core.py:" in digest  # the top suspect's path:line and its code
            assert "150 failing test(s)" in digest and "target paths (fix here): pkg/core.py" in digest
            assert "pkg/__init__.py" not in digest
            assert "failures (150 distinct first line(s)):" in digest and "… 145 more distinct" in digest
            assert "triage: 150 new" in digest and "## Plan" in digest
            assert "Traceback" not in digest and "def test_add" not in digest  # no raw log

            resource = await client.read_resource(f"selfheal://incident/{incident_id}")
            assert resource.contents[0].text == digest  # type: ignore[union-attr]
            one = await client.call_tool("show", {"incident_id": incident_id, "group": 1})
            # One group in full, page by page: its summary, then every test with its first line.
            assert not one.is_error and size_of(one) <= LIMIT and "and 120 more" in text_of(one)
            assert "\n- tests/test_add.py::test_add[0]: assert -1 == (0 + 1)\n" in text_of(one)
            assert re.search(r"\n\[page: tests 1-\d+ of 150; next: show group=1 offset=\d+\]$", text_of(one))
            no_group = await client.call_tool("show", {"incident_id": incident_id, "group": 2})
            assert no_group.is_error and text_of(no_group) == (
                f"show: group 2: incident {incident_id} has 1 root-cause group(s), numbered from 1")
            listed = {str(r.uri) for r in (await client.list_resources()).resources}
            assert listed == {f"selfheal://incident/{incident_id}", f"selfheal://report/{incident_id}"}

            # A change that moves the failure on: the next run is iteration 1, CONTINUE, and the
            # digest shows the failures as they are now, not the capture's messages.
            core = project / "pkg" / "core.py"
            core.write_text(core.read_text().replace("a - b", "a * b"))
            moved = await client.call_tool("run_tests", {})
            verdict = moved.structured_content or {}
            assert (verdict["decision"], verdict["iteration"], verdict["status"]) == ("CONTINUE", 1, "running")
            assert verdict["fingerprint_changed"] is True and verdict["progress"] is True
            assert "- assert 0 == (0 + 1)" in text_of(moved) and "- assert -1 == (0 + 1)" not in text_of(moved)
            assert size_of(moved) <= LIMIT

            # Other options than the capture's: recorded nothing, and the plugin's line says why.
            other = await client.call_tool("run_tests", {"pytest_args": []})
            verdict = other.structured_content or {}
            assert (verdict["decision"], verdict["status"], verdict["iteration"]) == ("CONTINUE", "not_counted", None)
            assert "not counted as an iteration" in text_of(other) and "(-p no:cacheprovider)" in text_of(other)

            # The fix, on disk: the next iteration stops with success.
            core.write_text(core.read_text().replace("a * b", "a + b"))
            fixed = await client.call_tool("run_tests", {})
            assert not fixed.is_error, text_of(fixed)
            verdict = fixed.structured_content or {}
            assert (verdict["decision"], verdict["stop_reason"], verdict["status"]) == ("STOP", "success", "resolved")
            assert verdict["iteration"] == 2 and verdict["max_iterations"] == 3
            assert verdict["fingerprint_changed"] is True and verdict["progress"] is True
            assert text_of(fixed).startswith(f"STOP success: incident {incident_id} is resolved")
            assert (project / ".selfheal" / "error_archive" / "resolved" / incident_id / "incident.json").is_file()
            assert not (project / ".selfheal" / "error_inbox" / incident_id).exists()

            report = await client.call_tool("report", {"incident_id": incident_id})
            assert not report.is_error and size_of(report) <= LIMIT
            assert text_of(report).startswith(f"**selfheal: resolved — stop reason `success`** ({incident_id}")
            assert "\n## RALF Lite Loop Report\n" in text_of(report)
            assert "`success`" in text_of(report)
            resource = await client.read_resource(f"selfheal://report/{incident_id}")
            assert resource.contents[0].text == text_of(report)  # type: ignore[union-attr]

            status = await client.call_tool("status", {})
            assert f"{incident_id}  resolved  resolved  2  " in text_of(status)

            # A bad id is a tool error of one line, and the server answers the next call.
            unknown = await client.call_tool("show", {"incident_id": "incident_20990101_000000_nope"})
            assert unknown.is_error and "\n" not in text_of(unknown)
            assert text_of(unknown).startswith("show: ") and "incident_20990101_000000_nope" in text_of(unknown)
            bad = await client.call_tool("show", {"incident_id": 12})
            assert bad.is_error and text_of(bad).startswith("show: bad arguments: incident_id: ")
            assert "\n" not in text_of(bad)
            again = await client.call_tool("status", {})
            assert not again.is_error and incident_id in text_of(again)

    anyio.run(scenario)


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_a_run_that_closes_one_incident_and_captures_another_is_about_the_new_one(tmp_path: Path) -> None:
    outage = tmp_path / "service-down"  # outside the project: what the captured code sees too
    project = make_project(tmp_path / "proj", {
        "calc.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
        "test_calc.py": """\
            from calc import add, mul


            def test_add():
                assert add(2, 3) == 5


            def test_mul():
                assert mul(2, 3) == 6
            """,
        "test_service.py": f"""\
            import os


            def test_service():
                assert not os.path.exists({str(outage)!r}), "the service is down"
            """,
    })

    async def scenario() -> None:
        async with session(project) as client:
            first = (await client.call_tool("run_tests", {})).structured_content or {}
            old = first["captured"]
            # add is fixed, and in the same run a test the change cannot have broken fails (it
            # fails on the captured code too): the open incident closes, the new failure is its
            # own incident. (A fix that broke mul would be no success: the regression check.)
            (project / "calc.py").write_text("def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n")
            outage.write_text("")
            second = await client.call_tool("run_tests", {})
            verdict = second.structured_content or {}
            new = verdict["captured"]
            assert new and new != old, text_of(second)
            assert (verdict["decision"], verdict["status"], verdict["incident_id"]) == ("CONTINUE", "captured", new)
            assert verdict["iteration"] is None
            assert verdict["closed"] == {"incident_id": old, "iteration": 1, "stop_reason": "success",
                                         "status": "resolved"}
            assert f"incident {old} stopped in the same run (success, now resolved)" in text_of(second)
            assert "test_service.py::test_service" in text_of(second) and "test_calc.py::test_add" not in text_of(second)

    anyio.run(scenario)


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_running_again_after_a_stop_is_stop_again_not_a_fresh_budget(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {
        "calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    })

    async def scenario() -> None:
        async with session(project) as client:
            first = (await client.call_tool("run_tests", {})).structured_content or {}
            incident_id = first["captured"]
            looped = text_of(await client.call_tool("loop", {"incident_id": incident_id}))
            assert looped.startswith("STOP repeated_fingerprint"), looped
            for _ in range(2):  # the agent runs again, code unchanged: the same STOP, no new incident
                again = await client.call_tool("run_tests", {})
                verdict = again.structured_content or {}
                assert (verdict["decision"], verdict["stop_reason"], verdict["incident_id"]) == (
                    "STOP", "already_stopped", incident_id), text_of(again)
                assert verdict["captured"] is None and verdict["stopped_because"] == "repeated_fingerprint"
                assert text_of(again).startswith("STOP already_stopped")
                assert f"selfheal reopen {incident_id}" in verdict["next"]
            listed = text_of(await client.call_tool("status", {}))
            assert listed.startswith("1 incident(s)"), listed

    anyio.run(scenario)


CALC = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                    "def test_other():\n    assert True\n",
}


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_a_renamed_failing_test_is_not_verified_and_reaches_a_stop(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", CALC)

    async def scenario() -> None:
        async with session(project) as client:
            incident_id = ((await client.call_tool("run_tests", {})).structured_content or {})["captured"]
            # The agent renames the failing test out of collection instead of fixing the code.
            test_file = project / "test_calc.py"
            test_file.write_text(test_file.read_text().replace("def test_add", "def check_add"))
            verdicts = []
            for _ in range(3):
                result = await client.call_tool("run_tests", {})
                verdict = result.structured_content or {}
                assert not result.is_error and verdict["incident_id"] == incident_id, text_of(result)
                verdicts.append((verdict["decision"], verdict["stop_reason"], verdict["iteration"]))
                if verdict["decision"] == "STOP":
                    break
                assert "1 not collected or deselected (test_calc.py::test_add): not verified" in verdict["next"]
                # Not "still failing" beside "1 passed": the summary says what the record knows.
                assert "is not verified: its tests ran to no verdict" in verdict["summary"], verdict["summary"]
                # The root cause is still shown: the digest is never empty while the test is not verified.
                assert "## Root cause 1 of 1" in text_of(result) and "calc.py" in text_of(result)
            # The rename changed a file (an attempt), then nothing changed twice: the empty-diff stop.
            assert verdicts == [("CONTINUE", None, 1), ("CONTINUE", None, 2), ("STOP", "no_fix_found", 3)], verdicts

    anyio.run(scenario)


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_an_unchanged_run_is_no_attempt_and_a_weakened_test_stays_stopped(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", CALC)

    async def scenario() -> None:
        async with session(project) as client:
            incident_id = ((await client.call_tool("run_tests", {})).structured_content or {})["captured"]
            same = await client.call_tool("run_tests", {})
            verdict = same.structured_content or {}
            assert (verdict["decision"], verdict["iteration"]) == ("CONTINUE", 1), text_of(same)
            assert "nothing changed since the last run" in verdict["summary"]
            test_file = project / "test_calc.py"
            test_file.write_text(test_file.read_text().replace("== 5", "== -1"))  # the test weakened to the bug
            edited = (await client.call_tool("run_tests", {})).structured_content or {}
            assert (edited["decision"], edited["stop_reason"]) == ("STOP", "tests_edited"), edited
            for _ in range(2):  # never "all selected tests passed" while the stop holds
                again = await client.call_tool("run_tests", {})
                verdict = again.structured_content or {}
                assert (verdict["decision"], verdict["stop_reason"], verdict["incident_id"]) == (
                    "STOP", "already_stopped", incident_id), text_of(again)
                assert verdict["stopped_because"] == "tests_edited" and verdict["status"] == "escalated"

    anyio.run(scenario)


# `selfheal mcp` with an audit hook that notes which of the package's modules were loaded
# when the operations' module (tools.py) was imported.
LOAD_PROBE = """
import sys
from pathlib import Path

marker = Path(sys.argv[1])


def hook(event, args):
    if event == "import" and args[0] == "pytest_selfheal.cli.table" and not marker.exists():
        marker.write_text(" ".join(sorted(m for m in sys.modules if m.startswith("pytest_selfheal"))))


sys.addaudithook(hook)
from pytest_selfheal.cli.main import main

sys.exit(main(["mcp"]))
"""


def test_initialize_and_the_tool_list_are_answered_before_the_operations_load(tmp_path: Path) -> None:
    """The server answers ``initialize`` and ``tools/list`` with the SDK and its own module:
    the operations (pytest runs, the store, the loop) and the other commands' modules load at
    the first tool call (docs/benchmarks.md, MCP start)."""
    project = make_project(tmp_path / "proj", CALC)
    marker = tmp_path / "operations-loaded"
    params = StdioServerParameters(command=PY, args=["-c", LOAD_PROBE, str(marker)], cwd=str(project),
                                   env=_server_env())

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=300) as client:
            assert len((await client.list_tools()).tools) == 6
            assert not marker.exists()
            listed = await client.call_tool("status", {})
            assert not listed.is_error and text_of(listed).startswith("no incidents"), text_of(listed)
            loaded = marker.read_text().split()  # what was loaded before the operations
            assert "pytest_selfheal.mcp_server.server" in loaded
            assert [m for m in loaded if m.startswith((
                "pytest_selfheal.mcp_server.tools", "pytest_selfheal.cli.incidents", "pytest_selfheal.cli.ci",
                "pytest_selfheal.store", "pytest_selfheal.run", "pytest_selfheal.loop"))] == []

    anyio.run(scenario)


def test_a_broken_config_is_every_tools_one_line_answer(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {**CALC, ".planning/config.json": '{"ralf_lite": {"max_iterations": 0}}'})

    async def scenario() -> None:
        async with session(project) as client:  # it starts: the client can read why
            for name, arguments in (("status", {}), ("run_tests", {}), ("show", {"incident_id": "latest"}),
                                    ("report", {}), ("loop", {"incident_id": "latest"})):
                result = await client.call_tool(name, arguments)
                text = text_of(result)
                assert result.is_error and text.startswith(f"{name}: ") and "\n" not in text, (name, text)
                assert "max_iterations" in text and "config.json" in text, text
            # Fixed while the server runs: the next call reads it.
            (project / ".planning" / "config.json").write_text("{}")
            assert not (await client.call_tool("status", {})).is_error
        assert not (project / ".selfheal" / "error_inbox").exists()  # nothing ran on the broken config

    anyio.run(scenario)


# --------------------------------------------------------------------------- apply


def _incident_with_patch(project: Path) -> str:
    """Capture the re-export bug, then put a real fix in error_runs/ID/final.patch (as a
    repair provider leaves it) and the tree back as it was."""
    run = subprocess.run([PY, "-m", "pytest", "--selfheal", "-q"], cwd=project, capture_output=True, text=True,
                         env=_server_env(), stdin=subprocess.DEVNULL, timeout=120)
    assert run.returncode == 1, run.stdout[-2000:]
    incident_id = next((project / ".selfheal" / "error_inbox").iterdir()).name
    core = project / "pkg" / "core.py"
    original = core.read_text()
    core.write_text(original.replace("a - b", "a + b"))
    patch = subprocess.run(["git", "diff"], cwd=project, capture_output=True, check=True).stdout
    core.write_text(original)
    (project / ".selfheal" / "error_runs" / incident_id).mkdir(parents=True, exist_ok=True)
    (project / ".selfheal" / "error_runs" / incident_id / "final.patch").write_bytes(patch)
    return incident_id


# auto: the 2026-07-28 protocol, the question rides an input_required result; legacy: the
# server sends elicitation/create mid-call (clients on the 2025 protocol versions).
# The 2025 protocol round (legacy) in the slow tier: the current one runs by default.
@pytest.mark.parametrize("mode", ["auto", pytest.param("legacy", marks=pytest.mark.slow)])
def test_apply_needs_the_users_approval_through_the_client(tmp_path: Path, mode: str) -> None:
    files = dict(REEXPORT)
    files["tests/test_add.py"] = files["tests/test_add.py"].replace("range(150)", "range(2)")
    project = make_project(tmp_path / "proj", files)
    incident_id = _incident_with_patch(project)
    core = project / "pkg" / "core.py"
    clean = tree_state(project)
    asked: list[str] = []
    answers = ["decline", "accept"]

    async def elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        action = answers.pop(0)
        return ElicitResult(action=action, content={"approve": True} if action == "accept" else None)

    async def scenario() -> None:
        # A client that cannot ask: refused, with the command to run by hand; nothing changes.
        async with session(project, mode=mode) as client:
            refused = await client.call_tool("apply", {"incident_id": incident_id})
            assert refused.is_error
            assert f"selfheal apply {incident_id}" in text_of(refused) and "\n" not in text_of(refused)
            assert tree_state(project) == clean and "a - b" in core.read_text()

        async with session(project, elicit=elicit, mode=mode) as client:
            declined = await client.call_tool("apply", {"incident_id": incident_id})
            assert not declined.is_error and text_of(declined).startswith("not applied")
            assert tree_state(project) == clean and "a - b" in core.read_text()

            applied = await client.call_tool("apply", {"incident_id": incident_id})
            assert not applied.is_error, text_of(applied)
            assert text_of(applied).startswith(f"applied final.patch of {incident_id}")
            assert "a + b" in core.read_text()
            assert asked and all(f"Apply final.patch of {incident_id} (1 file(s): pkg/core.py)" in q for q in asked)
            # The user sees the diff, and that no loop verified this patch (no run_result.json).
            assert all("\n-    return a - b\n+    return a + b\n" in q for q in asked)
            assert all("The patch is partial, NOT verified: the loop stopped with no verdict" in q for q in asked)
            assert "(the patch is partial, NOT verified" in text_of(applied)

            again = await client.call_tool("apply", {"incident_id": incident_id})
            assert text_of(again).startswith("nothing to do: final.patch")
            assert len(asked) == 2  # nothing asked when there is nothing to apply

    anyio.run(scenario)


def test_apply_refuses_a_patch_that_edits_tests_without_asking(tmp_path: Path) -> None:
    """Approval never covers a test edit: the apply tool refuses it in one line naming the
    file, before any question, unless repair.allow_test_edits is set."""
    files = dict(REEXPORT)
    files["tests/test_add.py"] = files["tests/test_add.py"].replace("range(150)", "range(2)")
    project = make_project(tmp_path / "proj", files)
    incident_id = _incident_with_patch(project)
    test_file = project / "tests" / "test_add.py"
    original = test_file.read_text()
    test_file.write_text(original.replace("== n + 1", "== n + 1 or True"))
    loosened = subprocess.run(["git", "diff", "--", "tests"], cwd=project, capture_output=True, check=True).stdout
    test_file.write_text(original)
    patch = project / ".selfheal" / "error_runs" / incident_id / "final.patch"
    patch.write_bytes(patch.read_bytes() + loosened)
    clean = tree_state(project)
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})

    async def scenario() -> None:
        async with session(project, elicit=elicit) as client:
            refused = await client.call_tool("apply", {"incident_id": incident_id})
            assert refused.is_error and "\n" not in text_of(refused)
            assert "edits test files (tests/test_add.py)" in text_of(refused)
            assert asked == [] and tree_state(project) == clean

    anyio.run(scenario)


# --------------------------------------------------------------------------- errors and bounds


HOSTILE = {
    "test_slow.py": """\
        import time


        def test_slow():
            time.sleep(60)
        """,
    "test_die.py": """\
        import os
        import signal


        def test_die():
            os.kill(os.getpid(), signal.SIGKILL)
        """,
    "test_many.py": """\
        import pytest


        @pytest.mark.parametrize("n", range(40))
        def test_distinct(n):
            assert f"value {n} ghp_abcdefghijklmnopqrstuvwxyz0123456789" == "other"
        """,
}


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_errors_are_one_line_and_the_server_survives(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", HOSTILE)
    limit = 1500

    async def scenario() -> None:
        async with session(project, "--set", f"mcp.max_chars={limit}") as client:
            killed = await client.call_tool("run_tests", {"selection": ["test_die.py"]})
            assert killed.is_error and "pytest was killed by signal 9" in text_of(killed)

            for args, expected in (
                ({"pytest_args": ["--basetemp=/tmp/elsewhere"]}, "refusing verification command"),
                ({"pytest_args": ["-p", "no:selfheal"]}, "'-p no:selfheal' is refused"),
                ({"selection": ["../outside.py"]}, "inside the project root"),
                ({"selection": ["-x"]}, "selection entries are node ids or paths"),
                ({"selection": "test_many.py"}, "run_tests: bad arguments: selection"),
                ({"args": ["test_many.py"], "selection": []},
                 "run_tests: bad arguments: unknown args (known: pytest_args, selection)"),
            ):
                refused = await client.call_tool("run_tests", args)
                assert refused.is_error and expected in text_of(refused), (args, text_of(refused))
                assert "\n" not in text_of(refused)

            # Even an error is bounded: a refused command naming 400 words is cut to one line.
            long = await client.call_tool("run_tests", {"selection": [f"t{i}.py" for i in range(400)] + ["../x.py"]})
            assert long.is_error and len(text_of(long)) <= limit and "\n" not in text_of(long)
            with pytest.raises(MCPError, match=r"^invalid incident id 'nope': expected incident_"):
                await client.read_resource("selfheal://incident/nope")

            many = await client.call_tool("run_tests", {"selection": ["test_many.py"]})
            assert not many.is_error, text_of(many)
            assert size_of(many) <= limit and "[cut: " in text_of(many)
            incident_id = (many.structured_content or {})["captured"]
            shown = await client.call_tool("show", {"incident_id": incident_id})
            assert size_of(shown) <= limit and "[cut: " in text_of(shown)
            assert f"`selfheal show {incident_id} --json` prints everything" in text_of(shown)
            negative = await client.call_tool("show", {"incident_id": incident_id, "group": 1, "offset": -5})
            assert negative.is_error and text_of(negative) == (
                "show: offset -5: an offset counts tests from the first (0), never below 0")
            # Captured seconds ago without options (none recorded is "none", not "not recorded"):
            # a run with options is judged by the options check, never refused as a pre-options incident.
            other = await client.call_tool("run_tests", {"selection": ["test_many.py"], "pytest_args": ["-q"]})
            assert "captured before pytest options were recorded" not in text_of(other), text_of(other)
            assert not other.is_error and (other.structured_content or {})["incident_id"] == incident_id, text_of(other)
            report = await client.call_tool("report", {})
            assert size_of(report) <= limit
            for result in (many, shown, report):
                assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in text_of(result)
                assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in json.dumps(result.structured_content)

            loop = await client.call_tool("loop", {"incident_id": incident_id})
            assert not loop.is_error and text_of(loop).startswith("STOP ")
            assert size_of(loop) <= limit
            # 40 failures do not fit in 1,500 characters: the sections are shortened by value,
            # the verdict, the decision point and the next action always kept (the first
            # section that did not fit used to end the text, dropping all three).
            stopped = text_of(await client.call_tool("report", {"incident_id": incident_id}))
            assert len(stopped) <= limit and stopped.startswith("**selfheal: escalated"), stopped
            assert "### Decision Point" in stopped and f"selfheal show {incident_id}" in stopped, stopped
            assert "### Recommended Next Action" in stopped and "[cut: " in stopped, stopped

    anyio.run(scenario)


@pytest.mark.slow  # waits out a 3 s timeout; the default tier's errors test covers a killed run
def test_a_run_past_its_timeout_is_one_error_line_and_the_server_survives(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", HOSTILE)

    async def scenario() -> None:
        async with session(project) as client:
            # A 3 s timeout for this call only (the config is read at every call).
            config = project / ".planning" / "config.json"
            config.parent.mkdir()
            config.write_text(json.dumps({"ralf_lite": {"verification": {"timeout_seconds": 3}}}))
            slow = await client.call_tool("run_tests", {"selection": ["test_slow.py"]})
            assert slow.is_error and "\n" not in text_of(slow)
            assert "passed its timeout of 3 s" in text_of(slow)
            config.unlink()
            killed = await client.call_tool("run_tests", {"selection": ["test_die.py"]})
            assert killed.is_error and "pytest was killed by signal 9" in text_of(killed)

    anyio.run(scenario)


def test_without_the_extra_the_command_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a))
    code, out, err = cli("mcp", cwd=tmp_path)
    assert code == 2 and out == ""
    assert err == "selfheal: error: selfheal mcp needs the optional extra (Python 3.10+): " \
                  "pip install 'pytest-selfheal[mcp]'\n"


# --------------------------------------------------------------------------- the bound


@settings(max_examples=200, deadline=None)
@given(
    blocks=st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=3000), max_size=12),
    limit=st.integers(min_value=1, max_value=9000),
)
def test_fit_never_exceeds_the_bound(blocks: list[str], limit: int) -> None:
    text = fit(blocks, limit, what="block(s)", more="call show")
    assert len(text) <= limit
    joined = "\n\n".join(blocks)
    if len(joined) <= limit:
        assert text == joined  # nothing is cut when everything fits
    elif limit >= 200:
        assert "[cut: " in text and "call show" in text


def test_fit_keeps_whole_blocks_in_order() -> None:
    blocks = ["a" * 100, "b" * 100, "c" * 100]
    text = fit(blocks, 300, what="group(s)", more="call show")
    assert text == "a" * 100 + "\n\n" + "b" * 100 + "\n\n" + \
        "[cut: 1 group(s) shortened or left out; call show]"
    assert fit(blocks, 200, what="group(s)", more="call show") == "a" * 100 + "\n\n" + \
        "[cut: 2 group(s) shortened or left out; call show]"


DOCTESTED = 'def add(a, b):\n    """\n    >>> add(1, 2)\n    3\n    """\n    return a - b\n'
DOCTESTED_TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def doctested_incident(tmp_path: Path) -> tuple[Path, str]:
    """A project whose bug fails a test and a doctest, captured at the user's terminal with an
    option the MCP server does not pass (``--doctest-modules``): the project and the incident."""
    project = make_project(tmp_path / "proj", {"calc.py": DOCTESTED, "test_calc.py": DOCTESTED_TESTS})
    assert run_pytest_selfheal(project, "--doctest-modules").returncode == 1
    (incident_id,) = incident_ids(project / ".selfheal")
    return project, incident_id


@pytest.mark.slow  # five runs: tests/test_sticky_stop.py keeps the rule's pure test in the default tier
def test_a_run_that_did_not_run_a_stopped_incidents_failing_tests_says_so(tmp_path: Path) -> None:
    project, incident_id = doctested_incident(tmp_path)

    async def scenario() -> None:
        async with session(project) as client:
            looped = text_of(await client.call_tool("loop", {"incident_id": incident_id}))
            assert looped.startswith("STOP repeated_fingerprint"), looped
            (project / "calc.py").write_text(DOCTESTED.replace("a - b", "a + b"))
            (project / "test_calc.py").write_text("# edited\n" + DOCTESTED_TESTS)
            verdict = (await client.call_tool("run_tests", {})).structured_content or {}
            assert (verdict["decision"], verdict["status"]) == ("STOP", "passed"), verdict
            assert (f"incident {incident_id} stopped (repeated_fingerprint); of the tests it failed, 1 not collected "
                    "by this run (calc.py::calc.add): this run reaches no verdict on it") in verdict["summary"]
            # The stopped capture's own option is trusted as in verification: the doctest runs again.
            again = await client.call_tool("run_tests", {"pytest_args": ["--doctest-modules"]})
            assert not again.is_error and (again.structured_content or {})["counts"] == {"passed": 2}, text_of(again)

    anyio.run(scenario)


@pytest.mark.slow  # five runs: tests/test_sticky_stop.py keeps the rule's pure tests in the default tier
def test_a_green_run_says_a_stopped_incidents_failing_tests_pass_now(tmp_path: Path) -> None:
    project, incident_id = doctested_incident(tmp_path)
    said = (f"incident {incident_id} stopped (no_fix_found); the 2 test(s) it failed (calc.py::calc.add, "
            "test_calc.py::test_add) pass in this run, which is no iteration of it: the run passes and the "
            f"incident stays escalated until `selfheal loop {incident_id} --reopen` judges the change")

    async def scenario() -> None:
        async with session(project) as client:
            for _ in range(2):  # nothing changed twice: the empty-diff stop
                verdict = (await client.call_tool("run_tests", {})).structured_content or {}
            assert (verdict["decision"], verdict["stop_reason"]) == ("STOP", "no_fix_found"), verdict
            (project / "calc.py").write_text(DOCTESTED.replace("a - b", "a + b"))
            fixed = await client.call_tool("run_tests", {"pytest_args": ["--doctest-modules"]})
            verdict = fixed.structured_content or {}
            assert (verdict["decision"], verdict["status"], verdict["counts"]) == ("STOP", "passed", {"passed": 2})
            assert said in verdict["summary"], verdict["summary"]

    anyio.run(scenario)
    # pytest --selfheal says the same of the same run; the incident stays as its stop left it.
    again = run_pytest_selfheal(project, "--doctest-modules")
    assert again.returncode == 0 and said in again.stdout, again.stdout
    assert (project / ".selfheal" / "error_archive" / "escalated" / incident_id).is_dir()


def test_run_tests_trusts_the_options_a_capture_recorded(pytester: pytest.Pytester) -> None:
    """An option the capture ran with (``--doctest-modules``) passes run_tests' argument check as
    it passes every verification run's; with no capture recording it, it is refused."""
    from pytest_selfheal.errors import RefusedError
    from pytest_selfheal.loop.verify import check_command
    from pytest_selfheal.mcp_server.tools import captures_options
    from pytest_selfheal.store.root import Store

    store = Store(pytester.path / ".selfheal")
    argv = ["python", "-m", "pytest", "-q", "--doctest-modules"]
    with pytest.raises(RefusedError, match="'--doctest-modules' is not a safe verification option"):
        check_command(argv, root=pytester.path, trusted=captures_options(store))
    pytester.makepyfile(calc='def add(a, b):\n    """\n    >>> add(1, 2)\n    3\n    """\n    return a - b\n')
    assert pytester.runpytest("--selfheal", "--doctest-modules").ret == 1
    assert captures_options(store) == ["--doctest-modules"]
    check_command(argv, root=pytester.path, trusted=captures_options(store))
