"""Shared builders of the reliability suite (SPEC §12, docs/reliability.md).

- tiny real failing projects in ``tmp_path`` (git init + commit through gitpython);
- ``run_pytest_selfheal`` / ``run_selfheal``: ``python -m pytest --selfheal …`` and
  ``python -m pytest_selfheal …`` as real subprocesses with a timeout;
- ``run_with_faults``: the same through ``_faultshim.py`` (SIGKILL / ENOSPC / EROFS at the
  N-th file-system operation under the reports root);
- ``walk_written(root)``: every file written under a directory;
- ``check_root``: the invariants every root must keep after any fault (all JSON whole,
  ``selfheal status`` reads it, only documented temp files).

Long variants carry ``@pytest.mark.slow`` and run only with ``SELFHEAL_RELIABILITY_FULL=1``
(or ``-m slow``); the default run is a bounded sample of the same checks.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import pytest

PY = sys.executable
HERE = Path(__file__).resolve().parent
FAULTSHIM = HERE / "_faultshim.py"
FULL = os.environ.get("SELFHEAL_RELIABILITY_FULL", "") not in ("", "0", "false", "no")
GITIGNORE = ".selfheal/\n__pycache__/\n.pytest_cache/\n*.state\n"

# A deterministic failure: the loop stops after one re-run with repeated_fingerprint.
DETERMINISTIC = """
    def sub(a, b):
        return a + b

    def test_ok():
        assert True

    def test_sub():
        assert sub(5, 2) == 3
"""

# A failure whose message changes at every run (state file beside it, gitignored): the loop
# sees progress ("fingerprint changed") every time and runs to max_iterations.
MOVING = """
    import os
    STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "moving.state")
    WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]

    def test_moving():
        n = int(open(STATE).read()) if os.path.exists(STATE) else 0
        with open(STATE, "w") as handle:
            handle.write(str(n + 1))
        assert WORDS[n % len(WORDS)] == "zulu"
"""

# Names a reader may meet under a root after a kill, beside the contract's files
# (docs/store.md: temp files ".<name>.<random>.tmp", build folders ".tmp_<id>_<random>",
# the lock files).
TEMP_FILE = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp$")
BUILD_DIR = re.compile(r"^\.tmp_incident_[0-9]{8}_[0-9]{6}_[A-Za-z0-9_-]+_[0-9a-f]{8}$")
LOCK_FILES = (".lock", ".loop.lock")


# --------------------------------------------------------------------------- slow variants


@pytest.fixture(autouse=True)
def _only_full_runs_slow(request: pytest.FixtureRequest) -> None:
    """``@pytest.mark.slow`` tests run with SELFHEAL_RELIABILITY_FULL=1 or ``-m slow`` only."""
    if request.node.get_closest_marker("slow") is None:
        return
    if FULL or "slow" in str(request.config.getoption("markexpr") or ""):
        return
    pytest.skip("long variant: run with SELFHEAL_RELIABILITY_FULL=1 pytest tests/reliability -m slow")


def sample(items: Sequence[Any], count: int) -> List[Any]:
    """``count`` of ``items`` spread evenly, first and middle ones included (deterministic)."""
    items = list(items)
    if len(items) <= count:
        return items
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


# --------------------------------------------------------------------------- processes


def run_env(extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment of every child: no plugin autoload (pytest starts in ~0.5 s instead
    of seconds with hypothesis & co.), no bytecode files, nothing of the outer run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    for key in ("SELFHEAL_VERIFYING", "SELFHEAL_TEST_KILL_AT", "PYTEST_ADDOPTS") + tuple(
        k for k in env if k.startswith("RELIABILITY_FAULT")
    ):
        env.pop(key, None)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


PYTEST_SELFHEAL = ("-p", "pytest_selfheal.plugin", "--selfheal", "-q", "-p", "no:cacheprovider")


def run_pytest_selfheal(
    project: Path, *args: str, env: Optional[Mapping[str, str]] = None, timeout: float = 120
) -> "subprocess.CompletedProcess[str]":
    """``python -m pytest --selfheal ARGS`` in ``project`` (a real subprocess)."""
    return subprocess.run([PY, "-m", "pytest", *PYTEST_SELFHEAL, *args], cwd=project, capture_output=True,
                          text=True, timeout=timeout, env=run_env(env), stdin=subprocess.DEVNULL)


def run_selfheal(
    cwd: Path, *args: str, env: Optional[Mapping[str, str]] = None, timeout: float = 120
) -> "subprocess.CompletedProcess[str]":
    """``python -m pytest_selfheal ARGS`` in ``cwd`` (a real subprocess)."""
    return subprocess.run([PY, "-m", "pytest_selfheal", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=run_env(env), stdin=subprocess.DEVNULL)


def faulted_argv(module: str, *args: str) -> List[str]:
    """argv running ``module`` under the fault shim."""
    return [PY, str(FAULTSHIM), module, *args]


def run_with_faults(
    cwd: Path, root: Path, mode: str, module: str, *args: str, at: int = 1,
    env: Optional[Mapping[str, str]] = None, timeout: float = 120,
) -> Tuple["subprocess.CompletedProcess[str]", Optional[int]]:
    """Run ``python -m MODULE ARGS`` with faults under ``root``; returns (result, ops counted
    — only in ``count`` mode)."""
    count_file = cwd.parent / f".faultcount-{os.getpid()}-{os.urandom(3).hex()}"
    extra = {"RELIABILITY_FAULT_ROOT": str(root), "RELIABILITY_FAULT_MODE": mode, "RELIABILITY_FAULT_AT": str(at),
             "RELIABILITY_FAULT_COUNT_FILE": str(count_file)}
    extra.update(env or {})
    result = subprocess.run(faulted_argv(module, *args), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                            env=run_env(extra), stdin=subprocess.DEVNULL)
    count = None
    if count_file.exists():
        count = int(count_file.read_text() or "0")
        count_file.unlink()
    return result, count


def one_error_line(stderr: str) -> str:
    """The single ``selfheal: error: …`` line of ``stderr`` (asserts there is exactly one, no traceback)."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("selfheal: error: ")]
    assert len(errors) == 1, stderr
    assert lines[-1] == errors[0], stderr  # nothing after the error line
    return errors[0]


