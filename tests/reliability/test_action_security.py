"""Action security beyond tests/test_action_yml.py (which already checks: no ``${{ }}`` in any
``run:`` of action.yml, this repository's workflows and docs/action.md; inputs through
``env:`` only; least-privilege ``permissions:``; the fork recipe's trusted half checks out
nothing). Added here:

- the GitHub token never reaches ANY test process: not the capture's pytest, not a
  verification run, not the repair provider (each appends what it sees to a file);
- a PR-controlled reports root (a committed ``.selfheal/`` with an open incident whose
  ``plan.json`` holds shell commands) and a PR-controlled config widening the allowlist:
  ``selfheal ci`` never runs those commands (the plan it loops is the one it generated);
- static: only the selfheal step of action.yml receives the token; no workflow (ours or
  documented) is triggered by ``pull_request_target``; every checkout in a workflow that
  runs tests through the action sets ``persist-credentials: false``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped,unused-ignore]
from fake_github import FakeGitHub
from helpers import PY, CliResult, cli, git_commit_all, make_project, run_env

from .conftest import record_figures, walk_written

ROOT = Path(__file__).resolve().parents[2]

SEES_TOKEN = """
    import os

    def _note(where):
        with open(os.environ["SEEN_LOG"], "a") as log:
            log.write(where + " " + os.environ.get("GITHUB_TOKEN", "<absent>") + "\\n")

    def test_ok():
        assert True

    def test_bad():
        _note("test")  # the capture, then each verification: they look alike to the tests
        assert 1 + 1 == 3
