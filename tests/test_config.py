"""The effective configuration: schema, validation, merge, files, ini options."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_selfheal.config import files as config_files
from pytest_selfheal.config.files import find_pytest_ini, global_config_path, load_config
from pytest_selfheal.config.keys import SCHEMA, SPECS, Settings, ini_table, reference_table
from pytest_selfheal.config.settings import (
    ConfigLayer,
    Override,
    ini_layers,
    merge_layers,
    override_layers,
    parse_override,
)
from pytest_selfheal.errors import EXIT_USAGE, ConfigError
from pytest_selfheal.names import INI_KEYS, INI_OVERRIDES

DOCS = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

# The documented key list, written out by hand on purpose: the schema must equal it.
SPEC_DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "max_iterations": 3,
    "error_fingerprint_repeats": 2,
    "no_progress_repeats": 2,
    "apply_to": {"auto_tasks": True, "autonomous_plans": True, "tdd_tasks": False},
    "max_runtime_minutes": None,
    "auto_replan_on_no_progress": False,
    "reports_dir": ".selfheal",
    "report_path": None,
    "log_tail_lines": 200,
    "verification": {"allowlist": ["pytest"], "timeout_seconds": 900, "args": [], "localise": True,
                     "regression": "affected", "regression_budget_seconds": 600},
    "repair": {"command": None, "timeout_seconds": 600, "allowed_paths": [], "approve": False,
               "allow_test_edits": False, "allow_binary": False},
    "redaction": {"patterns": [], "env_names": ["*TOKEN*", "*SECRET*", "*PASSWORD*", "*KEY*"]},
    "classification": {"rules": []},
    "history": {"enabled": True, "base_branch": "main", "flaky_rate": 0.1, "window_days": 30,
                "quarantine_file": ".selfheal-quarantine.yml"},
    "new_tests": {"enabled": True, "reruns": 5, "max_seconds": 120, "max_share": 0.2, "seed": None},
    "mcp": {"max_chars": 8000},
    "gate": {"pytest_args": [], "timeout_seconds": 300, "max_chars": 4000},
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".planning").mkdir(parents=True)
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose global config dir is an empty directory of this test."""
    (tmp_path / "global").mkdir()
    return {"HOME": str(tmp_path / "home"), "OPENCODE_CONFIG_DIR": str(tmp_path / "global")}


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def global_file(env: Mapping[str, str]) -> Path:
    return global_config_path(env)


def load(project: Path, env: Mapping[str, str], **kwargs: Any) -> Any:
    kwargs.setdefault("ini", {})
    return load_config(project, env=env, **kwargs)


