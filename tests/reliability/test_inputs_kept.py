"""No input loses the run: each input that
used to end in "selfheal: internal error" with no incident is now one warning or an escaped
value, and the incident is captured. Property-based tests over each parser assert the same
for arbitrary text, surrogates and YAML documents (docs/reliability.md "Trust boundaries").
"""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
from pathlib import Path

import pytest
from helpers import (
    FULL,
    PY,
    PYTEST_SELFHEAL,
    as_pytest_writes_it,
    cli,
    failed_report,
    git_commit_all,
    incident_ids,
    make_project,
    run_env,
    run_pytest_selfheal,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_selfheal.history.triage import parse_quarantine
from pytest_selfheal.junit.reader import iter_testcases
from pytest_selfheal.junit.writer import junit_case
from pytest_selfheal.redact import default_redactor
from pytest_selfheal.store.root import Store

from .conftest import DETERMINISTIC

EXAMPLES = 2000 if FULL else 200
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not FULL,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TODAY = dt.date(2026, 1, 15)

# A 475-byte-class alias bomb: 9^8 strings if anything expands it.
ALIAS_BOMB = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefg", "bcdefgh"))
    + "quarantine:\n  - test: t.py::x\n    reason: r\n    expires: *h\n  - test: *h\n    reason: r\n"
    + "  - {*h : 1, test: t.py::y, reason: r}\n"
)


def _captured(project: Path, *args: str) -> str:
    """A red ``pytest --selfheal`` run that must capture one incident, with no internal error."""
    # errors="replace": pytest prints a lone surrogate as its raw byte (0xff)
    result = subprocess.run([PY, "-m", "pytest", *PYTEST_SELFHEAL, *args], cwd=project, capture_output=True,
                            text=True, errors="replace", env=run_env(), timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "internal error" not in result.stdout + result.stderr, result.stdout + result.stderr
    ids = incident_ids(project / ".selfheal")
    assert len(ids) == 1, result.stdout
    return ids[0]


@pytest.mark.parametrize("text, warning", [
    ("quarantine:\n  - test: test_calc.py::test_sub\n    reason: r\n    expires: 2026-02-30\n", "day is out of range"),
    pytest.param("quarantine:\n  - !!python/object:os.system {test: a}\n", "could not determine a constructor",
                 marks=pytest.mark.slow),
    pytest.param("quarantine:\n  - ? [a, b]\n    : x\n", "not a plain entry", marks=pytest.mark.slow),
    pytest.param("quarantine:\n  - !!binary AAAA\n", "expected an entry", marks=pytest.mark.slow),
    pytest.param(ALIAS_BOMB, "got a list", marks=pytest.mark.slow),
])
def test_a_bad_quarantine_entry_is_one_warning_and_the_capture_happens(tmp_path: Path, text: str,
                                                                      warning: str) -> None:
    entries, warnings = parse_quarantine(text, "q.yml", TODAY)
    assert entries == [] and any(warning in line for line in warnings), warnings
    assert all(len(line) < 300 for line in warnings), "a warning printed an expanded value"
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC, ".selfheal-quarantine.yml": text})
    _captured(project)


@pytest.mark.parametrize("text, warning", [
    ("quarantine:\n  - test: a::b\n    reason: r\n    expires: 2026-02-30\n", "day is out of range"),
    ("quarantine:\n  - !!python/object:os.system {test: a}\n", "could not determine a constructor"),
    ("quarantine:\n  - ? [a, b]\n    : x\n", "not a plain entry"),
    ("quarantine:\n  - !!binary AAAA\n", "expected an entry"),
])
def test_each_bad_quarantine_entry_is_one_warning(text: str, warning: str) -> None:
    entries, warnings = parse_quarantine(text, "q.yml", TODAY)
    assert entries == [] and len(warnings) == 1 and warning in warnings[0], warnings


def test_the_alias_bomb_is_never_expanded(tmp_path: Path) -> None:
    entries, warnings = parse_quarantine(ALIAS_BOMB, "q.yml", TODAY)
    assert entries == [] and [len(line) < 120 for line in warnings] == [True, True, True], warnings


def test_a_lone_surrogate_in_a_failure_message_is_escaped_not_lost(tmp_path: Path) -> None:
    test = 'import os\n\ndef test_file():\n    assert os.fsdecode(b"report-\\xff.csv") == "report.csv"\n'
    project = make_project(tmp_path / "p", {"test_f.py": test})
    incident_id = _captured(project)
    text = (project / ".selfheal" / "error_inbox" / incident_id / "incident.json").read_text(encoding="utf-8")
    assert "report-\\\\udcff.csv" in text  # the escape, as text
    # No orphan plan: the plan and its incident are published together.
    assert sorted(p.name for p in (project / ".selfheal" / "error_plans").iterdir()) == [incident_id]


