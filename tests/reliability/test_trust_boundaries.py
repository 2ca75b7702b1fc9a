"""Trust boundaries: each test reproduces one finding of
the adversarial review and shows the boundary holds (docs/reliability.md "Trust boundaries").

- plan commands: an allowlisted runner AND allowlisted arguments; the verification runs in
  the project root computed here; runners resolve through absolute PATH entries only;
- store writes never follow a symlink out of the reports root;
- ``selfheal ci`` loops only what its own run captured;
- no verification or repair process outlives a SIGKILLed ``selfheal loop``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import (
    PY,
    capture,
    cli,
    clone_project,
    git_commit_all,
    incident_ids,
    make_project,
    run_env,
    selfheal,
    selfheal_process,
)

from pytest_selfheal.store.root import Store

from .conftest import DETERMINISTIC, one_error_line

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGKILL are POSIX")

EVIL_MODULE = """
import os
open(os.environ["TRUST_MARKER"], "w").write("pwned")
"""

EVIL_TEST = """
import os
open(os.environ["TRUST_MARKER"], "w").write("pwned")

def test_evil():
    pass
"""


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("trust")
    project = make_project(base / "template", {"test_calc.py": DETERMINISTIC, "evilmod.py": EVIL_MODULE})
    incident_id = capture(project)
    return {"project": project, "incident_id": incident_id}


def _copy(template: dict[str, object], dest: Path) -> Path:
    return clone_project(Path(str(template["project"])), dest)


def _set_plan(project: Path, incident_id: str, command: str) -> None:
    plan_path = project / ".selfheal" / "error_plans" / incident_id / "plan.json"
    plan = json.loads(plan_path.read_text())
    plan["verification_commands"] = [command]
    plan_path.write_text(json.dumps(plan))


def _outside(tmp_path: Path) -> dict[str, Path]:
    """A folder outside the project: an evil test, an evil ini, a module, a victim file."""
    out = tmp_path / "outside"
    (out / "site").mkdir(parents=True)
    (out / "test_evil.py").write_text(EVIL_TEST)
    (out / "site" / "evilmod2.py").write_text(EVIL_MODULE)
    (out / "evil.ini").write_text("[pytest]\naddopts = -p evilmod\n")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    return {"out": out, "victim": victim}


HOSTILE_ARGUMENTS = [
    "python -m pytest -p evilmod test_calc.py",
    "python -m pytest -pevilmod test_calc.py",
    "python -m pytest -c {out}/evil.ini test_calc.py",
    "python -m pytest -o pythonpath={out}/site -p evilmod2 test_calc.py",
    "python -m pytest --override-ini=pythonpath={out}/site -p evilmod2 test_calc.py",
    "python -m pytest --pyargs evilmod",
    "python -m pytest {out}/test_evil.py",
    "python -m pytest ../outside/test_evil.py",
    "python -m pytest test_calc.py --basetemp={victim}",
    "python -m pytest test_calc.py --debug={victim}/keep.txt",
    "python -m pytest test_calc.py --rootdir={out}",
    "python -m pytest test_calc.py --confcutdir={out}",
    "python -m pytest test_calc.py --junitxml={victim}/keep.txt",
    "python -m pytest test_calc.py -W error::evilmod.Warning",
    "python -m pytest link/test_evil.py",
    "python -m pytest test_calc.py -- {out}/test_evil.py",
    "pytest -p evilmod test_calc.py",
]


@pytest.mark.parametrize("command", HOSTILE_ARGUMENTS)
def test_plan_arguments_that_load_code_or_leave_the_root_are_refused(
    tmp_path: Path, template: dict[str, object], command: str
) -> None:
    places = _outside(tmp_path)
    project = _copy(template, tmp_path / "p")
    (project / "link").symlink_to(places["out"], target_is_directory=True)
    incident_id = str(template["incident_id"])
    _set_plan(project, incident_id, command.format(out=places["out"], victim=places["victim"]))
    marker = tmp_path / "PWNED"
    store = Store(project / ".selfheal")
    before = len(store.read_events(incident_id)[0])
    result = selfheal(project, "loop", incident_id, env={"TRUST_MARKER": str(marker)})
    assert not marker.exists(), f"{command!r} loaded code it was not allowed to"
    assert (places["victim"] / "keep.txt").read_text() == "keep", f"{command!r} touched a path outside the root"
    assert result.returncode == 5, result.stdout + result.stderr
    assert "refusing verification command" in one_error_line(result.stderr)
    events = store.read_events(incident_id)[0][before:]
    assert [e.event for e in events] == ["decision_point_needed"] and events[0].get("refused"), events
    assert store.count_attempts(incident_id) == 0
    assert store.read_status(incident_id) != "resolved"


SAFE_ARGUMENTS = [
    "python -m pytest -q test_calc.py::test_sub",
    "python -m pytest -vv -x -rA --tb=short --no-header -p no:cacheprovider test_calc.py::test_sub",
    "python -m pytest -q -k sub -m 'not slow' --maxfail=1 test_calc.py",
    "python -m pytest -q ./test_calc.py::test_sub {project}/test_calc.py::test_sub",
]


@pytest.mark.parametrize("command", SAFE_ARGUMENTS)
def test_safe_plan_arguments_still_run(tmp_path: Path, template: dict[str, object], command: str) -> None:
    project = _copy(template, tmp_path / "p")
    incident_id = str(template["incident_id"])
    _set_plan(project, incident_id, command.format(project=project))
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == 1, result.stdout + result.stderr  # ran, still failing: unresolved
    assert Store(project / ".selfheal").count_attempts(incident_id) >= 1


def test_options_the_capture_recorded_are_trusted_in_the_plan_too(tmp_path: Path) -> None:
    project = make_project(tmp_path / "rec", {"test_calc.py": DETERMINISTIC})
    incident_id = capture(project, "-W", "default")
    store = Store(project / ".selfheal")
    assert store.read_incident(incident_id).pytest_options[-2:] == ("-W", "default")
    _set_plan(project, incident_id, "python -m pytest -W default -q test_calc.py::test_sub")
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == 1, result.stdout + result.stderr
    # ... but not an option incident.json claims the capture recorded and the loop sets itself.
    other = make_project(tmp_path / "edit", {"test_calc.py": DETERMINISTIC})
    other_id = capture(other)
    path = other / ".selfheal" / "error_inbox" / other_id / "incident.json"
    doc = json.loads(path.read_text())
    doc["pytest_options"] = ["--basetemp", str(tmp_path / "victim")]
    path.write_text(json.dumps(doc))
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep.txt").write_text("keep")
    result = selfheal(other, "loop", other_id)
    assert result.returncode == 5, result.stdout + result.stderr
    assert (tmp_path / "victim" / "keep.txt").exists()


def test_the_verification_rootdir_is_not_read_from_incident_json(tmp_path: Path, template: dict[str, object]) -> None:
    places = _outside(tmp_path)
    project = _copy(template, tmp_path / "p")
    incident_id = str(template["incident_id"])
    # A rootdir elsewhere holding a test_calc.py that passes and writes the marker.
    (places["out"] / "test_calc.py").write_text(EVIL_TEST + "\ndef test_sub():\n    pass\n")
    path = project / ".selfheal" / "error_inbox" / incident_id / "incident.json"
    doc = json.loads(path.read_text())
    doc["rootdir"] = str(places["out"])
    path.write_text(json.dumps(doc))
    marker = tmp_path / "PWNED"
    result = selfheal(project, "loop", incident_id, env={"TRUST_MARKER": str(marker)})
    assert not marker.exists(), "the verification ran in the rootdir incident.json named"
    assert f"names rootdir {places['out']}, outside the project root" in result.stdout, result.stdout
    assert result.returncode == 1, result.stdout + result.stderr  # verified here: still failing
    assert Store(project / ".selfheal").read_status(incident_id) != "resolved"


def test_a_bare_runner_never_resolves_through_a_relative_path_entry(tmp_path: Path, template: dict[str, object]) -> None:
    project = _copy(template, tmp_path / "p")
    incident_id = str(template["incident_id"])
    marker = tmp_path / "PWNED"
    fake = project / "pytest"
    fake.write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    fake.chmod(0o755)
    _set_plan(project, incident_id, "pytest -q test_calc.py::test_sub")
    for path_value in (":" + os.environ["PATH"], "." + os.pathsep + os.environ["PATH"], os.environ["PATH"] + ":"):
        result = selfheal(project, "loop", incident_id, env={"PATH": path_value})
        assert not marker.exists(), f"PATH={path_value[:20]}… ran the committed ./pytest"
        assert result.returncode in (1, 5), result.stdout + result.stderr
    # The installed runner is still found on the absolute entries.
    assert shutil.which("pytest") is not None


# --------------------------------------------------------------------------- symlinks


def _plant_link(root: Path, incident_id: str, what: str, outside: Path) -> None:
    """Replace one entry of the reports root by a symbolic link to ``outside``."""
    if what == "audit_tail":
        link = root / "error_inbox" / incident_id / "audit_tail.jsonl"
        shutil.copy(link, outside / "audit_tail.jsonl")
        link.unlink()
        link.symlink_to(outside / "audit_tail.jsonl")
    elif what == "runs":
        (root / "error_runs").mkdir(exist_ok=True)
        (root / "error_runs" / incident_id).symlink_to(outside, target_is_directory=True)
    elif what == "escalated":
        (root / "error_archive").mkdir(exist_ok=True)
        (root / "error_archive" / "escalated").symlink_to(outside, target_is_directory=True)
    elif what == "lock":
        (root / ".lock").unlink(missing_ok=True)
        (root / ".lock").symlink_to(outside / "lockfile")
    elif what == "incident_folder":
        folder = root / "error_inbox" / incident_id
        shutil.move(str(folder), str(outside / incident_id))
        folder.symlink_to(outside / incident_id, target_is_directory=True)
    elif what == "inbox":
        shutil.move(str(root / "error_inbox"), str(outside / "error_inbox"))
        (root / "error_inbox").symlink_to(outside / "error_inbox", target_is_directory=True)
    elif what == "plans":
        shutil.move(str(root / "error_plans"), str(outside / "error_plans"))
        (root / "error_plans").symlink_to(outside / "error_plans", target_is_directory=True)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("what", ["audit_tail", "runs", "escalated", "lock", "incident_folder", "inbox"])
def test_store_writes_never_follow_a_symlink_out_of_the_reports_root(
    tmp_path: Path, template: dict[str, object], what: str
) -> None:
    project = _copy(template, tmp_path / "p")
    incident_id = str(template["incident_id"])
    outside = tmp_path / "outside"
    outside.mkdir()
    _plant_link(project / ".selfheal", incident_id, what, outside)
    before = _snapshot(outside)
    result = selfheal(project, "loop", incident_id)
    assert _snapshot(outside) == before, f"{what}: selfheal loop wrote outside the reports root"
    assert result.returncode == 5, result.stdout + result.stderr
    line = one_error_line(result.stderr)
    assert "symbolic link" in line, line


def test_confine_refuses_links_and_paths_outside(tmp_path: Path) -> None:
    from pytest_selfheal.errors import RefusedError
    from pytest_selfheal.store import fsio

    root = tmp_path / "root"
    (root / "real").mkdir(parents=True)
    (root / "link").symlink_to(root / "real", target_is_directory=True)  # even a link that stays inside
    assert fsio.confine(root, root / "real" / "new" / "file.json") == root / "real" / "new" / "file.json"
    for path in (root / "link" / "x.json", tmp_path / "elsewhere.json", root / ".." / "x"):
        with pytest.raises(RefusedError):
            fsio.confine(root, path)
    # The root itself may be a link: where the user keeps it is the user's choice.
    (tmp_path / "alias").symlink_to(root, target_is_directory=True)
    assert fsio.confine(tmp_path / "alias", tmp_path / "alias" / "real" / "f") == tmp_path / "alias" / "real" / "f"


def test_a_replan_does_not_write_through_a_symlinked_plans_folder(tmp_path: Path, template: dict[str, object]) -> None:
    project = _copy(template, tmp_path / "p")
    incident_id = str(template["incident_id"])
    outside = tmp_path / "outside"
    outside.mkdir()
    root = project / ".selfheal"
    shutil.rmtree(root / "error_plans" / incident_id)
    (root / "error_plans" / incident_id).symlink_to(outside, target_is_directory=True)
    result = selfheal(project, "plan", incident_id, "--force")
    assert list(outside.iterdir()) == [], "the plan was written outside the reports root"
    assert result.returncode == 5, result.stdout + result.stderr
    assert "symbolic link" in one_error_line(result.stderr)


# --------------------------------------------------------------------------- selfheal ci

CI_TEST = """
    import os

    def test_ok():
        assert True

    def test_bad():
        if os.environ.get("SEEN_FILE"):
            with open(os.environ["SEEN_FILE"], "a") as seen:
                seen.write(os.environ.get("SELFHEAL_CI_RUN", "<absent>") + "\\n")
        assert os.environ.get("CI_MESSAGE", "one") == "fixed"
