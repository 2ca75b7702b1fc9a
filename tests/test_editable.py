"""The code under test is the worktree's, with real editable installs:
a project installed with ``pip install --no-build-isolation -e`` (setuptools and hatchling
from the test extra) into its own virtual environment, captured with that environment's
``pytest --selfheal``, then looped by that environment's ``selfheal loop`` with an agent
that fixes the bug in the repair worktree. The verification must import the worktree's
code, so the fix is judged ``success``; the user's tree is not touched (proposed, not applied).
A hatch-vcs-style case: the package imports a `_version.py` that git ignores, generated at
install time; the repair worktree carries it (docs/repair.md "Isolation"). The package re-exports (``from .core import *``): the plan names ``core.py``, which holds the bug.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
import venv
from pathlib import Path

import pytest
from helpers import PYTEST_SELFHEAL, git_commit_all, run_env

BUGGY = "def sub(a, b):\n    return a + b\n"
FIXED = "def sub(a, b):\n    return a - b\n"
TEST = "from calc import sub\n\n\ndef test_sub():\n    assert sub(5, 2) == 3\n"
AGENT = textwrap.dedent(
    """
    import pathlib, sys
    worktree, relative = sys.argv[1:3]
    calc = pathlib.Path(worktree, relative)
    calc.write_text(calc.read_text().replace("a + b", "a - b"))
    """
)
BACKENDS = {
    "setuptools": '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n',
    "hatchling": '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n',
}
# (backend, layout): the package's folder, relative to the project. Its __init__ re-exports
# `from .core import *`; the bug is in core.py, the module the plan must name.
CASES = {
    ("setuptools", "src"): "src/calc",
    ("hatchling", "src"): "src/calc",
    ("setuptools", "flat"): "calc",
}


def _environment(where: Path) -> Path:
    """A virtual environment without pip that also sees this one's packages (pytest, the
    plugin, the build backends) through a ``.pth`` line; returns its interpreter."""
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(where)
    python = where / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    outer = sysconfig.get_paths()["purelib"]
    # An `import` line of a .pth runs at start-up: addsitedir also reads the outer .pth files.
    Path(purelib, "outer.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    return python


def _project(top: Path, backend: str, package: str, generated: bool = False) -> None:
    layout = "src" if package.startswith("src/") else "flat"
    files: dict[str, str] = {
        "pyproject.toml": BACKENDS[backend] + '[project]\nname = "calc"\nversion = "0.1"\n'
        + ('[tool.setuptools]\npackages = ["calc"]\n' if backend == "setuptools" and layout == "flat" else "")
        + ('[tool.hatch.build.targets.wheel]\npackages = ["src/calc"]\n' if backend == "hatchling" else "")
        + "[tool.pytest.ini_options]\n",
        f"{package}/__init__.py": "from .core import *\n" + ("from ._version import version\n" if generated else ""),
        f"{package}/core.py": BUGGY,
        "tests/test_calc.py": TEST,
        ".gitignore": ".selfheal/\n__pycache__/\n*.egg-info/\nbuild/\n" + ("_version.py\n" if generated else ""),
    }
    for name, text in files.items():
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_text(text)
    git_commit_all(top, "calc with a bug")
    if generated:
        # What hatch-vcs / setuptools-scm write into the package at install time: ignored by git.
        (top / package / "_version.py").write_text("version = '0.1.dev3+g1234567'\n")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = run_env()
    env.pop("PYTHONPATH", None)  # the editable install alone makes `calc` importable
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
                            stdin=subprocess.DEVNULL)
    assert "Traceback" not in result.stderr, result.stderr
    return result


# One case in the default tier, and the hatch-vcs-style one (an ignored `_version.py`
# generated at install time, imported by the package); the others in the slow tier (~6 s each).
@pytest.mark.parametrize("backend,layout,generated", [
    # By default one backend, with a generated (ignored) _version.py; the others in the slow tier.
    pytest.param("setuptools", "src", False, marks=pytest.mark.slow),
    ("hatchling", "src", True),
    pytest.param("hatchling", "src", False, marks=pytest.mark.slow),
    pytest.param("setuptools", "flat", False, marks=pytest.mark.slow),
    pytest.param("setuptools", "flat", True, marks=pytest.mark.slow),
])
def test_an_agent_fix_of_an_editable_install_is_judged_in_the_worktree(
    backend: str, layout: str, generated: bool, tmp_path: Path
) -> None:
    package = CASES[(backend, layout)]
    package_file = f"{package}/core.py"
    top = tmp_path / "proj"
    top.mkdir()
    _project(top, backend, package, generated)
    python = _environment(tmp_path / "env")
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-build-isolation",
                      "--no-deps", "--no-index", "-q", "-e", str(top)], tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # From anywhere, this environment imports the user's tree.
    where = _run([str(python), "-c", "import calc; print(calc.__file__)"], tmp_path)
    assert where.stdout.strip() == str((top / package / "__init__.py").resolve()), where.stdout + where.stderr

    captured = _run([str(python), "-m", "pytest", *PYTEST_SELFHEAL], top)
    assert captured.returncode == 1, captured.stdout + captured.stderr
    (incident_id,) = [p.name for p in (top / ".selfheal" / "error_inbox").iterdir()]
    # The plan names the module that defines `sub`, not the __init__.py that re-exports it;
    # that is the repair scope (no allowed_paths given), so the agent's fix is in scope.
    plan = json.loads((top / ".selfheal" / "error_plans" / incident_id / "plan.json").read_text())
    assert [a["target_paths"] for a in plan["actions"]] == [[package_file]]
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    command = json.dumps([str(python), str(agent), "{worktree}", package_file])
    looped = _run([str(python), "-m", "pytest_selfheal", "loop", incident_id, "--set", f"repair.command={command}"],
                  top)
    assert looped.returncode == 0, looped.stdout + looped.stderr
    run_result = json.loads((top / ".selfheal" / "error_runs" / incident_id / "run_result.json").read_text())
    assert run_result["stop_reason"] == "success" and run_result["final_status"] == "resolved"
    assert run_result["tests_fixed"] == ["tests/test_calc.py::test_sub"]
    assert run_result["repair"]["applied"] is False
    assert (top / package_file).read_text() == BUGGY  # proposed as a patch, not applied
    patch = (top / ".selfheal" / "error_runs" / incident_id / "final.patch").read_text()
    assert f"+++ b/{package_file}" in patch and "+    return a - b" in patch
    assert "_version.py" not in patch and (not generated or (top / package / "_version.py").is_file())
