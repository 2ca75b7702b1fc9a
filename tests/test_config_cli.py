"""``selfheal config`` through the console script's ``main`` (in process): precedence, origins,
one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers import CliResult, cli

from pytest_selfheal.config.keys import SCHEMA


class Run:
    def __init__(self, proc: CliResult) -> None:
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project" / ".planning").mkdir(parents=True)
    return tmp_path / "project"


@pytest.fixture
def global_file(home: Path) -> Path:
    """The global config file, found through HOME (OPENCODE_CONFIG_DIR unset)."""
    return home / ".config" / "opencode" / "get-shit-done" / "config.json"


@pytest.fixture
def selfheal(project: Path, home: Path) -> Any:
    def run(*args: str) -> Run:
        env = {k: v for k, v in os.environ.items() if k != "OPENCODE_CONFIG_DIR"}
        env["HOME"] = str(home)
        return Run(cli("config", *args, cwd=project, env=env))

    return run


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def origin_lines(out: str) -> dict[str, list[str]]:
    """``key -> [value, origin]`` from the aligned ``--show-origin`` text."""
    rows = {}
    for line in out.splitlines():
        left, _, origin = line.rpartition("    (")
        key, _, value = left.partition(" = ")
        rows[key] = [value.strip(), origin[:-1]]
    return rows


def test_defaults_when_no_file_exists(selfheal: Any) -> None:
    run = selfheal()
    assert (run.code, run.err) == (0, "")
    data = json.loads(run.out)
    assert data["ralf_lite"]["max_iterations"] == 3
    assert data["ralf_lite"]["apply_to"] == {"auto_tasks": True, "autonomous_plans": True,
                                             "tdd_tasks": False}
    assert data["ralf_lite"]["max_runtime_minutes"] is None
    assert run.out == json.dumps(data, indent=2, sort_keys=True) + "\n"


def test_project_beats_global_show_origin(selfheal: Any, project: Path, global_file: Path) -> None:
    write_json(global_file, {"ralf_lite": {"max_iterations": 5, "apply_to": {"tdd_tasks": True}}})
    project_file = write_json(project / ".planning" / "config.json",
                              {"planning": {"x": 1}, "ralf_lite": {"max_iterations": 4,
                                                                   "apply_to": {"auto_tasks": False}}})
    run = selfheal("--show-origin")
    assert (run.code, run.err) == (0, "")
    rows = origin_lines(run.out)
    assert rows["ralf_lite.max_iterations"] == ["4", str(project_file)]
    assert rows["ralf_lite.apply_to.tdd_tasks"] == ["true", str(global_file)]
    assert rows["ralf_lite.apply_to.auto_tasks"] == ["false", str(project_file)]
    assert rows["ralf_lite.enabled"] == ["true", "default"]
    assert len(rows) == len(SCHEMA)
    # The origin column is aligned.
    assert len({line.index("    (") for line in run.out.splitlines()[:5]}) == 1


def test_ini_beats_project_and_set_beats_ini(selfheal: Any, project: Path) -> None:
    write_json(project / ".planning" / "config.json", {"ralf_lite": {"max_iterations": 4}})
    (project / "pytest.ini").write_text(
        "[pytest]\nselfheal_max_iterations = 6\nselfheal_config =\n    repair.approve = yes\n")
    ini_origin = f"pytest ini ({project / 'pytest.ini'})"
    rows = origin_lines(selfheal("--show-origin").out)
    assert rows["ralf_lite.max_iterations"] == ["6", ini_origin]
    assert rows["ralf_lite.repair.approve"] == ["true", ini_origin]
    run = selfheal("--show-origin", "--json", "--set", "max_iterations=7",
                   "--set", 'repair.command=["aider","--yes"]')
    assert run.code == 0
    data = json.loads(run.out)
    assert data["ralf_lite.max_iterations"] == {"value": 7, "origin": "--set"}
    assert data["ralf_lite.repair.command"] == {"value": ["aider", "--yes"], "origin": "--set"}
    assert data["ralf_lite.repair.approve"] == {"value": True, "origin": ini_origin}


def test_project_option(selfheal: Any, project: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    write_json(other / ".planning" / "config.json", {"ralf_lite": {"log_tail_lines": 7}})
    run = selfheal("--project", str(other))
    assert json.loads(run.out)["ralf_lite"]["log_tail_lines"] == 7
    run = selfheal("--project", str(tmp_path / "missing"))
    assert run.code == 2 and run.err.startswith("selfheal: error: --project: not a directory")


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("config.json", '{\n  "ralf_lite": {\n    "max_iterations": 3\n    "enabled": true}}',
         "invalid JSON at line 4 column 5: Expecting ',' delimiter"),
        ("config.json", '{"ralf_lite": {"max_iterations": "three"}}',
         'ralf_lite.max_iterations: expected an integer from 1 to 1000, got "three"'),
        ("config.json", '{"ralf_lite": {"max_iterations": true}}',
         "ralf_lite.max_iterations: expected an integer from 1 to 1000, got true"),
        ("config.json", '{"ralf_lite": {"retries": 3}}', "ralf_lite.retries: unknown key"),
        ("config.json", '{"ralf_lite": {"repair": {"approve": "yes"}}}',
         'ralf_lite.repair.approve: expected a boolean (true or false), got "yes"'),
        ("config.json", '{"ralf_lite": {"verification": ["pytest"]}}',
         "ralf_lite.verification: expected an object, got a list"),
        ("config.json", '{"ralf_lite": {"redaction": {"patterns": ["(unclosed"]}}}',
         'ralf_lite.redaction.patterns[0]: expected a valid regular expression, got "(unclosed"'),
        ("config.json", '{"ralf_lite": "on"}', 'ralf_lite: expected an object, got "on"'),
        pytest.param("config.json", "[" * 100_000 + "]" * 100_000, "invalid JSON: nested too deeply",
                     id="json-nested-100000-levels"),
        ("config.yaml", "ralf_lite:\n  max_iterations: [3\n", "invalid YAML at line 3 column 1"),
        ("config.yaml", "ralf_lite: !!python/object/apply:os.system ['echo pwned']\n",
         "invalid YAML at line 1 column 12: could not determine a constructor for the tag "
         "'tag:yaml.org,2002:python/object/apply:os.system'"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(
    selfheal: Any, project: Path, name: str, content: str, message: str
) -> None:
    path = project / ".planning" / name
    path.write_text(content)
    run = selfheal("--show-origin")
    assert run.code == 2
    assert run.out == ""
    assert "Traceback" not in run.err
    assert run.err.count("\n") == 1
    assert run.err.startswith(f"selfheal: error: {path}: {message}")
    assert "pwned" not in run.out


def test_foreign_top_level_keys_never_error(selfheal: Any, project: Path, global_file: Path) -> None:
    write_json(global_file, {"planning": "anything", "gates": [None, {"deep": {"x": 1}}]})
    write_json(project / ".planning" / "config.json",
               {"workflow": {"unknown": True}, "ralf_lite": {"enabled": False}})
    run = selfheal()
    assert (run.code, run.err) == (0, "")
    data = json.loads(run.out)
    assert list(data) == ["ralf_lite"]
    assert data["ralf_lite"]["enabled"] is False


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "max_iterations=three"],
         'selfheal: error: --set: ralf_lite.max_iterations: expected an integer from 1 to 1000, got "three"'),
        (["--set", "max_iterations"], "selfheal: error: --set: expected KEY=VALUE"),
        (["--set", "nope=1"], "selfheal: error: --set: ralf_lite.nope: unknown key"),
    ],
)
def test_bad_set_is_one_line_and_exit_2(selfheal: Any, args: list[str], message: str) -> None:
    run = selfheal(*args)
    assert run.code == 2 and run.out == "" and run.err.count("\n") == 1
    assert run.err.startswith(message)


def test_bad_ini_option_is_one_line_and_exit_2(selfheal: Any, project: Path) -> None:
    (project / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\nselfheal_no_progress_repeats = 'often'\n")
    run = selfheal()
    assert run.code == 2 and run.err.count("\n") == 1
    assert run.err == (f"selfheal: error: pytest ini ({project / 'pyproject.toml'}): "
                       'selfheal_no_progress_repeats: expected an integer from 1 to 1000, got "often"\n')