def config_error(project: Path, env: Mapping[str, str], **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        load(project, env, **kwargs)
    message = str(info.value)
    assert "\n" not in message and info.value.exit_code == EXIT_USAGE
    return message


# --- defaults and schema -------------------------------------------------------------


def test_defaults_equal_the_spec(project: Path, env: dict[str, str]) -> None:
    effective = load(project, env)
    assert effective.values == SPEC_DEFAULTS
    assert effective.to_json() == {"ralf_lite": SPEC_DEFAULTS}
    assert set(effective.origins.values()) == {"default"}
    assert sorted(effective.origins) == sorted(spec.key for spec in SCHEMA)


def test_defaults_are_not_shared_with_results() -> None:
    effective = merge_layers([])
    effective.values["verification"]["allowlist"].append("make")
    effective.get("redaction.env_names").clear()
    assert SPECS["verification.allowlist"].default == ["pytest"]
    assert merge_layers([]).get("redaction.env_names") == SPEC_DEFAULTS["redaction"]["env_names"]


def test_get_accepts_dotted_prefixed_and_object_keys() -> None:
    effective = merge_layers([])
    assert effective.get("apply_to.tdd_tasks") is False
    assert effective.get("ralf_lite.max_iterations") == 3
    assert effective.get("repair")["timeout_seconds"] == 600
    with pytest.raises(KeyError):
        effective.get("apply_to.nope")


def test_every_schema_key_is_in_the_docs_table() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    hint = ("docs/configuration.md is out of date; regenerate the tables with "
            "python -c 'from pytest_selfheal.config.keys import reference_table, ini_table; "
            "print(reference_table()); print(ini_table())'")
    assert reference_table() in docs, hint
    assert ini_table() in docs, hint
    for spec in SCHEMA:
        assert f"| `{spec.key}` | {spec.type_name} | `{json.dumps(spec.default)}` |" in docs
    for name in INI_KEYS:
        assert f"`{name}`" in docs


# --- layers ------------------------------------------------------------------------


def test_project_beats_global_with_origin(project: Path, env: dict[str, str]) -> None:
    write_json(global_file(env), {"ralf_lite": {"max_iterations": 5, "enabled": False}})
    project_file = write_json(project / ".planning" / "config.json",
                              {"ralf_lite": {"max_iterations": 4}})
    effective = load(project, env)
    assert effective.get("max_iterations") == 4
    assert effective.origins["max_iterations"] == str(project_file)
    assert effective.get("enabled") is False
    assert effective.origins["enabled"] == str(global_file(env))


def test_deep_merge_keeps_sibling_keys(project: Path, env: dict[str, str]) -> None:
    write_json(global_file(env), {"ralf_lite": {"apply_to": {"tdd_tasks": True}}})
    write_json(project / ".planning" / "config.json",
               {"ralf_lite": {"apply_to": {"auto_tasks": False}}})
    effective = load(project, env)
    assert effective.get("apply_to") == {"auto_tasks": False, "autonomous_plans": True,
                                         "tdd_tasks": True}
    assert effective.origins["apply_to.tdd_tasks"] == str(global_file(env))
    assert effective.origins["apply_to.auto_tasks"].endswith("config.json")
    assert effective.origins["apply_to.autonomous_plans"] == "default"


def test_lists_are_replaced_not_appended(project: Path, env: dict[str, str]) -> None:
    write_json(global_file(env), {"ralf_lite": {"verification": {"allowlist": ["pytest", "tox"]}}})
    write_json(project / ".planning" / "config.json",
               {"ralf_lite": {"verification": {"allowlist": ["nox"]}}})
    assert load(project, env).get("verification.allowlist") == ["nox"]


def test_ini_beats_project_and_overrides_beat_ini(project: Path, env: dict[str, str]) -> None:
    write_json(project / ".planning" / "config.json", {"ralf_lite": {"max_iterations": 4}})
    effective = load(project, env, ini={"selfheal_max_iterations": "6"}, ini_origin="pytest ini (x)")
    assert (effective.get("max_iterations"), effective.origins["max_iterations"]) == (6, "pytest ini (x)")
    effective = load(project, env, ini={"selfheal_max_iterations": "6"},
                     overrides=[parse_override("max_iterations=7", "--set")])
    assert (effective.get("max_iterations"), effective.origins["max_iterations"]) == (7, "--set")


def test_overrides_apply_in_order_and_accept_typed_values(project: Path, env: dict[str, str]) -> None:
    effective = load(project, env, overrides=[
        Override("repair.approve", True, "--selfheal-approve"),
        parse_override("max_iterations=2", "--set"),
        Override("max_iterations", "9", "--selfheal-max-iterations"),
        parse_override("apply_to={tdd_tasks: true}", "--set"),
    ])
    assert effective.get("repair.approve") is True
    assert effective.origins["repair.approve"] == "--selfheal-approve"
    assert effective.get("max_iterations") == 9
    assert effective.origins["max_iterations"] == "--selfheal-max-iterations"
    assert effective.get("apply_to.tdd_tasks") is True
    assert effective.origins["apply_to.auto_tasks"] == "default"  # objects merge key by key


def test_foreign_top_level_keys_are_ignored(project: Path, env: dict[str, str]) -> None:
    write_json(global_file(env), {"planning": [1, {"x": None}], "gates": "anything", "workflow": 3})
    deep: Any = "leaf"
    for _ in range(300):
        deep = {"d": deep}
    write_json(project / ".planning" / "config.json",
               {"planning": {"phase": 3}, "workflow": deep, "ralf_lite": {"log_tail_lines": 50}})
    effective = load(project, env)
    assert effective.get("log_tail_lines") == 50
    assert "planning" not in effective.to_json() and "workflow" not in effective.values


def test_missing_or_null_ralf_lite_is_no_layer(project: Path, env: dict[str, str]) -> None:
    write_json(global_file(env), {"planning": {}})
    (project / ".planning" / "config.yaml").write_text("ralf_lite:\n  # max_iterations: 9\n")
    assert load(project, env).values == SPEC_DEFAULTS
    (project / ".planning" / "config.yaml").write_text("")
    assert load(project, env).values == SPEC_DEFAULTS


def test_yaml_project_file_and_json_wins(project: Path, env: dict[str, str]) -> None:
    planning = project / ".planning"
    (planning / "config.yml").write_text("ralf_lite:\n  log_tail_lines: 10\n  max_iterations: 8\n")
    (planning / "config.yaml").write_text(
        "workflow: {a: 1}\nralf_lite:\n  max_iterations: 7\n  no_progress_repeats: 5\n")
    effective = load(project, env)
    assert effective.get("max_iterations") == 7
    assert effective.origins["log_tail_lines"] == str(planning / "config.yml")
    write_json(planning / "config.json", {"ralf_lite": {"max_iterations": 6}})
    effective = load(project, env)
    assert effective.get("max_iterations") == 6
    assert effective.origins["max_iterations"] == str(planning / "config.json")
    assert effective.get("no_progress_repeats") == 5  # from YAML, not touched by JSON


# --- validation (strict, values from files) --------------------------------------------


@pytest.mark.parametrize(
    "section, expected",
    [
        ({"max_iterations": "three"},
         'ralf_lite.max_iterations: expected an integer from 1 to 1000, got "three"'),
        ({"max_iterations": "4"}, 'ralf_lite.max_iterations: expected an integer from 1 to 1000, got "4"'),
        ({"max_iterations": True}, "ralf_lite.max_iterations: expected an integer from 1 to 1000, got true"),
        ({"max_iterations": 0}, "ralf_lite.max_iterations: expected an integer from 1 to 1000, got 0"),
        ({"max_iterations": 2.5}, "ralf_lite.max_iterations: expected an integer from 1 to 1000, got 2.5"),
        ({"max_iterations": None}, "ralf_lite.max_iterations: expected an integer from 1 to 1000, got null"),
        ({"enabled": 1}, "ralf_lite.enabled: expected a boolean (true or false), got 1"),
        ({"enabled": "yes"}, 'ralf_lite.enabled: expected a boolean (true or false), got "yes"'),
        ({"max_iteration": 3}, 'ralf_lite.max_iteration: unknown key; did you mean "max_iterations"?'),
        ({"apply_to": {"tdd_task": True}}, 'ralf_lite.apply_to.tdd_task: unknown key; did you mean "tdd_tasks"?'),
        ({"apply_to": True}, "ralf_lite.apply_to: expected an object, got true"),
        ({"apply_to.tdd_tasks": True}, "ralf_lite.apply_to.tdd_tasks: unknown key"),
        ({"apply_to": {"tdd_tasks": "no"}},
         'ralf_lite.apply_to.tdd_tasks: expected a boolean (true or false), got "no"'),
        ({"max_runtime_minutes": 0}, "ralf_lite.max_runtime_minutes: expected a number > 0 and <= 10080 or null, got 0"),
        ({"max_runtime_minutes": float("inf")},
         "ralf_lite.max_runtime_minutes: expected a number > 0 and <= 10080 or null, got inf"),
        ({"verification": {"timeout_seconds": -1}},
         "ralf_lite.verification.timeout_seconds: expected a number > 0 and <= 86400, got -1"),
        ({"verification": {"allowlist": "pytest"}},
         'ralf_lite.verification.allowlist: expected a list of strings, got "pytest"'),
        ({"verification": {"allowlist": ["pytest", 3]}},
         "ralf_lite.verification.allowlist: expected a list of strings, got a list"),
        ({"reports_dir": ""}, 'ralf_lite.reports_dir: expected a non-empty string, got ""'),
        ({"report_path": 3}, "ralf_lite.report_path: expected a non-empty string or null, got 3"),
        ({"repair": {"command": "aider --yes"}},
         'ralf_lite.repair.command: expected a non-empty list of strings or null, got "aider --yes"'),
        ({"repair": {"command": []}},
         "ralf_lite.repair.command: expected a non-empty list of strings or null, got a list"),
        ({"redaction": {"patterns": ["ok", "("]}},
         'ralf_lite.redaction.patterns[1]: expected a valid regular expression, got "(": '
         "missing ), unterminated subpattern at position 0"),
        ({"classification": {"rules": {}}},
         "ralf_lite.classification.rules: expected a list of rule objects"),
        ({"classification": {"rules": ["x"]}},
         'ralf_lite.classification.rules[0]: expected a rule object {name, pattern, failure_type}, got "x"'),
        ({"classification": {"rules": [{"name": "a", "pattern": "x"}]}},
         "ralf_lite.classification.rules[0]: missing required key 'failure_type'"),
        ({"classification": {"rules": [{"name": "a", "pattern": "[", "failure_type": "LINT"}]}},
         'ralf_lite.classification.rules[0].pattern: expected a valid regular expression, got "["'),
        ({"classification": {"rules": [{"name": "a", "pattern": "x", "failure_type": "LNT"}]}},
         'ralf_lite.classification.rules[0].failure_type: expected one of TEST_ASSERTION, DOCTEST_MISMATCH, TYPECHECK, '
         'LINT, BUILD_COMPILE, TOOLING_ENV, TIMEOUT, UNKNOWN, got "LNT"'),
        ({"classification": {"rules": [{"name": "a", "pattern": "x", "failure_type": "LINT",
                                        "transient": "yes"}]}},
         "ralf_lite.classification.rules[0].transient: expected a boolean"),
        ({"classification": {"rules": [{"name": "a", "pattern": "x", "failure_type": "LINT",
                                        "failure_class": "flaky"}]}},
         'ralf_lite.classification.rules[0].failure_class: expected one of deterministic, transient, '
         'environment, got "flaky"'),
        ({"classification": {"rules": [{"name": "a", "pattern": "x", "failure_type": "LINT",
                                        "severity": 1}]}},
         "ralf_lite.classification.rules[0].severity: unknown key; known keys: name, pattern"),
    ],
)
def test_bad_values_name_file_key_and_type(
    project: Path, env: dict[str, str], section: dict[str, Any], expected: str
) -> None:
    path = write_json(project / ".planning" / "config.json", {"ralf_lite": section})
    assert config_error(project, env).startswith(f"{path}: {expected}")


def test_valid_rules_and_numbers_pass() -> None:
    rule = {"name": "db", "pattern": r"refused \d+", "failure_type": "TOOLING_ENV", "transient": True,
            "failure_class": "environment"}
    effective = merge_layers([ConfigLayer.of("f", {
        "classification": {"rules": [rule]},
        "max_runtime_minutes": 1.5,
        "repair": {"timeout_seconds": 30, "command": ["aider", "{prompt_file}"]},
    })])
    assert effective.get("classification.rules") == [rule]
    assert effective.get("max_runtime_minutes") == 1.5
    assert effective.get("repair.command") == ["aider", "{prompt_file}"]


def test_ralf_lite_must_be_an_object(project: Path, env: dict[str, str]) -> None:
    path = write_json(global_file(env), {"ralf_lite": ["max_iterations", 3]})
    assert config_error(project, env) == f"{path}: ralf_lite: expected an object, got a list"


def test_a_bad_file_is_reported_before_a_bad_ini_option(project: Path, env: dict[str, str]) -> None:
    path = write_json(project / ".planning" / "config.json", {"ralf_lite": {"enabled": "x"}})
    message = config_error(project, env, ini={"selfheal_max_iterations": "three"})
    assert message.startswith(f"{path}: ralf_lite.enabled")


# --- file errors -------------------------------------------------------------------


def test_invalid_json_names_line_and_column(project: Path, env: dict[str, str]) -> None:
    path = project / ".planning" / "config.json"
    path.write_text('{\n  "a": 1,\n  "b": 2\n    "c": 3\n}\n')
    assert config_error(project, env) == (
        f"{path}: invalid JSON at line 4 column 5: Expecting ',' delimiter")


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("config.json", "[1, 2]", "expected a JSON object at the top level, got a list"),
        ("config.json", "", "invalid JSON at line 1 column 1: Expecting value"),
        pytest.param("config.json", "[" * 100_000 + "]" * 100_000, "invalid JSON: nested too deeply",
                     id="json-nested-100000-levels"),
        pytest.param("config.json", '{"a": ' + "9" * 5000 + "}", "invalid JSON: ", id="json-huge-int"),
        ("config.yaml", "ralf_lite:\n  max_iterations: !!python/object:os.system ls\n",
         "invalid YAML at line 2 column 19: could not determine a constructor for the tag "
         "'tag:yaml.org,2002:python/object:os.system'"),
        ("config.yaml", "ralf_lite: [\n", "invalid YAML at line 2 column 1: "),
        ("config.yaml", "- a\n- b\n", "expected a YAML mapping at the top level, got a list"),
        pytest.param("config.yaml", "[" * 600, "invalid YAML: nested too deeply", id="yaml-nested"),
    ],
)
def test_malformed_files(project: Path, env: dict[str, str], name: str, content: str, expected: str) -> None:
    path = project / ".planning" / name
    path.write_text(content)
    assert config_error(project, env).startswith(f"{path}: {expected}")


