"""The one home of the test suite's shared helpers (``from helpers import ...``; tests/ is on
``sys.path`` through the rootdir conftest).

- ``make_project`` / ``git_commit_all``: a tiny pytest project in ``tmp_path``, committed in a
  fresh git repository (or a plain folder);
- ``run_env``: the environment of every child process the tests start;
- ``capture``: ``python -m pytest --selfheal`` in a project (a real subprocess: the plugin in
  its own pytest) and the id of the one incident it wrote;
- ``cli``: the ``selfheal`` console script's ``main`` in this process — output, exit code,
  nothing of the call left behind (cwd, environment, stdin, signal handlers);
- ``selfheal_process``: the same as a real subprocess, only where the process boundary is
  what a test checks (the ``python -m pytest_selfheal`` entry point, kills, signals).
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import git
import pytest
from schema_check import assert_valid

from pytest_selfheal.cli.main import main
from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.settings import parse_override
from pytest_selfheal.errors import StoreIOError
from pytest_selfheal.junit.nodeids import mangle_nodeid, xml_escape_visible
from pytest_selfheal.junit.writer import junit_message
from pytest_selfheal.loop.control import KILL_ENV
from pytest_selfheal.loop.driver import run_loop
from pytest_selfheal.loop.replay import differences, replay, state_from_disk
from pytest_selfheal.plan.build import build_plan
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import is_incident_id
from pytest_selfheal.store.root import Store

PY = sys.executable
# The long variants' switch (docs/reliability.md): runs the ``slow`` tier with the default one
# and widens the bounded samples of the reliability suite.
FULL = os.environ.get("SELFHEAL_RELIABILITY_FULL", "") not in ("", "0", "false", "no")
GITIGNORE = ".selfheal/\n__pycache__/\n.pytest_cache/\n*.state\n"
BUCKETS = ("error_inbox", "error_archive/resolved", "error_archive/escalated")
PYTEST_SELFHEAL = ("-p", "pytest_selfheal.plugin", "--selfheal", "-q", "-p", "no:cacheprovider")
_SIGNALS = [signal.SIGINT] + ([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])

# --------------------------------------------------------------------------- child processes


# Every pytest the tests start runs a tiny project that does not use hypothesis: not
# importing it saves ~1.5 s of CPU per child process.
CHILD_ADDOPTS = "-p no:hypothesispytest -p no:flaky -p no:rerunfailures"


def run_env(extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment of a child: no plugin autoload (pytest starts in ~0.5 s instead of
    seconds with hypothesis & co.), no bytecode files in the repos, nothing of the outer run
    (xdist worker variables, the loop's verification flag, kill points, fault injection).
    PYTEST_ADDOPTS is the one every test has (conftest.py), also for a capture made before
    a test's environment is set (a module's fixture): an incident captured in a child is
    judged in this process too, and the seal compares it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    for key in ("SELFHEAL_VERIFYING", KILL_ENV) + tuple(
        k for k in env if k.startswith("RELIABILITY_FAULT")
    ):
        env.pop(key, None)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTEST_ADDOPTS"] = CHILD_ADDOPTS
    env.update(extra or {})
    return env


def run_pytest_selfheal(
    project: Path, *args: str, env: Optional[Mapping[str, str]] = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest --selfheal ARGS`` in ``project`` (a real subprocess)."""
    return subprocess.run([PY, "-m", "pytest", *PYTEST_SELFHEAL, *args], cwd=project, capture_output=True,
                          text=True, timeout=timeout, env=run_env(env), stdin=subprocess.DEVNULL)


