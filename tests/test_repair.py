"""Repair providers: the command runner, hooks (pytest conftest and CLI entry points), one
repair call against a real git worktree, scope approval, and the approval policy."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Optional

import git
import pluggy
import pytest
from helpers import broken_pytest_plugin, fake_distribution

from pytest_selfheal import hookspecs, process
from pytest_selfheal.config.settings import ConfigLayer, merge_layers
from pytest_selfheal.errors import ConfigError
from pytest_selfheal.hooks import cli_plugin_manager, repair_hook_names
from pytest_selfheal.loop import policy
from pytest_selfheal.plan.build import build_plan
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Failure, Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.repair import session as session_module
from pytest_selfheal.repair import worktree as W
from pytest_selfheal.repair.approval import Approver, approver_from, is_interactive
from pytest_selfheal.repair.patches import read_run_bytes, write_patch
from pytest_selfheal.repair.session import RepairSession, command_env, repair_loop, substitute
from pytest_selfheal.run import has_repair_provider as provider_configured
from pytest_selfheal.store.root import Store

hookimpl = pluggy.HookimplMarker("pytest")

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


# --------------------------------------------------------------------------- helpers


def make_repo(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "calc.py").write_text(BUGGY)
    (path / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    (path / "other.py").write_text("o = 1\n")
    repo = git.Repo.init(path)
    repo.git.add(A=True)
    repo.index.commit("init")
    repo.close()


def new_incident(store: Store, log_tail: str = "E   assert -1 == 5\n") -> tuple[str, Plan]:
    incident_id = store.create_incident(
        Incident(
            step="test_calc.py::test_add",
            failure_class="deterministic",
            message="assert -1 == 5",
            error_signature="TEST_ASSERTION | test_calc::test_add | assert -1 == 5",
            failures=(
                Failure(nodeid="test_calc.py::test_add", test="test_calc::test_add", fingerprint="fp1",
                             signature="TEST_ASSERTION | test_calc::test_add | assert -1 == 5",
                             failure_type="TEST_ASSERTION", failure_class="deterministic", message="assert -1 == 5",
                             target_paths=("calc.py",)),
            ),
        ),
        log_tail=log_tail,
        context=RunContext(),
    )
    plan = build_plan(store.read_incident(incident_id), generated_at="2026-02-17T12:00:00+00:00")
    store.write_plan(incident_id, plan, render_plan_md(plan))
    return incident_id, store.read_plan(incident_id)


def events(store: Store, incident_id: str) -> list[dict[str, Any]]:
    return [e.to_json() for e in store.read_events(incident_id)[0]]


class Env:
    """A project (real git repo), its store with one incident, and a worktree."""

    def __init__(self, tmp_path: Path) -> None:
        self.top = tmp_path / "proj"
        make_repo(self.top)
        self.store = Store(self.top / ".selfheal", lock_timeout=5)
        self.incident_id, self.plan = new_incident(self.store)
        self.wt = W.create(self.top, name=self.incident_id, exclude=[self.store.root])

    def session(self, pm: Optional[pluggy.PluginManager] = None, approver: Optional[Approver] = None,
                **config: Any) -> RepairSession:
        effective = merge_layers([ConfigLayer.of("test", {"repair": config})]) if config else merge_layers([])
        return RepairSession(self.store, self.incident_id, effective=effective, worktree=self.wt,
                             approver=approver or Approver(), pluginmanager=pm)

    def call(self, session: RepairSession, iteration: int = 1) -> dict[str, Any]:
        """One repair call; the JSON document of the repair block it returns."""
        capture = policy.capture_observation(self.store.read_incident(self.incident_id))
        return session(incident_id=self.incident_id, iteration=iteration, store=self.store, plan=self.plan,
                       last_attempt=None, observations=[capture]).to_json()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.wt.remove()


def hook_pm(*plugins: tuple[str, object]) -> pluggy.PluginManager:
    pm = pluggy.PluginManager("pytest")
    pm.add_hookspecs(hookspecs)
    for name, plugin in plugins:
        pm.register(plugin, name=name)
    return pm


class Fixer:
    def __init__(self, answer: Optional[Mapping[str, Any]] = None, files: Optional[dict[str, str]] = None) -> None:
        self.answer = {"result": "done"} if answer is None else answer
        self.files = {"calc.py": FIXED} if files is None else files
        self.requests: list[Mapping[str, Any]] = []

    @hookimpl
    def pytest_selfheal_repair(self, request: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
        self.requests.append(request)
        for name, text in self.files.items():
            Path(name).write_text(text)  # relative: the hook runs inside the worktree
        return self.answer


# --------------------------------------------------------------------------- placeholders, env


def test_substitute_per_argument_keeps_other_braces() -> None:
    argv = substitute(
        ["agent", "--message-file", "{prompt_file}", "--id={incident_id}", "{worktree}/x", "{iteration}",
         '{"json": 1}', "{unknown}"],
        {"prompt_file": "/p/prompt 01.md", "incident_id": "incident_1", "worktree": "/w", "iteration": "2"},
    )
    assert argv == ["agent", "--message-file", "/p/prompt 01.md", "--id=incident_1", "/w/x", "2", '{"json": 1}',
                    "{unknown}"]


def test_command_env_isolates_git_and_keeps_the_rest() -> None:
    env = command_env({"PATH": "/bin", "OPENAI_API_KEY": "k", "GIT_DIR": "/u/.git", "GIT_INDEX_FILE": "/u/i"}, X="1")
    assert env == {"PATH": "/bin", "OPENAI_API_KEY": "k", "SELFHEAL_VERIFYING": "1", "X": "1"}


# --------------------------------------------------------------------------- run_command


def script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_run_command_exit_code_and_output(tmp_path: Path) -> None:
    agent = script(tmp_path, "a.py", "import os, sys\nprint('cwd', os.getcwd())\nsys.exit(3)\n")
    run = process.run([sys.executable, str(agent)], cwd=tmp_path, timeout_seconds=30, output_path=tmp_path / "o.log")
    assert run.started and run.exit_code == 3 and not run.timed_out
    assert f"cwd {tmp_path}" in (tmp_path / "o.log").read_text()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0; it is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return True


@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_run_command_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    agent = script(tmp_path, "hang.py", """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(sys.argv[1], "w").write(str(child.pid))
        time.sleep(60)
    """)
    start = time.monotonic()
    run = process.run([sys.executable, str(agent), str(tmp_path / "pid")], cwd=tmp_path, timeout_seconds=1.0,
                      output_path=tmp_path / "o.log", kill_grace=1.0)
    assert run.timed_out and run.exit_code is None
    assert time.monotonic() - start < 10
    grandchild = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(grandchild)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups")
def test_run_command_reaps_background_children_after_exit(tmp_path: Path) -> None:
    agent = script(tmp_path, "bg.py", """
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(sys.argv[1], "w").write(str(child.pid))
    """)
    run = process.run([sys.executable, str(agent), str(tmp_path / "pid")], cwd=tmp_path, timeout_seconds=30,
                      output_path=tmp_path / "o.log")
    assert run.exit_code == 0
    grandchild = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(grandchild)


def test_run_command_that_cannot_start(tmp_path: Path) -> None:
    run = process.run([str(tmp_path / "no-such-agent")], cwd=tmp_path, timeout_seconds=5, output_path=tmp_path / "o")
    assert not run.started and run.exit_code is None and run.error
    assert "cannot start" in (tmp_path / "o").read_text()


def test_no_shell_ever(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    run = process.run(["echo", f"x; touch {marker}"], cwd=tmp_path, timeout_seconds=5, output_path=tmp_path / "o")
    assert run.exit_code == 0 and not marker.exists()
    assert f"x; touch {marker}" in (tmp_path / "o").read_text()


# --------------------------------------------------------------------------- one repair call (hooks)


def test_hook_fix_is_a_diff_with_patch_prompt_and_events(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    fixer = Fixer()
    result = env.call(env.session(hook_pm(("fixer", fixer))))
    assert result["provider"] == "hook:fixer" and result["result"] == "diff"
    assert result["files_changed"] == ["calc.py"] and result["patch"] == "attempt_01.patch"
    assert result["scope_denied"] is False and result["out_of_scope"] == []
    assert result["actions_applied"] == ["A1"] and result["worktree"] == str(env.wt.project_root)
    # The hook ran inside the worktree: the user's file is untouched.
    assert (env.top / "calc.py").read_text() == BUGGY
    assert (env.wt.path / "calc.py").read_text() == FIXED
    (request,) = fixer.requests
    assert request["worktree"] == str(env.wt.project_root) and request["iteration"] == 1
    assert request["prompt"].startswith("# Repair request") and Path(request["prompt_file"]).is_file()
    assert request["failures"][0]["fingerprint"] == "fp1" and request["plan"]["actions"][0]["id"] == "A1"
    patch = read_run_bytes(env.store, env.incident_id, "attempt_01.patch")
    assert patch is not None and b"+    return a + b" in patch
    assert W.check_patch(env.top, patch).ok
    names = [e["event"] for e in events(env.store, env.incident_id)]
    assert names[-3:] == ["repair_attempt_started", "diff_proposed", "repair_attempt_completed"]
    completed = events(env.store, env.incident_id)[-1]
    assert completed["result"] == "diff" and completed["files_changed"] == ["calc.py"]


def test_prompt_file_is_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t-value-123")
    e = Env(tmp_path)
    try:
        e.store.update_incident(e.incident_id, message="x")
        (e.store.incident_dir(e.incident_id) / "log_tail.txt").write_text("E  token s3cr3t-value-123 leaked\n")
        e.call(e.session(hook_pm(("fixer", Fixer()))))
        text = (e.store.runs_dir(e.incident_id) / "prompt_01.md").read_text()
        assert "s3cr3t-value-123" not in text and "[REDACTED]" in text
    finally:
        e.wt.remove()


def test_hook_that_gives_up_or_declines_is_rolled_back(env: Env) -> None:
    result = env.call(env.session(hook_pm(("quitter", Fixer(answer={"result": "gave_up", "message": "no idea"})))))
    assert result["result"] == "no_fix_found" and result["patch"] is None and result["message"] == "no idea"
    assert (env.wt.path / "calc.py").read_text() == BUGGY  # its edit was rolled back
    result = env.call(env.session(hook_pm(("shy", Fixer(answer={})))), iteration=2)
    assert result["result"] == "crashed" and "invalid result" in result["message"]


def test_hook_declining_falls_through_to_the_command(env: Env, tmp_path: Path) -> None:
    class Declines:
        @hookimpl
        def pytest_selfheal_repair(self, request: Mapping[str, Any]) -> None:
            return None

    agent = script(tmp_path, "agent.py", f"import pathlib, sys\npathlib.Path(sys.argv[1], 'calc.py').write_text({FIXED!r})\n")
    session = env.session(hook_pm(("declines", Declines())), command=[sys.executable, str(agent), "{worktree}"])
    result = env.call(session)
    assert result["provider"] == "command:" + os.path.basename(sys.executable)
    assert result["result"] == "diff" and result["log"] == "repair_01.log"
    assert (env.store.runs_dir(env.incident_id) / "repair_01.log").read_text().startswith("$ ")
    only_decline = env.call(env.session(hook_pm(("declines", Declines()))), iteration=2)
    assert only_decline["result"] == "no_fix_found" and "declined" in only_decline["message"]


def test_hook_exception_is_a_crash(env: Env) -> None:
    class Boom:
        @hookimpl
        def pytest_selfheal_repair(self, request: Mapping[str, Any]) -> Mapping[str, Any]:
            Path("calc.py").write_text("half-done\n")
            raise RuntimeError("model unavailable")

    result = env.call(env.session(hook_pm(("boom", Boom()))))
    assert result["result"] == "crashed" and result["message"] == "RuntimeError: model unavailable"
    assert (env.wt.path / "calc.py").read_text() == BUGGY


def test_out_of_scope_without_approval_is_denied_and_rolled_back(env: Env) -> None:
    fixer = Fixer(files={"calc.py": FIXED, "other.py": "o = 2\n"})
    result = env.call(env.session(hook_pm(("fixer", fixer))))
    assert result["result"] == "diff" and result["scope_denied"] is True
    assert result["out_of_scope"] == ["other.py"] and result["actions_applied"] == []
    assert (env.wt.path / "calc.py").read_text() == BUGGY and (env.wt.path / "other.py").read_text() == "o = 1\n"
    names = [e["event"] for e in events(env.store, env.incident_id)]
    assert "scope_expansion_requested" in names
    requested = next(e for e in events(env.store, env.incident_id) if e["event"] == "scope_expansion_requested")
    assert requested["files"] == ["other.py"]


def test_out_of_scope_with_approval_or_allowed_glob_is_kept(env: Env) -> None:
    files = {"calc.py": FIXED, "other.py": "o = 2\n"}
    approved = env.call(env.session(hook_pm(("fixer", Fixer(files=files))), approver=Approver(approved=True)))
    assert approved["scope_denied"] is False and approved["out_of_scope"] == ["other.py"]
    assert (env.wt.path / "other.py").read_text() == "o = 2\n"
    env.wt.restore(env.wt.base)
    globbed = env.call(env.session(hook_pm(("fixer", Fixer(files=files))), allowed_paths=["*.py"]), iteration=2)
    assert globbed["scope_denied"] is False and globbed["out_of_scope"] == []


def test_interactive_scope_question(env: Env) -> None:
    answers: list[str] = []

    def ask(question: str) -> str:
        answers.append(question)
        return "y"

    shown = io.StringIO()
    approver = Approver(interactive=True, input_fn=ask, out=shown)
    result = env.call(env.session(hook_pm(("fixer", Fixer(files={"other.py": "o = 3\n"}))), approver=approver))
    assert result["scope_denied"] is False
    assert "other.py" in answers[0] and answers[0].endswith("[y/N] ")
    assert "+o = 3" in shown.getvalue()  # the diff is shown before the question


def test_empty_diff_is_no_fix_found(env: Env) -> None:
    result = env.call(env.session(hook_pm(("lazy", Fixer(files={})))))
    assert result["result"] == "no_fix_found" and result["files_changed"] == [] and result["patch"] is None
    assert "diff_proposed" not in [e["event"] for e in events(env.store, env.incident_id)]


def test_second_call_patch_is_cumulative(env: Env) -> None:
    env.call(env.session(hook_pm(("one", Fixer(files={"calc.py": "def add(a, b):\n    return a + b  # 1\n"})))))
    second = env.call(env.session(hook_pm(("two", Fixer(files={"calc.py": FIXED})))), iteration=2)
    assert second["files_changed"] == ["calc.py"]
    patch = read_run_bytes(env.store, env.incident_id, "attempt_02.patch")
    assert patch is not None and b"-    return a - b\n+    return a + b\n" in patch  # vs the user's state


# --------------------------------------------------------------------------- plugin managers


def test_provider_configured() -> None:
    assert not provider_configured(merge_layers([]), None)
    assert not provider_configured(merge_layers([]), hook_pm())
    assert provider_configured(merge_layers([ConfigLayer.of("t", {"repair": {"command": ["agent"]}})]), None)
    assert provider_configured(merge_layers([]), hook_pm(("fixer", Fixer())))


def test_hook_call_order_follows_pluggy(env: Env) -> None:
    first, second = Fixer(files={"calc.py": "first\n"}), Fixer(files={"calc.py": "second\n"})
    pm = hook_pm(("registered_first", first), ("registered_last", second))
    assert repair_hook_names(pm) == ["registered_last", "registered_first"]
    result = env.call(env.session(pm))
    assert result["provider"] == "hook:registered_last" and not first.requests


def test_cli_loads_entry_point_hooks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    fake_distribution(site, "my_repair_hook", """
        import pluggy
        hookimpl = pluggy.HookimplMarker("pytest")

        @hookimpl
        def pytest_selfheal_repair(request):
            return {"result": "gave_up"}
    """)
    monkeypatch.syspath_prepend(str(site))
    pm = cli_plugin_manager()
    assert repair_hook_names(pm) == ["my_repair_hook"]
    assert provider_configured(merge_layers([]), pm)


def test_cli_loads_entry_point_hooks_of_a_zipped_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Entry points are read as pytest reads them (importlib.metadata): a distribution inside a
    zip file on sys.path counts too."""
    site = tmp_path / "site"
    site.mkdir()
    fake_distribution(site, "zipped_repair_hook", """
        import pluggy
        hookimpl = pluggy.HookimplMarker("pytest")

        @hookimpl
        def pytest_selfheal_repair(request):
            return {"result": "gave_up"}
    """)
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in sorted(site.rglob("*")):
            if path.is_file():
                bundle.write(path, path.relative_to(site).as_posix())
    monkeypatch.syspath_prepend(str(archive))
    assert repair_hook_names(cli_plugin_manager()) == ["zipped_repair_hook"]