# --------------------------------------------------------------------------- projects


def git_commit_all(path: Path, message: str = "init") -> None:
    """``git init`` (if needed), ``git add -A``, ``git commit`` through gitpython."""
    import git

    repo = git.Repo.init(path)
    try:
        repo.git.add(A=True)
        actor = git.Actor("Test Author", "author@example.invalid")
        repo.index.commit(message, author=actor, committer=actor)
    finally:
        repo.close()


def make_project(root: Path, files: Mapping[str, str], *, ini: str = "", git: bool = True) -> Path:
    """A tiny pytest project (``pytest.ini`` + ``files``), committed in a fresh git repo."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n" + ini)
    (root / ".gitignore").write_text(GITIGNORE)
    for name, text in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(text))
    if git:
        git_commit_all(root)
    return root


def capture(project: Path, *args: str, env: Optional[Mapping[str, str]] = None) -> str:
    """``pytest --selfheal`` in ``project``; returns the one new incident id."""
    root = project / ".selfheal"
    before = set(incident_ids(root))
    result = run_pytest_selfheal(project, *args, env=env)
    assert result.returncode == 1, result.stdout + result.stderr
    new = [i for i in incident_ids(root) if i not in before]
    assert len(new) == 1, result.stdout + result.stderr
    return new[0]


def clone_project(template: Path, dest: Path) -> Path:
    """Copy a captured project; every incident's ``rootdir`` points at the copy."""
    shutil.copytree(template, dest, symlinks=True)
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


# --------------------------------------------------------------------------- reading roots


def walk_written(root: Path) -> List[Path]:
    """Every regular file under ``root`` (hidden ones included), sorted."""
    if not root.exists():
        return []
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def tree_snapshot(root: Path) -> Dict[str, Tuple[int, float]]:
    """``{relative path: (size, mtime)}`` of every file and folder under ``root``."""
    out: Dict[str, Tuple[int, float]] = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        out[path.relative_to(root).as_posix()] = (stat.st_size if path.is_file() else -1, stat.st_mtime)
    return out


