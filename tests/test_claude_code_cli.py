"""The real Claude Code CLI (``claude`` from npm's ``@anthropic-ai/claude-code``) with the stop
gate and the MCP server, its model a script served on 127.0.0.1 (tests/scripted_model.py).

What the agent does is scripted; what Claude Code does with the gate's answers and the
tools' results is its own: an honest agent is let stop once the tests pass, a stubborn one
is sent back with the digest and then let stop with the STOP, a cheat that edits the test
is stopped with ``tests_edited`` (never "tests passed"), and the model reads the digest
of ``run_tests`` in what Claude Code passes it. Slow tier; skipped where ``claude`` is not
installed (``.ci/run`` installs it for the slow tier).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import PY, cli, make_project, run_env, run_pytest_selfheal
from scripted_model import Block, ScriptedModel, last_user_text, text, tool_use

CLAUDE = shutil.which("claude")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CLAUDE is None, reason="the Claude Code CLI is not installed: "
                                                        "npm install -g @anthropic-ai/claude-code")]

CALC = "def sub(a, b):\n    return a + b\n"
TEST_CALC = "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 2) == 3\n"


Script = Callable[[dict[str, Any]], list[Block]]


def replies(steps: list[list[Block]]) -> Script:
    """The model replies with ``steps`` in order, then "Done." to every later request."""
    plan = list(steps)
    return lambda request: plan.pop(0) if plan else [text("Done.")]


def drive(project: Path, home: Path, script: Script, *args: str) -> tuple[ScriptedModel, list[dict[str, Any]], str]:
    """One ``claude -p`` session in ``project`` with ``script`` as its model. Returns the server
    (its requests), the stream-json events and Claude Code's debug log."""
    debug = home / "debug.txt"
    env = run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin", "HOME": str(home), "ANTHROPIC_API_KEY": "sk-scripted",
                   "IS_SANDBOX": "1", "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
                   "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
    with ScriptedModel(script) as model:
        env["ANTHROPIC_BASE_URL"] = model.url
        done = subprocess.run([str(CLAUDE), "-p", "make the failing test pass", "--output-format", "stream-json",
                               "--verbose", "--include-hook-events", "--dangerously-skip-permissions",
                               "--debug-file", str(debug), *args],
                              cwd=project, env=env, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return model, events, debug.read_text(errors="replace") if debug.exists() else ""


@pytest.fixture()
def red(tmp_path: Path) -> Path:
    """A project with its failure captured and the stop hook installed (Claude Code's settings)."""
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})
    assert run_pytest_selfheal(project).returncode == 1
    assert cli("stop-gate", "install", "claude", cwd=project).returncode == 0
    (tmp_path / "home").mkdir()
    return project


def read_then_edit(path: Path, old: str, new: str) -> list[list[Block]]:
    return [[tool_use("Read", {"file_path": str(path)}, "toolu_read")],
            [tool_use("Edit", {"file_path": str(path), "old_string": old, "new_string": new}, "toolu_edit")]]


def gate_answers(debug: str) -> list[str]:
    """What the stop gate answered, as Claude Code logged it."""
    return [line for line in debug.splitlines() if "Hook Stop (Stop)" in line]


def test_an_honest_agent_is_let_stop_when_the_tests_pass(red: Path) -> None:
    model, events, debug = drive(red, red.parent / "home", replies(read_then_edit(red / "calc.py", "a + b", "a - b")))
    answers = gate_answers(debug)
    assert len(answers) == 1 and "selfheal: tests passed; incident " in answers[0], answers
    assert events[-1]["type"] == "result" and events[-1]["result"] == "Done."
    assert len(model.requests) == 3  # read, edit, done: never sent back
    assert list((red / ".selfheal" / "error_archive" / "resolved").iterdir())


def test_a_stubborn_agent_gets_the_digest_then_the_stop(red: Path) -> None:
    model, _events, debug = drive(red, red.parent / "home", replies([]))
    # Its first "Done." is sent back with the digest, which the model reads.
    sent_back = [last_user_text(request) for request in model.requests[1:]]
    assert sent_back and "CONTINUE: incident " in sent_back[0], sent_back
    assert "## Root cause 1 of 1" in sent_back[0] and "test_calc.py::test_sub" in sent_back[0]
    assert "target paths (fix here): calc.py" in sent_back[0]
    # The second, the code unchanged again, is let through with the loop's STOP.
    answers = gate_answers(debug)
    assert len(answers) == 2 and '"decision": "block"' in answers[0].replace("\\", ""), answers
    # The hook's own settings (.claude/settings.json, written after the capture) are no code change.
    assert "fingerprint same, progress no" in answers[0], answers
    assert "systemMessage" in answers[1] and "selfheal: STOP " in answers[1] and "tests passed" not in debug, answers
    assert len(model.requests) == 2


def test_a_cheat_that_edits_the_test_is_stopped_not_passed(red: Path) -> None:
    _model, _events, debug = drive(red, red.parent / "home",
                                   replies(read_then_edit(red / "test_calc.py", "== 3", "== 7")))
    answers = gate_answers(debug)
    assert answers and "selfheal: STOP tests_edited" in answers[-1], answers
    assert "tests passed" not in "\n".join(answers)


def test_the_model_receives_the_run_tests_digest_over_mcp(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})
    (tmp_path / "home").mkdir()
    servers = {"mcpServers": {"selfheal": {"command": PY, "args": ["-m", "pytest_selfheal", "mcp"]}}}
    waits: list[str] = []

    def script(request: dict[str, Any]) -> list[Block]:
        # Claude Code connects MCP servers in the background: a model that calls the tool
        # before it is listed is told "still connecting"; this one waits a second instead.
        if any(block.get("id") == "toolu_run" for m in request["messages"] for block in m["content"]
               if isinstance(m["content"], list) and isinstance(block, dict)):
            return [text("Done.")]
        if "mcp__selfheal__run_tests" in {tool["name"] for tool in request["tools"]}:
            return [tool_use("mcp__selfheal__run_tests", {}, "toolu_run")]
        assert len(waits) < 60, "the MCP server never connected"
        waits.append(f"toolu_wait{len(waits)}")
        return [tool_use("Bash", {"command": "sleep 1", "description": "wait"}, waits[-1])]

    model, _events, _debug = drive(project, tmp_path / "home", script, "--mcp-config", json.dumps(servers),
                                   "--strict-mcp-config")
    received = last_user_text(model.requests[-1])
    # What Claude Code passes the model: the verdict and its digest, the groups and where to fix.
    assert "CONTINUE" in received and "captured incident" in received, received
    assert "## Root cause 1 of 1" in received and "target paths (fix here): calc.py" in received, received
    assert "assert 7 == 3" in received, received