def test_unreadable_files(project: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = project / ".planning" / "config.json"
    path.write_bytes(b'{"ralf_lite": {"reports_dir": "\xff"}}')
    assert config_error(project, env) == f"{path}: not UTF-8 text (bad byte at offset 31)"
    path.write_text("{}" + " " * 100)
    monkeypatch.setattr(config_files, "MAX_CONFIG_BYTES", 50)
    assert config_error(project, env) == f"{path}: file too large (over 50 bytes)"
    path.unlink()
    path.mkdir()
    assert config_error(project, env) == f"{path}: cannot read: not a regular file"


def test_utf8_bom_is_accepted(project: Path, env: dict[str, str]) -> None:
    (project / ".planning" / "config.json").write_bytes(b'\xef\xbb\xbf{"ralf_lite": {"max_iterations": 4}}')
    assert load(project, env).get("max_iterations") == 4


# --- global path --------------------------------------------------------------------


def test_global_config_path_follows_the_env() -> None:
    assert global_config_path({"OPENCODE_CONFIG_DIR": "/etc/oc", "HOME": "/h"}) == Path(
        "/etc/oc/get-shit-done/config.json")
    default = Path("/h/.config/opencode/get-shit-done/config.json")
    assert global_config_path({"HOME": "/h"}) == default
    assert global_config_path({"OPENCODE_CONFIG_DIR": "", "HOME": "/h"}) == default
    assert global_config_path({"OPENCODE_CONFIG_DIR": "~/oc", "HOME": "/h"}) == Path(
        "/h/oc/get-shit-done/config.json")


def test_global_config_from_home(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "home"
    write_json(home / ".config" / "opencode" / "get-shit-done" / "config.json",
               {"ralf_lite": {"log_tail_lines": 9}})
    assert load(project, {"HOME": str(home)}).get("log_tail_lines") == 9


# --- text coercion (ini options and overrides) -------------------------------------------


@pytest.mark.parametrize(
    "text, key, value",
    [
        ("max_iterations=5", "max_iterations", 5),
        ("ralf_lite.max_iterations= 5 ", "max_iterations", 5),
        ("enabled=no", "enabled", False),
        ("enabled=TRUE", "enabled", True),
        ("repair.approve=1", "repair.approve", True),
        ("max_runtime_minutes=7.5", "max_runtime_minutes", 7.5),
        ("max_runtime_minutes=null", "max_runtime_minutes", None),
        ("verification.timeout_seconds=60", "verification.timeout_seconds", 60),
        ("reports_dir=123", "reports_dir", "123"),
        ("report_path=", "report_path", None),
        ("report_path=out/report.md", "report_path", "out/report.md"),
        ('repair.command=["aider","--yes"]', "repair.command", ["aider", "--yes"]),
        ("repair.command=aider --yes '--message=a b'", "repair.command", ["aider", "--yes", "--message=a b"]),
        ("repair.command=null", "repair.command", None),
        ("verification.allowlist=[pytest, tox]", "verification.allowlist", ["pytest", "tox"]),
        ("verification.allowlist=pytest", "verification.allowlist", ["pytest"]),
        ("redaction.env_names=[]", "redaction.env_names", []),
        ("redaction.patterns=['sk-[a-z]+']", "redaction.patterns", ["sk-[a-z]+"]),
        ("classification.rules=[{name: db, pattern: refused, failure_type: TOOLING_ENV}]",
         "classification.rules", [{"name": "db", "pattern": "refused", "failure_type": "TOOLING_ENV"}]),
    ],
)
def test_text_values_are_coerced(text: str, key: str, value: Any) -> None:
    effective = merge_layers(override_layers([parse_override(text, "--set")]))
    assert effective.get(key) == value
    assert effective.origins[key] == "--set"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("max_iterations=three", 'ralf_lite.max_iterations: expected an integer from 1 to 1000, got "three"'),
        ("max_iterations=0", "ralf_lite.max_iterations: expected an integer from 1 to 1000, got 0"),
        ("max_iterations=1.5", 'ralf_lite.max_iterations: expected an integer from 1 to 1000, got "1.5"'),
        ("enabled=maybe", 'ralf_lite.enabled: expected a boolean (true or false), got "maybe"'),
        ("max_runtime_minutes=soon", "ralf_lite.max_runtime_minutes: expected a number > 0 and <= 10080 or null"),
        ("max_runtime_minutes=nan", "ralf_lite.max_runtime_minutes: expected a number > 0 and <= 10080 or null, got nan"),
        ("repair.command=aider 'open", "ralf_lite.repair.command: expected a non-empty list of strings"),
        ("repair.command=[aider", "ralf_lite.repair.command: expected a non-empty list of strings"),
        ("verification.allowlist=[1, 2]", "ralf_lite.verification.allowlist: expected a list of strings"),
        ("apply_to=[1]", "ralf_lite.apply_to: expected an object, got a list"),
        ("apply_to={x: 1}", 'ralf_lite.apply_to.x: unknown key'),
    ],
)
def test_text_values_that_do_not_coerce(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        override_layers([parse_override(text, "--set")])
    assert str(info.value).startswith(f"--set: {expected}")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("max_iterations", "--set: expected KEY=VALUE"),
        ("=5", "--set: expected KEY=VALUE"),
        ("max iterations=5", "--set: expected KEY=VALUE"),
        ("max_iteration=5", '--set: ralf_lite.max_iteration: unknown key; did you mean "max_iterations"?'),
        ("planning.phase=1", "--set: ralf_lite.planning.phase: unknown key"),
    ],
)
def test_parse_override_rejects_bad_forms(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_override(text, "--set")
    assert str(info.value).startswith(expected)


def test_parse_override_keeps_text() -> None:
    assert parse_override("ralf_lite.repair.command = a=b c", "--x") == Override(
        "repair.command", "a=b c", "--x")


def test_ini_layers() -> None:
    ini = {
        "selfheal": "true",  # the plugin's own switches are not config keys
        "selfheal_loop": "1",
        "selfheal_report": "",  # empty means unset
        "selfheal_dir": "reports",
        "selfheal_approve": "yes",
        "selfheal_repair_command": 'aider --message-file "{prompt_file}"',
        INI_OVERRIDES: "\n  max_iterations = 4\n\nreports_dir=other\n",
    }
    effective = merge_layers(ini_layers(ini, "pytest ini (/p/pytest.ini)"))
    assert effective.get("reports_dir") == "other"  # selfheal_config lines come last
    assert effective.get("max_iterations") == 4
    assert effective.get("repair.approve") is True
    assert effective.get("repair.command") == ["aider", "--message-file", "{prompt_file}"]
    assert effective.get("report_path") is None
    assert effective.origins["repair.approve"] == "pytest ini (/p/pytest.ini)"
    assert merge_layers(ini_layers({INI_OVERRIDES: ["enabled=false"]}, "i")).get("enabled") is False


def test_ini_errors_name_the_ini_option() -> None:
    with pytest.raises(ConfigError) as info:
        ini_layers({"selfheal_max_iterations": "three"}, "pytest ini (/p/pytest.ini)")
    assert str(info.value) == ('pytest ini (/p/pytest.ini): selfheal_max_iterations: '
                               'expected an integer from 1 to 1000, got "three"')
    with pytest.raises(ConfigError, match=r"^pytest ini \(/p/pytest.ini\): expected KEY=VALUE"):
        ini_layers({INI_OVERRIDES: "max_iterations"}, "pytest ini (/p/pytest.ini)")


def test_every_ini_name_maps_to_a_schema_key() -> None:
    keys = {spec.key for spec in SCHEMA}
    for name, dotted in INI_KEYS.items():
        assert name.startswith("selfheal_")
        assert dotted in keys or (name == INI_OVERRIDES and dotted == "")


# --- pytest ini files ------------------------------------------------------------------


def ini_options(project_root: Path) -> dict[str, str]:
    """The ``selfheal*`` options of the pytest config file ``load_config`` would read."""
    found = find_pytest_ini(project_root)
    return found[1] if found else {}


@pytest.mark.parametrize(
    "name, content",
    [
        ("pytest.ini", "[pytest]\nselfheal_max_iterations = 4\naddopts = -q\n"),
        (".pytest.ini", "[pytest]\nselfheal_max_iterations = 4\n"),
        ("pytest.toml", "[pytest]\nselfheal_max_iterations = 4\n"),
        ("pyproject.toml", "[tool.pytest.ini_options]\nselfheal_max_iterations = 4\naddopts = '-q'\n"),
        ("pyproject.toml", "[tool.pytest]\nselfheal_max_iterations = '4'\n"),
        ("tox.ini", "[tox]\nenvlist = py\n[pytest]\nselfheal_max_iterations = 4\n"),
        ("setup.cfg", "[metadata]\nname = x\n[tool:pytest]\nselfheal_max_iterations = 4\n"),
    ],
)
def test_find_pytest_ini_kinds(tmp_path: Path, name: str, content: str) -> None:
    (tmp_path / name).write_text(content)
    assert ini_options(tmp_path) == {"selfheal_max_iterations": "4"}


def test_find_pytest_ini_order_and_sections(tmp_path: Path) -> None:
    assert ini_options(tmp_path) == {}
    (tmp_path / "setup.cfg").write_text("[tool:pytest]\nselfheal_max_iterations = 1\n")
    (tmp_path / "tox.ini").write_text("[tox]\n")  # no [pytest] section: skipped, like pytest
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")  # no pytest table: skipped
    assert ini_options(tmp_path) == {"selfheal_max_iterations": "1"}
    (tmp_path / "pytest.ini").write_text("[other]\nselfheal_max_iterations = 2\n")
    assert ini_options(tmp_path) == {}  # pytest.ini wins even without a [pytest] section


def test_toml_lists_keep_items_apart(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\n"
        "selfheal_repair_command = ['my tool', '--yes']\n"
        "selfheal_approve = true\n"
        "selfheal_config = ['max_iterations=4', 'repair.timeout_seconds=30']\n")
    effective = load_config(tmp_path, env=env)
    assert effective.get("repair.command") == ["my tool", "--yes"]
    assert effective.get("repair.approve") is True
    assert effective.get("max_iterations") == 4
    assert effective.origins["max_iterations"] == f"pytest ini ({tmp_path / 'pyproject.toml'})"


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("pyproject.toml", "[tool.pytest.ini_options\n", "invalid TOML: "),
        ("pytest.ini", "[pytest\n", "invalid ini file at line 1: "),
    ],
)
def test_bad_pytest_config_files(tmp_path: Path, name: str, content: str, expected: str) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(ConfigError) as info:
        ini_options(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / name}: {expected}")


