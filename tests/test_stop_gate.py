"""``selfheal stop-gate claude|cursor`` driven as the agents drive it: a real subprocess, the
agent's payload on stdin, its answer read from stdout; ``install`` in process."""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers import PY, cli, git_commit_all, make_project, run_env, run_pytest_selfheal

from pytest_selfheal.errors import EXIT_BAD_INPUT, InputError
from pytest_selfheal.gate.agents import Agent, GateAnswer, answer_json, parse_payload
from pytest_selfheal.gate.run import send_back_once
from pytest_selfheal.records.mcp import RunDecision, RunVerdict

# The console script of this test environment: what an install run from it writes.
SELFHEAL = str(Path(sysconfig.get_path("scripts"), "selfheal"))


def claude_payload(project: Path, active: bool = False, session: str = "sess-1") -> dict[str, Any]:
    # The shape Claude Code sends a Stop hook.
    return {"session_id": session, "transcript_path": str(project / "transcript.jsonl"), "cwd": str(project),
            "permission_mode": "default", "hook_event_name": "Stop", "stop_hook_active": active}


def cursor_payload(project: Path, loop_count: int = 0) -> dict[str, Any]:
    # The shape Cursor sends a stop hook.
    return {"conversation_id": "conv-1", "generation_id": "gen-1", "hook_event_name": "stop",
            "workspace_roots": [str(project)], "status": "completed", "loop_count": loop_count}


def gate(agent: str, payload: Any, cwd: Path, env: Optional[Mapping[str, str]] = None,
         python: str = PY) -> tuple[dict[str, Any], str]:
    """Run the hook as the agent does; returns its JSON answer and its stderr (exit code 0 always)."""
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    done = subprocess.run([python, "-m", "pytest_selfheal", "stop-gate", agent], input=raw, cwd=cwd,
                          capture_output=True, timeout=300,
                          env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin", **(env or {})}))
    assert done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout), done.stderr.decode()


# The code under test in its own module: an agent's fix edits it, never a test file (a
# pass with a test file edited is `tests_edited`, docs/repair.md).
CALC = "def sub(a, b):\n    return a + b\n"
TEST_CALC = "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 2) == 3\n"


def edit(project: Path, body: str) -> None:
    """The agent's change to the code under test (``sub`` returns ``body``)."""
    path = project / "calc.py"
    path.write_text(path.read_text().replace(path.read_text().split("return ")[1].split("\n")[0], body))


@pytest.fixture()
def red(tmp_path: Path) -> Path:
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})
    result = run_pytest_selfheal(project)
    assert result.returncode == 1, result.stdout
    return project


def test_claude_blocks_with_the_digest_then_lets_the_fixed_run_stop(red: Path) -> None:
    edit(red, "a * b")  # a first try that does not fix it
    answer, err = gate("claude", claude_payload(red), red)
    assert answer["decision"] == "block", answer
    reason = answer["reason"]
    assert reason.startswith("CONTINUE: incident ") and "iteration 1 of 3" in reason
    assert "## Root cause 1 of 1" in reason and "test_calc.py::test_sub" in reason
    assert "never the failing tests" in reason and err == ""
    incident = reason.split()[2]
    edit(red, "a - b")
    answer, err = gate("claude", claude_payload(red, active=True), red)
    assert set(answer) == {"systemMessage"} and answer["systemMessage"].startswith("selfheal: tests passed; "), answer
    assert f"incident {incident} is resolved" in answer["systemMessage"], answer  # whole, nothing redacted


def test_an_unchanged_run_is_no_attempt_then_the_second_stops(red: Path) -> None:
    # Nothing changed since the capture: an iteration with nothing tried, the agent goes back.
    answer, _ = gate("claude", claude_payload(red), red)
    assert answer["decision"] == "block", answer
    assert "iteration 1 of 3" in answer["reason"] and "nothing changed since the last run" in answer["reason"]
    assert "## Root cause 1 of 1" in answer["reason"]
    # The second unchanged run in a row stops (no_fix_found), and the gate says why.
    answer, _ = gate("claude", claude_payload(red, active=True), red)
    assert set(answer) == {"systemMessage"}, answer
    assert answer["systemMessage"].startswith("selfheal: STOP no_fix_found: "), answer
    # The user's next step, not the MCP agent's "hand over" line.
    assert "; next: " in answer["systemMessage"] and "report tool" not in answer["systemMessage"]