def incident_ids(root: Path) -> List[str]:
    """Ids of every incident folder in the inbox and archive (by folder name)."""
    from pytest_selfheal.store.ids import is_incident_id

    found = []
    for bucket in ("error_inbox", "error_archive/resolved", "error_archive/escalated"):
        base = root / bucket
        if base.is_dir():
            found.extend(p.name for p in base.iterdir() if p.is_dir() and is_incident_id(p.name))
    return sorted(found)


def cli(*args: str) -> Tuple[int, str, str]:
    """``selfheal ARGS`` in this process (the console script's own ``main``): (code, out, err).

    Used for the many read-only checks after each fault (``status``, ``replay``): the same
    code path as the subprocess, without 0.3 s of interpreter start-up each time."""
    from pytest_selfheal.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def status_rows(root: Path) -> List[Dict[str, Any]]:
    """``selfheal status --json --dir ROOT``: exit 0, one JSON list, no traceback."""
    code, out, err = cli("status", "--json", "--dir", str(root))
    assert code == 0, err
    assert "Traceback" not in err
    rows = json.loads(out)
    assert isinstance(rows, list)
    return rows


def check_files_whole(root: Path) -> Dict[str, int]:
    """No partial file anywhere under ``root``; returns counts of what was found.

    Every ``*.json`` parses; every ``status.txt`` holds one known word; undecodable
    (torn) lines of ``audit_tail.jsonl`` are counted (``torn``); a dot name is only a
    documented temp file, a build folder or a lock file.
    """
    from pytest_selfheal.store.states import STATUSES

    counts = {"json": 0, "temp": 0, "torn": 0}
    for path in walk_written(root):
        name = path.name
        relative = path.relative_to(root).as_posix()
        if any(part.startswith(".tmp_") for part in path.relative_to(root).parts[:-1]):
            assert BUILD_DIR.match(path.parent.name), relative
            counts["temp"] += 1
            continue
        if name.startswith("."):
            assert TEMP_FILE.match(name) or name in LOCK_FILES, f"undocumented hidden file {relative}"
            counts["temp"] += int(bool(TEMP_FILE.match(name)))
            continue
        if name.endswith(".json"):
            json.loads(path.read_text(encoding="utf-8"))  # raises on a partial document
            counts["json"] += 1
        elif name == "status.txt":
            assert path.read_text().strip() in STATUSES, relative
        elif name == "audit_tail.jsonl":
            # Append-only log: a torn line (a short write on a full disk) is skipped by every
            # reader with a warning (docs/store.md); every other line is a whole event.
            raw = path.read_text(encoding="utf-8", errors="replace")
            for line in raw.split("\n"):
                if not line.strip():
                    continue
                try:
                    json.loads(line)
                except ValueError:
                    counts["torn"] += 1
    return counts


def check_root(root: Path, expect_ids: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """After any fault: files whole, ``selfheal status`` exits 0, nothing corrupted, every
    incident of ``expect_ids`` listed exactly once. Returns the status rows."""
    check_files_whole(root)
    rows = status_rows(root)
    assert [r for r in rows if r["status"] == "corrupted"] == [], rows
    listed = [r["incident_id"] for r in rows]
    assert len(listed) == len(set(listed)), listed  # never two copies
    assert set(expect_ids) <= set(listed), (expect_ids, listed)
    return rows


def attempt_numbers(root: Path, incident_id: str) -> List[int]:
    """Iteration numbers of ``error_runs/<id>/attempt_XX.json`` (by file name)."""
    folder = root / "error_runs" / incident_id
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := re.fullmatch(r"attempt_([0-9]{2,})\.json", p.name)))


def attempt_bytes(root: Path, incident_id: str) -> Dict[int, bytes]:
    """``{iteration: file bytes}`` of every attempt file."""
    folder = root / "error_runs" / incident_id
    return {n: (folder / f"attempt_{n:02d}.json").read_bytes() for n in attempt_numbers(root, incident_id)}


# --------------------------------------------------------------------------- figures

FIGURES_ENV = "SELFHEAL_RELIABILITY_FIGURES"


def record_figures(test: str, **numbers: Any) -> None:
    """Append ``{test, **numbers}`` as one JSON line to ``$SELFHEAL_RELIABILITY_FIGURES``
    (scripts/reliability_figures.py sums them into the table of docs/reliability.md)."""
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"test": test, "full": FULL, **numbers}, sort_keys=True) + "\n")