def test_a_broken_unrelated_pytest_plugin_cannot_stop_selfheal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the pytest_selfheal group is loaded by the selfheal command: an installed pytest
    plugin that fails to import (pytest's business) is never imported by it."""
    site = tmp_path / "site"
    site.mkdir()
    broken_pytest_plugin(site)
    monkeypatch.syspath_prepend(str(site))
    pm = cli_plugin_manager()
    assert pm.get_plugin("unrelated_broken") is None and "unrelated_broken" not in sys.modules


def test_broken_entry_point_is_one_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    fake_distribution(site, "broken_hook", "raise ImportError('needs a missing package')\n")
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ConfigError, match="cannot load the 'pytest_selfheal' entry point 'broken_hook': ImportError") as info:
        cli_plugin_manager()
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- files


def test_write_patch_keeps_non_utf8_bytes(env: Env) -> None:
    data = b"diff --git a/x b/x\n+caf\xe9\n"
    path = write_patch(env.store, env.incident_id, "odd.patch", data)
    assert path.read_bytes() == data
    assert read_run_bytes(env.store, env.incident_id, "odd.patch") == data
    assert read_run_bytes(env.store, env.incident_id, "missing.patch") is None


# --------------------------------------------------------------------------- approval


def test_approver_up_front_and_without_terminal() -> None:
    assert Approver(approved=True).confirm("apply?")
    no = Approver(interactive=False, input_fn=lambda q: pytest.fail("must not ask"))
    assert not no.confirm("apply?")
    assert approver_from(approve=False, config_approve=True, interactive=False).approved
    assert not approver_from(approve=False, config_approve="yes", interactive=False).approved  # only a real true
    assert approver_from(approve=True, interactive=False).how == "approved"