"""


def _ci_env(**extra: str) -> dict[str, str]:
    env = run_env(extra)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # as in a job: the plugin autoloads
    env["PYTEST_ADDOPTS"] = "-p no:hypothesispytest -p no:cacheprovider"
    for key in [k for k in env if k.startswith("GITHUB_")]:
        env.pop(key)
    return env


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_ci_never_adopts_an_incident_committed_to_the_repository(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"test_app.py": CI_TEST}, git=False)
    committed = capture(project)  # the PR author's own capture, with its plan, committed
    assert selfheal(project, "plan", committed).returncode == 0
    store = Store(project / ".selfheal")
    assert store.read_status(committed) == "planned"
    (project / ".gitignore").write_text("__pycache__/\n")
    git_commit_all(project, "PR: commit a reports root")
    # Same node id, another message: before the fix agent mode took this run as an attempt of
    # the committed incident and ci looped it with the committed plan.
    seen = tmp_path / "seen.txt"
    done = cli("ci", "--set", "max_iterations=1", "--", "-q", cwd=project,
               env=_ci_env(CI_MESSAGE="two", SEEN_FILE=str(seen)))
    assert "Traceback" not in done.stderr, done.stderr
    assert store.count_attempts(committed) == 0, "the committed incident was adopted"
    assert store.read_status(committed) == "planned"
    looped = [line for line in done.stdout.splitlines() if "running the RALF-Lite loop on" in line]
    assert len(looped) == 1 and committed not in looped[0], done.stdout
    (own,) = [i for i in incident_ids(project / ".selfheal") if i != committed]
    assert store.read_incident(own).ci_run, "the capture did not record ci's run token"
    assert looped[0].endswith(own)
    # The token marks the capture; the tests themselves never see it.
    assert set(seen.read_text().split()) == {"<absent>"}, seen.read_text()


@pytest.mark.slow  # ~7 s: four real selfheal ci runs at once
def test_four_concurrent_ci_runs_on_one_root_each_loop_their_own_incident(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"test_app.py": CI_TEST})
    argv = [PY, "-m", "pytest_selfheal", "ci", "--set", "max_iterations=1", "--", "-q"]
    procs = [subprocess.Popen(argv, cwd=project, env=_ci_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, text=True) for _ in range(4)]
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    looped: list[str] = []
    for output in outputs:
        assert "Traceback" not in output, output
        lines = [line for line in output.splitlines() if "running the RALF-Lite loop on" in line]
        assert len(lines) == 1, output
        looped.append(lines[0].rsplit(" ", 1)[1])
    assert len(set(looped)) == 4, f"two ci runs chose the same incident: {looped}"
    store = Store(project / ".selfheal")
    tokens = {store.read_incident(i).ci_run for i in looped}
    assert len(tokens) == 4 and None not in tokens
    for incident_id in looped:
        assert store.count_attempts(incident_id) == 1, incident_id


# --------------------------------------------------------------------------- process hygiene

HANGS_WITH_A_GRANDCHILD = """
    import os, subprocess, time

    def test_hang():
        hang = os.environ.get("HANG_DIR")
        if os.environ.get("SELFHEAL_VERIFYING") and hang and os.path.exists(os.path.join(hang, "hang")):
            child = subprocess.Popen(["sleep", "120"])
            with open(os.path.join(hang, "grandchild.pid"), "w") as handle:
                handle.write(str(child.pid))
            with open(os.path.join(hang, "child.pid"), "w") as handle:
                handle.write(str(os.getpid()))
            time.sleep(120)
        assert False, "fails"