# Cursor's variant in the slow tier (~3 s): its gate answers through the same code, and its own
# follow-up and stop are checked by default below.
@pytest.mark.parametrize("agent", ["claude", pytest.param("cursor", marks=pytest.mark.slow)])
def test_the_first_answer_on_red_tests_sends_the_agent_back_whatever_it_ran(red: Path, agent: str) -> None:
    # The agent ran the tests itself after a change that fixes nothing: the same failure
    # again, the loop stopped by repetition with budget left.
    edit(red, "b + a  # tried")
    ran = run_pytest_selfheal(red)
    assert "-> STOP repeated_fingerprint" in ran.stdout, ran.stdout
    first = claude_payload(red) if agent == "claude" else cursor_payload(red)
    answer, _ = gate(agent, first, red)
    sent = answer.get("reason") or answer.get("followup_message") or ""
    assert sent.startswith("CONTINUE: incident "), answer
    assert "stopped (repeated_fingerprint) with 2 of 3 iteration(s) left" in sent and "test_calc.py::test_sub" in sent
    # Sent back once: the next stop without a change is let through.
    again = claude_payload(red, active=True) if agent == "claude" else cursor_payload(red, loop_count=1)
    answer, err = gate(agent, again, red)
    assert "decision" not in answer and "followup_message" not in answer, answer
    assert "STOP already_stopped" in (answer.get("systemMessage") or err), (answer, err)


def test_only_the_first_answer_sends_back_a_stopped_incident() -> None:
    # Claude Code's stop_hook_active (Cursor's loop_count): the agent goes on because a stop
    # hook blocked, this gate or another; that answer is no first answer, whatever was counted.
    stopped = RunVerdict(RunDecision.STOP, "repeated_fingerprint", "escalated", "s", "n", 1, (("failed", 1),), 3,
                         incident_id="i1", iteration=1)
    first, again = (parse_payload(Agent.CLAUDE, json.dumps({"stop_hook_active": active}).encode())
                    for active in (False, True))
    assert send_back_once(stopped, first) and not send_back_once(stopped, again)
    assert not send_back_once(replace(stopped, counts=(("passed", 1),)), first)  # green: nothing to send back
    assert not send_back_once(replace(stopped, iteration=3), first)  # no budget left


def test_claude_never_blocks_past_the_budget(red: Path) -> None:
    edit(red, "a * b")
    answer, _ = gate("claude", claude_payload(red, session="s-budget"), red)
    assert answer["decision"] == "block"
    # Three blocks in a row already (max_iterations 3) and Claude Code goes on because of them.
    state = next((red / ".selfheal" / "gate").glob("claude-*.json"))
    state.write_text(json.dumps({"agent": "claude", "blocks": 3}))
    edit(red, "a + b + 1")
    answer, _ = gate("claude", claude_payload(red, active=True, session="s-budget"), red)
    assert set(answer) == {"systemMessage"}, answer
    assert "blocked 3 time(s) in a row" in answer["systemMessage"]


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_after_tests_edited_every_stop_says_stop_again_never_tests_passed(red: Path) -> None:
    test_file = red / "test_calc.py"
    test_file.write_text(test_file.read_text().replace("== 3", "== 7"))  # weakened to the bug's answer
    answer, _ = gate("claude", claude_payload(red), red)
    assert answer["systemMessage"].startswith("selfheal: STOP tests_edited: "), answer
    incident = answer["systemMessage"].split("incident ")[1].split()[0]
    answer, _ = gate("claude", claude_payload(red), red)
    assert answer["systemMessage"].startswith("selfheal: STOP already_stopped: "), answer
    assert f"incident {incident}'s, which stopped (tests_edited)" in answer["systemMessage"]
    # A commit changes the diff hash: the next run is the incident's next iteration. The gate's
    # run has other options than the capture's, so it asks for the capture's first ...
    git_commit_all(red, "weaken the test")
    answer, err = gate("cursor", cursor_payload(red), red)
    assert "not counted as an iteration" in answer.get("followup_message", ""), (answer, err)
    # ... again at every stop, never "tests passed"; the capture's own run, the weakened test
    # passing, stops tests_edited again.
    answer, err = gate("cursor", cursor_payload(red, loop_count=1), red)
    assert "not counted as an iteration" in answer.get("followup_message", ""), (answer, err)
    assert f"incident {incident} iteration 2 of 3: " in run_pytest_selfheal(red).stdout
    answer, err = gate("cursor", cursor_payload(red, loop_count=2), red)
    assert "tests passed" not in err + json.dumps(answer), (answer, err)