def selfheal_process(
    cwd: Path, *args: str, env: Optional[Mapping[str, str]] = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest_selfheal ARGS`` in ``cwd`` as a real subprocess (``run_env(env)``).

    Only for what needs the process boundary: the entry point itself, kills and signals.
    Everything else goes through ``cli``."""
    return subprocess.run([PY, "-m", "pytest_selfheal", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=run_env(env), stdin=subprocess.DEVNULL)


# --------------------------------------------------------------------------- the CLI in process


@dataclass
class CliResult:
    """What ``cli`` returns: the attribute names of ``subprocess.CompletedProcess``."""

    returncode: int
    stdout: str
    stderr: str

    def __iter__(self) -> Iterator[Any]:
        """Unpacks as ``code, out, err``."""
        return iter((self.returncode, self.stdout, self.stderr))


def cli(
    *args: str,
    cwd: Optional[Path] = None,
    env: Optional[Mapping[str, str]] = None,
    stdin: str = "",
) -> CliResult:
    """``selfheal ARGS`` through the console script's ``main`` in this process.

    ``cwd``: the working directory during the call; ``env``: the whole environment during
    the call (as ``subprocess.run(env=...)``; default: this process's, unchanged); ``stdin``:
    what the command reads (never a TTY, as in a job). argparse's ``SystemExit`` becomes the
    exit code. Afterwards the working directory, ``os.environ``, ``sys.stdin``, the
    SIGINT/SIGTERM handlers and the root logger's handlers are exactly as before; a command
    that leaves a signal or logging handler of its own installed fails the test. Never a
    traceback on stdout or stderr.
    """
    if env is not None and KILL_ENV in env:
        raise ValueError(f"{KILL_ENV} kills the process: use selfheal_process")
    saved_cwd = os.getcwd()
    saved_env = dict(os.environ)
    saved_stdin = sys.stdin
    saved_handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    saved_log_handlers = list(logging.getLogger().handlers)
    # UTF-8, strict, like the pipes of a job: what a real stdout cannot encode fails here too.
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="strict", write_through=True)
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        os.environ.pop(KILL_ENV, None)
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin = io.StringIO(stdin)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse: usage errors, --help, --version
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if isinstance(exc.code, str):
                    err.write(exc.code + "\n")
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        leaked = {sig: signal.getsignal(sig) for sig in _SIGNALS if signal.getsignal(sig) is not saved_handlers[sig]}
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler)
        added_log_handlers = [h for h in logging.getLogger().handlers if h not in saved_log_handlers]
        for extra in added_log_handlers:
            logging.getLogger().removeHandler(extra)
    assert not leaked, f"selfheal {' '.join(args)} left signal handlers installed: {leaked}"
    assert not added_log_handlers, f"selfheal {' '.join(args)} left logging handlers: {added_log_handlers}"
    result = CliResult(int(code), out_bytes.getvalue().decode(), err_bytes.getvalue().decode())
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, result.stderr
    return result


# --------------------------------------------------------------------------- projects


def git_commit_all(path: Path, message: str = "init") -> None:
    """``git init`` (if needed), ``git add -A``, ``git commit`` through gitpython."""
    repo = git.Repo.init(path)
    try:
        repo.git.add(A=True)
        actor = git.Actor("Test Author", "author@example.invalid")
        repo.index.commit(message, author=actor, committer=actor)
    finally:
        repo.close()


def make_project(
    root: Path, files: Mapping[str, str], *, ini: Optional[str] = "", git: bool = True,
    gitignore: str = GITIGNORE,
) -> Path:
    """A tiny pytest project: ``pytest.ini`` (``[pytest]`` + ``ini``; none when ``ini`` is
    None), a ``.gitignore`` for the reports root, ``files`` (dedented), committed in a fresh
    git repository unless ``git`` is false."""
    root.mkdir(parents=True, exist_ok=True)
    if ini is not None:
        (root / "pytest.ini").write_text("[pytest]\n" + ini)
    (root / ".gitignore").write_text(gitignore)
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    if git:
        git_commit_all(root)
    return root


def incident_ids(root: Path) -> list[str]:
    """Ids of every incident folder in the inbox and archive (by folder name)."""
    found: list[str] = []
    for bucket in BUCKETS:
        base = root / bucket
        if base.is_dir():
            found.extend(p.name for p in base.iterdir() if p.is_dir() and is_incident_id(p.name))
    return sorted(found)


def capture(project: Path, *args: str, env: Optional[Mapping[str, str]] = None) -> str:
    """``python -m pytest --selfheal ARGS`` in ``project`` (exit 1: a red run); returns the
    id of the one incident it wrote under ``project/.selfheal``."""
    root = project / ".selfheal"
    before = set(incident_ids(root))
    result = run_pytest_selfheal(project, *args, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    new = [i for i in incident_ids(root) if i not in before]
    assert len(new) == 1, result.stdout + result.stderr
    return new[0]


def clone_project(template: Path, dest: Path) -> Path:
    """Copy a captured project (into ``dest``, which may exist, e.g. a pytester's folder, the
    working directory); every incident's ``rootdir`` points at the copy."""
    shutil.copytree(template, dest, symlinks=True, dirs_exist_ok=True)
    for bucket in ("error_inbox", "error_archive/resolved", "error_archive/escalated"):
        base = dest / ".selfheal" / bucket
        if not base.is_dir():
            continue
        for folder in base.iterdir():
            path = folder / "incident.json"
            if path.is_file():
                doc = json.loads(path.read_text())
                doc["rootdir"] = str(dest)
                path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return dest


def fake_distribution(site: Path, module: str, body: str) -> None:
    """An installed-looking distribution in ``site``: ``module.py`` (``body``, dedented) and a
    ``.dist-info`` registering it under ``pytest11`` and ``pytest_selfheal`` (pytest and the
    ``selfheal`` command each load it; put ``site`` on sys.path / PYTHONPATH)."""
    (site / f"{module}.py").write_text(textwrap.dedent(body))
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{module} = {module}\n\n"
                                           f"[pytest_selfheal]\n{module} = {module}\n")



def broken_pytest_plugin(site: Path, module: str = "unrelated_broken") -> None:
    """An installed-looking ``pytest11`` plugin in ``site`` that cannot be imported, registered
    under ``pytest11`` only (an unrelated plugin, not one of ours)."""
    (site / f"{module}.py").write_text("raise ImportError('needs a missing package')\n")
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{module} = {module}\n")

# A pytest11 plugin adding one report section (test_report_cli.py, test_ci.py).
SECTIONS_PLUGIN = """
    import os
    import pluggy
    hookimpl = pluggy.HookimplMarker("pytest")

    @hookimpl
    def pytest_selfheal_report_sections(report):
        if os.environ.get("SECTIONS_HOOK_CRASH"):
            raise RuntimeError("coverage server down")
        ids = ",".join(e["incident_id"] for e in report["incidents"]) or "none"
        return [{"title": "Coverage", "markdown": f"Covered: {ids} ({report['final_status']})\\n"}]
"""


# --------------------------------------------------------------------------- loop projects and checks


def effective_config(project: Path, *settings: str) -> Any:
    """The effective config of ``project`` with ``KEY=VALUE`` overrides."""
    return load_config(project, overrides=[parse_override(s, "test") for s in settings])


def loop_in_process(project: Path, incident_id: str, *settings: str, **kwargs: Any) -> dict[str, Any]:
    """``run_loop`` in this process (verifications are still real subprocesses); its result's JSON document."""
    kwargs.setdefault("unattended", False)
    kwargs.setdefault("env", run_env())
    return run_loop(Store(project / ".selfheal"), incident_id, effective=effective_config(project, *settings),
                    project_root=project, **kwargs).to_json()


def assert_replay_equals_disk(store: Store, incident_id: str) -> dict[str, Any]:
    """The events alone rebuild exactly the state on disk; returns the replayed state as JSON."""
    records, warnings = store.read_events(incident_id)
    assert warnings == []
    replayed = replay(records)
    assert differences(replayed, state_from_disk(store, incident_id)) == []
    return replayed.to_json()


def assert_files_valid(store: Store, incident_id: str) -> None:
    """Every attempt and the run result fit the shipped schemas; attempts are 1..n."""
    attempts = store.read_attempts(incident_id)
    assert [a.iteration for a in attempts] == list(range(1, len(attempts) + 1))
    for attempt in attempts:
        assert_valid("attempt", attempt.to_json())
    result = store.read_run_result(incident_id)
    if result is not None:
        assert_valid("run_result", result.to_json())


ATTEMPT_DEFAULTS: dict[str, Any] = {
    "incident_id": "incident_20260217_120000_ab12cd",
    "iteration": 1,
    "started_at": "2026-02-17T12:00:00+00:00",
    "finished_at": "2026-02-17T12:00:01+00:00",
    "actions_applied": [],
    "verification_commands": [],
    "verification_passed": False,
    "result": "continue",
    "error_signature": None,
}


def attempt_record(**fields: Any) -> Attempt:
    """An ``Attempt`` for pure tests: the contract fields filled in, then ``fields`` (JSON values)."""
    return Attempt.from_json({**ATTEMPT_DEFAULTS, **fields}, "test attempt")


INCIDENT_DEFAULTS: dict[str, Any] = {
    "incident_id": "incident_20260217_120000_ab12cd",
    "status": "new",
    "created_at": "2026-02-17T12:00:00+00:00",
    "updated_at": "2026-02-17T12:00:00+00:00",
    "run_id": "run_20260217_120000_ab12cd",
    "year": 2026,
    "month": 2,
    "ym": "2026-02",
    "step": "collection",
    "failure_class": "deterministic",
    "message": "boom",
    "error_signature": "TEST_ASSERTION | t | boom",
}


def incident_record(**fields: Any) -> Incident:
    """An ``Incident`` for pure tests: the contract fields filled in, then ``fields`` (JSON values)."""
    return Incident.from_json({**INCIDENT_DEFAULTS, **fields}, "test incident")


def events_named(store: Store, incident_id: str, name: str) -> list[dict[str, Any]]:
    """The incident's events called ``name``, as the JSON of their lines."""
    return [e.to_json() for e in store.read_events(incident_id)[0] if e.event == name]


# Two buggy functions and a passing test: the agent-in-the-loop and sticky-stop projects.
TWO_BUGS_TESTS = """
from mod import add, sub

def test_add():
    assert add(2, 3) == 5

def test_sub():
    assert sub(5, 3) == 2

def test_other():
    assert True
"""

FLAKY = """
    import os
    STATE = {state!r}

    def test_ok():
        assert True

    def test_flaky():
        if not os.path.exists(STATE):
            open(STATE, "w").close()
            assert False, "first run fails"
"""

DETERMINISTIC = """
    def sub(a, b):
        return a + b

    def test_sub():
        assert sub(5, 2) == 3
"""

FIXED = DETERMINISTIC.replace("return a + b", "return a - b")

# The same bug with the code beside its test, importable from the rootdir (make_project's
# ``ini=ROOT_ON_PATH``): a fix edits the code, not a test file (which is never a success).
SPLIT = {"sub.py": "def sub(a, b):\n    return a + b\n",
         "test_calc.py": "from sub import sub\n\n\ndef test_sub():\n    assert sub(5, 2) == 3\n"}
SPLIT_FIXED = "def sub(a, b):\n    return a - b\n"
ROOT_ON_PATH = "pythonpath = .\n"

# A failure whose message changes at every run. In a project without git (make it with
# git=False, as moving_project does) the loop cannot tell whether the code changed, so a new
# message counts as progress ("fingerprint changed") each time; in a git repository with an
# unchanged tree it is an unstable message, judged as a repeat.
MOVING = """
    import os
    # Per project (gitignored): a copied project keeps counting where its template stopped.
    STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moving.state")
    WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

    def test_moving():
        n = int(open(STATE).read()) if os.path.exists(STATE) else 0
        # Atomically: a kill between truncating and writing would leave an empty file, and then
        # the same ValueError every run (a real repeated fingerprint, not a moving message).
        with open(STATE + ".tmp", "w") as handle:
            handle.write(str(n + 1))
        os.replace(STATE + ".tmp", STATE)
        assert WORDS[n % len(WORDS)] == "zulu"
"""

# Fails at capture, hangs in every verification run (the loop sets SELFHEAL_VERIFYING).
HANGING = """
    import os, time
    PIDFILE = {pidfile!r}
    STOP = {stop!r}

    def test_hang():
        if os.environ.get("SELFHEAL_VERIFYING") and not os.path.exists(STOP):
            with open(PIDFILE, "w") as handle:
                handle.write(str(os.getpid()))
            time.sleep(60)
        assert False, "fails at capture"
"""

TOOLING = """
    def test_env():
        import nonexistent_dep_xyz  # noqa: F401
"""


def flaky_project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "flaky", {"test_flaky.py": FLAKY.format(state=str(tmp_path / "flaky.state"))})