"""

REPAIR_WITH_A_GRANDCHILD = (
    "import os, subprocess, time; hang = os.environ['HANG_DIR']; "
    "child = subprocess.Popen(['sleep', '120']); "
    "open(os.path.join(hang, 'grandchild.pid'), 'w').write(str(child.pid)); "
    "open(os.path.join(hang, 'child.pid'), 'w').write(str(os.getpid())); time.sleep(120)"
)


def _kill_loop_and_check(project: Path, hang: Path, *args: str) -> None:
    from test_process import gone_within, wait_for_file

    (hang / "hang").write_text("")
    env = run_env({"HANG_DIR": str(hang), "TMPDIR": str(hang / "tmp")})
    loop = subprocess.Popen([PY, "-m", "pytest_selfheal", "loop", *args], cwd=project, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        child = int(wait_for_file(hang / "child.pid", 120))
        grandchild = int(wait_for_file(hang / "grandchild.pid", 120))
        os.kill(loop.pid, signal.SIGKILL)  # no finally, no atexit in selfheal: nothing of ours runs
        loop.wait()
        assert gone_within(child, 30), "the child outlived the SIGKILLed selfheal loop"
        assert gone_within(grandchild, 30), "a grandchild outlived the SIGKILLed selfheal loop"
    finally:
        if loop.poll() is None:
            loop.kill()
            loop.wait()
        for name in ("child.pid", "grandchild.pid"):
            path = hang / name
            if path.is_file() and path.read_text().strip():
                try:
                    os.kill(int(path.read_text()), signal.SIGKILL)
                except OSError:
                    pass


def _hanging(tmp_path: Path) -> tuple[Path, str, Path]:
    """(project, its incident, the folder of pid files and the loop's TMPDIR)."""
    project = make_project(tmp_path / "p", {"test_hang.py": HANGS_WITH_A_GRANDCHILD})
    hang = tmp_path / "hang"
    (hang / "tmp").mkdir(parents=True)
    return project, capture(project), hang


@posix_only
def test_a_sigkilled_loop_leaves_no_verification_process_and_its_folder_is_cleaned_next_time(tmp_path: Path) -> None:
    project, incident_id, hang = _hanging(tmp_path)
    _kill_loop_and_check(project, hang, incident_id)
    left = sorted(p.name for p in (hang / "tmp").iterdir())
    assert len(left) == 1 and left[0].startswith("selfheal-verify-"), left  # the killed run's folder
    # The next start removes it (its pid is dead), and removes nothing else.
    other = hang / "tmp" / "selfheal-verify-notapid-x"
    other.mkdir()
    (hang / "hang").unlink()
    result = selfheal_process(project, "loop", incident_id, env={"HANG_DIR": str(hang), "TMPDIR": str(hang / "tmp")})
    assert "Traceback" not in result.stderr, result.stderr
    assert sorted(p.name for p in (hang / "tmp").iterdir()) == [other.name]


@posix_only
def test_a_sigkilled_loop_leaves_no_repair_process(tmp_path: Path) -> None:
    project, incident_id, hang = _hanging(tmp_path)
    command = json.dumps([PY, "-c", REPAIR_WITH_A_GRANDCHILD])
    _kill_loop_and_check(project, hang, incident_id, "--set", f"repair.command={command}")


def test_stale_verify_folders_only_ours_only_dead(tmp_path: Path) -> None:
    from pytest_selfheal.loop.verify import remove_stale_verify_dirs, verify_dir_prefix

    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"selfheal-verify-{dead.pid}-abc"
    live = tmp_path / f"selfheal-verify-{os.getppid()}-abc"  # a live process's folder
    own = tmp_path / f"{verify_dir_prefix()}abc"
    unrelated = tmp_path / f"other-{dead.pid}"
    target = tmp_path / "target"
    for folder in (stale, live, own, unrelated, target):
        folder.mkdir()
        (folder / "junit_0.xml.out").write_text("output")
    link = tmp_path / f"selfheal-verify-{dead.pid}-link"
    link.symlink_to(target, target_is_directory=True)
    assert remove_stale_verify_dirs(tmp_path) == [stale]
    assert not stale.exists()
    assert all(p.exists() for p in (live, own, unrelated, link, target / "junit_0.xml.out"))


def test_pruning_a_linked_incident_removes_the_link_not_its_target(tmp_path: Path, template: dict[str, object]) -> None:
    project = _copy(template, tmp_path / "p")
    incident_id = str(template["incident_id"])
    assert selfheal(project, "archive", incident_id, "--as", "escalated").returncode == 0
    folder = project / ".selfheal" / "error_archive" / "escalated" / incident_id
    outside = tmp_path / "outside"
    shutil.move(str(folder), str(outside))
    folder.symlink_to(outside, target_is_directory=True)
    before = _snapshot(outside)
    Store(project / ".selfheal").prune(incident_id)
    assert not os.path.lexists(folder)
    assert _snapshot(outside) == before
