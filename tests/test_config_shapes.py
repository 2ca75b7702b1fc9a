"""Hostile config values are refused, alike on every surface: a range or a shape for every key
(config/keys.py, checked in config/settings.py) — paths inside the project, no shell or
interpreter in the allowlist, nothing that moves pytest's rootdir or config in the arguments,
bounded counts, patterns of bounded cost. Through `selfheal config` (``main``), the plugin
(pytester) and `selfheal ci`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers import cli
from test_ci import actions_env, run_ci

from pytest_selfheal.config.keys import MAX_ITEMS, SCHEMA
from pytest_selfheal.errors import EXIT_USAGE
from pytest_selfheal.recorder.run_config import load_effective_config

SHELL_REFUSAL = "a shell, an interpreter or a launcher runs whatever its arguments say"
ROOT_REFUSAL = "it moves pytest's rootdir or config file"
FLAG_REFUSAL = "it sets a selfheal config key from a config value; set the key itself"


def _config(project: Path, section: dict[str, Any]) -> Path:
    path = project / ".planning" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ralf_lite": section}))
    return path


def _selfheal_config(project: Path, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if k != "OPENCODE_CONFIG_DIR"}
    env["HOME"] = str(project.parent / "home")
    return cli("config", *args, cwd=project, env=env)


REFUSED = [
    # paths leave the project: relative, absolute, climbing through a folder
    ({"reports_dir": "../shared"}, 'reports_dir: refusing "../shared": it leads out of the project'),
    ({"report_path": "reports/../../report.md"}, "report_path: refusing"),
    ({"history": {"quarantine_file": "/etc/passwd"}}, 'history.quarantine_file: refusing "/etc/passwd": it leads out'),
    ({"reports_dir": "/"}, 'reports_dir: refusing "/": it leads out of the project'),
    # programs that run whatever their arguments say, judged by what the entry names
    ({"verification": {"allowlist": ["pytest", "/bin/sh"]}}, f'allowlist[1]: refusing "/bin/sh": {SHELL_REFUSAL}'),
    ({"verification": {"allowlist": ["ksh93"]}}, f'allowlist[0]: refusing "ksh93": {SHELL_REFUSAL}'),
    ({"verification": {"allowlist": ["Python3.12.exe"]}}, f'refusing "Python3.12.exe": {SHELL_REFUSAL}'),
    ({"verification": {"allowlist": ["pypy3"]}}, f'refusing "pypy3": {SHELL_REFUSAL}'),
    ({"verification": {"allowlist": ["deno"]}}, f'refusing "deno": {SHELL_REFUSAL}'),
    ({"verification": {"allowlist": ["env"]}}, f'refusing "env": {SHELL_REFUSAL}'),
    ({"verification": {"allowlist": ["xargs"]}}, f'refusing "xargs": {SHELL_REFUSAL}'),
    ({"verification": {"allowlist": ["pwsh.exe"]}}, f'refusing "pwsh.exe": {SHELL_REFUSAL}'),
    ({"verification": {"allowlist": ["sh -c"]}}, f'refusing "sh -c": {SHELL_REFUSAL}'),
    # options that move the rootdir or the config, in every spelling, and @FILE
    ({"verification": {"args": ["--rootdir=/"]}}, f'args[0]: refusing "--rootdir=/": {ROOT_REFUSAL}'),
    ({"verification": {"args": ["-x", "--rootdir", "/"]}}, f'args[1]: refusing "--rootdir": {ROOT_REFUSAL}'),
    ({"verification": {"args": ["-cother.ini"]}}, f'refusing "-cother.ini": {ROOT_REFUSAL}'),
    ({"verification": {"args": ["-qc", "other.ini"]}}, f'refusing "-qc": {ROOT_REFUSAL}'),
    ({"verification": {"args": ["--config-file=x.toml"]}}, f'refusing "--config-file=x.toml": {ROOT_REFUSAL}'),
    ({"verification": {"args": ["--confcutdir=/"]}}, f'refusing "--confcutdir=/": {ROOT_REFUSAL}'),
    ({"gate": {"pytest_args": ["--inifile", "x.ini"]}}, f'gate.pytest_args[0]: refusing "--inifile": {ROOT_REFUSAL}'),
    ({"verification": {"args": ["@more-args.txt"]}}, "refusing \"@more-args.txt\": pytest would read more arguments"),
    ({"verification": {"args": ["-o", "confcutdir=/"]}}, f'args[1]: refusing "confcutdir=/": {ROOT_REFUSAL}'),
    ({"verification": {"args": ["--override-ini=addopts=-x --rootdir=/"]}}, "args[0]: refusing \"--override-ini="),
    # selfheal's own flags in a config value: the project's words passed on as an invoker's
    ({"gate": {"pytest_args": ["--selfheal-dir=/tmp/x"]}}, f'pytest_args[0]: refusing "--selfheal-dir=/tmp/x": {FLAG_REFUSAL}'),
    ({"verification": {"args": ["-o", "addopts=--selfheal-set=reports_dir=/"]}}, "args[1]: refusing"),
    # bounded counts
    ({"max_iterations": 10**12}, "max_iterations: expected an integer from 1 to 1000, got 1000000000000"),
    ({"new_tests": {"reruns": 101}}, "new_tests.reruns: expected an integer from 1 to 100, got 101"),
    ({"history": {"flaky_rate": 1.5}}, "history.flaky_rate: expected a number > 0 and <= 1, got 1.5"),
    ({"gate": {"timeout_seconds": 10**9}}, "gate.timeout_seconds: expected a number > 0 and <= 86400"),
    ({"redaction": {"env_names": ["X"] * (MAX_ITEMS + 1)}}, f"redaction.env_names: more than {MAX_ITEMS} items"),
    # patterns whose search backtracks catastrophically
    ({"redaction": {"patterns": ["(a+)+$"]}}, 'redaction.patterns[0]: expected a valid regular expression, got '
                                             '"(a+)+$": a repeated group holds a repeat'),
    ({"classification": {"rules": [{"name": "slow", "pattern": "(\\w+\\s?)*$", "failure_type": "TIMEOUT"}]}},
     "classification.rules[0].pattern: expected a valid regular expression"),
    ({"redaction": {"patterns": ["(x|xy){30}z"]}}, "a repeated group holds an alternation"),
    ({"redaction": {"patterns": ["a" * 1001]}}, "longer than 1000 characters"),
]


@pytest.mark.parametrize(("section", "message"), REFUSED, ids=[m.split(":")[0] for _, m in REFUSED])
def test_selfheal_config_refuses_a_hostile_value_in_one_line(tmp_path: Path, section: dict[str, Any],
                                                            message: str) -> None:
    project = tmp_path / "project"
    path = _config(project, section)
    run = _selfheal_config(project)
    assert run.returncode == EXIT_USAGE, run.stdout
    assert run.stdout == "" and run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith(f"selfheal: error: {path}: ralf_lite.")
    assert message in run.stderr


def test_the_shapes_leave_ordinary_values_alone(tmp_path: Path) -> None:
    project = tmp_path / "project"
    _config(project, {
        "reports_dir": "build/selfheal", "report_path": str(project / "out" / "report.md"),
        "verification": {"allowlist": ["pytest", "tox", "nox", "py.test"],
                         "args": ["-p", "no:randomly", "-x", "-k", "not slow", "-o", "cache_dir=.cache", "--co"]},
        "gate": {"pytest_args": ["tests/unit", "-q"]}, "max_iterations": 1000,
        "redaction": {"patterns": ["(?i)token=\\w+", "AKIA[0-9A-Z]{16}", "password=(?:[^ ]{4})+"]},
    })
    run = _selfheal_config(project)
    assert (run.returncode, run.stderr) == (0, ""), run.stderr
    assert json.loads(run.stdout)["ralf_lite"]["verification"]["allowlist"] == ["pytest", "tox", "nox", "py.test"]


def test_every_count_and_duration_has_an_upper_bound() -> None:
    unbounded = [s.key for s in SCHEMA if s.kind in ("int", "number") and s.most is None]
    assert unbounded == []


def test_a_set_flag_is_held_to_the_same_shapes(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    run = _selfheal_config(project, "--set", "verification.allowlist=[pytest, bash]")
    assert run.returncode == EXIT_USAGE
    assert run.stderr == (f'selfheal: error: --set: ralf_lite.verification.allowlist[1]: refusing "bash": '
                          f"{SHELL_REFUSAL}; allowlist the test runner itself (a module run as `python -m NAME` "
                          "is allowlisted as NAME)\n")


def test_the_plugin_refuses_before_any_test_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a="def test_a():\n    open('ran', 'w').close()\n")
    _config(pytester.path, {"verification": {"args": ["--rootdir=/"]}})
    result = pytester.runpytest("--selfheal")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*selfheal: *ralf_lite.verification.args[[]0]: refusing \"--rootdir=/\": {ROOT_REFUSAL}*"])
    assert not (pytester.path / "ran").exists()
    (pytester.path / ".planning" / "config.json").unlink()
    elsewhere = pytester.path.parent / "elsewhere"
    pytester.makeini(f"[pytest]\nselfheal_dir = {elsewhere}\n")  # text committed with the project
    outside = pytester.runpytest("--selfheal")
    assert outside.ret == pytest.ExitCode.USAGE_ERROR
    outside.stderr.fnmatch_lines(["*pytest ini (*): ralf_lite.reports_dir: refusing *: it leads out of the project*"])
    assert not (pytester.path / "ran").exists() and not elsewhere.exists()


@pytest.mark.parametrize("flag", ["--selfheal-dir={}", "--selfheal-set=reports_dir={}", "--selfheal-report={}/r.md"])
def test_a_path_flag_in_the_ini_addopts_is_the_projects_and_stays_inside_it(pytester: pytest.Pytester, flag: str) -> None:
    pytester.makepyfile(test_a="def test_a():\n    open('ran', 'w').close()\n")
    elsewhere = pytester.path.parent / "elsewhere"
    pytester.makeini(f"[pytest]\naddopts = {flag.format(elsewhere)}\n")  # text committed with the project
    refused = pytester.runpytest("--selfheal")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines([f"*selfheal: {flag.split('=')[0]} in the addopts of the pytest ini (*): "
                                  "ralf_lite.*: refusing *: it leads out of the project*"])
    assert not (pytester.path / "ran").exists() and not elsewhere.exists()
    assert pytester.runpytest("--selfheal", flag.format(elsewhere)).ret == 0  # the invoker's own choice


def test_selfheal_ci_refuses_before_any_test_runs(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_a.py").write_text("def test_a():\n    open('ran', 'w').close()\n")
    env = actions_env(tmp_path, None)
    done = run_ci(project, env, "--set", 'verification.args=["--config-file=/etc/pytest.ini"]')
    assert done.returncode == EXIT_USAGE, done.stdout
    assert done.stderr.startswith('selfheal: error: --set: ralf_lite.verification.args[0]: refusing '
                                  f'"--config-file=/etc/pytest.ini": {ROOT_REFUSAL}')
    assert not (project / "ran").exists()
    _config(project, {"report_path": str(tmp_path / "report.md")})  # a committed config: outside is refused
    elsewhere = run_ci(project, env)
    assert elsewhere.returncode == EXIT_USAGE and "report_path: refusing" in elsewhere.stderr, elsewhere.stdout
    assert not (project / "ran").exists() and not (tmp_path / "report.md").exists()


def test_a_flags_absolute_path_is_its_invokers_choice(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    run = _selfheal_config(project, "--set", f"reports_dir={tmp_path / 'shared'}")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["ralf_lite"]["reports_dir"] == str(tmp_path / "shared")
    climbing = _selfheal_config(project, "--set", "reports_dir=../shared")
    assert climbing.returncode == EXIT_USAGE and 'refusing "../shared": it leads out of the project' in climbing.stderr


def test_each_flag_is_labelled_with_who_gave_it(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = --selfheal-set=log_tail_lines=7 --selfheal-max-iterations=4\n")
    config = pytester.parseconfigure("--selfheal-approve", "--selfheal-set", "max_iterations=2", "test_a.py")
    origins = load_effective_config(config).origins
    assert origins["repair.approve"] == "--selfheal-approve"  # a switch given on the command line
    assert origins["max_iterations"] == "--selfheal-set"  # the invoker's, given after the ini's flag
    assert origins["log_tail_lines"].startswith("--selfheal-set in the addopts of the pytest ini (")