def test_load_config_reads_the_ini_itself_only_when_not_given(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nselfheal_no_progress_repeats = 5\n")
    assert load_config(tmp_path, env=env).get("no_progress_repeats") == 5
    assert load_config(tmp_path, env=env, ini={}).get("no_progress_repeats") == 2


def test_os_environ_is_the_default_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENCODE_CONFIG_DIR", str(tmp_path / "g"))
    write_json(tmp_path / "g" / "get-shit-done" / "config.json", {"ralf_lite": {"log_tail_lines": 3}})
    assert global_config_path() == tmp_path / "g" / "get-shit-done" / "config.json"
    assert load_config(tmp_path / "nowhere").get("log_tail_lines") == 3
    assert os.environ["OPENCODE_CONFIG_DIR"] == str(tmp_path / "g")


# --------------------------------------------------------------------------- typed settings


def test_settings_defaults_are_the_built_in_defaults() -> None:
    # The record's own defaults and the key table cannot drift apart.
    assert merge_layers([]).settings == Settings()


def test_settings_are_built_once_from_the_merged_values() -> None:
    effective = merge_layers([
        ConfigLayer.of("project.yaml", {"max_iterations": 5, "verification": {"allowlist": ["pytest", "tox"]},
                          "repair": {"command": ["agent", "{prompt_file}"], "allowed_paths": ["src/*"]},
                          "redaction": {"env_names": ["*CRED*"]},
                          "classification": {"rules": [{"name": "db", "pattern": "db down", "failure_type": "TOOLING_ENV"}]}}),
        ConfigLayer.of("--set", {"apply_to": {"tdd_tasks": True}, "report_path": "r.md"}),
    ])
    settings = effective.settings
    assert settings.max_iterations == 5 and settings.apply_to.tdd_tasks and settings.apply_to.auto_tasks
    assert settings.verification.allowlist == ("pytest", "tox")
    assert settings.repair.command == ("agent", "{prompt_file}") and settings.repair.allowed_paths == ("src/*",)
    assert settings.redaction.env_names == ("*CRED*",) and settings.report_path == "r.md"
    assert [rule.name for rule in settings.classification_rules] == ["db"]
    assert settings.classification_rules[0].failure_type == "TOOLING_ENV"


def test_settings_of_ini_text_are_typed() -> None:
    effective = merge_layers(ini_layers({"selfheal_max_iterations": "4"}, "pytest ini (tox.ini)"))
    assert effective.settings.max_iterations == 4
    assert effective.origins["max_iterations"] == "pytest ini (tox.ini)"
