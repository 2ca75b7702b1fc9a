"""The GitHub token never reaches a test or repair process.

- process.py builds every child's environment without ``GH_TOKEN``, ``GITHUB_TOKEN``,
  ``ACTIONS_ID_TOKEN_REQUEST_TOKEN``, ``ACTIONS_RUNTIME_TOKEN`` or any ``*TOKEN*`` variable:
  the capture's pytest, every verification run and the repair provider see none.
- action.yml's two steps, run as the action runs them (real processes): the test step has
  no token (a test reading its parent's ``/proc/<pid>/environ`` finds none), the posting
  step holds it and runs no project code (``python -I -S``: no site-packages, no ``.pth``;
  the report JSON is read, rendered and posted).
- Static: only the posting step holds the token; every pip install of the action is pinned
  and hash-checked (or ``--no-index``); ``requirements-action.txt`` pins every line with
  hashes; actionlint passes on the workflows and on the action's steps.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped,unused-ignore]
from fake_github import FakeGitHub
from helpers import PY, cli, make_project
from test_actions_env import parse_github_output

from pytest_selfheal.process import token_named

from .test_secrets_everywhere import ci_env

ROOT = Path(__file__).resolve().parents[2]

TOKENS = {
    "GH_TOKEN": "gh-token-value-0001",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc-token-value-0002",
    "ACTIONS_RUNTIME_TOKEN": "runtime-token-value-0003",
    "DEPLOY_TOKEN": "deploy-token-value-0004",
}

# Each process appends what it can see: its own token-named variables and runner command
# files, and its parent's tokens. Given $GITHUB_ENV / $GITHUB_PATH, it appends to them what
# would run project code in the job's later steps (the step that holds the token).
SNOOPS = """
    import json, os

    COMMAND_FILES = ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_STATE")

    def _note(where):
        mine = sorted(k for k in os.environ if "TOKEN" in k.upper() or k in COMMAND_FILES)
        if os.environ.get("GITHUB_ENV"):
            with open(os.environ["GITHUB_ENV"], "a") as f:
                f.write("BASH_ENV=" + os.environ["EVIL_SCRIPT"] + "\\n")
        if os.environ.get("GITHUB_PATH"):
            with open(os.environ["GITHUB_PATH"], "a") as f:
                f.write(os.path.dirname(os.environ["EVIL_SCRIPT"]) + "\\n")
        try:
            with open(f"/proc/{os.getppid()}/environ", "rb") as f:
                parent = sorted(e.split(b"=", 1)[0].decode() for e in f.read().split(b"\\0") if b"TOKEN" in e.upper())
        except OSError:
            parent = ["<unreadable>"]
        with open(os.environ["SEEN_LOG"], "a") as log:
            log.write(json.dumps([where, mine, parent]) + "\\n")

    def test_ok():
        assert True

    def test_bad():
        _note("test")  # the capture, then each verification: they look alike to the tests
        assert 1 + 1 == 3
