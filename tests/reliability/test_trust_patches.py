"""Trust boundaries, second round: a patch is shown as what it does.

The approval question of ``selfheal apply`` named only the files of ``diff --git`` headers:
plain unified hunks after one git-style section, a created ``sitecustomize.py`` and a source
file turned into a symlink out of the project went unnamed. The description now comes from
the whole patch as ``git apply`` reads it (docs/repair.md "What the approval question names").
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from helpers import cli

from pytest_selfheal.errors import EXIT_REFUSED, EXIT_UNRESOLVED
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.repair import approval
from pytest_selfheal.repair.patches import refusal, summarise
from pytest_selfheal.store.root import Store

CALC = "def f():\n    return 1\n"

MIXED = """\
diff --git a/README b/README
--- a/README
+++ b/README
@@ -1 +1 @@
-a
+b
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def f():
-    return 1
+    return 2
--- /dev/null
+++ b/sitecustomize.py
@@ -0,0 +1 @@
+import os
"""


def _git(top: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=top, check=True, capture_output=True, text=True).stdout


def _project(tmp_path: Path) -> tuple[Path, Store, str]:
    top = tmp_path / "proj"
    top.mkdir()
    (top / "README").write_text("a\n")
    (top / "calc.py").write_text(CALC)
    (top / "old.txt").write_text("old\n")
    (top / "b.bin").write_bytes(b"\x00\x01bin")
    (top / ".gitignore").write_text(".selfheal/\n")
    _git(top, "init", "-q")
    _git(top, "add", "-A")
    _git(top, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    store = Store(top / ".selfheal")
    incident_id = store.create_incident(
        Incident(step="test_calc.py::test_f", failure_class="deterministic", message="m",
                 error_signature="TEST_ASSERTION | t | m", rootdir=str(top)),
        log_tail="", context=RunContext(),
    )
    return top, store, incident_id


def _staged_patch(top: Path) -> bytes:
    """The index's change as a binary git patch; the working tree is reset afterwards."""
    _git(top, "add", "-A")
    patch = subprocess.run(["git", "diff", "--cached", "--binary"], cwd=top, check=True, capture_output=True).stdout
    _git(top, "reset", "-q", "--hard")
    return patch


def _ask(top: Path, incident_id: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``selfheal apply ID`` at a terminal answering no: (exit code, the question asked)."""
    asked = []
    monkeypatch.chdir(top)
    monkeypatch.setattr(approval, "is_interactive", lambda stdin=None, stdout=None: True)
    monkeypatch.setattr(approval, "ask_on_stderr", lambda question: asked.append(question) or "n")
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    result = cli("apply", incident_id, cwd=top)
    return result.returncode, (asked[0] if asked else result.stderr)


def test_the_question_names_every_file_of_a_mixed_format_patch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top, store, incident_id = _project(tmp_path)
    store.write_run_file(incident_id, "final.patch", MIXED)
    code, question = _ask(top, incident_id, monkeypatch)
    assert code == EXIT_UNRESOLVED, question
    assert "3 file(s): README, calc.py, sitecustomize.py" in question, question
    assert "create sitecustomize.py" in question
    assert (top / "calc.py").read_text() == CALC and not (top / "sitecustomize.py").exists()


def test_a_file_turned_into_a_symlink_out_of_the_project_is_refused(tmp_path: Path) -> None:
    top, store, incident_id = _project(tmp_path)
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (top / "calc.py").unlink()
    (top / "calc.py").symlink_to(outside)
    store.write_run_file(incident_id, "final.patch", _staged_patch(top).decode())
    result = cli("apply", incident_id, "--yes", cwd=top)
    assert result.returncode == EXIT_REFUSED, result.stdout + result.stderr
    assert "symlink pointing outside the repository (calc.py -> " in result.stderr
    assert not (top / "calc.py").is_symlink() and (top / "calc.py").read_text() == CALC


def test_a_symlink_inside_the_project_is_named_and_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top, store, incident_id = _project(tmp_path)
    (top / "link.py").symlink_to("calc.py")
    store.write_run_file(incident_id, "final.patch", _staged_patch(top).decode())
    code, question = _ask(top, incident_id, monkeypatch)
    assert code == EXIT_UNRESOLVED, question
    assert "create mode 120000 link.py" in question and "symlink link.py -> calc.py" in question


def test_renames_mode_changes_deletions_and_binaries_are_named(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    top, store, incident_id = _project(tmp_path)
    _git(top, "mv", "old.txt", "new.txt")
    (top / "README").chmod(0o755)
    (top / "b.bin").write_bytes(b"\x00\x02bin")
    store.write_run_file(incident_id, "final.patch", _staged_patch(top).decode())
    refused = cli("apply", incident_id, "--yes", cwd=top)
    assert refused.returncode == EXIT_REFUSED and "binary file(s) (b.bin)" in refused.stderr, refused.stderr
    (top / ".planning").mkdir()
    (top / ".planning" / "config.yml").write_text("ralf_lite:\n  repair:\n    allow_binary: true\n")
    code, question = _ask(top, incident_id, monkeypatch)
    assert code == EXIT_UNRESOLVED, question
    for part in ("mode change 100644 => 100755 README", "rename old.txt => new.txt (100%)", "binary: b.bin"):
        assert part in question, question


def test_summary_and_refusal_directly(tmp_path: Path) -> None:
    top, _, _ = _project(tmp_path)
    summary = summarise(top, MIXED.encode())
    assert summary.files == ("README", "calc.py", "sitecustomize.py")
    assert refusal(summary, top, allow_binary=False) is None
    link = b"diff --git a/x b/x\nnew file mode 120000\n--- /dev/null\n+++ b/x\n@@ -0,0 +1 @@\n+../../etc\n"
    assert "outside the repository (x -> ../../etc)" in str(refusal(summarise(top, link), top, allow_binary=True))
