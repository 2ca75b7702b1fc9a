"""One redactor per run: the project's ``redaction`` settings reach what the CLI prints."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
from helpers import cli

from pytest_selfheal.cli.common import print_json
from pytest_selfheal.config.settings import ConfigLayer, merge_layers

SECRET = "ACME-90210"
INI = "[pytest]\nselfheal_config =\n    redaction.patterns = ['ACME-[0-9]{5}']\n    history.base_branch = ACME-90210\n"


def _project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text(INI, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "OPENCODE_CONFIG_DIR"}
    env["HOME"] = str(tmp_path)
    return project, env


def test_config_json_redacts_a_project_pattern(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    run = cli("config", "--json", cwd=project, env=env)
    assert run.returncode == 0, run.stderr
    assert SECRET not in run.stdout
    assert json.loads(run.stdout)["ralf_lite"]["history"]["base_branch"] == "[REDACTED]"


def test_print_json_redacts_with_the_project_of_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    project, _env = _project(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("OPENCODE_CONFIG_DIR", raising=False)
    monkeypatch.chdir(project)
    print_json({"branch": SECRET})
    assert json.loads(capsys.readouterr().out) == {"branch": "[REDACTED]"}


def test_the_redactor_of_a_config_is_built_once() -> None:
    effective = merge_layers([ConfigLayer.of("test", {"redaction": {"patterns": ["ACME-[0-9]{5}"]}})])
    assert effective.redactor is effective.redactor
    assert effective.redactor.redact(f"x {SECRET} y") == "x [REDACTED] y"


def test_a_suspicious_project_pattern_compiles_without_a_python_warning() -> None:
    effective = merge_layers([ConfigLayer.of("test", {"redaction": {"patterns": ["[[a]"]}})])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert effective.redactor.redact("bcd") == "bcd"
