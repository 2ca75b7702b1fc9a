"""``selfheal ci`` end to end: a real failing project, real pytest subprocesses, the loopback fake
GitHub (tests/fake_github.py) and the Actions environment files as temp files; the command
itself through the console script's ``main`` in this process."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

import pytest
from fake_github import FakeGitHub
from helpers import SECTIONS_PLUGIN, CliResult, cli, fake_distribution, make_project
from test_actions_env import parse_github_output

from pytest_selfheal import process
from pytest_selfheal import run as pytest_run
from pytest_selfheal.cli.main import main
from pytest_selfheal.errors import EXIT_OK, EXIT_PYTEST, EXIT_UNRESOLVED, EXIT_USAGE, UsageError
from pytest_selfheal.github import ci, ci_inputs, ci_verdict
from pytest_selfheal.github.client import marker
from pytest_selfheal.records.ci import CiVerdict
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.report.data import build_report
from pytest_selfheal.run import exit_code_for

PR = 7
MARKER = marker("default")
# Planted secrets: an env var named like a token, a GitHub token format and a password
# assignment in the failing test's output.
PLANTED_ENV_VALUE = "planted-env-secret-9f8e7d6c5b"
PLANTED_GHP = "ghp_" + "Zx9" * 12
PLANTED_PASSWORD = "hunter2-planted-pw"
SECRETS = (PLANTED_ENV_VALUE, PLANTED_GHP, PLANTED_PASSWORD)

FAILING_TEST = f'''
import os
from pathlib import Path


def test_ok():
    assert True


def test_bad():
    # The test process must never see the GitHub token (it is only for the comment).
    Path(os.environ["SEEN_FILE"]).write_text(os.environ.get("GITHUB_TOKEN", "<absent>"))
    planted = os.environ.get("PLANTED_API_TOKEN", "")
    print("connecting with", planted, "{PLANTED_GHP}")
    assert 1 + 1 == 3, f"login failed: token={{planted}} password={PLANTED_PASSWORD} {PLANTED_GHP}"
'''

FLAKY_TEST = '''
import os
from pathlib import Path


def test_flaky():
    state = Path(os.environ["FLAKY_STATE"])
    if not state.exists():
        state.write_text("failed once")
        assert False, "flaky: fails on the first run only"
'''


def actions_env(tmp_path: Path, fake: Optional[FakeGitHub], *, event: Optional[dict[str, object]] = None,
                event_name: str = "pull_request", token: Optional[str] = None) -> dict[str, str]:
    """os.environ (already cleaned of CI variables by conftest) plus an Actions environment."""
    env = dict(os.environ)
    summary = tmp_path / "step_summary.md"
    outputs = tmp_path / "github_output.txt"
    event_path = tmp_path / "event.json"
    for path in (summary, outputs):
        path.write_text("")
    event_path.write_text(json.dumps(event if event is not None else {"pull_request": {"number": PR}}))
    env.update({
        "GITHUB_ACTIONS": "true",
        "GITHUB_REPOSITORY": fake.repository if fake else "octo-org/hello-world",
        "GITHUB_EVENT_NAME": event_name,
        "GITHUB_EVENT_PATH": str(event_path),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567",
        "GITHUB_RUN_ID": "4242",
        "GITHUB_SERVER_URL": "https://github.com",
        "PYTHONDONTWRITEBYTECODE": "1",
        # Speed only: every pytest these runs start (capture, verification) skips importing
        # hypothesis, which the tiny projects do not use (seconds per process).
        "PYTEST_ADDOPTS": "-p no:hypothesispytest",
        "PLANTED_API_TOKEN": PLANTED_ENV_VALUE,
        "SEEN_FILE": str(tmp_path / "seen_token.txt"),
    })
    if fake is not None:
        env["GITHUB_API_URL"] = fake.url
        env["GITHUB_TOKEN"] = token or fake.token
    return env


def run_ci(project: Path, env: dict[str, str], *args: str) -> CliResult:
    """``selfheal ci ARGS`` in ``project`` with exactly ``env`` (the console script's ``main``, in process)."""
    return cli("ci", *args, cwd=project, env=env)


def run_ci_process(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest_selfheal ci ARGS`` as a real process: plugins on its PYTHONPATH load."""
    return subprocess.run([sys.executable, "-m", "pytest_selfheal", "ci", *args], cwd=str(project), env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def outputs_of(env: dict[str, str]) -> dict[str, str]:
    return dict(parse_github_output(Path(env["GITHUB_OUTPUT"]).read_text()))


def ours(fake: FakeGitHub) -> list[dict[str, object]]:
    return [c for c in fake.comments(PR) if c["user"]["login"] == "github-actions[bot]"]


def first_visible_line(body: str) -> str:
    return next(line for line in body.splitlines() if line.strip() and not line.startswith("<!--"))


def _assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow  # ~12 s; by default: test_github.py (the sticky comment), the other selfheal ci runs here
def test_two_runs_one_sticky_comment_then_green(tmp_path: Path, fake_github: FakeGitHub) -> None:
    fake_github.max_per_page = 10  # 35 comments -> 4 pages: the comment is found across pages
    for i in range(30):
        fake_github.add_comment(PR, f"review remark {i}", "alice")
    for i in range(5):  # other users quoting our marker: never ours, never edited
        fake_github.add_comment(PR, f"{MARKER}\nquoting the bot {i}", "mallory")
    project = make_project(tmp_path / "proj", ini=None, files={"test_app.py": FAILING_TEST})
    env = actions_env(tmp_path, fake_github)

    first = run_ci(project, env, "--", "-q")
    assert first.returncode == EXIT_UNRESOLVED, first.stdout + first.stderr
    out1 = outputs_of(env)
    assert out1["final-status"] == "escalated"
    assert out1["stop-reason"] == "repeated_fingerprint"
    assert out1["iterations"] == "1"
    assert out1["incident-id"].startswith("incident_")
    assert out1["pytest-exit-code"] == "1"
    report_md = Path(out1["report-path"])
    assert report_md.is_file() and Path(out1["report-json-path"]).is_file()
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "## RALF Lite Loop Report" in summary
    assert summary.startswith("**selfheal: escalated — stop reason `repeated_fingerprint`**")
    mine = ours(fake_github)
    assert len(mine) == 1
    body1 = str(mine[0]["body"])
    assert body1.startswith(MARKER)
    line = first_visible_line(body1)
    assert "stop reason `repeated_fingerprint`" in line and "escalated" in line
    assert out1["incident-id"] in line
    # The token never reached the test process.
    assert (tmp_path / "seen_token.txt").read_text() == "<absent>"

    Path(env["GITHUB_OUTPUT"]).write_text("")
    second = run_ci(project, env, "--", "-q")
    assert second.returncode == EXIT_UNRESOLVED, second.stdout + second.stderr
    out2 = outputs_of(env)
    assert out2["incident-id"] != out1["incident-id"]
    mine2 = ours(fake_github)
    assert len(mine2) == 1 and mine2[0]["id"] == mine[0]["id"]
    body2 = str(mine2[0]["body"])
    assert body2 != body1 and out2["incident-id"] in first_visible_line(body2)
    assert len(fake_github.requests_to("PATCH")) == 1
    assert len(fake_github.requests_to("POST")) == 1
    assert all(str(c["body"]).endswith(f"quoting the bot {i}")
               for i, c in enumerate(c for c in fake_github.comments(PR) if c["user"]["login"] == "mallory"))
    assert len(fake_github.comments(PR)) == 36

    # Planted secrets: in pytest's own log (the job log), never in what we write or post.
    assert PLANTED_PASSWORD in first.stdout
    report_json = Path(out2["report-json-path"]).read_text()
    _assert_no_secret(body1, body2, Path(env["GITHUB_STEP_SUMMARY"]).read_text(),
                      Path(env["GITHUB_OUTPUT"]).read_text(), report_md.read_text(), report_json,
                      fake_github.token)
    assert fake_github.token not in body2 + report_json

    # Fixed: a green run turns the existing comment into "passed" (and adds none).
    (project / "test_app.py").write_text("def test_ok():\n    assert True\n")
    Path(env["GITHUB_OUTPUT"]).write_text("")
    green = run_ci(project, env, "--", "-q")
    assert green.returncode == EXIT_OK, green.stdout + green.stderr
    out3 = outputs_of(env)
    assert (out3["final-status"], out3["stop-reason"], out3["iterations"], out3["incident-id"]) == \
        ("passed", "none", "0", "")
    mine3 = ours(fake_github)
    assert len(mine3) == 1
    assert first_visible_line(str(mine3[0]["body"])).startswith("**selfheal: passed — stop reason `none`**")


def test_read_only_token_warns_and_a_flaky_test_resolves(tmp_path: Path, fake_github: FakeGitHub) -> None:
    read_only = "ghs_readOnlyForkToken0123456789abcdefXYZ"
    fake_github.set_token(read_only, "github-actions[bot]", "read-only", user_visible=False)
    project = make_project(tmp_path / "proj", ini=None, files={"test_flaky.py": FLAKY_TEST})
    env = actions_env(tmp_path, fake_github, token=read_only)
    env["FLAKY_STATE"] = str(tmp_path / "flaky_state")

    done = run_ci(project, env, "--", "-q")
    assert done.returncode == EXIT_OK, done.stdout + done.stderr  # resolved, and the comment is no failure
    out = outputs_of(env)
    assert (out["final-status"], out["stop-reason"], out["iterations"]) == ("resolved", "success", "1")
    warnings = [line for line in done.stdout.splitlines() if line.startswith("::warning::")]
    assert warnings and "HTTP 403" in warnings[0] and "job summary" in warnings[0]
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "## RALF Lite Loop Report" in summary and "flaky" in summary.lower()
    assert fake_github.comments(PR) == []
    assert read_only not in done.stdout + done.stderr


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_push_event_no_comment_and_no_fail_on_unresolved(tmp_path: Path, fake_github: FakeGitHub) -> None:
    project = make_project(tmp_path / "proj", ini=None, files={"test_app.py": FAILING_TEST})
    env = actions_env(tmp_path, fake_github, event={"ref": "refs/heads/main"}, event_name="push")

    done = run_ci(project, env, "--no-fail-on-unresolved", "--", "-q")
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    out = outputs_of(env)
    assert out["final-status"] == "escalated"
    assert "::warning::" not in done.stdout
    assert "no comment" in done.stdout
    assert fake_github.requests == []
    assert "## RALF Lite Loop Report" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    # The capture's terminal names no command for the loop selfheal ci is about to run.
    assert "next: selfheal ci runs the RALF-Lite loop on what this run captured" in done.stdout
    assert "next: Run the loop" not in done.stdout


CALC_FIX_AGENT = """
import pathlib, sys
calc = pathlib.Path(sys.argv[1], "calc.py")
calc.write_text(calc.read_text().replace("a - b", "a + b"))
"""


@pytest.mark.parametrize("pass_on_proposed_fix", [pytest.param(False, marks=pytest.mark.slow), True])
def test_a_fix_that_is_only_proposed_does_not_turn_the_job_green(tmp_path: Path, fake_github: FakeGitHub,
                                                                 pass_on_proposed_fix: bool) -> None:
    """The job is about the code it checked out: a repair provider's fix is proposed (in the
    comment, inert), the final status says so, and the job fails unless the user opts in."""
    project = make_project(tmp_path / "proj", ini=None, files={
        "calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
    })
    agent = tmp_path / "agent.py"
    agent.write_text(CALC_FIX_AGENT)
    env = actions_env(tmp_path, fake_github)
    env["INPUT_REPAIR_COMMAND"] = json.dumps([sys.executable, str(agent), "{worktree}"])
    env["INPUT_PASS_ON_PROPOSED_FIX"] = str(pass_on_proposed_fix).lower()

    done = run_ci(project, env, "--action-inputs", "--", "-q")
    assert done.returncode == (EXIT_OK if pass_on_proposed_fix else EXIT_UNRESOLVED), done.stdout + done.stderr
    out = outputs_of(env)
    assert (out["final-status"], out["stop-reason"]) == ("fix_proposed", "success")
    assert (project / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"  # the checkout is unchanged
    (comment,) = ours(fake_github)
    body = str(comment["body"])
    assert "fix_proposed" in first_visible_line(body) and "still fails" in first_visible_line(body)
    assert "### Proposed fix" in body and "```diff" in body and "+    return a + b" in body
    assert "### Proposed fix" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()


def test_proposed_fix_section_is_inert_and_bounded() -> None:
    section = ci_verdict.proposed_fix_section(b"+x = '````'\n" + b"+y\n" * 50, limit=100)
    fence = section.split("\n")[4]
    assert fence == "`````diff"  # longer than any backtick run in the patch
    assert "cut at 100 of" in section


def test_pytest_errors_have_their_own_exit_codes(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", ini=None, files={"test_none.py": "x = 1\n"})
    env = actions_env(tmp_path, None, event_name="push", event={})

    no_tests = run_ci(project, env, "--no-fail-on-unresolved", "--", "-q")
    assert no_tests.returncode == EXIT_PYTEST, no_tests.stdout + no_tests.stderr
    out = outputs_of(env)
    assert (out["final-status"], out["stop-reason"], out["pytest-exit-code"]) == ("error", "pytest_error", "5")
    assert "no tests were collected" in Path(env["GITHUB_STEP_SUMMARY"]).read_text()

    usage = run_ci(project, env, "--", "--no-such-pytest-option")
    assert usage.returncode == EXIT_USAGE, usage.stdout + usage.stderr


def test_a_refused_verification_is_reported_then_decides_the_exit_code(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", ini=None, files={"test_app.py": FAILING_TEST})
    env = actions_env(tmp_path, None, event_name="push", event={})

    done = run_ci(project, env, "--set", 'verification.allowlist=["nox"]', "--no-fail-on-unresolved", "--", "-q")
    assert done.returncode == 5, done.stdout + done.stderr  # refused, never run: not hidden by the flag
    out = outputs_of(env)
    assert out["incident-id"].startswith("incident_") and out["iterations"] == "0"
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "### selfheal ci error" in summary and "allowlist" in summary
    assert "selfheal: error:" in done.stdout


def test_report_section_hooks_reach_summary_file_and_comment(tmp_path: Path, fake_github: FakeGitHub) -> None:
    site = tmp_path / "site"
    site.mkdir()
    fake_distribution(site, "ci_report_sections", SECTIONS_PLUGIN)
    fake_github.add_comment(PR, f"{MARKER}\nold report", "github-actions[bot]")  # a green run only updates
    project = make_project(tmp_path / "proj", ini=None, files={"test_ok.py": "def test_ok():\n    assert True\n"})
    env = actions_env(tmp_path, fake_github)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)

    # Real processes: the plugin is an entry point found on the PYTHONPATH of a fresh interpreter.
    done = run_ci_process(project, env, "--", "-q")
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    section = "\n### Coverage\n\nCovered: none (no_incidents)\n"
    assert Path(env["GITHUB_STEP_SUMMARY"]).read_text().endswith(section)
    assert Path(outputs_of(env)["report-path"]).read_text().endswith(section)
    (comment,) = ours(fake_github)
    assert section in str(comment["body"])

    # A crashing hook is a warning naming its plugin: the report is published without its sections.
    env["SECTIONS_HOOK_CRASH"] = "1"
    for path in (env["GITHUB_STEP_SUMMARY"], env["GITHUB_OUTPUT"]):
        Path(path).write_text("")
    crashed = run_ci_process(project, env, "--", "-q")
    assert crashed.returncode == EXIT_OK, crashed.stdout + crashed.stderr
    warnings = [line for line in crashed.stdout.splitlines() if line.startswith("::warning::")]
    assert any("plugin 'ci_report_sections' failed: RuntimeError: coverage server down" in w for w in warnings)
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "## RALF Lite Loop Report" in summary and "### Coverage" not in summary
    assert "### Coverage" not in str(ours(fake_github)[0]["body"])


# --------------------------------------------------------------------------- comment-only mode


def _report_file(tmp_path: Path, ci_block: Mapping[str, object]) -> Path:
    report = build_report(incidents=[])
    path = tmp_path / "artifact" / "ralf_lite_report.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**report.to_json(), "ci": ci_block}))
    return path


def _set_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def test_comment_from_checks_the_head_sha(tmp_path: Path, fake_github: FakeGitHub,
                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sha = "a" * 40
    path = _report_file(tmp_path, {"final_status": "escalated", "stop_reason": "max_iterations", "iterations": 3,
                                   "pull_request": PR, "head_sha": sha})
    _set_env(monkeypatch, actions_env(tmp_path, fake_github, event_name="workflow_run", event={}))
    monkeypatch.chdir(tmp_path)

    fake_github.respond_next("GET", f"/pulls/{PR}", 200, {"head": {"sha": "b" * 40}})
    assert main(["ci", "--comment-from", str(path), "--expected-head-sha", sha]) == EXIT_OK
    assert "::warning::" in capsys.readouterr().out and fake_github.comments(PR) == []

    fake_github.respond_next("GET", f"/pulls/{PR}", 200, {"head": {"sha": sha}})
    assert main(["ci", "--comment-from", str(path), "--expected-head-sha", sha]) == EXIT_OK
    (comment,) = fake_github.comments(PR)
    assert first_visible_line(str(comment["body"])).startswith(
        "**selfheal: escalated — stop reason `max_iterations`**")
    out = outputs_of(dict(os.environ))
    assert out["final-status"] == "escalated" and out["iterations"] == "3"


def test_comment_from_distrusts_the_artifact(tmp_path: Path, fake_github: FakeGitHub,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    hostile = {"final_status": f"x** {MARKER} @admin", "stop_reason": "<img src=x>", "iterations": "many",
               "pull_request": "8; rm -rf /", "run_url": "https://evil.example/actions/runs/1", "head_sha": "zz"}
    path = _report_file(tmp_path, hostile)
    _set_env(monkeypatch, actions_env(tmp_path, fake_github))  # PR 7 from the event payload
    monkeypatch.chdir(tmp_path)
    # The sanitised verdict is the report's own ("no_incidents": green), which only
    # updates an existing comment.
    fake_github.add_comment(PR, f"{MARKER}\nold report", "github-actions[bot]")
    assert main(["ci", "--comment-from", str(path)]) == EXIT_OK
    (comment,) = fake_github.comments(PR)
    body = str(comment["body"])
    assert body.count("<!--") == 1 and "<img" not in body and "evil.example" not in body and "@admin" not in body
    assert fake_github.comments(8) == []


def test_comment_from_rejects_pytest_args_and_missing_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["ci", "--comment-from", "r.json", "--", "-q"]) == EXIT_USAGE
    assert main(["ci", "--comment-from", "missing.json"]) == 4
    assert capsys.readouterr().err.count("selfheal: error:") == 2


# --------------------------------------------------------------------------- pieces


def test_action_inputs_are_parsed_safely() -> None:
    got = ci_inputs.action_inputs({
        "INPUT_PYTEST_ARGS": "-q -k 'a and not b' $(touch /tmp/pwned); echo",
        "INPUT_CONFIG": "max_iterations=5\n\n# comment\nverification.timeout_seconds = 60\n",
        "INPUT_REPAIR_COMMAND": '["aider", "--yes", "--message-file", "{prompt_file}"]',
        "INPUT_COMMENT": "False",
        "INPUT_FAIL_ON_UNRESOLVED": "true",
        "INPUT_REPORT_NAME": "py3.12",
        "INPUT_WORKING_DIRECTORY": "sub dir",
        "INPUT_PULL_REQUEST_NUMBER": "12",
        "INPUT_EXPECTED_HEAD_SHA": "",
    })
    assert got == {
        "pytest_args": ["-q", "-k", "a and not b", "$(touch", "/tmp/pwned);", "echo"],
        "overrides": [
            ("max_iterations=5", "config input line 1"),
            ("verification.timeout_seconds = 60", "config input line 4"),
            ('repair.command=["aider", "--yes", "--message-file", "{prompt_file}"]', "repair-command input"),
        ],
        "comment": False, "fail_on_unresolved": True, "report_name": "py3.12", "working_directory": Path("sub dir"),
        "pull_request": 12,
    }
    assert ci_inputs.action_inputs({}) == {}


@pytest.mark.parametrize("env", [
    {"INPUT_PYTEST_ARGS": "-k 'unclosed"},
    {"INPUT_COMMENT": "maybe"},
    {"INPUT_REPAIR_COMMAND": "aider --yes"},
    {"INPUT_REPAIR_COMMAND": '["aider", 3]'},
    {"INPUT_PULL_REQUEST_NUMBER": "-1"},
    {"INPUT_EXPECTED_HEAD_SHA": "main; echo"},
])
def test_bad_action_inputs_are_usage_errors(env: dict[str, str]) -> None:
    with pytest.raises(UsageError):
        ci_inputs.action_inputs(env)


def test_bad_config_input_stops_before_pytest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INPUT_CONFIG", "max_iterations=three")
    assert main(["ci", "--action-inputs"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert "config input line 1" in captured.err and "running" not in captured.out
    assert not (tmp_path / ".selfheal").exists()


def test_missing_working_directory_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INPUT_WORKING_DIRECTORY", "no/such/dir")
    assert main(["ci", "--action-inputs"]) == EXIT_USAGE
    assert "working-directory" in capsys.readouterr().err


@pytest.mark.parametrize(("status", "pytest_code", "fail", "expected"), [
    ("resolved", 1, True, 0),
    ("passed", 0, True, 0),
    ("escalated", 1, True, 1),
    ("escalated", 1, False, 0),
    ("replan_requested", 1, True, 1),
    ("failed", 1, True, 1),
    ("failed", 1, False, 0),
    ("error", 4, False, 2),
    ("error", 5, False, EXIT_PYTEST),
    ("error", 3, True, EXIT_PYTEST),
    ("error", -9, True, EXIT_PYTEST),
])
def test_exit_code_policy(status: str, pytest_code: int, fail: bool, expected: int) -> None:
    assert exit_code_for(status, fail_on_unresolved=fail, pytest_exit_code=pytest_code) == expected


@pytest.mark.parametrize(("status", "expected"), [
    ("resolved", EXIT_OK),
    ("escalated", EXIT_UNRESOLVED),
    ("replan_requested", EXIT_UNRESOLVED),
    ("disabled", EXIT_UNRESOLVED),
    ("", EXIT_UNRESOLVED),
])
def test_loop_statuses_use_the_same_exit_code_map(status: str, expected: int) -> None:
    # `selfheal loop` passes only the final status: fail_on_unresolved is on, no pytest code.
    assert exit_code_for(status) == expected


def test_verdict_without_incident() -> None:
    assert ci_verdict.verdict_without_incident(0) == CiVerdict("passed", "none", 0, None, 0)
    assert ci_verdict.verdict_without_incident(1).stop_reason == "not_captured"
    assert ci_verdict.verdict_without_incident(2).final_status == "error"


def test_captured_incident_is_the_new_one_holding_this_runs_token(tmp_path: Path) -> None:
    from pytest_selfheal.store.root import Store

    store = Store(tmp_path / ".selfheal")
    base = Incident(step="t.py::t", failure_class="code", message="m", error_signature="s", rootdir="/x")
    old = store.create_incident(dataclasses.replace(base, ci_run="mine"), log_tail="", context=RunContext())
    before = pytest_run.snapshot(store)
    theirs = store.create_incident(dataclasses.replace(base, ci_run="theirs"), log_tail="", context=RunContext())
    assert ci.captured_incident(store, before, "mine") is None  # the old one was there before: not ours
    mine = store.create_incident(dataclasses.replace(base, ci_run="mine"), log_tail="", context=RunContext())
    store.create_incident(base, log_tail="", context=RunContext())  # no token: a plain local capture
    assert ci.captured_incident(store, before, "mine") == store.read_incident(mine)
    assert ci.captured_incident(store, before, "theirs") == store.read_incident(theirs)
    assert old != mine


def test_child_env_withholds_the_token_and_argv_pins_the_root(tmp_path: Path) -> None:
    env = {"GITHUB_TOKEN": "t", "GH_TOKEN": "t", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "t", "ACTIONS_RUNTIME_TOKEN": "t",
           "npm_token": "t", "PATH": "/bin", "SELFHEAL_RUN_TOKEN": "ours", "ACTIONS_ID_TOKEN_REQUEST_URL": "u"}
    # The variable names the rule withholds (every *TOKEN*, any case; selfheal's own pass).
    assert process.child_environment(env) == {"PATH": "/bin", "SELFHEAL_RUN_TOKEN": "ours"}
    argv = pytest_run.pytest_argv(tmp_path, [("max_iterations=5", "--set")], ["-q"])
    assert argv[:4] == [sys.executable, "-m", "pytest", "--selfheal"]
    assert argv[4:] == ["--selfheal-set", "max_iterations=5", "--selfheal-set", f"reports_dir={tmp_path}", "-q"]


def test_run_pytest_copies_the_output_live_and_tells_a_missing_interpreter(tmp_path: Path) -> None:
    out = io.StringIO()  # no .buffer: the text path, decoded across piece boundaries
    script = "import sys; sys.stdout.buffer.write(b'x' * 65535 + 'é\\nend'.encode()); sys.exit(5)"
    assert ci.run_pytest([sys.executable, "-c", script], cwd=tmp_path, env=dict(os.environ), stream=out) == 5
    assert out.getvalue() == "x" * 65535 + "é\nend"
    missing = io.StringIO()
    code = ci.run_pytest([str(tmp_path / "no-python")], cwd=tmp_path, env={}, stream=missing)
    verdict = ci.verdict_without_incident(code)
    assert code == pytest_run.CANNOT_START and verdict.final_status == "error"
    assert exit_code_for(verdict.final_status, fail_on_unresolved=False, pytest_exit_code=code) == 7
    assert missing.getvalue().startswith(f"selfheal ci: cannot start {tmp_path / 'no-python'}: ")


def test_a_proposed_patch_shows_the_test_files_first() -> None:
    patch = ("diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-a\n+b\n"
             "diff --git a/tests/test_calc.py b/tests/test_calc.py\n--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n"
             "@@ -1 +1 @@\n-assert add(2, 3) == 5\n+assert True\n")
    ordered = ci_verdict.tests_first(patch)
    assert ordered.index("tests/test_calc.py") < ordered.index("a/calc.py")
    assert sorted(ordered.splitlines()) == sorted(patch.splitlines())