@pytest.mark.parametrize("answer, ok", [("y", True), ("YES ", True), ("", False), ("n", False), ("yes please", False)])
def test_approver_interactive_answers(answer: str, ok: bool) -> None:
    assert Approver(interactive=True, input_fn=lambda q: answer, out=io.StringIO()).confirm("apply?") is ok


def test_default_question_goes_to_stderr(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert Approver(interactive=True).confirm("apply?", details="the diff")
    out, err = capsys.readouterr()
    assert out == "" and err == "the diff\napply? [y/N] "  # stdout stays clean for --json
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert not Approver(interactive=True).confirm("apply?")  # EOF


def test_approver_eof_is_no() -> None:
    def eof(question: str) -> str:
        raise EOFError

    assert not Approver(interactive=True, input_fn=eof, out=io.StringIO()).confirm("apply?")


def test_is_interactive_needs_both_terminals() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert is_interactive(Tty(), Tty())
    assert not is_interactive(Tty(), io.StringIO())
    assert not is_interactive(io.StringIO(), Tty())
    closed = io.StringIO()
    closed.close()
    assert not is_interactive(closed, Tty())


# --------------------------------------------------------------------------- the whole loop, in process (hooks)


def capture(project: Path) -> str:
    env = dict(os.environ)
    env.pop("SELFHEAL_VERIFYING", None)
    subprocess.run([sys.executable, "-m", "pytest", "-q", "--selfheal", "-p", "no:cacheprovider"], cwd=project,
                   capture_output=True, text=True, env=env, timeout=120)
    (incident_id,) = os.listdir(project / ".selfheal" / "error_inbox")
    return incident_id


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_repair_loop_with_a_conftest_style_hook_and_approval(tmp_path: Path) -> None:
    top = tmp_path / "proj"
    make_repo(top)
    incident_id = capture(top)
    store = Store(top / ".selfheal")
    fixer = Fixer()
    lines: list[str] = []
    result = repair_loop(store, incident_id, effective=merge_layers([]), project_root=top, approve=True,
                         interactive=False, pluginmanager=hook_pm(("fixer", fixer)), out=lines.append).to_json()
    assert result["final_status"] == "resolved" and result["stop_reason"] == "success"
    assert result["repair"]["applied"] is True and result["repair"]["final_patch"] == "final.patch"
    assert (top / "calc.py").read_text() == FIXED
    on_disk = json.loads((store.runs_dir(incident_id) / "run_result.json").read_text())
    assert on_disk["repair"]["applied"] is True
    assert any("fix applied to your working tree" in line for line in lines)
    assert "worktree.json" not in os.listdir(store.runs_dir(incident_id))
    assert git.Repo(top).git.worktree("list").count("\n") == 0  # only the main worktree is left


@pytest.mark.slow
def test_resume_replays_the_latest_accepted_patch(tmp_path: Path) -> None:
    """A loop killed after an accepted repair: the next run's worktree starts from that patch."""
    e = Env(tmp_path)
    e.wt.remove()  # the "killed" run's worktree is gone
    store, incident_id = e.store, e.incident_id
    wt = W.create(e.top, name="scratch")
    try:
        (wt.path / "calc.py").write_text(FIXED)
        write_patch(store, incident_id, "attempt_01.patch", wt.diff(wt.base, wt.snapshot()))
    finally:
        wt.remove()
    store.set_status(incident_id, "planned")
    store.set_status(incident_id, "running")
    store.write_attempt(incident_id, Attempt.from_json({
        "incident_id": incident_id, "iteration": 1, "started_at": "2026-02-17T12:00:00+00:00",
        "finished_at": "2026-02-17T12:00:01+00:00", "actions_applied": ["A1"],
        "verification_commands": ["python -m pytest -q test_calc.py::test_add"], "verification_passed": False,
        "result": "continue", "error_signature": "TEST_ASSERTION | test_calc::test_add | assert 9 == 5",
        "outcomes": {"test_calc.py::test_add": "failed"},
        "failures": [{"nodeid": "test_calc.py::test_add", "test": "test_calc::test_add", "fingerprint": "fp9",
                      "signature": "TEST_ASSERTION | test_calc::test_add | assert 9 == 5",
                      "failure_type": "TEST_ASSERTION"}],
        "repair": {"provider": "hook:x", "result": "diff", "files_changed": ["calc.py"], "patch": "attempt_01.patch"},
    }, "test attempt"))
    seen: list[str] = []

    class Looks:
        @hookimpl
        def pytest_selfheal_repair(self, request: Mapping[str, Any]) -> Mapping[str, Any]:
            seen.append(Path("calc.py").read_text())
            return {"result": "done"}

    lines: list[str] = []
    result = repair_loop(store, incident_id, effective=merge_layers([]), project_root=e.top, approve=False,
                         interactive=False, pluginmanager=hook_pm(("looks", Looks())), out=lines.append).to_json()
    assert seen == [FIXED]  # the accepted repair of attempt 1 was replayed
    assert any("resumed the worktree from attempt_01.patch" in line for line in lines)
    assert result["stop_reason"] == "success" and result["repair"]["applied"] is False
    assert (e.top / "calc.py").read_text() == BUGGY
    final = read_run_bytes(store, incident_id, "final.patch")
    assert final is not None and b"+    return a + b" in final


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_approved_fix_that_no_longer_applies_stays_proposed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = tmp_path / "proj"
    make_repo(top)
    incident_id = capture(top)
    store = Store(top / ".selfheal")

    class FixesWhileTheUserEdits:
        @hookimpl
        def pytest_selfheal_repair(self, request: Mapping[str, Any]) -> Mapping[str, Any]:
            Path("calc.py").write_text(FIXED)
            return {"result": "done"}

    # The user edits after the repair call (an edit during it is a provider escape), before the close-out.
    real_summarise = session_module.summarise

    def user_moves_on(where: Path, patch: bytes) -> Any:
        (top / "calc.py").write_text("def add(a, b):\n    return b - a  # the user moved on\n")
        return real_summarise(where, patch)

    monkeypatch.setattr(session_module, "summarise", user_moves_on)

    lines: list[str] = []
    result = repair_loop(store, incident_id, effective=merge_layers([]), project_root=top, approve=True,
                         interactive=False, pluginmanager=hook_pm(("fixer", FixesWhileTheUserEdits())),
                         out=lines.append).to_json()
    block = result["repair"]
    assert result["final_status"] == "resolved" and block["applied"] is False
    assert "does not apply cleanly" in block["message"]
    assert block["apply_command"].startswith(f"selfheal apply {incident_id} --dir ")  # run from elsewhere
    assert (top / "calc.py").read_text().endswith("# the user moved on\n")  # nothing half-applied
    assert (store.runs_dir(incident_id) / "final.patch").is_file()
