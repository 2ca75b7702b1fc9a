"""verify.py (allowlist, running a selection, observing its junit) and gitrepo.py (diff hash)."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import Any

import git
import pytest
from helpers import git_commit_all, make_project, run_env
from test_process import alive

from pytest_selfheal.capture.options import option_lookup, replayable_options
from pytest_selfheal.errors import RefusedError
from pytest_selfheal.gitrepo import PendingSnapshot, clean_tree_hash, diff_hash, git_snapshot
from pytest_selfheal.loop.verify import (
    COLLECTION_KEY,
    VERIFYING_ENV,
    VerificationRun,
    check_allowed,
    check_command,
    nodeid_for,
    observe,
    resolve_argv,
    run_selection,
    runner,
)
from pytest_selfheal.names import OPTIONS_PLUGIN
from pytest_selfheal.process import read_tail
from pytest_selfheal.records import models
from pytest_selfheal.redact import default_redactor

# --------------------------------------------------------------------------- allowlist


@pytest.mark.parametrize(
    "argv, name",
    [
        (["python", "-m", "pytest", "-q", "t.py::a"], "pytest"),
        (["python3.11", "-m", "pytest"], "pytest"),
        (["/usr/bin/python3", "-mpytest"], "pytest"),
        (["pytest", "-q"], "pytest"),
        (["/opt/venv/bin/pytest"], "pytest"),
        (["C:\\py\\Scripts\\pytest.exe", "-q"], "pytest"),
        (["python", "-c", "print(1)"], "python"),
        (["python", "-m", "pip", "install", "x"], "pip"),
        (["rm", "-rf", "/tmp/x"], "rm"),
    ],
)
def test_runner_name(argv: list[str], name: str) -> None:
    assert runner(argv)[0] == name


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-m", "pytest", "-q", "tests/test_a.py::test_x[a b]"],
        ["pytest", "-q", "-k", "a or b"],
        ["python", "-m", "pytest", "t.py::test[x;y]"],  # a ';' inside an argument is just a character
    ],
)
def test_allowed_commands(argv: list[str]) -> None:
    check_allowed(argv, ["pytest"])


@pytest.mark.parametrize(
    "argv, why",
    [
        (["rm", "-rf", "/tmp/x"], "'rm' is not in ralf_lite.verification.allowlist"),
        (["python", "-c", "import os"], "'python' is not in"),
        (["python", "-m", "pip", "install", "evil"], "'pip' is not in"),
        (["pytest;", "touch", "/tmp/pwned"], "shell syntax in the executable"),
        (["python", "-m", "pytest", "-q", "t.py", "&&", "touch", "/tmp/pwned"], "shell syntax ('&&')"),
        (["python", "-m", "pytest", "|", "sh"], "shell syntax ('|')"),
        (["python", "-m", "pytest", ">", "/etc/passwd"], "shell syntax ('>')"),
        (["python", "-m", "pytest", "$(touch /tmp/x)"], "shell syntax"),
        (["python", "-m", "pytest", "`id`"], "shell syntax"),
        ([], "empty"),
    ],
)
def test_refused_commands(argv: list[str], why: str) -> None:
    with pytest.raises(RefusedError) as info:
        check_allowed(argv, ["pytest"])
    assert why in str(info.value)
    assert "\n" not in str(info.value)


def test_allowlist_is_configurable() -> None:
    check_allowed(["tox", "-e", "py"], ["pytest", "tox"])
    with pytest.raises(RefusedError):
        check_allowed(["python", "-m", "pytest"], [])


def test_bare_python_becomes_the_running_interpreter() -> None:
    assert resolve_argv(["python", "-m", "pytest"]) == [sys.executable, "-m", "pytest"]
    assert resolve_argv(["python3", "-m", "pytest"])[0] == sys.executable
    assert resolve_argv(["/opt/py/bin/python", "-m", "pytest"])[0] == "/opt/py/bin/python"
    assert resolve_argv(["pytest", "-q"]) == ["pytest", "-q"]


# --------------------------------------------------------------------------- running


PROJECT = {
    "test_a.py": """
        import os

        def test_pass():
            assert os.environ.get("SELFHEAL_VERIFYING") == "1"

        def test_fail():
            token = "ghp_" + "Zz9" * 12
            raise RuntimeError("login refused for token=" + token)

        class TestBox:
            def test_inner(self):
                assert 1 == 2
    """,
}


def test_run_selection_writes_junit_and_observe_maps_node_ids(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", PROJECT)
    junit = tmp_path / "out" / "junit.xml"
    run = run_selection(
        ["python", "-m", "pytest", "-q", "test_a.py::test_pass", "test_a.py::test_fail", "test_a.py::test_gone"],
        cwd=project, junit_path=junit, timeout_seconds=120, env=run_env(),
    )
    assert run.argv[0] == sys.executable and run.argv[-1] == f"--junitxml={junit}"
    assert run.exit_code == 4 or run.exit_code == 1  # pytest reports the unknown node id
    selection = ["test_a.py::test_pass", "test_a.py::test_fail"]
    run = run_selection(["python", "-m", "pytest", "-q", *selection], cwd=project, junit_path=junit,
                        timeout_seconds=120, env=run_env())
    assert run.exit_code == 1 and not run.timed_out and junit.is_file()
    assert "1 failed, 1 passed" in run.output_tail
    outcomes, failures = observe(run, selection + ["test_a.py::test_gone"], redactor=default_redactor())
    assert outcomes == {"test_a.py::test_pass": "passed", "test_a.py::test_fail": "failed",
                        "test_a.py::test_gone": "missing"}
    assert [f.nodeid for f in failures] == ["test_a.py::test_fail"]
    assert "ghp_" not in failures[0].signature and "[REDACTED]" in failures[0].signature


def test_observe_collector_selections_take_the_worst_outcome_inside(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", PROJECT)
    run = run_selection(["python", "-m", "pytest", "-q", "test_a.py::TestBox", "test_a.py::test_pass"], cwd=project,
                        junit_path=tmp_path / "j.xml", timeout_seconds=120, env=run_env())
    outcomes, failures = observe(run, ["test_a.py::TestBox", "test_a.py::test_pass"])
    assert outcomes["test_a.py::TestBox"] == "failed"
    assert outcomes["test_a.py::test_pass"] == "passed"
    assert outcomes["test_a.TestBox::test_inner"] == "failed"  # outside the selection: junit identity
    assert len(failures) == 1 and failures[0].nodeid is None


def test_observe_a_file_selection_records_the_selected_tests_and_failing_neighbours_only(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {**PROJECT, "test_b.py": """
        import pytest

        def test_sel():
            pass

        def test_ok():
            pass

        @pytest.mark.skip(reason="not today")
        def test_skipped():
            pass
    """})
    # A command naming the files (by hand, or an older plan's): the plan's node ids are mapped back.
    run = run_selection(["python", "-m", "pytest", "-q", "test_a.py", "test_b.py"], cwd=project,
                        junit_path=tmp_path / "j.xml", timeout_seconds=120, env=run_env())
    outcomes, _ = observe(run, ["test_b.py::test_sel", "test_a.py::test_pass"])
    # Passing and skipped neighbours are not the selection's; a failing neighbour is a failure.
    assert outcomes == {"test_b.py::test_sel": "passed", "test_a.py::test_pass": "passed",
                        "test_a::test_fail": "failed", "test_a.TestBox::test_inner": "failed"}


def test_collect_only_verification_passes_on_a_clean_collection(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", PROJECT)
    run = run_selection(["python", "-m", "pytest", "-q", "--collect-only"], cwd=project,
                        junit_path=tmp_path / "j.xml", timeout_seconds=120, env=run_env())
    assert observe(run, []) == ({COLLECTION_KEY: "passed"}, [])


def test_missing_runner_module_is_one_tooling_env_failure(tmp_path: Path) -> None:
    run = run_selection([sys.executable, "-m", "nonexistent_runner_xyz", "t.py::a"], cwd=tmp_path,
                        junit_path=tmp_path / "j.xml", timeout_seconds=60)
    assert run.exit_code == 1 and not (tmp_path / "j.xml").exists()
    outcomes, failures = observe(run, ["t.py::a"])
    assert outcomes == {"t.py::a": "missing"}
    assert len(failures) == 1
    assert failures[0].failure_type == models.TOOLING_ENV
    assert "No module named nonexistent_runner_xyz" in failures[0].message
    assert failures[0].test == "verification"


def test_missing_executable_is_reported_not_raised(tmp_path: Path) -> None:
    run = run_selection(["definitely-not-a-command-xyz", "-q"], cwd=tmp_path, junit_path=tmp_path / "j.xml",
                        timeout_seconds=10)
    assert run.exit_code is None and "command not found" in run.output_tail
    _, failures = observe(run, ["t.py::a"])
    assert failures[0].failure_type == models.TOOLING_ENV


def test_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = tmp_path / "hang.py"
    # The child starts a grandchild that ignores SIGTERM, then both hang.
    script.write_text(
        "import os, signal, subprocess, sys, time\n"
        "code = 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)'\n"
        "p = subprocess.Popen([sys.executable, '-c', code])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    start = time.monotonic()
    run = run_selection([sys.executable, str(script)], cwd=tmp_path, junit_path=tmp_path / "j.xml",
                        timeout_seconds=1.5, kill_grace=0.5)
    assert run.timed_out and run.exit_code is None
    assert time.monotonic() - start < 20
    assert "started" in run.output_tail
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alive(grandchild):
        time.sleep(0.05)
    assert not alive(grandchild)
    outcomes, failures = observe(run, ["t.py::a"])
    assert outcomes == {"t.py::a": "missing"} and failures[0].failure_type == models.TIMEOUT


def test_an_exception_while_waiting_kills_the_group(tmp_path: Path) -> None:
    script = tmp_path / "sleep.py"
    script.write_text("import time\ntime.sleep(60)\n")

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_selection([sys.executable, str(script)], cwd=tmp_path, junit_path=tmp_path / "j.xml",
                          timeout_seconds=None, kill_grace=0.5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_output_goes_to_a_file_and_only_the_tail_is_kept(tmp_path: Path) -> None:
    script = tmp_path / "loud.py"
    script.write_text("import sys\nfor i in range(200000):\n    sys.stdout.write(f'line {i}\\n')\n")
    run = run_selection([sys.executable, str(script)], cwd=tmp_path, junit_path=tmp_path / "j.xml",
                        timeout_seconds=60)
    assert run.exit_code == 0
    lines = run.output_tail.splitlines()
    assert len(lines) == 200 and lines[-1] == "line 199999"
    assert read_tail(tmp_path / "absent") == ""


def test_the_child_sees_selfheal_verifying(tmp_path: Path) -> None:
    script = tmp_path / "env.py"
    script.write_text(f"import os\nprint(os.environ.get({VERIFYING_ENV!r}))\n")
    run = run_selection([sys.executable, str(script)], cwd=tmp_path, junit_path=tmp_path / "j.xml",
                        timeout_seconds=60)
    assert run.output_tail.strip() == "1"


def test_nodeid_for_tolerates_a_junit_prefix() -> None:
    mapping = {"tests.test_a::test_x": "tests/test_a.py::test_x"}
    assert nodeid_for("tests.test_a::test_x", mapping) == "tests/test_a.py::test_x"
    assert nodeid_for("myprefix.tests.test_a::test_x", mapping) == "tests/test_a.py::test_x"
    assert nodeid_for("other::test_x", mapping) is None


def test_observe_empty_junit_file(tmp_path: Path) -> None:
    junit = tmp_path / "j.xml"
    junit.write_text("")
    run = VerificationRun(["pytest"], 4, False, 0.1, "ERROR: usage: pytest [options]\n\n", junit)
    outcomes, failures = observe(run, ["a.py::t"])
    assert outcomes == {"a.py::t": "missing"}
    assert failures[0].message == "ERROR: usage: pytest [options]"


def test_a_selection_pytest_cannot_find_is_the_environment_not_a_changed_failure(tmp_path: Path) -> None:
    """pytest refuses the whole run when one node id names nothing: nothing was verified.
    The failure says which id (pytest's ERROR line, not its last line) and is TOOLING_ENV, so
    the loop stops (tooling_env) instead of counting the changed message as progress."""
    output = ("ERROR: not found: /p/tests/test_more.py::tests.test_more.IterOnlyRange\n"
              "(no match in any of [<Module test_more.py>])\n\n")
    run = VerificationRun(["pytest"], 4, False, 0.1, output, tmp_path / "absent.xml")
    outcomes, failures = observe(run, ["tests/test_more.py::tests.test_more.IterOnlyRange"])
    assert outcomes == {"tests/test_more.py::tests.test_more.IterOnlyRange": "missing"}
    assert failures[0].message == "ERROR: not found: /p/tests/test_more.py::tests.test_more.IterOnlyRange"
    assert failures[0].failure_type == models.TOOLING_ENV


# --------------------------------------------------------------------------- gitrepo


def test_diff_hash_tracks_edits_untracked_files_and_commits_but_not_the_reports_root(tmp_path: Path) -> None:
    project = make_project(tmp_path / "repo", {"src/mod.py": "X = 1\n"})
    reports = project / "custom-reports"
    clean = diff_hash(project, exclude=[reports])
    assert clean is not None and len(clean) == 16
    assert clean == clean_tree_hash(git.Repo(project).head.commit.hexsha)
    reports.mkdir()
    (reports / "attempt_01.json").write_text("{}")
    assert diff_hash(project, exclude=[reports]) == clean  # the reports root is excluded
    # An agent's or an editor's settings (hidden folders, tracked or not, at any depth) are no code.
    for folder in (".claude", ".cursor", "src/.vscode"):
        (project / folder).mkdir()
        (project / folder / "settings.json").write_text("{}")
    (project / ".github").mkdir()
    (project / ".github" / "ci.yml").write_text("on: push\n")
    git.Repo(project).git.add(".github")
    assert diff_hash(project, exclude=[reports]) == clean
    (project / "src" / "mod.py").write_text("X = 2\n")
    edited = diff_hash(project, exclude=[reports])
    assert edited not in (None, clean)
    (project / "src" / "new.py").write_text("Y = 1\n")
    added = diff_hash(project, exclude=[reports])
    assert added not in (None, clean, edited)
    (project / "src" / "new.py").write_text("Y = 2\n")
    assert diff_hash(project, exclude=[reports]) != added  # untracked contents count
    (project / "src" / "new.py").unlink()
    (project / "src" / "mod.py").write_text("X = 1\n")
    assert diff_hash(project, exclude=[reports]) == clean
    (project / "src" / "mod.py").write_text("X = 3\n")
    git_commit_all(project, "fix")  # committing the change is a change too
    committed = diff_hash(project, exclude=[reports])
    assert committed not in (None, clean)
    # Ignored files do not count; a sub-directory sees the whole repository.
    (project / "__pycache__").mkdir()
    (project / "__pycache__" / "x.pyc").write_bytes(b"\0\1")
    assert diff_hash(project / "src", exclude=[reports]) == committed


def test_diff_hash_is_binary_safe_and_none_outside_git(tmp_path: Path) -> None:
    project = make_project(tmp_path / "repo", {"data.bin": "placeholder"})
    (project / "data.bin").write_bytes(bytes(range(256)))
    first = diff_hash(project)
    (project / "data.bin").write_bytes(bytes(reversed(range(256))))
    assert first is not None and diff_hash(project) not in (None, first)
    outside = tmp_path / "plain"
    outside.mkdir()
    assert diff_hash(outside) is None


def test_diff_hash_of_an_unborn_repository(tmp_path: Path) -> None:
    git.Repo.init(tmp_path / "fresh").close()
    (tmp_path / "fresh" / "a.py").write_text("A = 1\n")
    first = diff_hash(tmp_path / "fresh")
    (tmp_path / "fresh" / "a.py").write_text("A = 2\n")
    assert first is not None and diff_hash(tmp_path / "fresh") not in (None, first)


def _gitpython_context(path: Path) -> dict[str, Any]:
    """What gitpython says of the repository: the reference the one-pass snapshot replaces."""
    repo = git.Repo(path, search_parent_directories=True)
    try:
        valid = repo.head.is_valid()
        return {
            "root": str(repo.working_tree_dir),
            "commit": repo.head.commit.hexsha if valid else None,
            "branch": None if repo.head.is_detached else repo.active_branch.name,
            "dirty": repo.is_dirty(untracked_files=True),
            "diff_stat": repo.git.diff("HEAD", "--stat") if valid else "",
            "untracked": len(repo.untracked_files),
        }
    finally:
        repo.close()


def test_git_snapshot_reads_what_gitpython_reads(tmp_path: Path) -> None:
    project = make_project(tmp_path / "repo", {"src/mod.py": "X = 1\n", "? odd.py": "O = 1\n"})
    reports = project / ".selfheal"
    states = [_gitpython_context(project)]
    clean = git_snapshot(project, exclude=[reports])
    assert clean.context is not None and clean.context.to_json() == states[0] and clean.context.dirty is False
    assert clean.diff_hash == diff_hash(project, exclude=[reports])
    # A rename of a path that looks like a status line, an edit and an untracked file.
    repo = git.Repo(project)
    repo.git.mv("? odd.py", "1 renamed.py")
    (project / "src" / "mod.py").write_text("X = 2\n")
    (project / "src" / "new.py").write_text("N = 1\n")
    dirty = git_snapshot(project / "src", exclude=[reports])
    assert dirty.context is not None and dirty.context.to_json() == _gitpython_context(project)
    assert dirty.context.untracked == 1 and "mod.py" in (dirty.context.diff_stat or "")
    assert dirty.diff_hash not in (None, clean.diff_hash)
    # Detached, and reached through a symlinked spelling (kept as given, as gitpython does).
    git_commit_all(project, "all")
    repo.git.checkout("--detach")
    repo.close()
    (tmp_path / "link").symlink_to(project)
    linked = git_snapshot(tmp_path / "link")
    assert linked.context is not None and linked.context.to_json() == _gitpython_context(tmp_path / "link")
    assert linked.context.branch is None and linked.context.root == str(tmp_path / "link")
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_snapshot(plain) == git_snapshot(plain, context=False) and git_snapshot(plain).context is None


def test_a_snapshot_in_a_thread_reads_what_git_snapshot_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = make_project(tmp_path / "repo", {"src/mod.py": "X = 1\n"})
    (project / "src" / "mod.py").write_text("X = 2\n")
    reports = project / ".selfheal"
    pending = PendingSnapshot(project, exclude=[reports])
    assert pending.result() == git_snapshot(project, exclude=[reports])
    assert pending.result().context is not None and pending.result().context.dirty is True
    assert PendingSnapshot(project, [reports], context=False).result() == git_snapshot(project, [reports], context=False)

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    # An unexpected error in the thread reaches the caller, not a silent None.
    monkeypatch.setattr("pytest_selfheal.gitrepo.git_snapshot", broken)
    with pytest.raises(RuntimeError, match="boom"):
        PendingSnapshot(project).result()


def test_replayable_options_keep_behaviour_record_the_selection_filters_apart_and_drop_output() -> None:
    known = {"-p": (True, "plugins"), "-o": (True, "override_ini"), "-k": (True, "keyword"), "-q": (False, "verbose"),
             "--tb": (True, "tbstyle"), "--import-mode": (True, "importmode"), "-x": (False, "maxfail"),
             "--target": (True, "target"), "--selfheal": (False, "selfheal"), "--strict-markers": (False, "strict_markers")}
    args = ["-q", "-pno:randomly", "tests/t.py::a", "-k", "x or y", "-o", "a=b", "--import-mode=importlib", "-x",
            "--tb=short", "-p", "pytest_selfheal.plugin", "--selfheal", "--target", "staging", "--strict-markers",
            "--mystery", "positional", "--", "-p", "after"]
    assert replayable_options(args, lambda name, _value: known.get(name)) == (
        ["-p", "no:randomly", "-o", "a=b", "--import-mode=importlib", "--target", "staging", "--strict-markers"],
        ["-k", "x or y"])


def test_replayable_options_ask_pytests_own_parser(pytestconfig: pytest.Config) -> None:
    lookup = option_lookup(pytestconfig.pluginmanager.get_plugin(OPTIONS_PLUGIN))
    args = ["-q", "-pno:randomly", "tests/t.py::a", "-k", "x or y", "-o", "a=b", "--import-mode=importlib", "-x",
            "--tb=short", "-p", "pytest_selfheal.plugin", "--selfheal", "--selfheal-dir", "d", "--strict-markers",
            "--mystery", "positional", "-W", "error", "-Wignore", "--durations=-1", "-qx", "--runxfail", "@args.txt",
            "-m", "not slow", "--deselect=tests/t.py::b", "--ignore", "tests/legacy", "--ignore-glob=*_old.py",
            "--", "-p", "after"]
    assert replayable_options(args, lookup) == (
        ["-p", "no:randomly", "-o", "a=b", "--import-mode=importlib", "--strict-markers", "-W", "error", "-W", "ignore",
         "--runxfail"],
        ["-k", "x or y", "-m", "not slow", "--deselect=tests/t.py::b", "--ignore", "tests/legacy",
         "--ignore-glob=*_old.py"])


@pytest.mark.parametrize(
    "argv",
    [
        ["python", "-m", "pytest", "-q", "tests/test_a.py::test_x[../../etc]"],  # a parameter is no path
        ["pytest", "-qx", "-rfE", "--tb", "line", "-k", "a or b", "-p", "no:randomly", "tests"],
        ["python", "-mpytest", "--collect-only", "-q"],
        ["pytest", "--deselect", "tests/test_a.py::test_y", "tests/test_a.py"],
    ],
)
def test_check_command_accepts_selections_and_safe_options(tmp_path: Path, argv: list[str]) -> None:
    check_command(argv, allowlist=["pytest"], root=tmp_path)


@pytest.mark.parametrize(
    "argv, why",
    [
        (["pytest", "-p", "evil"], "'-p evil' loads code that is not a pytest plugin installed"),
        (["pytest", "-s", "--tb=evil"], "option '--tb'"),
        (["pytest", "-qW", "error"], "option '-qW'"),
        (["pytest", "/etc/passwd"], "not a node id or path inside"),
        (["pytest", "../x/test_a.py::t"], "not a node id or path inside"),
        (["pytest", "--deselect", "/elsewhere/t.py::t", "t.py"], "--deselect outside"),
        (["tox", "-e", "py"], "option '-e'"),  # another runner: selections only
        (["pytest", "--", "t.py"], "'--' is not accepted"),
    ],
)
def test_check_command_refuses_unsafe_arguments(tmp_path: Path, argv: list[str], why: str) -> None:
    with pytest.raises(RefusedError) as info:
        check_command(argv, allowlist=["pytest", "tox"], root=tmp_path)
    assert why in str(info.value)


def test_check_command_trusts_the_recorded_options_but_not_what_the_loop_sets(tmp_path: Path) -> None:
    trusted = ["-p", "xdist", "--import-mode=importlib", "-W", "error", "--basetemp=/x", "-p", "evil_but_recorded"]
    check_command(["pytest", "t.py", *trusted[:5]], allowlist=["pytest"], root=tmp_path, trusted=trusted)
    with pytest.raises(RefusedError):
        check_command(["pytest", "t.py", "--basetemp=/x"], allowlist=["pytest"], root=tmp_path, trusted=trusted)
    with pytest.raises(RefusedError):  # recorded, but no plugin installed here: it would load project code
        check_command(["pytest", "t.py", "-p", "evil_but_recorded"], allowlist=["pytest"], root=tmp_path,
                      trusted=trusted)
    with pytest.raises(RefusedError):  # the same option with another value is not the recorded one
        check_command(["pytest", "t.py", "-W", "ignore"], allowlist=["pytest"], root=tmp_path, trusted=trusted)


def test_check_command_follows_symlinks_out_of_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(RefusedError):
        check_command(["pytest", "link/t.py"], allowlist=["pytest"], root=root)
