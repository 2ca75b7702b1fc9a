"""Trust boundaries, fourth round: the ignored files carried into a repair worktree.

An ignored symlink was carried as a live link: a provider wrote ``authorized_keys`` through
``{worktree}/sshkeys`` into the folder it pointed to outside the project, and nothing noticed.
Now a link is carried as a copy of what it points to inside the project, or not at all, and
a write reaching the user's side of a carried file stops the loop ``provider_escaped``. Real
git repositories, real links, the loop through ``main(argv)``.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import capture, cli, make_project, run_env

from pytest_selfheal.errors import EXIT_OK, EXIT_UNRESOLVED
from pytest_selfheal.repair import worktree as W
from pytest_selfheal.repair.worktree import carry_ignored

BUGGY = "def add(a, b):\n    return a - b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
IGNORE = "sshkeys\nsecret.txt\nlinked_version.py\ngenerated/\nlinked_dir\n"

# Fixes the bug in its worktree, then writes through what was carried (MODE).
AGENT = textwrap.dedent(
    """
    import pathlib, subprocess, sys
    mode, worktree = sys.argv[1:3]
    wt = pathlib.Path(worktree)
    calc = wt / "calc.py"
    calc.write_text(calc.read_text().replace("a - b", "a + b"))
    if mode == "through_links":
        keys = wt / "sshkeys" / "authorized_keys"
        keys.parent.mkdir(parents=True, exist_ok=True)
        keys.write_text("ssh-ed25519 AAAA attacker\\n")
        (wt / "linked_version.py").write_text("version = 'evil'\\n")
    else:  # the user's own copy of a carried file, by its path in the user's tree
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=wt, capture_output=True,
                                text=True, check=True).stdout.strip()
        top = pathlib.Path(wt, common).resolve().parent
        (top / "generated" / "_version.py").write_text("version = 'evil'\\n")
    """
)


def _project(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "home" / ".ssh"
    outside.mkdir(parents=True)
    (outside / "id").write_text("private\n")
    (tmp_path / "elsewhere.txt").write_text("not the project's\n")
    project = make_project(tmp_path / "proj", {"calc.py": BUGGY, "test_calc.py": TESTS, ".gitignore": IGNORE})
    (project / "generated").mkdir()
    (project / "generated" / "_version.py").write_text("version = '1.0'\n")
    (project / "generated" / "data.txt").write_text("data\n")
    (project / "sshkeys").symlink_to(outside, target_is_directory=True)  # leads out
    (project / "secret.txt").symlink_to(tmp_path / "elsewhere.txt")  # leads out
    (project / "linked_version.py").symlink_to("generated/_version.py")  # stays inside
    (project / "linked_dir").symlink_to("generated", target_is_directory=True)  # stays inside
    return project, outside


def test_a_link_is_carried_as_a_copy_inside_or_not_at_all(tmp_path: Path) -> None:
    project, outside = _project(tmp_path)
    wt = W.create(project, name="incident_x", exclude=[project / ".selfheal"])
    try:
        assert sorted(wt.carried) == ["generated/_version.py", "generated/data.txt", "linked_dir/_version.py",
                                      "linked_dir/data.txt", "linked_version.py"]
        for rel in wt.carried:
            assert not (wt.path / rel).is_symlink() and not (wt.path / rel).parent.is_symlink(), rel
        assert (wt.path / "linked_version.py").read_text() == "version = '1.0'\n"
        assert not (wt.path / "sshkeys").exists() and not (wt.path / "sshkeys").is_symlink()
        assert not (wt.path / "secret.txt").exists() and not (wt.path / "secret.txt").is_symlink()
        (wt.path / "linked_version.py").write_text("changed in the worktree\n")
        assert (project / "generated" / "_version.py").read_text() == "version = '1.0'\n"
    finally:
        wt.remove()


def _loop(project: Path, tmp_path: Path, mode: str) -> tuple[int, str, str]:
    (tmp_path / "agent.py").write_text(AGENT)
    incident_id = capture(project)
    command = json.dumps([sys.executable, str(tmp_path / "agent.py"), mode, "{worktree}"])
    result = cli("loop", incident_id, "--set", f"repair.command={command}", cwd=project, env=run_env())
    return result.returncode, result.stdout + result.stderr, incident_id


@pytest.mark.parametrize("mode", [pytest.param("through_links", marks=pytest.mark.slow), "user_side"])
def test_writes_through_what_was_carried_stay_in_the_worktree_or_stop_provider_escaped(
        tmp_path: Path, mode: str) -> None:
    project, outside = _project(tmp_path)
    code, out, incident_id = _loop(project, tmp_path, mode)
    assert sorted(p.name for p in outside.iterdir()) == ["id"]  # nothing written through a link
    assert (tmp_path / "elsewhere.txt").read_text() == "not the project's\n"
    if mode == "through_links":
        # Every write landed in the worktree's own copies: a fix proposed, the user's files as they were.
        assert code == EXIT_OK and "provider_escaped" not in out, out
        assert (project / "generated" / "_version.py").read_text() == "version = '1.0'\n"
        return
    assert code == EXIT_UNRESOLVED and "provider_escaped" in out, out
    attempt = json.loads((project / ".selfheal" / "error_runs" / incident_id / "attempt_01.json").read_text())
    assert attempt["repair"]["provider_escaped"] == ["generated/_version.py", "linked_dir/_version.py",
                                                     "linked_version.py"], attempt["repair"]


def test_a_copy_never_lands_outside_through_a_link_of_the_worktree(tmp_path: Path) -> None:
    project, outside = _project(tmp_path)
    dest = tmp_path / "wt"
    dest.mkdir()
    (dest / "generated").symlink_to(outside, target_is_directory=True)  # a link the checkout holds
    carried = carry_ignored(project, dest, [".selfheal"])
    assert sorted(p.name for p in outside.iterdir()) == ["id"]
    assert "generated/_version.py" not in carried.paths and "linked_version.py" in carried.paths
