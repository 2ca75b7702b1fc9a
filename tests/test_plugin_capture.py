"""`pytest --selfheal` capture, driven through real pytest runs (pytester)."""

from __future__ import annotations

import json
import platform
import shutil
from pathlib import Path
from typing import Any

import git
import pytest
from schema_check import assert_valid

from pytest_selfheal.capture.context import probe_platform, run_context
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.jsondoc import fields_of

BUGGY = """
def add(a, b):
    return a - b
"""
TESTS = """
from mod import add

def test_add(tmp_path):
    assert add(2, 3) == 5, f"add returned {add(2, 3)} in {tmp_path}"

def test_ok():
    assert add(0, 0) == 0
"""


def incidents(root: Path) -> list[Path]:
    inbox = root / ".selfheal" / "error_inbox"
    return sorted(p for p in inbox.iterdir() if p.is_dir() and not p.name.startswith(".")) if inbox.exists() else []


def read(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(mod=BUGGY, test_mod=TESTS)
    return pytester


def test_green_run_writes_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok="def test_ok():\n    assert True\n")
    result = pytester.runpytest("--selfheal")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / ".selfheal").exists()
    assert "selfheal" not in result.stdout.str().split("passed")[0].split("=")[-1]


def test_disabled_by_default_writes_nothing(project: pytest.Pytester) -> None:
    result = project.runpytest()
    assert result.ret == 1
    assert not (project.path / ".selfheal").exists()


def test_failing_run_captures_incident_with_contract_files(project: pytest.Pytester) -> None:
    result = project.runpytest("--selfheal")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the plugin never changes the exit code
    (folder,) = incidents(project.path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "audit_tail.jsonl",
        "context.json",
        "incident.json",
        "log_tail.txt",
        "status.txt",
    ]
    incident = read(folder / "incident.json")
    assert_valid("incident", incident)
    assert incident["incident_id"] == folder.name
    assert incident["step"] == "test_mod.py::test_add"
    assert incident["failure_class"] == "deterministic"
    assert incident["error_signature"].startswith("TEST_ASSERTION | test_mod::test_add | AssertionError")
    (failure,) = incident["failures"]
    assert failure["nodeid"] == "test_mod.py::test_add"
    assert failure["failure_type"] == "TEST_ASSERTION" and failure["code_fixable"] is True
    assert failure["target_paths"][:1] == ["mod.py"] or "mod.py" in failure["target_paths"]
    assert (folder / "status.txt").read_text().strip() == "planned"
    events = [json.loads(line)["event"] for line in (folder / "audit_tail.jsonl").read_text().splitlines()]
    assert events[:3] == ["incident_captured", "failure_classified", "plan_generated"]
    assert "assert add(2, 3) == 5" in (folder / "log_tail.txt").read_text()
    context = read(folder / "context.json")
    assert context["pytest"] == pytest.__version__ and "platform" in context and context["git"] is None
    plan = read(project.path / ".selfheal" / "error_plans" / folder.name / "plan.json")
    assert_valid("plan", plan)
    assert plan["verification_commands"] == ["python -m pytest -q test_mod.py::test_add"]
    result.stdout.fnmatch_lines(["*selfheal*", f"captured {folder.name}: 1 failure(s) (1 new) -> .selfheal*"])
    assert read(folder / "incident.json")["failures"][0]["triage"] == {
        "label": "new", "detail": "new: never seen failing on main", "base_branch": "main"}
    assert (project.path / ".selfheal" / "history.sqlite3").is_file()


def test_same_bug_same_fingerprint_across_basetemp(project: pytest.Pytester, tmp_path: Path) -> None:
    # Separate reports roots: on one root the second run would be the open incident's next iteration.
    def capture(name: str) -> dict[str, Any]:
        project.runpytest("--selfheal", f"--selfheal-dir={name}", f"--basetemp={tmp_path / name}")
        (folder,) = (project.path / name / "error_inbox").glob("incident_*")
        return read(folder / "incident.json")

    first, second = capture("one"), capture("second-run-with-a-longer-name")
    assert first["fingerprint"] == second["fingerprint"]
    assert first["error_signature"] == second["error_signature"]
    # A different bug gives a different fingerprint.
    project.makepyfile(mod="def add(a, b):\n    return a * b\n")
    assert capture("three")["fingerprint"] != first["fingerprint"]


def test_user_junitxml_is_reused_and_agrees(project: pytest.Pytester) -> None:
    project.runpytest("--selfheal", "--selfheal-dir=own")
    project.runpytest("--selfheal", "--selfheal-dir=theirs", "--junitxml=report.xml")
    assert (project.path / "report.xml").exists()
    first, second = (read(next((project.path / d / "error_inbox").glob("incident_*")) / "incident.json") for d in ("own", "theirs"))
    assert first["fingerprints"] == second["fingerprints"]


def test_collection_error_is_captured_as_build_compile(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_broken="def test_x(:\n    pass\n")
    result = pytester.runpytest("--selfheal")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    (folder,) = incidents(pytester.path)
    incident = read(folder / "incident.json")
    assert incident["step"] == "collection"
    assert incident["failures"][0]["failure_type"] == "BUILD_COMPILE"
    assert incident["failures"][0]["outcome"] == "error"