def test_cursor_follows_up_then_stops_at_its_loop_count(red: Path) -> None:
    edit(red, "a * b")
    answer, err = gate("cursor", cursor_payload(red), red)
    assert set(answer) == {"followup_message"} and "## Root cause 1 of 1" in answer["followup_message"]
    edit(red, "a + b + 1")
    answer, err = gate("cursor", cursor_payload(red, loop_count=3), red)
    assert answer == {} and "blocked 3 time(s) in a row" in err and len(err.splitlines()) == 1


def test_green_run_lets_the_agent_stop(tmp_path: Path) -> None:
    project = make_project(tmp_path / "green", {"test_ok.py": "def test_ok():\n    assert True\n"})
    answer, err = gate("claude", claude_payload(project), project)
    assert set(answer) == {"systemMessage"} and answer["systemMessage"].startswith("selfheal: tests passed; ")
    assert not (project / ".selfheal" / "error_inbox").exists() or not any((project / ".selfheal" / "error_inbox").iterdir())
    assert not (project / ".selfheal" / "gate").exists()  # nothing to count on a green project
    answer, err = gate("cursor", cursor_payload(project), project)
    assert answer == {} and err.startswith("selfheal: tests passed; ")


# --------------------------------------------------------------------------- fail open, visibly

CANNOT = "selfheal: the stop gate could not judge the tests, so it let the agent stop: "