def test_a_control_character_in_a_test_file_name_is_captured(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_\x01x.py": "def test_a():\n    assert 0\n"})
    incident_id = _captured(project)
    incident = Store(project / ".selfheal").read_incident(incident_id)
    assert incident.step == "test_\x01x.py::test_a"


@pytest.mark.parametrize("pattern", ["incident_id|status|failures|nodeid|outcome", ".+",
                                     pytest.param("[a-z_]+", marks=pytest.mark.slow)])
def test_redaction_patterns_matching_the_package_own_words_keep_the_documents_valid(tmp_path: Path,
                                                                                    pattern: str) -> None:
    config = f"ralf_lite:\n  redaction:\n    patterns: ['{pattern}']\n"
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC, ".planning/config.yml": config})
    incident_id = _captured(project)
    result = cli("show", incident_id, "--json", cwd=project)
    assert result.returncode == 0, result.stderr


def test_a_nul_in_reports_dir_is_one_config_error(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC,
                                            ".planning/config.yml": 'ralf_lite:\n  reports_dir: "x\\0y"\n'})
    result = cli("status", cwd=project)
    assert result.returncode == 2 and result.stderr.startswith("selfheal: error: ")
    assert "ralf_lite.reports_dir: contains a NUL character" in result.stderr
    run = run_pytest_selfheal(project)
    assert "internal error" not in run.stdout + run.stderr and "contains a NUL character" in run.stdout + run.stderr


@pytest.mark.slow
def test_selfheal_ci_reads_the_event_before_the_tests_run(tmp_path: Path) -> None:
    """A PR's conftest rewrote $GITHUB_EVENT_PATH (base sha = the PR's head) before ``selfheal
    ci`` read it, so the PR's own quarantine file applied and its failure passed the job."""
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC})
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True,
                          check=True).stdout.strip()
    (project / ".selfheal-quarantine.yml").write_text(
        "quarantine:\n  - test: test_calc.py::test_sub\n    reason: the PR says so\n")
    (project / "conftest.py").write_text(
        "import json, os, subprocess\n"
        "head = subprocess.run(['git', 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()\n"
        "with open(os.environ['GITHUB_EVENT_PATH'], 'w') as f:\n"
        "    json.dump({'pull_request': {'number': 7, 'base': {'sha': head}}}, f)\n")
    git_commit_all(project, "the PR")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7, "base": {"sha": base}}}))
    env = run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin", "GITHUB_ACTIONS": "true",
                   "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event),
                   "GITHUB_REPOSITORY": "o/r"})
    result = cli("ci", "--no-comment", cwd=project, env=env)
    assert json.loads(event.read_text())["pull_request"]["base"]["sha"] != base  # the conftest did rewrite it
    # The job's verdict uses the event read before the tests: the PR's own file does not apply.
    # (Inside the test process the conftest runs first, so the capture's own triage line may say
    # "quarantined": test code runs with the job's permissions, docs/reliability.md "Known limits".)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "every failure left is quarantined" not in result.stdout


# --------------------------------------------------------------------------- properties


@SETTINGS
@given(st.text())
def test_quarantine_parser_never_raises_on_any_text(text: str) -> None:
    entries, warnings = parse_quarantine(text, "q.yml", TODAY)
    assert isinstance(entries, list) and all(isinstance(w, str) and len(w) < 400 for w in warnings)


YAML_SCALARS = st.one_of(st.text(max_size=20), st.integers(), st.sampled_from(
    ["2026-02-30", "2026-13-01", "!!binary AAAA", "!!python/name:os.system", "*undefined", "&a x", "? [a]", "{", "~"]))


@SETTINGS
@given(st.lists(st.dictionaries(st.sampled_from(["test", "fingerprint", "reason", "expires", "owner", "x", "? k"]),
                                YAML_SCALARS, max_size=5), max_size=4))
def test_quarantine_parser_never_raises_on_yaml_documents(items: list[dict[str, object]]) -> None:
    lines = ["quarantine:"]
    for item in items:
        lines.append("  -" + ("".join(f"\n    {key}: {value}" for key, value in item.items()) or " {}"))
    entries, warnings = parse_quarantine("\n".join(lines) + "\n", "q.yml", TODAY)
    assert len(entries) + len(warnings) <= max(1, len(items))


@SETTINGS
@given(st.text(), st.text())
def test_redaction_output_always_encodes_as_utf8(text: str, key: str) -> None:
    redactor = default_redactor(env={})
    redactor.redact(text).encode("utf-8")  # raises on a lone surrogate
    json.dumps(redactor.redact_obj({key: [text]}), ensure_ascii=False).encode("utf-8")


@SETTINGS
@given(st.text(min_size=1, max_size=60), st.text(max_size=200), st.sampled_from(["call", "setup", "collect"]))
def test_the_capture_reads_a_failure_as_the_reader_reads_pytests_junit(name: str, message: str, when: str) -> None:
    report = failed_report(f"tests/test_{name}.py::test_{name}", when, message, message, file=f"tests/test_{name}.py")
    assert list(iter_testcases(io.BytesIO(as_pytest_writes_it(report)))) == [junit_case(report, report.nodeid)]


@pytest.mark.parametrize("message", ["\x00\x01\x1b[31m" + "é" * 10 + "\ud800",
                                     pytest.param("x" * 70000, marks=pytest.mark.slow)])
def test_awkward_messages_are_captured(tmp_path: Path, message: str) -> None:
    test = f"def test_m():\n    raise AssertionError({message!r})\n"
    project = make_project(tmp_path / "p", {"test_m.py": test})
    _captured(project)
