"""Isolated git worktrees: the user's state in, patches out, the user's tree never touched.

Real git repositories in tmp_path (gitpython to init and commit).
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import git
import pytest

from pytest_selfheal.errors import InputError, RefusedError
from pytest_selfheal.gitrepo import diff_hash, init_repo, isolated_git_env, run_git
from pytest_selfheal.records.repair import WorktreeRecord
from pytest_selfheal.repair import worktree as W
from pytest_selfheal.repair.worktree import carry_ignored


def make_repo(path: Path, files: dict[str, str]) -> git.Repo:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    repo = git.Repo.init(path)
    repo.git.add(A=True)
    repo.index.commit("init")
    return repo


def git_out(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def user_state(top: Path) -> dict[str, object]:
    """Everything of the user's repository a worktree must not touch."""
    files = {
        p.relative_to(top).as_posix(): p.read_bytes()
        for p in sorted(top.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(top).parts
    }
    return {"files": files, "index": (top / ".git" / "index").read_bytes(), "status": git_out(top, "status", "--porcelain")}


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    top = tmp_path / "proj"
    make_repo(top, {"calc.py": "def add(a, b):\n    return a - b\n", "gone.py": "x = 1\n", "pkg/mod.py": "y = 2\n",
                    "data.bin": "placeholder\n", ".gitignore": "*.log\n"})
    # Uncommitted state: a modification, a deletion, a staged change, untracked, ignored, binary, junk.
    (top / "pkg" / "mod.py").write_text("y = 3\n")
    (top / "gone.py").unlink()
    (top / "calc.py").write_text("def add(a, b):\n    return a - b  # staged\n")
    git_out(top, "add", "calc.py")
    (top / "new_module.py").write_text("z = 4\n")
    (top / "debug.log").write_text("ignored\n")
    (top / "data.bin").write_bytes(bytes(range(256)))
    (top / "__pycache__").mkdir()
    (top / "__pycache__" / "calc.cpython-311.pyc").write_bytes(b"\x00junk")
    (top / ".selfheal" / "error_inbox").mkdir(parents=True)
    (top / ".selfheal" / "error_inbox" / "x.json").write_text("{}")
    yield top


def test_worktree_holds_the_users_state_and_touches_nothing(project: Path) -> None:
    before = user_state(project)
    wt = W.create(project, name="incident_x", exclude=[project / ".selfheal"])
    try:
        assert wt.path.is_dir() and not str(wt.path).startswith(str(project))
        assert wt.prefix == "" and wt.project_root == wt.path
        assert (wt.path / "pkg" / "mod.py").read_text() == "y = 3\n"
        assert not (wt.path / "gone.py").exists()
        assert (wt.path / "calc.py").read_text().endswith("# staged\n")
        assert (wt.path / "new_module.py").read_text() == "z = 4\n"
        assert (wt.path / "data.bin").read_bytes() == bytes(range(256))
        # Ignored files are carried in (the code under test may need them) but stay ignored;
        # junk and the reports root stay out.
        assert (wt.path / "debug.log").read_text() == "ignored\n" and wt.carried == ("debug.log",)
        assert not (wt.path / "__pycache__").exists()
        assert not (wt.path / ".selfheal").exists()
        # HEAD is the user's commit; the user's changes are uncommitted changes here too.
        assert git_out(wt.path, "rev-parse", "HEAD") == git_out(project, "rev-parse", "HEAD")
        status = git_out(wt.path, "status", "--porcelain")
        assert " M pkg/mod.py" in status and " D gone.py" in status and "?? new_module.py" in status
        assert wt.snapshot() == wt.base
    finally:
        wt.remove()
    assert user_state(project) == before
    assert not wt.scratch.exists()
    assert git_out(project, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_progress_hash_in_the_worktree_equals_the_users(project: Path) -> None:
    import shutil

    shutil.rmtree(project / "__pycache__")  # bytecode caches are never copied (and usually ignored)
    wt = W.create(project, name="incident_x", exclude=[project / ".selfheal"])
    try:
        # The capture hashed the user's tree (minus the reports root); the loop hashes the worktree.
        assert diff_hash(wt.path) == diff_hash(project, exclude=[project / ".selfheal"])
        (wt.path / "calc.py").write_text("changed\n")
        assert diff_hash(wt.path) != diff_hash(project, exclude=[project / ".selfheal"])
    finally:
        wt.remove()


def test_snapshot_diff_restore_and_patch(project: Path) -> None:
    before_user = user_state(project)
    wt = W.create(project, name="incident_x", exclude=[project / ".selfheal"])
    try:
        start = wt.snapshot()
        (wt.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (wt.path / "brand_new.py").write_text("n = 1\n")
        (wt.path / "new_module.py").unlink()
        (wt.path / "__pycache__").mkdir()
        (wt.path / "__pycache__" / "x.pyc").write_bytes(b"junk")  # never part of a repair
        after = wt.snapshot()
        assert sorted(wt.changed_files(start, after)) == ["brand_new.py", "calc.py", "new_module.py"]
        assert wt.changed_files(start, start) == [] and wt.diff(start, start) == b""
        patch = wt.diff(wt.base, after)
        assert patch.startswith(b"diff --git a/") and patch.endswith(b"\n")
        assert b"+    return a + b" in patch and b"__pycache__" not in patch
        # Roll back: files of the repair are gone, the rest is the user's state again.
        wt.restore(start)
        assert wt.snapshot() == start
        assert (wt.path / "calc.py").read_text().endswith("# staged\n")
        assert not (wt.path / "brand_new.py").exists() and (wt.path / "new_module.py").exists()
        # The patch applies to the user's tree, exactly once.
        assert W.check_patch(project, patch).ok
        W.apply_patch(project, patch)
        assert (project / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
        assert (project / "brand_new.py").read_text() == "n = 1\n" and not (project / "new_module.py").exists()
        again = W.check_patch(project, patch)
        assert again.already_applied and not again.ok
        with pytest.raises(RefusedError, match="already applied"):
            W.apply_patch(project, patch)
    finally:
        wt.remove()
    assert user_state(project)["index"] == before_user["index"]  # git apply never touches the index


def test_conflicting_patch_changes_nothing(project: Path) -> None:
    wt = W.create(project, name="incident_x")
    try:
        (wt.path / "calc.py").write_text("def add(a, b):\n    return a + b\n")
        (wt.path / "other.py").write_text("o = 1\n")
        patch = wt.diff(wt.base, wt.snapshot())
    finally:
        wt.remove()
    (project / "calc.py").write_text("def add(a, b):\n    return b - a  # the user moved on\n")
    before = user_state(project)
    verdict = W.check_patch(project, patch)
    assert not verdict.ok and not verdict.already_applied and "calc.py" in verdict.error
    with pytest.raises(RefusedError, match="does not apply cleanly") as info:
        W.apply_patch(project, patch)
    assert "\n" not in str(info.value)
    assert user_state(project) == before  # nothing half-applied (other.py not created)
    assert not W.check_patch(project, b"").ok


def test_reset_head_undoes_provider_commits(project: Path) -> None:
    wt = W.create(project, name="incident_x")
    try:
        start = wt.snapshot()
        (wt.path / "calc.py").write_text("committed by an agent\n")
        subprocess.run(["git", "commit", "-qam", "agent"], cwd=wt.path, check=True)
        assert git_out(wt.path, "rev-parse", "HEAD") != wt.head + "\n"
        wt.reset_head()
        assert git_out(wt.path, "rev-parse", "HEAD").strip() == wt.head
        assert (wt.path / "calc.py").read_text() == "committed by an agent\n"
        assert wt.changed_files(start, wt.snapshot()) == ["calc.py"]
    finally:
        wt.remove()
    assert git_out(project, "rev-parse", "HEAD").strip() == wt.head  # the user's branch never moved


def test_project_in_a_subdirectory(tmp_path: Path) -> None:
    top = tmp_path / "mono"
    make_repo(top, {"README": "r\n", "svc/app.py": "a = 1\n", "svc/tests/test_app.py": "def test(): pass\n"})
    wt = W.create(top / "svc", name="incident_sub")
    try:
        assert wt.prefix == "svc"
        assert wt.project_root == wt.path / "svc" and (wt.project_root / "app.py").is_file()
        start = wt.snapshot()
        (wt.project_root / "app.py").write_text("a = 2\n")
        (wt.path / "README").write_text("changed\n")
        files = wt.changed_files(start, wt.snapshot())
        assert sorted(files) == ["README", "svc/app.py"]
        assert sorted(wt.project_relative(files)) == ["../README", "app.py"]
    finally:
        wt.remove()


def test_user_hooks_never_run(project: Path) -> None:
    hooks = project / ".git" / "hooks"
    marker = project.parent / "hook_ran"
    for name in ("post-checkout", "reference-transaction", "post-index-change"):
        script = hooks / name
        script.write_text(f"#!/bin/sh\necho {name} >> '{marker}'\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    wt = W.create(project, name="incident_x")
    try:
        (wt.path / "calc.py").write_text("x\n")
        wt.restore(wt.base)
    finally:
        wt.remove()
    assert not marker.exists()


def test_not_a_repository_or_no_commit_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(RefusedError, match="need a git repository") as info:
        W.create(plain, name="x")
    assert "\n" not in str(info.value)
    unborn = tmp_path / "unborn"
    git.Repo.init(unborn).close()
    with pytest.raises(RefusedError, match="no commit yet"):
        W.create(unborn, name="x")
    assert not [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("selfheal-*") if (p / "x").exists()]


def test_inherited_git_index_file_is_ignored(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A run started from a pre-commit hook inherits GIT_INDEX_FILE: it must not aim at the user's index.
    monkeypatch.setenv("GIT_INDEX_FILE", str(project / ".git" / "index"))
    index = (project / ".git" / "index").read_bytes()
    with isolated_git_env():
        assert "GIT_INDEX_FILE" not in os.environ
        wt = W.create(project, name="incident_x")
        try:
            (wt.path / "calc.py").write_text("x\n")
            wt.restore(wt.base)
        finally:
            wt.remove()
    assert os.environ["GIT_INDEX_FILE"] == str(project / ".git" / "index")
    assert (project / ".git" / "index").read_bytes() == index


def test_remove_recorded_only_touches_selfheal_temp_dirs(project: Path, tmp_path: Path) -> None:
    wt = W.create(project, name="incident_x")
    record = WorktreeRecord(repo=str(wt.repo_top), path=str(wt.path), scratch=str(wt.scratch))
    victim = tmp_path / "precious"
    victim.mkdir()
    W.remove_recorded(WorktreeRecord(repo=str(project), path=str(victim / "x"), scratch=str(victim)))
    W.remove_recorded(WorktreeRecord(repo=str(project)))
    with pytest.raises(InputError):  # a hand-edited record is refused where it is read
        WorktreeRecord.from_json({"repo": 1}, "worktree.json")
    assert victim.is_dir()
    W.remove_recorded(record)  # a killed run's leftover
    assert not wt.path.exists() and not wt.scratch.exists()
    assert git_out(project, "worktree", "list", "--porcelain").count("worktree ") == 1
    wt.remove()  # idempotent, never raises


def test_the_demo_repository_is_on_main_whatever_gits_default(tmp_path: Path) -> None:
    # history.base_branch defaults to main: the demo's second capture of the same bug is then
    # triaged "known on main", as on a real project, even where git's default is master.
    (tmp_path / "calc.py").write_text("x = 1\n")
    init_repo(tmp_path, "demo project")
    assert run_git(tmp_path, ["branch", "--show-current"]).decode().strip() == "main"
    assert run_git(tmp_path, ["log", "--format=%s"]).decode().strip() == "demo project"


def test_a_staged_ignored_file_is_never_deleted_by_the_patch(tmp_path: Path) -> None:
    """`git add -f` of ignored files (not committed): the worktree has them, and the final
    patch holds only the provider's change, so applying it keeps them."""
    top = tmp_path / "proj"
    make_repo(top, {"src/pkg/number.py": "N = 1\n", ".gitignore": "_version.py\n*.mo\n"})
    (top / "src" / "pkg" / "_version.py").write_text("version = '1.0'\n")
    (top / "src" / "pkg" / "fr.mo").write_bytes(b"\x00catalogue")
    git_out(top, "add", "-f", "src/pkg/_version.py", "src/pkg/fr.mo")
    wt = W.create(top, name="incident_x")
    try:
        assert (wt.path / "src" / "pkg" / "_version.py").read_text() == "version = '1.0'\n"
        assert wt.snapshot() == wt.base
        (wt.path / "src" / "pkg" / "number.py").write_text("N = 2\n")
        final = wt.snapshot()
        assert wt.changed_files(wt.base, final) == ["src/pkg/number.py"]
        patch = wt.diff(wt.base, final)
    finally:
        wt.remove()
    assert b"deleted file" not in patch and b"_version.py" not in patch
    W.apply_patch(top, patch)
    assert (top / "src" / "pkg" / "number.py").read_text() == "N = 2\n"
    assert (top / "src" / "pkg" / "_version.py").read_text() == "version = '1.0'\n"
    assert (top / "src" / "pkg" / "fr.mo").read_bytes() == b"\x00catalogue"
    assert "A  src/pkg/_version.py" in git_out(top, "status", "--porcelain")  # still staged


def test_ignored_files_are_carried_bounded_and_never_patched(tmp_path: Path) -> None:
    top = tmp_path / "proj"
    make_repo(top, {"src/pkg/__init__.py": "from ._version import version\n",
                    ".gitignore": "_version.py\n*.mo\ndata/\n.venv/\nnode_modules/\nenvx/\n.selfheal/\n"
                                  "*.egg-info/\nbuild/\n"})
    generated = {"src/pkg/_version.py": "version = '1.0'\n", "src/pkg/locale/fr/LC_MESSAGES/pkg.mo": "mo",
                 "data/sample.txt": "sample\n", "data/deeper/more.txt": "more\n"}
    junk = [".venv/lib/x.py", "node_modules/m/index.js", "envx/pyvenv.cfg", "envx/lib/y.py", ".selfheal/a.json",
            "src/pkg.egg-info/PKG-INFO", "build/lib/pkg/__init__.py", "data/__pycache__/x.pyc"]
    for rel, text in [*generated.items(), *((j, "junk") for j in junk)]:
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text)
    wt = W.create(top, name="incident_x", exclude=[top / ".selfheal"])
    try:
        assert sorted(wt.carried) == sorted(generated)
        for rel, text in generated.items():
            assert (wt.path / rel).read_text() == text
        for rel in junk:
            assert not (wt.path / rel).exists(), rel
        # A carried file changed or deleted by a provider is no repair.
        assert wt.snapshot() == wt.base
        (wt.path / "src/pkg/_version.py").write_text("version = '9'\n")
        (wt.path / "data/sample.txt").unlink()
        assert wt.snapshot() == wt.base and wt.diff(wt.base, wt.snapshot()) == b""
        assert not wt.warnings
    finally:
        wt.remove()
    # Bounded: smallest first, the rest counted.
    dest = tmp_path / "dest"
    dest.mkdir()
    carried = carry_ignored(top, dest, [".selfheal"], max_files=2, max_bytes=1000)
    assert carried.paths == ("data/deeper/more.txt", "src/pkg/locale/fr/LC_MESSAGES/pkg.mo")
    assert carried.left_out == 2 and carried.left_out_bytes > 0
    assert "src/pkg/_version.py" not in carried.paths  # the largest two are the ones left out


def test_the_diff_hash_ignores_comment_and_blank_line_edits_of_python_files(tmp_path: Path) -> None:
    """Progress means the code's behaviour could have changed: a comment is no code change."""
    code = 'def f(a):\n    s = "a#b"\n    return a - 1\n'
    make_repo(tmp_path, {"m.py": code, "notes.txt": "x\n"})
    clean = diff_hash(tmp_path)
    (tmp_path / "m.py").write_text("# why\n" + code.replace("a - 1\n", "a - 1  # off by one?\n") + "\n\n")
    assert diff_hash(tmp_path) == clean
    for changed in (code.replace("a - 1", "a + 1"), code.replace("a#b", "a#c"), code + "X = 1  # new\n"):
        (tmp_path / "m.py").write_text(changed)
        assert diff_hash(tmp_path) != clean, changed
    (tmp_path / "m.py").write_text(code)
    (tmp_path / "notes.txt").write_text("x\n# a comment in a text file is content\n")
    assert diff_hash(tmp_path) != clean