def _no_pytest_python(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """An interpreter that runs selfheal but has no pytest: a bare venv whose path holds every
    package of ours but pytest's (symlinked), and this checkout."""
    subprocess.run([PY, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    site = Path(pytest.__file__).resolve().parent.parent
    for entry in site.iterdir():
        if not entry.name.startswith(("pytest", "_pytest", "py.py", "__pycache__")) and not entry.name.endswith(".pth"):
            (shadow / entry.name).symlink_to(entry)
    checkout = Path(__file__).resolve().parent.parent
    return str(tmp_path / "venv" / "bin" / "python"), {"PYTHONPATH": f"{checkout}{os.pathsep}{shadow}"}


@pytest.mark.parametrize("case", ["config", "addopts", "conftest", "no_pytest"])
def test_when_the_gate_cannot_judge_it_lets_the_agent_stop_and_says_why(tmp_path: Path, case: str) -> None:
    files = {"calc.py": CALC, "test_calc.py": TEST_CALC}
    ini = ""
    if case == "config":
        files[".planning/config.json"] = "{ not json"
    elif case == "addopts":
        # The suite's children load the plugin by its module name (PYTEST_PLUGINS), so its
        # refusal names both: the entry point's name, and the module's.
        ini = "addopts = -p no:selfheal -p no:pytest_selfheal.plugin\n"
    elif case == "conftest":
        files["conftest.py"] = "import not_installed_anywhere\n"
    project = make_project(tmp_path / "proj", files, ini=ini)
    python, env = _no_pytest_python(tmp_path) if case == "no_pytest" else (PY, {})
    for agent in ("claude", "cursor"):
        first = claude_payload(project) if agent == "claude" else cursor_payload(project)
        answer, err = gate(agent, first, project, env=env, python=python)
        # Never a block because it could not run; the person sees why.
        assert "decision" not in answer and "followup_message" not in answer, (case, answer)
        if agent == "claude":
            assert set(answer) == {"systemMessage"} and answer["systemMessage"].startswith(CANNOT), answer
        assert len(err.splitlines()) == 1 and err.startswith(f"selfheal: error: stop-gate {agent}: "), err
        why = {"config": "config.json", "addopts": "the selfheal plugin is not loaded in the test run", "conftest": "not_installed_anywhere",
               "no_pytest": "No module named pytest"}[case]
        assert why in err, err


def test_a_cursor_turn_that_did_not_complete_runs_nothing(red: Path) -> None:
    for status in ("aborted", "error"):
        answer, err = gate("cursor", {**cursor_payload(red), "status": status}, red)
        assert answer == {} and f"the turn ended {status}, not completed: no tests run" in err
    assert not list((red / ".selfheal" / "error_runs").glob("*/attempt_*.json"))  # no iteration spent


@pytest.mark.parametrize("agent", ["claude", "cursor"])
def test_garbage_on_stdin_lets_the_agent_stop_with_one_line(tmp_path: Path, agent: str) -> None:
    answer, err = gate(agent, b"\xff\xfe{ garbage", tmp_path)
    # The person is told why: Claude Code shows the systemMessage; Cursor shows the hook's stderr.
    assert answer == ({"systemMessage": "selfheal: the stop gate could not judge the tests, so it let the agent "
                                        "stop: hook payload: not JSON (UnicodeDecodeError)"} if agent == "claude" else {})
    assert len(err.splitlines()) == 1 and err.startswith(f"selfheal: error: stop-gate {agent}: hook payload: ")


@pytest.mark.parametrize("agent", ["claude", "cursor"])
@pytest.mark.parametrize("text", ["garbage", "", "[1, 2]", '{"stop_hook_active": "yes", "loop_count": true}',
                                  '{"cwd": 7, "workspace_roots": "/"}', "{" * 5000])
def test_malformed_payloads_let_the_agent_stop(tmp_path: Path, agent: str, text: str) -> None:
    code, out, err = cli("stop-gate", agent, cwd=tmp_path, stdin=text)
    answer = json.loads(out)
    assert code == 0 and "decision" not in answer and "followup_message" not in answer
    assert answer.get("systemMessage", "hook payload: ").split("let the agent stop: ")[-1].startswith(
        "hook payload: ") if agent == "claude" else answer == {}
    assert len(err.splitlines()) == 1 and err.startswith(f"selfheal: error: stop-gate {agent}: hook payload: ")


def test_a_directory_that_is_not_a_project_runs_nothing(tmp_path: Path) -> None:
    bare = tmp_path / "home"
    bare.mkdir()
    (bare / "test_x.py").write_text("def test_x():\n    assert False\n")
    answer, err = gate("claude", claude_payload(bare), bare)
    assert set(answer) == {"systemMessage"} and "is not a project" in answer["systemMessage"]
    assert "is not a project" in err and len(err.splitlines()) == 1
    assert not (bare / ".selfheal").exists()


def test_payload_shapes_parse() -> None:
    payload = parse_payload(Agent.CURSOR, b'\xef\xbb\xbf{"workspace_roots": ["/p"], "loop_count": 2}')
    assert (payload.directory, payload.continued, payload.loop_count) == ("/p", True, 2)
    with pytest.raises(InputError):
        parse_payload(Agent.CURSOR, b'{"loop_count": -1}')
    assert answer_json(Agent.CLAUDE, GateAnswer(False)) == {}
    assert answer_json(Agent.CURSOR, GateAnswer(False, "why")) == {}


# --------------------------------------------------------------------------- install


@pytest.mark.parametrize("agent,relative", [("claude", ".claude/settings.json"), ("cursor", ".cursor/hooks.json")])
def test_install_on_an_empty_project_then_again(tmp_path: Path, agent: str, relative: str) -> None:
    project = make_project(tmp_path / "p", {}, git=False)
    code, out, err = cli("stop-gate", "install", agent, cwd=project)
    command = f"{SELFHEAL} stop-gate {agent}"
    bound = ", with a timeout of at least 330 s (gate.timeout_seconds 300 + 30)" if agent == "claude" else ""
    assert (code, err) == (0, "") and out == (
        f"installed the stop hook in {project / relative}: it runs {command}{bound}\n")
    written = json.loads((project / relative).read_text())
    if agent == "claude":
        assert written == {"hooks": {"Stop": [{"hooks": [
            {"type": "command", "command": command, "timeout": 330}]}]}}
    else:
        assert written == {"version": 1, "hooks": {"stop": [{"command": command}]}}
    before = (project / relative).read_text()
    code, out, _ = cli("stop-gate", "install", agent, cwd=project)
    assert code == 0 and out.startswith("the stop hook is already in") and (project / relative).read_text() == before


def test_install_again_raises_a_timeout_the_test_run_outgrew(tmp_path: Path) -> None:
    # Claude Code kills a hook past its timeout without a word: each install keeps it above
    # gate.timeout_seconds, and a longer one the user chose stays.
    project = make_project(tmp_path / "p", {}, git=False)
    settings = project / ".claude" / "settings.json"
    assert cli("stop-gate", "install", "claude", cwd=project).returncode == 0
    (project / ".planning").mkdir()
    (project / ".planning" / "config.json").write_text('{"ralf_lite": {"gate": {"timeout_seconds": 900}}}')
    code, out, _ = cli("stop-gate", "install", "claude", cwd=project)
    assert code == 0 and out.startswith("updated the stop hook in") and "at least 930 s" in out, out
    assert json.loads(settings.read_text())["hooks"]["Stop"][0]["hooks"][0]["timeout"] == 930
    written = settings.read_text()
    for kept, change in (("1e4", "the stop hook is already in"), ('"3600"', "updated the stop hook in")):
        settings.write_text(written.replace('"timeout": 930', f'"timeout": {kept}'))
        code, out, _ = cli("stop-gate", "install", "claude", cwd=project)
        assert code == 0 and out.startswith(change), (kept, out)
    assert settings.read_text() == written  # a string is no number of seconds: replaced


@pytest.mark.parametrize("words", [["claude", "--bogus"], ["codex"], ["cursor", "extra"], ["claude", "-x"], []])
def test_a_hook_command_line_that_is_wrong_still_answers_and_exits_0(tmp_path: Path, words: list[str]) -> None:
    # To Claude Code, exit 2 means "block": a usage error would send the agent back for ever.
    code, out, err = cli("stop-gate", *words, cwd=tmp_path, stdin="{}")
    assert code == 0 and len(err.splitlines()) == 1 and "letting the agent stop" in err, (code, out, err)
    answer = json.loads(out)
    assert answer == {} if words[:1] == ["cursor"] else (
        set(answer) == {"systemMessage"} and answer["systemMessage"].startswith(CANNOT + "selfheal stop-gate: "))
    # install is no hook: its usage errors keep their exit code.
    assert cli("stop-gate", "install", "codex", cwd=tmp_path).returncode == 2


def test_a_crash_before_the_gate_starts_is_one_line_and_exit_0(tmp_path: Path) -> None:
    # A selfheal whose command modules cannot load (a broken install): still one answer.
    broken = tmp_path / "shadow" / "pytest_selfheal" / "cli"
    broken.mkdir(parents=True)
    (broken / "tools.py").write_text("raise RuntimeError('half-installed')\n")
    done = subprocess.run([PY, "-c", "import sys, pytest_selfheal.cli as c; c.__path__.insert(0, sys.argv[1]); "
                           "from pytest_selfheal.cli.main import main; sys.exit(main(['stop-gate', 'claude']))",
                           str(broken)], input=b"{}", capture_output=True, timeout=60, cwd=tmp_path, env=run_env())
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.splitlines()) == 1 and b"half-installed" in done.stderr, done.stderr
    assert json.loads(done.stdout)["systemMessage"].startswith(CANNOT), done.stdout


def test_install_keeps_the_users_other_settings(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {}, git=False)
    existing = {"permissions": {"allow": ["Bash(ls)"]}, "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit"}]}]}}
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(json.dumps(existing))
    assert cli("stop-gate", "install", "claude", cwd=project).returncode == 0
    written = json.loads((project / ".claude" / "settings.json").read_text())
    assert written["permissions"] == existing["permissions"]
    assert written["hooks"]["PreToolUse"] == existing["hooks"]["PreToolUse"]
    assert written["hooks"]["Stop"][0] == existing["hooks"]["Stop"][0]
    assert written["hooks"]["Stop"][1]["hooks"][0]["command"] == f"{SELFHEAL} stop-gate claude"
    (project / ".cursor").mkdir()
    (project / ".cursor" / "hooks.json").write_text(json.dumps(
        {"version": 1, "hooks": {"afterFileEdit": [{"command": "fmt"}], "stop": [{"command": "say done"}]}}))
    assert cli("stop-gate", "install", "cursor", cwd=project).returncode == 0
    cursor = json.loads((project / ".cursor" / "hooks.json").read_text())
    assert cursor["hooks"]["afterFileEdit"] == [{"command": "fmt"}]
    assert cursor["hooks"]["stop"] == [{"command": "say done"}, {"command": f"{SELFHEAL} stop-gate cursor"}]


@pytest.mark.parametrize("text", ["{not json", "[]", '{"hooks": []}', '{"hooks": {"Stop": {}}}',
                                  '{"hooks": {"Stop": ["x"]}}'])
def test_install_leaves_a_malformed_settings_file_alone(tmp_path: Path, text: str) -> None:
    project = make_project(tmp_path / "p", {}, git=False)
    (project / ".claude").mkdir()
    path = project / ".claude" / "settings.json"
    path.write_text(text)
    code, out, err = cli("stop-gate", "install", "claude", cwd=project)
    assert code == EXIT_BAD_INPUT and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"selfheal: error: {path}: ") and err.rstrip().endswith("left unchanged")
    assert path.read_text() == text


def test_install_user_writes_the_home_file(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {}, git=False)
    home = tmp_path / "home"
    home.mkdir()
    env = run_env({"HOME": str(home)})
    code, out, _ = cli("stop-gate", "install", "cursor", "--user", "--command", "/opt/bin/selfheal stop-gate cursor",
                       cwd=project, env=env)
    assert code == 0 and not (project / ".cursor").exists()
    assert json.loads((home / ".cursor" / "hooks.json").read_text())["hooks"]["stop"] == [
        {"command": "/opt/bin/selfheal stop-gate cursor"}]
