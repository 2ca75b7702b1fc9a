"""Shared builders of the reliability suite (docs/reliability.md).

- projects, processes and the in-process ``selfheal`` come from ``helpers.py`` (the suite's
  one home for them: ``make_project``, ``capture``, ``run_pytest_selfheal``, ``selfheal``, ``cli``);
- ``run_with_faults``: the same through ``_faultshim.py`` (SIGKILL / ENOSPC / EROFS at the
  N-th file-system operation under the reports root);
- ``walk_written(root)``: every file written under a directory;
- ``check_root``: the invariants every root must keep after any fault (all JSON whole,
  ``selfheal status`` reads it, only documented temp files).

Long variants carry ``@pytest.mark.slow``: deselected by default, ``pytest -m slow`` (or
``SELFHEAL_RELIABILITY_FULL=1``, which also widens the samples) runs them; the default run is
a bounded sample of the same checks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from helpers import FULL, PY, cli, run_env

from pytest_selfheal.records.vocab import STATUSES

HERE = Path(__file__).resolve().parent
FAULTSHIM = HERE / "_faultshim.py"

# A deterministic failure: the loop stops after one re-run with repeated_fingerprint.
DETERMINISTIC = """
    def sub(a, b):
        return a + b

    def test_ok():
        assert True

    def test_sub():
        assert sub(5, 2) == 3
"""

# Names a reader may meet under a root after a kill, beside the contract's files
# (docs/store.md: temp files ".<name>.<random>.tmp", build folders ".tmp_<id>_<random>" in
# the inbox and the capture's plan build folder "error_plans/.tmp_plan", the lock files).
TEMP_FILE = re.compile(r"^\..+\.[0-9a-f]{8}\.tmp$")
BUILD_DIR = re.compile(r"^(\.tmp_incident_[0-9]{8}_[0-9]{6}_[A-Za-z0-9_-]+_[0-9a-f]{8}|\.tmp_plan)$")
LOCK_FILES = (".lock", ".loop.lock")


def sample(items: Sequence[Any], count: int) -> list[Any]:
    """``count`` of ``items`` spread evenly, first and middle ones included (deterministic)."""
    items = list(items)
    if len(items) <= count:
        return items
    step = len(items) / count
    return [items[int(i * step)] for i in range(count)]


# --------------------------------------------------------------------------- processes


def faulted_argv(module: str, *args: str) -> list[str]:
    """argv running ``module`` under the fault shim."""
    return [PY, str(FAULTSHIM), module, *args]


def run_with_faults(
    cwd: Path, root: Path, mode: str, module: str, *args: str, at: int = 1,
    env: Optional[Mapping[str, str]] = None, timeout: float = 120,
) -> tuple[subprocess.CompletedProcess[str], Optional[int]]:
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


# --------------------------------------------------------------------------- reading roots


def walk_written(root: Path) -> list[Path]:
    """Every regular file under ``root`` (hidden ones included), sorted."""
    if not root.exists():
        return []
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def tree_snapshot(root: Path) -> dict[str, tuple[int, float]]:
    """``{relative path: (size, mtime)}`` of every file and folder under ``root``."""
    out: dict[str, tuple[int, float]] = {}
    for path in sorted(root.rglob("*")):
        stat = path.lstat()
        out[path.relative_to(root).as_posix()] = (stat.st_size if path.is_file() else -1, stat.st_mtime)
    return out


def status_rows(root: Path) -> list[dict[str, Any]]:
    """``selfheal status --json --dir ROOT``: exit 0, one JSON list, no traceback."""
    code, out, err = cli("status", "--json", "--dir", str(root))
    assert code == 0, err
    assert "Traceback" not in err
    rows = json.loads(out)
    assert isinstance(rows, list)
    return rows


def check_files_whole(root: Path) -> dict[str, int]:
    """No partial file anywhere under ``root``; returns counts of what was found.

    Every ``*.json`` parses; every ``status.txt`` holds one known word; undecodable
    (torn) lines of ``audit_tail.jsonl`` are counted (``torn``); a dot name is only a
    documented temp file, a build folder or a lock file.
    """
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


def check_root(root: Path, expect_ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    """After any fault: files whole, ``selfheal status`` exits 0, nothing corrupted, every
    incident of ``expect_ids`` listed exactly once. Returns the status rows."""
    check_files_whole(root)
    rows = status_rows(root)
    assert [r for r in rows if r["status"] == "corrupted"] == [], rows
    listed = [r["incident_id"] for r in rows]
    assert len(listed) == len(set(listed)), listed  # never two copies
    assert set(expect_ids) <= set(listed), (expect_ids, listed)
    return rows


def attempt_numbers(root: Path, incident_id: str) -> list[int]:
    """Iteration numbers of ``error_runs/<id>/attempt_XX.json`` (by file name)."""
    folder = root / "error_runs" / incident_id
    if not folder.is_dir():
        return []
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := re.fullmatch(r"attempt_([0-9]{2,})\.json", p.name)))


def attempt_bytes(root: Path, incident_id: str) -> dict[int, bytes]:
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