"""

# It changes an allowed file too: after a repair that kept nothing the tests would not run again.
PROVIDER = ("import os; open(os.environ['SEEN_LOG'], 'a').write('repair ' + os.environ.get('GITHUB_TOKEN', '<absent>') "
            "+ '\\n'); open('note.txt', 'a').write('tried\\n')")
ALLOW_NOTE = 'repair.allowed_paths=["note.txt"]'



def actions_env(tmp_path: Path, fake: FakeGitHub, **extra: str) -> dict[str, str]:
    env = run_env(extra)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # as in a real job: the plugin autoloads
    summary, outputs, event = tmp_path / "summary.md", tmp_path / "outputs.txt", tmp_path / "event.json"
    summary.write_text("")
    outputs.write_text("")
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    env.update({
        "GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": fake.repository, "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event), "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(outputs),
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567", "GITHUB_RUN_ID": "1",
        "GITHUB_SERVER_URL": "https://github.com", "GITHUB_API_URL": fake.url, "GITHUB_TOKEN": fake.token,
        "PYTEST_ADDOPTS": "-p no:hypothesispytest -p no:cacheprovider",
    })
    return env


def run_ci(project: Path, env: dict[str, str], *args: str) -> CliResult:
    """``selfheal ci ARGS`` with exactly ``env`` (in process; its pytest runs are real processes)."""
    return cli("ci", *args, cwd=project, env=env)


def test_the_token_never_reaches_any_test_process(tmp_path: Path, fake_github: FakeGitHub) -> None:
    log = tmp_path / "seen.log"
    project = make_project(tmp_path / "proj", {"test_app.py": SEES_TOKEN})
    env = actions_env(tmp_path, fake_github, SEEN_LOG=str(log))
    provider = json.dumps([PY, "-c", PROVIDER])
    done = run_ci(project, env, "--set", f"repair.command={provider}", "--set", ALLOW_NOTE, "--", "-q")
    assert done.returncode == 1, done.stdout + done.stderr
    assert fake_github.requests_to("POST"), "the comment (the token's one use) was not posted"
    seen = [line.split(" ", 1) for line in log.read_text().splitlines()]
    kinds = {where for where, _ in seen}
    assert kinds == {"test", "repair"} and [where for where, _ in seen].count("test") >= 2, seen
    assert all(value == "<absent>" for _, value in seen), seen
    # Nor is it in anything written.
    for path in walk_written(project) + [Path(env["GITHUB_STEP_SUMMARY"]), Path(env["GITHUB_OUTPUT"])]:
        assert fake_github.token.encode() not in path.read_bytes(), path
    record_figures("test_action_security.py::test_the_token_never_reaches_any_test_process",
                   processes_checked=len(seen), token_seen=0)


MALICIOUS_PLAN_COMMANDS = ["sh -c 'touch {marker}'", "pytest; touch {marker}", "python -c \"open('{marker}','w')\""]


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_a_pr_controlled_reports_root_never_runs_its_plan(tmp_path: Path, fake_github: FakeGitHub) -> None:
    """A PR commits ``.selfheal/`` with an open incident and a hand-written plan, plus a config
    that allowlists ``touch`` (a shell or an interpreter it could not: config/keys.py): the job loops
    only the incident it captured itself."""
    marker = tmp_path / "PWNED"
    log = tmp_path / "seen.log"
    project = make_project(tmp_path / "proj", {"test_app.py": SEES_TOKEN}, git=False)
    # Capture once locally (as the PR author would) to get a well-formed incident, then tamper.
    first = subprocess.run([PY, "-m", "pytest", "-p", "pytest_selfheal.plugin", "--selfheal", "-q",
                            "-p", "no:cacheprovider"], cwd=project, capture_output=True, text=True, timeout=120,
                           env=run_env({"SEEN_LOG": str(log)}))
    assert first.returncode == 1, first.stdout
    root = project / ".selfheal"
    (incident_id,) = [p.name for p in (root / "error_inbox").iterdir()]
    plan_path = root / "error_plans" / incident_id / "plan.json"
    plan = json.loads(plan_path.read_text())
    plan["verification_commands"] = [c.format(marker=marker) for c in MALICIOUS_PLAN_COMMANDS]
    plan_path.write_text(json.dumps(plan))
    (project / ".planning").mkdir()
    (project / ".planning" / "config.json").write_text(json.dumps(
        {"ralf_lite": {"verification": {"allowlist": ["pytest", "touch"]}}}))
    (project / ".gitignore").write_text("__pycache__/\n")  # the PR commits its .selfheal/
    git_commit_all(project, "PR: add a reports root and a config")
    log.write_text("")
    env = actions_env(tmp_path, fake_github, SEEN_LOG=str(log))
    done = run_ci(project, env, "--", "-q")
    assert "Traceback" not in done.stderr, done.stderr
    assert not marker.exists(), "a PR-controlled plan command was executed"
    # The committed incident was not looped: still no attempt of a verification run of its own plan.
    runs = root / "error_runs" / incident_id
    attempts = sorted(runs.glob("attempt_*.json")) if runs.is_dir() else []
    for attempt in attempts:
        doc = json.loads(attempt.read_text())
        assert all("touch" not in c and "sh -c" not in c for c in doc["verification_commands"]), doc
    assert all(value == "<absent>" for value in [line.split(" ", 1)[1] for line in log.read_text().splitlines()])
    record_figures("test_action_security.py::test_a_pr_controlled_reports_root_never_runs_its_plan",
                   commands=len(MALICIOUS_PLAN_COMMANDS), executed=0)


# --------------------------------------------------------------------------- static checks


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _doc_workflows() -> list[tuple[str, Any]]:
    import re
    import textwrap

    text = (ROOT / "docs" / "action.md").read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```ya?ml\n(.*?)^```", text, flags=re.S | re.M):
        body = match.group(1)
        try:
            doc = yaml.safe_load(body)
        except yaml.YAMLError:
            doc = yaml.safe_load(textwrap.dedent(body))
        if isinstance(doc, dict) and "jobs" in doc:
            found.append((f"docs/action.md:{text.count(chr(10), 0, match.start()) + 1}", doc))
    return found


def _workflows() -> list[tuple[str, Any]]:
    own = [(str(p.relative_to(ROOT)), _load(p)) for p in sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))]
    return own + _doc_workflows()


def _triggers(doc: dict[Any, Any]) -> list[str]:
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on:` key as True
    if isinstance(on, str):
        return [on]
    return [str(k) for k in (on or {})]


def test_only_the_posting_step_gets_the_token() -> None:
    # The tests run in the "selfheal" step without it (test_token_isolation.py).
    # The shared history's pull and push hold it too, in the same isolation.
    steps = _load(ROOT / "action.yml")["runs"]["steps"]
    holders = [s.get("id") for s in steps if "github-token" in json.dumps(s.get("env") or {})
               or "GITHUB_TOKEN" in (s.get("env") or {})]
    assert holders == ["history-pull", "post", "history-push"], holders


@pytest.mark.parametrize(("where", "doc"), _workflows(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_pull_request_target_and_no_persisted_checkout_credentials(where: str, doc: dict[Any, Any]) -> None:
    assert "pull_request_target" not in _triggers(doc), where
    for job in (doc.get("jobs") or {}).values():
        steps = job.get("steps") or []
        runs_tests = any(("pytest-selfheal@" in str(s.get("uses", "")) or s.get("uses") == "./")
                         and "comment-from" not in (s.get("with") or {}) for s in steps)
        for step in steps:
            if str(step.get("uses", "")).startswith("actions/checkout@") and runs_tests:
                assert (step.get("with") or {}).get("persist-credentials") is False, \
                    f"{where}: checkout keeps its token in .git/config, readable by the tests"