def test_setup_error_is_an_error_outcome(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_fx="""
import pytest

@pytest.fixture
def db():
    raise RuntimeError("database fixture exploded")

def test_uses_db(db):
    pass
"""
    )
    pytester.runpytest("--selfheal")
    (folder,) = incidents(pytester.path)
    failure = read(folder / "incident.json")["failures"][0]
    assert failure["outcome"] == "error"
    assert "database fixture exploded" in failure["message"]


def test_ini_switch_enables_capture(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nselfheal = true\n")
    project.runpytest()
    assert len(incidents(project.path)) == 1


def test_no_selfheal_flag_overrides_the_ini_switch(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nselfheal = true\nselfheal_loop = true\n")
    result = project.runpytest("--no-selfheal")
    result.assert_outcomes(failed=1, passed=1)
    assert incidents(project.path) == [] and "- selfheal -" not in result.stdout.str()
    # --no-selfheal-loop keeps the capture and skips the loop the ini asks for.
    project.runpytest("--no-selfheal-loop")
    (folder,) = incidents(project.path)
    assert not (project.path / ".selfheal" / "error_runs" / folder.name).exists()
    assert (folder / "status.txt").read_text().strip() == "planned"


def test_selfheal_dir_flag_moves_the_root(project: pytest.Pytester) -> None:
    project.runpytest("--selfheal", "--selfheal-dir=elsewhere")
    assert not (project.path / ".selfheal").exists()
    assert len(list((project.path / "elsewhere" / "error_inbox").glob("incident_*"))) == 1


def test_bad_config_stops_the_run_with_one_line(project: pytest.Pytester) -> None:
    (project.path / ".planning").mkdir()
    (project.path / ".planning" / "config.json").write_text('{"ralf_lite": {"max_iterations": "three"}}')
    result = project.runpytest_subprocess("--selfheal")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "max_iterations" in err and "config.json" in err
    assert "Traceback" not in err + result.stdout.str()
    assert not (project.path / ".selfheal").exists()


@pytest.mark.parametrize("where", ["ini", "global"])
def test_a_bad_config_stops_a_green_run_too(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                            where: str) -> None:
    """A green run reads no config when there is none, but one that is there is read whole."""
    pytester.makepyfile(test_green="def test_green():\n    assert True\n")
    if where == "ini":
        pytester.makeini("[pytest]\nselfheal_max_iterations = three\n")
    else:
        home = pytester.path / "oc"
        (home / "get-shit-done").mkdir(parents=True)
        (home / "get-shit-done" / "config.json").write_text('{"ralf_lite": {"max_iterations": "three"}}')
        monkeypatch.setenv("OPENCODE_CONFIG_DIR", str(home))
    result = pytester.runpytest_subprocess("--selfheal")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "max_iterations" in result.stderr.str()


def test_secrets_in_failure_output_are_redacted(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t-deploy-value")
    pytester.makepyfile(
        test_leak="""
import os

def test_leak():
    token = os.environ["DEPLOY_TOKEN"]
    raise AssertionError("login failed with ghp_" + "a" * 36 + " and " + token)
"""
    )
    pytester.runpytest("--selfheal")
    (folder,) = incidents(pytester.path)
    written = "".join(p.read_text() for p in folder.iterdir())
    written += "".join(p.read_text() for p in (pytester.path / ".selfheal" / "error_plans").rglob("*.*"))
    assert "s3cr3t-deploy-value" not in written
    assert "ghp_" + "a" * 36 not in written
    assert "[REDACTED]" in written


def test_git_context_is_recorded(project: pytest.Pytester) -> None:
    repo = git.Repo.init(project.path)
    repo.git.add(A=True)
    repo.index.commit("init")
    (project.path / "mod.py").write_text(BUGGY + "\n# touched\n")
    project.runpytest("--selfheal")
    (folder,) = incidents(project.path)
    context = read(folder / "context.json")
    assert context["git"]["commit"] == repo.head.commit.hexsha
    assert context["git"]["dirty"] is True
    assert "mod.py" in context["git"]["diff_stat"]


@pytest.mark.slow  # ~16 s; xdist captures are also checked by default in test_rootcause_e2e.py
def test_xdist_controller_alone_writes_one_incident(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("--selfheal", "-n", "2")
    assert result.ret == 1
    (folder,) = incidents(project.path)
    assert read(folder / "incident.json")["nodeids"] == ["test_mod.py::test_add"]


def test_tdd_marked_failures_are_recorded_for_apply_to(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_t="""
import pytest

@pytest.mark.tdd
def test_red_first():
    assert False, "not implemented yet"

def test_plain():
    assert False
"""
    )
    pytester.runpytest("--selfheal", "--strict-markers")
    (folder,) = incidents(pytester.path)
    incident = read(folder / "incident.json")
    assert incident["tdd_nodeids"] == ["test_t.py::test_red_first"]
    assert incident["nodeids"] == ["test_t.py::test_red_first", "test_t.py::test_plain"]


SECTIONS_CONFTEST = """
import os

def pytest_selfheal_report_sections(report):
    if os.environ.get("SECTIONS_HOOK_CRASH"):
        raise RuntimeError("coverage server down")
    ids = ",".join(e["incident_id"] for e in report["incidents"])
    return [{"title": "Coverage", "markdown": "Covered: " + ids}]
"""


def test_report_file_carries_hook_sections(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project.makeconftest(SECTIONS_CONFTEST)
    result = project.runpytest("--selfheal", "--selfheal-report", "report.md")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (folder,) = incidents(project.path)
    body = (project.path / "report.md").read_text()
    assert body.startswith("## RALF Lite Loop Report\n")
    assert body.endswith(f"\n### Coverage\n\nCovered: {folder.name}\n")

    # A crashing hook costs the file, never the run: one error line, pytest's exit code kept.
    (project.path / "report.md").unlink()
    monkeypatch.setenv("SECTIONS_HOOK_CRASH", "1")
    crashed = project.runpytest("--selfheal", "--selfheal-report", "report.md")
    assert crashed.ret == pytest.ExitCode.TESTS_FAILED
    crashed.stdout.fnmatch_lines(["selfheal: error: the pytest_selfheal_report_sections hook of plugin *"
                                  "failed: RuntimeError: coverage server down"])
    assert not (project.path / "report.md").exists()


def test_the_summary_has_one_next_line_and_follows_the_verbosity(project: pytest.Pytester) -> None:
    def section(*args: str) -> list[str]:
        shutil.rmtree(project.path / ".selfheal", ignore_errors=True)  # a capture each time, not agent mode
        out = project.runpytest("--selfheal", *args).stdout.str()
        body = out.split("- selfheal -", 1)[1].split("\n", 1)[1]  # after the section's header line
        return [line for line in body.split("short test summary")[0].strip().splitlines() if line.strip("= ")]

    default = section()
    assert sum(line.strip().startswith("next:") for line in default) == 1
    assert any("TEST_ASSERTION" in line for line in default) and any("RALF Lite Loop Report" in line for line in default)
    quiet = section("-q")
    # -q: the incident, the report's headline and the next command; not the per-failure lines.
    assert quiet[0].startswith("captured incident_") and quiet[1].startswith("RALF Lite Loop Report")
    assert quiet[2].strip().startswith("next: Run the loop: selfheal loop incident_") and len(quiet) == 3
    very_quiet = section("-qq")
    assert [line.strip().split(" ")[0] for line in very_quiet] == ["captured", "next:"]


def test_a_tooling_env_capture_does_not_suggest_the_loop(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_env="import not_installed_module_xyz\n\ndef test_x():\n    pass\n")
    out = pytester.runpytest("--selfheal").stdout.str()
    (next_line,) = [line for line in out.splitlines() if line.strip().startswith("next:")]
    assert "Fix the environment" in next_line and "selfheal loop" not in next_line


def test_the_platform_probe_gives_run_context_the_same_platform(tmp_path: Path) -> None:
    probe_platform()
    probe_platform()  # once per process: a second call starts nothing
    context = run_context(tmp_path, ["-q"], {}, git=None)
    assert context.platform == platform.platform() and context.invocation_args == ("-q",)
    assert list(context.to_json()) == list(tuple(f.key for f in fields_of(RunContext))) and context.git is None


READ_BACK_CONFTEST = """
import json
from pathlib import Path

from pytest_selfheal.report.data import build_report
from pytest_selfheal.report.load import load_incident_run
from pytest_selfheal.report.render import render_terminal
from pytest_selfheal.report.sections import report_markdown
from pytest_selfheal.store.root import Store


def pytest_unconfigure(config):
    # The report of the captured incident as built from the files on disk (the read-back
    # the recorder no longer does), with the recorder's own settings.
    recorder = config.pluginmanager.get_plugin("selfheal-recorder")
    report = build_report(
        incidents=[load_incident_run(Store(recorder.reports_root), recorder.incident_id)],
        effective_config=recorder.effective.values,
        origins=recorder.effective.origins,
        enabled=recorder.effective.settings.enabled,
    )
    Path(str(config.rootpath), "read_back.json").write_text(json.dumps(
        {"terminal": render_terminal(report), "markdown": report_markdown(report, config.pluginmanager)}))
"""


def test_the_capture_reports_what_the_files_on_disk_say(project: pytest.Pytester) -> None:
    """The recorder builds the report of the incident it captured from the documents it has
    just written (no read-back): the terminal lines and the report file must be exactly
    those of the same report built from the files (``load_incident_run``)."""
    project.makeconftest(READ_BACK_CONFTEST)
    out = project.runpytest("--selfheal", "--selfheal-report", "report.md").stdout.str()
    read_back = read(project.path / "read_back.json")
    assert (project.path / "report.md").read_text() == read_back["markdown"]
    section = out.split("- selfheal -", 1)[1].split("short test summary")[0]
    shown = [line for line in section.splitlines() if line.strip("= ")]
    start = shown.index(read_back["terminal"][0])
    assert shown[start:start + len(read_back["terminal"])] == read_back["terminal"]
    assert read_back["terminal"][0].startswith("RALF Lite Loop Report: planned")