def deterministic_project(tmp_path: Path, name: str = "det") -> Path:
    return make_project(tmp_path / name, {"test_calc.py": DETERMINISTIC})


def moving_project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "moving", {"test_moving.py": MOVING}, git=False)


def hanging_project(tmp_path: Path) -> Path:
    return make_project(
        tmp_path / "hang",
        {"test_hang.py": HANGING.format(pidfile=str(tmp_path / "hang.pid"), stop=str(tmp_path / "hang.stop"))},
    )


def selfheal(cwd: Path, *args: str, env: Optional[Mapping[str, str]] = None, stdin: str = "") -> CliResult:
    """``selfheal ARGS`` in ``cwd`` through ``cli``, with a child's environment (``run_env(env)``):
    what the console script sees in a job, in this process."""
    return cli(*args, cwd=cwd, env=run_env(env), stdin=stdin)


def disk_full_on(monkeypatch: Any, name: str) -> None:
    """Make every in-place write of a file called ``name`` (``fsio.write_new_bytes``: the
    store's build folders) fail as a full disk would."""
    real = fsio.write_new_bytes

    def failing(path: Any, data: bytes) -> None:
        if Path(path).name == name:
            raise StoreIOError(f"cannot write {path}: No space left on device")
        real(path, data)

    monkeypatch.setattr(fsio, "write_new_bytes", failing)