"""

# It changes an allowed file too: after a repair that kept nothing the tests would not run again.
PROVIDER = ("import json, os; open(os.environ['SEEN_LOG'], 'a').write(json.dumps(['repair', "
            "sorted(k for k in os.environ if 'TOKEN' in k.upper() or k.startswith(('GITHUB_ENV', 'GITHUB_PATH', "
            "'GITHUB_OUTPUT', 'GITHUB_STEP_SUMMARY', 'GITHUB_STATE'))), []]) + '\\n'); open('note.txt', 'a').write('x\\n')")


def _seen(log: Path) -> list[Any]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def _command_files(tmp_path: Path) -> dict[str, str]:
    """The runner's command files a job step gets, as empty temp files, and the script a test
    would have the later steps run (``EVIL_SCRIPT``: it leaves ``EVIL_RAN`` behind)."""
    files = {name: tmp_path / f"runner-{name.lower()}" for name in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_STATE")}
    for path in files.values():
        path.write_text("")
    evil = tmp_path / "evil" / "evil.sh"
    evil.parent.mkdir()
    evil.write_text(f"echo ran > {tmp_path / 'EVIL_RAN'}\n")
    return {**{k: str(v) for k, v in files.items()}, "EVIL_SCRIPT": str(evil)}


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_no_token_named_variable_reaches_a_child(tmp_path: Path, fake_github: FakeGitHub) -> None:
    log = tmp_path / "seen.log"
    project = make_project(tmp_path / "p", {"test_app.py": SNOOPS})
    env = ci_env(tmp_path, fake_github, {"SEEN_LOG": str(log), **TOKENS, **_command_files(tmp_path)})
    provider = json.dumps([PY, "-c", PROVIDER])
    done = cli("ci", "--set", f"repair.command={provider}", "--set", 'repair.allowed_paths=["note.txt"]', "--", "-q",
               cwd=project, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    seen = _seen(log)
    kinds = [where for where, _, _ in seen]
    assert set(kinds) == {"test", "repair"} and kinds.count("test") >= 2, seen  # the capture and a verification
    assert all(mine == [] for _, mine, _ in seen), seen
    assert fake_github.requests_to("POST"), "the comment (the token's one use) was posted"


def _step_env(step: dict[str, Any], base: dict[str, str], values: dict[str, str]) -> dict[str, str]:
    """The environment action.yml gives ``step``: ``base`` (the runner's), plus the step's
    ``env:`` keys with ``values`` for them (a key the test does not set is empty)."""
    env = dict(base)
    for key in step.get("env") or {}:
        env[key] = values.get(key, "")
    return env


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_the_action_steps_keep_the_token_out_of_the_test_step(tmp_path: Path, fake_github: FakeGitHub) -> None:
    steps = {s["id"]: s for s in yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]}
    log = tmp_path / "seen.log"
    project = make_project(tmp_path / "p", {"test_app.py": SNOOPS})
    runner = ci_env(tmp_path, fake_github, {"SEEN_LOG": str(log), **_command_files(tmp_path)})
    token = runner.pop("GITHUB_TOKEN")  # the runner does not export it: the action passes its input
    runner.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)

    # Step "selfheal": exactly its env (no token), its command, in the project.
    test_step = _step_env(steps["selfheal"], runner, {"SELFHEAL_PYTHON": PY, "INPUT_PYTEST_ARGS": "-q",
                                                      "INPUT_COMMENT": "true", "INPUT_REPORT_NAME": "default",
                                                      "INPUT_FAIL_ON_UNRESOLVED": "true", "INPUT_WORKING_DIRECTORY": "."})
    assert not any(token_named(k) for k in test_step), sorted(k for k in test_step if token_named(k))
    done = subprocess.run(["bash", "-c", steps["selfheal"]["run"]], cwd=project, env=test_step,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    seen = _seen(log)
    assert [where for where, _, _ in seen].count("test") >= 2, seen  # the capture and a verification
    assert all(mine == [] and parent == [] for _, mine, parent in seen), seen  # nothing, not even in /proc
    assert not fake_github.requests_to("POST") and not fake_github.requests_to("PATCH")
    # The tests could not reach the runner's command files: nothing for the later steps.
    assert all(Path(runner[name]).read_text() == "" for name in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_STATE"))
    outputs = dict(parse_github_output(Path(runner["GITHUB_OUTPUT"]).read_text()))
    summary_size = Path(runner["GITHUB_STEP_SUMMARY"]).stat().st_size
    assert summary_size > 0

    # Step "post": its env (with the token), its script, an isolated interpreter whose only
    # library is the pinned copy (here: this test run's site-packages stand in for it).
    lib = sysconfig.get_paths()["purelib"]
    post_env = _step_env(steps["post"], runner, {
        "SELFHEAL_PYTHON": PY, "SELFHEAL_POST_LIB": lib, "ACTION_PATH": str(ROOT), "INPUT_COMMENT": "true",
        "REPORT_JSON": outputs["report-json-path"], "INPUT_REPORT_NAME": "default", "GITHUB_TOKEN": token,
        "INPUT_WORKING_DIRECTORY": ".",
    })
    # A hostile .pth in the project's environment would run at any normal interpreter start.
    pth_dir = tmp_path / "evil-site"
    pth_dir.mkdir()
    (pth_dir / "evil.pth").write_text(f"import os; open({str(tmp_path / 'PTH_RAN')!r}, 'w').write(os.environ.get('GITHUB_TOKEN', ''))\n")
    post_env["PYTHONPATH"] = str(pth_dir)  # ignored under -I; and .pth files are only read by site (-S)
    # What the runner does between steps: every NAME=VALUE line of $GITHUB_ENV joins the next
    # step's environment (before, a test's BASH_ENV=evil.sh ran in this bash step).
    for line in Path(runner["GITHUB_ENV"]).read_text().splitlines():
        name, _, value = line.partition("=")
        post_env[name] = value
    posted = subprocess.run(["bash", "-c", steps["post"]["run"]], cwd=project, env=post_env,
                            capture_output=True, text=True, timeout=300)
    assert posted.returncode == 0, posted.stdout + posted.stderr
    (comment,) = fake_github.comments(7)
    assert "## RALF Lite Loop Report" in str(comment["body"])
    assert Path(runner["GITHUB_STEP_SUMMARY"]).stat().st_size == summary_size  # posted only, summary not repeated
    assert not (tmp_path / "PTH_RAN").exists()
    assert not (tmp_path / "EVIL_RAN").exists()


def test_the_post_step_runs_no_project_code() -> None:
    # Which step holds the token: test_action_security.py::test_only_the_posting_step_gets_the_token.
    steps = yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]
    holders = ("post", "history-pull", "history-push")
    assert not any(token_named(k) for s in steps if s["id"] not in holders for k in (s.get("env") or {}))
    for history in (s for s in steps if s["id"] in holders[1:]):
        # The shared history's steps: the same isolated interpreter; git gets the token in its
        # environment only, in a scratch repository (--token-env), from this repository's URL.
        assert '-I -S -c' in history["run"] and "--token-env GITHUB_TOKEN" in history["run"]
        assert '--remote "$GITHUB_SERVER_URL/$GITHUB_REPOSITORY.git"' in history["run"]
    post = next(s for s in steps if s["id"] == "post")
    assert '-I -S -c' in post["run"] and "--post-only" in post["run"] and "--comment-from" in post["run"]
    assert "pytest" not in post["run"].replace("pytest_selfheal", "")
    assert post.get("if") == "${{ !cancelled() }}"


def test_the_action_installs_only_pinned_hash_checked_packages() -> None:
    install = yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"][0]["run"]
    pip_lines = [line for line in install.splitlines() if '"${pip_install[@]}"' in line]
    assert len(pip_lines) == 3
    for line in pip_lines:
        assert "--require-hashes" in line or ("--no-index" in line and "--no-deps" in line), line
    text = (ROOT / "requirements-action.txt").read_text()
    entries = re.split(r"\n(?=[a-z])", text[re.search(r"^[a-z]", text, re.M).start():])  # type: ignore[union-attr]
    names = set()
    for entry in entries:
        head = entry.splitlines()[0]
        assert re.match(r"^[a-z0-9._-]+==[0-9][^ ;]* ", head), head
        assert "--hash=sha256:" in entry, head
        names.add(head.split("==")[0])
    # Every runtime dependency of the package is pinned (pyproject.toml), and the backend.
    assert {"pytest", "pluggy", "pyyaml", "gitpython", "junitparser", "iniconfig", "tomli", "hatchling"} <= names


def _actionlint() -> str:
    found = shutil.which("actionlint") or str(Path(PY).parent / "actionlint")
    assert os.access(found, os.X_OK), "actionlint is missing: pip install -e '.[test]'"
    return found


def _as_workflow(action: dict[str, Any]) -> dict[str, Any]:
    """The composite action's steps as a workflow actionlint can check: the inputs become
    workflow_dispatch inputs (same names, so every ``inputs.*`` resolves)."""
    inputs = {name: {"description": spec.get("description", ""), "required": False, "type": "string",
                     "default": "" if "${{" in str(spec.get("default", "")) else str(spec.get("default", ""))}
              for name, spec in action["inputs"].items()}
    return {"name": "action.yml steps", "on": {"workflow_dispatch": {"inputs": inputs}},
            "permissions": {"contents": "read"},
            "jobs": {"action": {"runs-on": "ubuntu-latest", "steps": action["runs"]["steps"]}}}


def test_actionlint_passes_on_the_workflows_and_the_action(tmp_path: Path) -> None:
    binary = _actionlint()
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.y*ml"))
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    as_workflow = tmp_path / ".github" / "workflows" / "action-steps.yml"
    as_workflow.parent.mkdir(parents=True)
    as_workflow.write_text(yaml.safe_dump(_as_workflow(action), sort_keys=False))
    done = subprocess.run([binary, "-no-color", *workflows, str(as_workflow)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    # It does check: a broken expression in a step is reported.
    action["runs"]["steps"][1]["env"]["BROKEN"] = "${{ steps.install.outputs.python"
    as_workflow.write_text(yaml.safe_dump(_as_workflow(action), sort_keys=False))
    broken = subprocess.run([binary, "-no-color", str(as_workflow)], capture_output=True, text=True, timeout=120)
    assert broken.returncode != 0, broken.stdout