# The fields an incident.json always has, for the plan tests' partial incidents.
INCIDENT_REQUIRED = {
    "incident_id": "", "status": "new", "created_at": "2026-02-17T03:15:00+00:00",
    "updated_at": "2026-02-17T03:15:00+00:00", "run_id": "run1", "year": 2026, "month": 2, "ym": "2026-02",
    "step": "", "failure_class": "deterministic", "message": "", "error_signature": "",
}


def build_plan_doc(incident: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``build_plan`` of a partial incident document (its missing required fields filled in; an
    absent ``incident_id`` is empty), as the plan's JSON document."""
    record = Incident.from_json({**INCIDENT_REQUIRED, **incident}, "a test incident")
    return build_plan(record, **kwargs).to_json()


class _Longrepr:
    """What pytest's longrepr gives the capture: its text and its crash message."""

    def __init__(self, text: str, message: str) -> None:
        self.text = text
        self.reprcrash = SimpleNamespace(message=message)

    def __str__(self) -> str:
        return self.text


def failed_report(nodeid: str, when: str, message: str, text: str, file: Optional[str] = None,
                  line: Optional[int] = None, duration: float = 0.0) -> Any:
    """pytest's failing report of ``nodeid`` in its phase ``when`` (``collect``: a
    CollectReport), with its crash ``message`` and its ``text``; ``line`` 1-based."""
    longrepr = _Longrepr(text, message)
    if when == "collect":
        return pytest.CollectReport(nodeid, "failed", longrepr, [])
    location = (file or "", None if line is None else line - 1, nodeid)
    return pytest.TestReport(nodeid, location, {}, "failed", longrepr, when, duration=duration)  # type: ignore[arg-type]


def as_pytest_writes_it(report: Any, prefix: str = "") -> bytes:
    """The junit document pytest's junitxml writes for the failing ``report`` (with
    ElementTree, as it does)."""
    classname, name = mangle_nodeid(report.nodeid, prefix)
    case = ET.Element("testcase", classname=classname, name=name, time=f"{getattr(report, 'duration', 0.0):.3f}")
    file, line, _ = report.location
    if file:
        case.set("file", xml_escape_visible(file))
    if line is not None:
        case.set("line", str(line + 1))
    result = ET.SubElement(case, "failure" if report.when == "call" else "error",
                           message=xml_escape_visible(junit_message(report)))
    result.text = xml_escape_visible(report.longreprtext)
    suite = ET.Element("testsuite", name="pytest", tests="1")
    suite.append(case)
    return ET.tostring(suite, encoding="utf-8")
