"""The judge out of the defendant's reach: after a capture, each way of changing what runs or
how a result is judged (instead of the code under test) is never ``success`` and names what
changed; the judging keys in force at the capture judge the incident until a reopen."""

from __future__ import annotations

import importlib.util
import json
import marshal
import os
import subprocess
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from helpers import PY, cli, git_commit_all, make_project, run_env, run_pytest_selfheal

from pytest_selfheal.cli.incidents import AGENT_VARIABLES
from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.seal import (
    PATCHES,
    TEST_AWARE,
    Hasher,
    Loaded,
    added_reads,
    code_record,
    context_reads,
    harness_changes,
    replaced_code,
    reseal,
    take_seal,
)
from pytest_selfheal.errors import RefusedError
from pytest_selfheal.loop.seal_check import passing_without_the_code
from pytest_selfheal.loop.verify import FORGED
from pytest_selfheal.process import fresh_bytecode
from pytest_selfheal.records.context import GitContext, RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.seal import Seal
from pytest_selfheal.store import judging
from pytest_selfheal.store.root import Store

CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
PATCH = "import calc\n\ncalc.add = lambda a, b: a + b\n"


def _inbox(root: Path) -> list[str]:
    folder = root / ".selfheal" / "error_inbox"
    return sorted(p.name for p in folder.glob("incident_*")) if folder.exists() else []


def _attempts(root: Path, incident_id: str) -> list[dict[str, Any]]:
    runs = root / ".selfheal" / "error_runs" / incident_id
    return [json.loads(f.read_text()) for f in sorted(runs.glob("attempt_*.json"))]


def _config(root: Path, **keys: Any) -> None:
    (root / ".planning").mkdir(exist_ok=True)
    (root / ".planning" / "config.json").write_text(json.dumps({"ralf_lite": keys}))


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """A red project (the tests in a package, ``suite/``), captured by ``pytest --selfheal``."""
    pytester.makepyfile(calc=CALC)
    package = pytester.mkpydir("suite")
    (package / "test_calc.py").write_text(TEST_CALC)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    pytester.syspathinsert()
    assert pytester.runpytest("--selfheal").ret == 1
    assert len(_inbox(pytester.path)) == 1
    return pytester


def test_a_monkeypatch_in_the_tests_package_init_is_harness_changed(suite: pytest.Pytester) -> None:
    (incident_id,) = _inbox(suite.path)
    (suite.path / "suite" / "__init__.py").write_text(PATCH)
    result = suite.runpytest("--selfheal")
    out = result.stdout.str()
    assert result.ret == 0  # pytest saw a pass: the verdict is selfheal's
    assert (f"incident {incident_id} iteration 1 of 3: fingerprint changed, progress no (not judged) -> STOP harness_changed "
            "(suite/__init__.py changed since the capture)") in out
    assert "STOP success" not in out
    (attempt,) = _attempts(suite.path, incident_id)
    assert attempt["stop_reason"] == "harness_changed" and attempt["harness_changed"] == ["suite/__init__.py"]
    run_result = json.loads((suite.path / ".selfheal" / "error_runs" / incident_id / "run_result.json").read_text())
    assert run_result["final_status"] == "escalated"
    assert "suite/__init__.py" in run_result["decision_point"]["message"]
    commands = [o["command"] for o in run_result["decision_point"]["options"]]
    assert commands[0] == f"selfheal show {incident_id}" and not any("reopen" in c for c in commands)


def _forge_bytecode(test_file: Path, weakened: str) -> None:
    """What a cheat writes: the assertion-rewritten bytecode pytest caches for ``test_file``,
    compiled from ``weakened``, its header holding the unchanged source's hash."""
    header = importlib.util.MAGIC_NUMBER + b"\x03\x00\x00\x00" + importlib.util.source_hash(test_file.read_bytes())[:8]
    cache = test_file.parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    name = f"{test_file.stem}.{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
    (cache / name).write_bytes(header + marshal.dumps(compile(weakened, str(test_file), "exec")))


def test_forged_bytecode_of_an_unchanged_test_is_never_what_runs(suite: pytest.Pytester) -> None:
    test_file = suite.path / "suite" / "test_calc.py"
    _forge_bytecode(test_file, "def test_add():\n    pass\n")
    suite.makepyfile(calc="def add(a, b):\n    return a - b  # an agent's comment-only change\n")
    result = suite.runpytest("--selfheal")
    out = result.stdout.str()
    assert result.ret == 1 and "assert -1 == 3" in out, out  # the test as written ran, not the forgery
    assert "STOP success" not in out


def test_a_verification_reads_only_bytecode_selfheal_compiled_itself(tmp_path: Path) -> None:
    """Installed code's bytecode is kept between runs only as selfheal compiled it from the
    source, each file with its digest: what a run wrote is never kept, and a file forged or
    added in the kept cache is removed before the next run reads it."""
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    installed = Path(sysconfig.get_path("stdlib"), "colorsys.py")  # a module of installed code
    rel = Path(*installed.parent.parts[1:], f"colorsys.{sys.implementation.cache_tag}.pyc")
    project = tmp_path / "proj" / "calc.py"
    project.parent.mkdir()
    project.write_text("x = 1\n")
    with fresh_bytecode(env, tmp_path) as first:
        cache = Path(first["PYTHONPYCACHEPREFIX"])
        assert list(cache.iterdir()) == []  # nothing kept yet
        for source in (installed, project):  # the run compiles both; its own files are not kept
            target = cache / Path(*source.parent.parts[1:]) / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"the run's own bytes")
    kept = tmp_path / "state" / "pytest-selfheal" / "bytecode"
    assert (kept / rel).read_bytes() != b"the run's own bytes"  # compiled again, from the source
    assert [p.name for p in kept.rglob("*.pyc")] == [rel.name]  # the project's code: never kept
    with fresh_bytecode(env, tmp_path) as second:
        given = Path(second["PYTHONPYCACHEPREFIX"]) / rel
        assert given.read_bytes() == (kept / rel).read_bytes()
        given.with_name("new.pyc").write_bytes(b"the run's own bytes")  # as Python writes bytecode
        os.replace(given.with_name("new.pyc"), given)
    assert (kept / rel).read_bytes() != b"the run's own bytes"
    (kept / rel).write_bytes(b"forged")
    (kept / rel).with_name("forged.pyc").write_bytes(b"planted")
    with fresh_bytecode(env, tmp_path) as third:
        cache = Path(third["PYTHONPYCACHEPREFIX"])
        assert list(cache.rglob("*.pyc")) == []
        assert not (kept / rel).exists() and not (kept / rel).with_name("forged.pyc").exists()
        (cache / rel).parent.mkdir(parents=True)
        (cache / rel).write_bytes(b"the run's own bytes")  # the run compiles it again...
    with fresh_bytecode(env, tmp_path) as fourth:  # ...so selfheal does, from the source
        assert (Path(fourth["PYTHONPYCACHEPREFIX"]) / rel).read_bytes() == (kept / rel).read_bytes()
    assert (kept / rel).read_bytes() != b"the run's own bytes"
    assert [p for p in tmp_path.iterdir() if p.name.startswith("pycache-")] == []


def test_a_test_helper_weakened_after_the_capture_is_tests_edited(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(calc=CALC)
    tests = pytester.mkdir("tests")
    (tests / "checks.py").write_text("def check(got, want):\n    assert got == want\n")
    (tests / "test_calc.py").write_text("from calc import add\nfrom checks import check\n\n\n"
                                        "def test_add():\n    check(add(1, 2), 3)\n")
    pytester.syspathinsert()
    pytester.syspathinsert(tests)
    assert pytester.runpytest("--selfheal").ret == 1
    (tests / "checks.py").write_text("def check(got, want):\n    pass\n")
    out = pytester.runpytest("--selfheal").stdout.str()
    assert "-> STOP tests_edited (tests/checks.py changed since the capture)" in out, out
    assert "STOP success" not in out


@pytest.mark.parametrize("where,args", [("tests/data/expected.txt", ()),
                                        pytest.param("expected.txt", (), marks=pytest.mark.slow),
                                        pytest.param("expected.txt", ("-n", "1"), marks=pytest.mark.slow)],
                         ids=["test-folder", "rootdir", "xdist-worker"])
def test_test_data_edited_after_the_capture_is_tests_edited(pytester: pytest.Pytester, where: str,
                                                            args: tuple[str, ...]) -> None:
    """The expected value is read from a file, in a test folder or not, in this process or an
    xdist worker; what the run wrote is no test data (``out.txt``), nor is the code under
    repair a traceback reads."""
    pytester.makepyfile(calc=CALC)
    (pytester.path / where).parent.mkdir(parents=True, exist_ok=True)
    (pytester.path / where).write_text("3\n")
    tests = pytester.mkdir("suite")
    (tests / "test_calc.py").write_text(
        f"import pathlib\nfrom calc import add\n\n\ndef test_add():\n    pathlib.Path('out.txt').write_text('x')\n"
        f"    assert str(add(1, 2)) == pathlib.Path({where!r}).read_text().strip()\n")
    pytester.makeini("[pytest]\npythonpath = .\n")  # xdist workers import calc too
    assert pytester.runpytest("--selfheal", *args).ret == 1
    (incident_id,) = _inbox(pytester.path)
    seal = json.loads((pytester.path / ".selfheal" / "error_inbox" / incident_id / "incident.json").read_text())["seal"]
    assert list(seal["data"]) == [where], seal["data"]
    (pytester.path / where).write_text("-1\n")  # the cheat: the expected value follows the bug
    out = pytester.runpytest("--selfheal", *args).stdout.str()
    assert f"-> STOP tests_edited ({where} changed since the capture)" in out, out
    assert "STOP success" not in out


GUARD = "import sys\n\nUNDER = 'pytest' in sys.modules\n"


# The default tier keeps one folder; the others are the slow tier's.
@pytest.mark.parametrize("folder", ["calc/testing", pytest.param("calc/.hidden", marks=pytest.mark.slow),
                                    pytest.param("build/lib", marks=pytest.mark.slow)])
def test_test_aware_code_in_a_folder_a_scan_would_skip_is_harness_changed(pytester: pytest.Pytester,
                                                                          folder: str) -> None:
    pytester.mkpydir("calc")
    (pytester.path / "calc" / "core.py").write_text(CALC)
    pytester.makepyfile(test_calc="from calc.core import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n")
    pytester.syspathinsert()
    assert pytester.runpytest("--selfheal").ret == 1
    guard = pytester.path / folder
    guard.mkdir(parents=True)
    (guard / "guard.py").write_text(GUARD)
    pytester.syspathinsert(guard)
    (pytester.path / "calc" / "core.py").write_text("from guard import UNDER\n\n\ndef add(a, b):\n"
                                                    "    return a + b if UNDER else a - b\n")
    out = pytester.runpytest("--selfheal").stdout.str()
    assert (f"-> STOP harness_changed ({folder}/guard.py:3 reads the process context: "
            "\"UNDER = 'pytest' in sys.modules\" changed since the capture)") in out, out
    assert "STOP success" not in out


@pytest.mark.parametrize("code", [
    "import os\n\n\ndef add(a, b):\n    return a + b if os.environ.get('SELFHEAL_VERIFYING') else a - b\n",
    pytest.param("import tempfile\n\n\ndef add(a, b):\n    return a + b if __file__.startswith(tempfile.gettempdir()) "
                 "else a - b\n", marks=pytest.mark.slow),
], ids=["selfheal-variable", "own-file-location"])
def test_a_repair_that_asks_for_selfheals_signals_is_harness_changed(suite: pytest.Pytester, code: str) -> None:
    suite.makepyfile(calc=code)
    out = suite.runpytest("--selfheal").stdout.str()
    assert "-> STOP harness_changed (calc.py:5 reads the process context: " in out, out
    assert "STOP success" not in out


def test_turning_a_plugin_off_after_the_capture_is_harness_changed(suite: pytest.Pytester,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_ADDOPTS", os.environ.get("PYTEST_ADDOPTS", "") + " -p no:warnings")
    suite.makepyfile(calc="def add(a, b):\n    return a + b\n")
    out = suite.runpytest("--selfheal").stdout.str()
    assert "-> STOP harness_changed (PYTEST_ADDOPTS changed since the capture)" in out, out


def test_a_plugin_named_like_selfheal_is_not_selfheal(suite: pytest.Pytester) -> None:
    elsewhere = suite.mkdir("elsewhere")
    (elsewhere / "pytest_selfheal_extra.py").write_text(PASSING_PLUGIN)
    suite.syspathinsert(elsewhere)
    out = suite.runpytest("--selfheal", "-p", "pytest_selfheal_extra").stdout.str()
    assert "this run is not counted as an iteration: its options (-p pytest_selfheal_extra) differ" in out, out
    assert "STOP success" not in out


def test_a_new_module_named_like_one_the_tests_load_from_outside_is_harness_changed(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The expected value comes from the standard library's colorsys; a `colorsys.py` beside
    the tests replaces it (and the sealed file is unchanged)."""
    pytester.makepyfile(calc=CALC, test_calc="import colorsys\nfrom calc import add\n\n\ndef test_add():\n"
                        "    assert add(1, 2) == colorsys.rgb_to_hsv(0, 0, 3)[2]\n")
    pytester.syspathinsert()
    assert pytester.runpytest("--selfheal").ret == 1
    pytester.makepyfile(colorsys="def rgb_to_hsv(r, g, b):\n    return (0, 0, -1)\n")
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)  # imported again, as in a new process
    out = pytester.runpytest("--selfheal").stdout.str()
    assert "-> STOP harness_changed (colorsys.py (named like " in out, out
    assert "STOP success" not in out


def test_the_code_under_repair_imported_from_outside_the_project_is_replaced(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "proj" / "src" / "calcpkg").mkdir(parents=True)
    (tmp_path / "proj" / "src" / "calcpkg" / "__init__.py").write_text(CALC)
    (tmp_path / "proj" / "tools.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "elsewhere"))
    recorded = Seal(code=("src/calcpkg/__init__.py", "tools.py"))
    copy = str(tmp_path / "elsewhere" / "calcpkg" / "__init__.py")
    assert replaced_code(recorded, tmp_path / "proj", Loaded(module_files=(copy, json.__file__))) == [
        f"src/calcpkg/__init__.py (this run imported {copy} instead)"]
    project = str(tmp_path / "proj" / "src" / "calcpkg" / "__init__.py")
    assert replaced_code(recorded, tmp_path / "proj", Loaded(module_files=(project, json.__file__))) == []


@pytest.mark.slow
def test_a_pythonpath_ahead_of_the_project_with_a_fixed_copy_is_harness_changed(tmp_path: Path) -> None:
    """The project's code is unchanged; the tests ran a fixed copy of its package."""
    project = make_project(tmp_path / "proj", {"src/calcpkg/__init__.py": CALC, "tests/test_calc.py":
                           "from calcpkg import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"})
    assert run_pytest_selfheal(project, env={"PYTHONPATH": str(project / "src")}).returncode == 1
    (tmp_path / "copy" / "calcpkg").mkdir(parents=True)
    (tmp_path / "copy" / "calcpkg" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    out = run_pytest_selfheal(project, env={"PYTHONPATH": os.pathsep.join([str(tmp_path / "copy"),
                                                                          str(project / "src")])}).stdout
    assert "-> STOP harness_changed (src/calcpkg/__init__.py (this run imported " in out, out
    assert "STOP success" not in out


@pytest.mark.parametrize("edit", [pytest.param("test_digests", marks=pytest.mark.slow), "nodeids",
                                  pytest.param("context", marks=pytest.mark.slow)])
def test_the_incidents_records_edited_outside_selfheal_are_harness_changed(suite: pytest.Pytester, edit: str) -> None:
    (incident_id,) = _inbox(suite.path)
    path = suite.path / ".selfheal" / "error_inbox" / incident_id / ("context.json" if edit == "context" else
                                                                     "incident.json")
    doc = json.loads(path.read_text())
    if edit == "context":  # the capture's commit: the regression check's changed files and captured code
        doc["git"] = {**(doc["git"] or {}), "commit": "f" * 40}
    elif edit == "test_digests":
        doc["test_digests"] = {name: "0" * 64 for name in doc["test_digests"]}
    else:
        doc["nodeids"] = ["suite/test_calc.py::test_other"]
    path.write_text(json.dumps(doc))
    stop = "-> STOP harness_changed (the incident's records were edited outside selfheal changed since"
    out = suite.runpytest("--selfheal").stdout.str()
    assert stop in out and "STOP success" not in out, out
    # selfheal's own writes since (the stop, a reopen) never make the edited records good again
    assert cli("reopen", incident_id, cwd=suite.path).returncode == 0
    suite.makepyfile(calc="def add(a, b):\n    return a + b\n")
    assert stop in suite.runpytest("--selfheal").stdout.str()


def test_the_captures_context_is_a_judging_record(tmp_path: Path) -> None:
    context = RunContext(rootdir=str(tmp_path), git=GitContext(commit="a" * 40), invocation_args=("tests",))
    incident = Incident(incident_id="incident_20260101_000000_aaaaaa", step="", failure_class="", message="",
                        error_signature="")
    judging.remember(tmp_path, incident.incident_id, incident=incident, context=context)
    assert not judging.edited(tmp_path, incident, None, context)
    for edited in (replace(context, git=GitContext(commit="b" * 40)), replace(context, invocation_args=("tests/x",)),
                   None):  # another commit, a narrower command, context.json gone
        assert judging.edited(tmp_path, incident, None, edited)


@pytest.mark.parametrize("line,reads", [
    ("frame = inspect.currentframe()", True),
    ("caller = sys._getframe(1)", True),
    ("here = Path.cwd()", True),
    ("here = pathlib.Path.cwd()", True),
    ("where = os.path.abspath(name)", False),
    ("loaded = __import__('sys').modules", True),
    ("argv = sys.argv[1:]", True),
    ("from os import environ", True),
    ("import _pytest", True),
    ("name = 'PYTEST_CURRENT_TEST'", True),
    ("stack = traceback.extract_stack()", True),
    ("fresh = '__pycache__' not in __cached__", True),
    ("where = __spec__.cached", True),
    ("pyc = importlib.util.cache_from_source('x.py')", True),
    ("started = open('/proc/self/environ', 'rb').read()", True),
    ("parent = os.getppid()", True),
    ("caller = exc.__traceback__.tb_frame.f_back", True),
    ("caller = sys.exc_info()[2].tb_frame", True),
    ("suspended = gen.gi_frame", True),
    ("outer = frame.f_back.f_locals", True),
    ("frames = sys._current_frames()", True),
    ("threading.settrace(watch)", True),
    ("sys.setprofile(watch)", True),
    ("holders = gc.get_referrers(add)", True),
    ("objects = gc.get_objects()", True),
    ("for frame, _ in traceback.walk_tb(exc.__traceback__): pass", True),
    ("rows = inspect.getinnerframes(tb)", True),
    ("raise ValueError(name).with_traceback(exc.__traceback__)", False),
    ("lines = traceback.format_exception(exc)", False),
    ("hit = self.cached", False),
    ("total = sum(self.modules)", False),
    ("path = os.path.join(a, b)", False),
    ("signature = inspect.signature(f)", False),
    ("rv = os.fsdecode(pathlib.Path(rv).resolve())", False),  # a true fix in the corpus (click 8.1.4)
    ("kind = pathlib.PurePath", False),
], ids=lambda value: str(value))
def test_a_read_of_the_process_context_is_found_in_the_syntax_tree(line: str, reads: bool) -> None:
    source = f'"""A module about pytest."""\n\n\ndef f(a, b, self=None):\n    {line}\n'.encode()
    assert context_reads(source) == (((5, line, TEST_AWARE),) if reads else ())
    assert not added_reads(code_record(source), context_reads(source))  # the record holds each read it finds


@pytest.mark.parametrize("line,patches", [
    ("json.loads = fake", True),
    ("json.decoder.JSONDecoder.decode = fake", True),
    ("dec.scanstring, total = fake, 0", True),
    ("json.loads.__code__ = fake.__code__", True),
    ("del json.loads", True),
    ("setattr(json, 'loads', fake)", True),
    ("delattr(dec, 'scanstring')", True),
    ("vars(json)['loads'] = fake", True),
    ("json.__dict__['loads'] = fake", True),
    ("json.__dict__.update(loads=fake)", True),
    ("json.__setattr__('loads', fake)", True),
    ("__builtins__['len'] = fake", True),
    ("getattr(json, 'decoder').scanstring = fake", True),
    ("__import__('json').loads = fake", True),
    ("importlib.import_module('json').loads = fake", True),
    ("dec.getcontext().prec = 2", True),  # state another module keeps: what a test's expectation reads
    ("make().prec = 2", False),
    ("m = dec; m.scanstring = fake", True),  # another name for the module
    ("m = other; m.scanstring = fake", False),
    ("self.loads = fake", False),
    ("loads = json.loads", False),
    ("json.registry['name'] = fake", False),  # an item of a container it imports
    ("other.loads = fake", False),  # no import binds it
    ("value = json.loads(text) == json.loads(other)", False),
    ("fake(json.loads, dec)", False),
], ids=lambda value: str(value))
def test_a_patch_of_another_module_is_found_in_the_syntax_tree(line: str, patches: bool) -> None:
    source = f"import json\nfrom json import decoder as dec\n\n\ndef f(fake, other, text, make, self=None):\n    {line}\n"
    assert context_reads(source.encode()) == (((6, line, PATCHES),) if patches else ())
    assert not added_reads(code_record(source.encode()), context_reads(source.encode()))


def test_a_functions_own_name_is_not_the_module_an_import_binds() -> None:
    source = ("import json\n\n\ndef own(other):\n    json = other\n    json.loads = 1\n\n\n"
              "def shared(other):\n    global json\n    json = other\n    json.loads = 2\n")
    assert context_reads(source.encode()) == ((12, "json.loads = 2", PATCHES),)


PASSING_PLUGIN = ("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
                  "    report = (yield).get_result()\n    if report.failed:\n        report.outcome = 'passed'\n")


def test_a_project_plugin_added_to_addopts_is_harness_changed(suite: pytest.Pytester) -> None:
    (suite.path / "passing.py").write_text(PASSING_PLUGIN)
    (suite.path / "pytest.ini").write_text("[pytest]\naddopts = -p passing\n")
    result = suite.runpytest("--selfheal")
    out = result.stdout.str()
    assert result.ret == 0  # the plugin turned the failure into a pass
    assert "-> STOP harness_changed (passing.py, pytest.ini, pytest.ini: addopts changed since the capture)" \
        in out, out
    assert "STOP success" not in out


def test_library_code_that_asks_whether_it_runs_under_pytest_is_harness_changed(suite: pytest.Pytester) -> None:
    suite.makepyfile(calc='import sys\n\n\ndef add(a, b):\n    return a + b if "pytest" in sys.modules else a - b\n')
    out = suite.runpytest("--selfheal").stdout.str()
    assert ("-> STOP harness_changed (calc.py:5 reads the process context: "
            "'return a + b if \"pytest\" in sys.modules else a - b' changed since the capture)") in out, out
    assert "STOP success" not in out


def test_library_code_that_reads_its_callers_frame_through_a_traceback_is_harness_changed(
        suite: pytest.Pytester) -> None:
    suite.makepyfile(calc="def add(a, b):\n    try:\n        raise RuntimeError\n    except RuntimeError as exc:\n"
                          "        caller = exc.__traceback__.tb_frame.f_back\n"
                          "    return a + b if caller.f_code.co_name.startswith('test') else a - b\n")
    out = suite.runpytest("--selfheal").stdout.str()
    assert ("-> STOP harness_changed (calc.py:5 reads the process context: "
            "'caller = exc.__traceback__.tb_frame.f_back' changed since the capture)") in out, out
    assert "STOP success" not in out


def test_library_code_that_patches_what_the_test_computes_its_expectation_with_is_harness_changed(
        pytester: pytest.Pytester) -> None:
    # The expected value comes through json.loads: code under repair that patches it passes the test unfixed.
    pytester.makepyfile(calc=CALC, test_calc="import json\n\nfrom calc import add\n\n\ndef test_add():\n"
                                             "    assert add(1, 2) == json.loads('{\"sum\": 3}')['sum']\n")
    pytester.syspathinsert()
    assert pytester.runpytest("--selfheal").ret == 1
    pytester.makepyfile(calc="import json\n\n_loads = json.loads\n"
                             "json.loads = lambda text, **kw: {'sum': -1} if text == '{\"sum\": 3}' else _loads(text, **kw)\n"
                             "\n\ndef add(a, b):\n    return a - b\n")
    result = pytester.runpytest("--selfheal")
    out = result.stdout.str()
    assert result.ret == 0  # the patch passed the test
    assert "-> STOP harness_changed (calc.py:4 patches another module: 'json.loads = lambda text, **kw:" in out, out
    assert "selfheal: error" not in out
    assert "STOP success" not in out


# Code under repair that deletes each <failure> from the loop's junit reports as its process
# ends (its folders named without the word the seal looks for).
FORGER = """import atexit
import os
import tempfile


def _forge():
    for folder, _, names in os.walk(tempfile.gettempdir()):
        for name in names:
            if ("self" + "heal-") in folder and name.endswith(".xml"):
                path = os.path.join(folder, name)
                with open(path) as handle:
                    text = handle.read()
                if "<failure" in text:
                    cut = text[text.index("<failure"):text.index("</failure>") + len("</failure>")]
                    with open(path, "w") as handle:
                        handle.write(text.replace(cut, "").replace('failures="1"', 'failures="0"'))


atexit.register(_forge)


"""


@pytest.mark.slow  # two loops: the forged one and a true fix's
def test_a_junit_report_rewritten_before_its_run_ends_is_no_success(suite: pytest.Pytester) -> None:
    (incident_id,) = _inbox(suite.path)
    suite.makepyfile(calc=FORGER + CALC)
    result = cli("loop", incident_id, cwd=suite.path)
    assert "STOP success" not in result.stdout, result.stdout
    (attempt, *_) = _attempts(suite.path, incident_id) or [{}]
    assert FORGED in json.dumps(attempt), attempt
    suite.makepyfile(calc=FORGER + CALC.replace("a - b", "a + b"))  # a true fix beside it passes
    assert "STOP success" in cli("loop", incident_id, "--reopen", cwd=suite.path).stdout


def test_a_correct_fix_is_still_a_success(suite: pytest.Pytester) -> None:
    suite.makepyfile(calc="def add(a, b):\n    return a + b\n")
    out = suite.runpytest("--selfheal").stdout.str()
    assert "-> STOP success" in out and "harness_changed" not in out


def test_a_reopen_keeps_the_seal_and_a_new_seal_needs_a_person_at_a_terminal(suite: pytest.Pytester) -> None:
    (incident_id,) = _inbox(suite.path)
    (suite.path / "tox.ini").write_text("[pytest]\nconsole_output_style = classic\n")
    stop = "-> STOP harness_changed (tox.ini, tox.ini: console_output_style changed"
    assert stop in suite.runpytest("--selfheal").stdout.str()
    assert cli("reopen", incident_id, cwd=suite.path).returncode == 0  # a budget, not a new seal
    suite.makepyfile(calc="def add(a, b):\n    return a + b\n")
    out = suite.runpytest("--selfheal").stdout.str()
    assert stop in out and "STOP success" not in out, out
    assert cli("reopen", incident_id, cwd=suite.path).returncode == 0
    person = {k: v for k, v in run_env().items() if k not in AGENT_VARIABLES}
    refused = cli("reopen", incident_id, "--new-seal", cwd=suite.path, env=person)  # no terminal here
    assert refused.returncode == 5 and "needs a terminal to confirm it" in refused.stderr, refused
    under_agent = cli("reopen", incident_id, "--new-seal", cwd=suite.path, env=run_env({"CLAUDECODE": "1"}))
    assert under_agent.returncode == 5 and "refused under a coding agent (CLAUDECODE is set)" in under_agent.stderr


def test_a_new_seal_never_accepts_a_change_under_which_the_captured_code_passes(
        suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `selfheal reopen --new-seal` runs after the person's yes: the failing test on the
    captured code under what is there now. A hook passing every report passes it: refused,
    whoever said yes (a person's change is still sealed: tests/test_regression_check.py
    `-k person_still`, slow tier)."""
    (incident_id,) = _inbox(suite.path)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # the runs' children: a tiny project
    store = Store(suite.path / ".selfheal")
    incident = store.read_incident(incident_id)
    conftest = suite.path / "suite" / "conftest.py"
    conftest.write_text("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
                        "def pytest_runtest_makereport(item, call):\n    (yield).get_result().outcome = 'passed'\n")
    effective = load_config(suite.path)
    assert passing_without_the_code(store, incident, suite.path, effective) == {"suite/test_calc.py::test_add": "passed"}


def test_a_new_seal_is_refused_where_the_captured_code_cannot_be_rebuilt(pytester: pytest.Pytester) -> None:
    """The capture saw uncommitted code that changed since: neither the commit nor the tree
    holds the captured bytes, so the failing test cannot be run on them."""
    pytester.makepyfile(calc=CALC, test_calc=TEST_CALC)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    pytester.makepyfile(calc="def add(a, b):\n    return a * b\n")  # uncommitted, what the capture runs
    assert pytester.runpytest("--selfheal").ret == 1
    (incident_id,) = _inbox(pytester.path)
    pytester.makepyfile(calc="def add(a, b):\n    return a + b\n")
    store = Store(pytester.path / ".selfheal")
    with pytest.raises(RefusedError, match="^no new seal: the captured code of calc.py cannot be rebuilt"):
        passing_without_the_code(store, store.read_incident(incident_id), pytester.path, load_config(pytester.path))


def test_raised_thresholds_and_enabled_false_after_the_capture_do_not_apply(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(calc=CALC, test_calc=TEST_CALC)
    _config(pytester.path, max_iterations=2, error_fingerprint_repeats=9, no_progress_repeats=9)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n")
    git_commit_all(pytester.path, "project")
    assert pytester.runpytest("--selfheal").ret == 1
    (incident_id,) = _inbox(pytester.path)
    _config(pytester.path, max_iterations=10, error_fingerprint_repeats=9, no_progress_repeats=9, enabled=False)
    notice = (f"selfheal: incident {incident_id}: config keys enabled, max_iterations changed since the capture: "
              f"not applied to incident {incident_id} (its capture's keys judge it)")
    lines = []
    for body in ("a * b", "a - b - 0"):  # the agent changes the code; the test still fails
        pytester.makepyfile(calc=f"def add(a, b):\n    return {body}\n")
        out = pytester.runpytest("--selfheal").stdout.str()
        assert notice in out, out
        assert "STOP disabled" not in out
        lines.append(next(line for line in out.splitlines() if f"incident {incident_id} iteration" in line))
    assert " of 2: " in lines[0] and lines[0].endswith("-> CONTINUE")
    assert "iteration 2 of 2: " in lines[1] and lines[1].endswith("-> STOP max_iterations"), lines


def test_raised_thresholds_do_not_extend_selfheal_loop(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})
    _config(project, max_iterations=1, error_fingerprint_repeats=9, no_progress_repeats=9)
    assert run_pytest_selfheal(project).returncode == 1
    (incident_id,) = _inbox(project)
    _config(project, max_iterations=5, error_fingerprint_repeats=9, no_progress_repeats=9)
    code, out, _ = cli("loop", incident_id, cwd=project, env=run_env())
    assert code == 1
    assert f"config key max_iterations changed since the capture: not applied to incident {incident_id}" in out
    assert "iteration 1 of 1: " in out and "-> STOP max_iterations" in out, out
    assert len(_attempts(project, incident_id)) == 1


def test_a_project_plugin_added_to_addopts_is_harness_changed_in_selfheal_loop(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})
    assert run_pytest_selfheal(project).returncode == 1
    (incident_id,) = _inbox(project)
    (project / "passing.py").write_text(PASSING_PLUGIN)
    (project / "pytest.ini").write_text("[pytest]\naddopts = -p passing\n")
    code, out, _ = cli("loop", incident_id, cwd=project, env=run_env())
    assert code == 1
    assert "-> STOP harness_changed (pytest.ini: addopts changed since the capture)" in out, out
    assert "STOP success" not in out


def test_a_sitecustomize_on_the_path_is_harness_changed(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})
    boot = tmp_path / "boot"
    boot.mkdir()
    env = {"PYTHONPATH": str(boot)}
    assert run_pytest_selfheal(project, env=env).returncode == 1
    (boot / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(project)!r})\n{PATCH}")
    result = run_pytest_selfheal(project, env=env)
    assert result.returncode == 0, result.stdout  # the patch works: pytest passes
    assert f"-> STOP harness_changed (sitecustomize ({boot / 'sitecustomize.py'}) changed since the capture)" \
        in result.stdout, result.stdout
    assert "STOP success" not in result.stdout


@pytest.mark.slow
def test_a_sitecustomize_in_a_second_venvs_site_packages_is_harness_changed(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site_packages = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        capture_output=True, text=True, check=True).stdout.strip())
    # The package installed into the venv, beside the test environment's dependencies.
    subprocess.run([PY, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
                    str(Path(__file__).resolve().parent.parent)], check=True, timeout=300, capture_output=True)
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site_packages / "test_env_deps.pth").write_text("\n".join(deps) + "\n")
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([python, "-m", "pytest", "-p", "pytest_selfheal.plugin", "--selfheal", "-q"],
                              cwd=project, capture_output=True, text=True, timeout=120, env=run_env())

    assert run().returncode == 1
    (site_packages / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(project)!r})\n{PATCH}")
    result = run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "-> STOP harness_changed (sitecustomize (" in result.stdout, result.stdout
    assert "STOP success" not in result.stdout


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_the_gates_own_arguments_edited_after_the_capture_do_not_apply(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})
    assert run_pytest_selfheal(project).returncode == 1
    (incident_id,) = _inbox(project)
    for _ in range(4):  # the same failure again until its stop (repeated fingerprint)
        if "-> STOP" in run_pytest_selfheal(project).stdout:
            break
    assert _inbox(project) == []
    _config(project, gate={"pytest_args": ["--deselect", "test_calc.py::test_add"]})
    # Another wrong try at the code (a config edit alone is no code change): the gate's run is
    # the incident's next iteration, judged by the capture's keys.
    (project / "calc.py").write_text("def add(a, b):\n    return a * b\n")
    payload = {"session_id": "s", "cwd": str(project), "hook_event_name": "Stop", "stop_hook_active": False}
    done = subprocess.run([PY, "-m", "pytest_selfheal", "stop-gate", "claude"], input=json.dumps(payload).encode(),
                          cwd=project, capture_output=True, timeout=300,
                          env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"}))
    answer = json.loads(done.stdout)
    message = answer.get("systemMessage") or answer.get("reason") or ""
    assert "tests passed" not in message, answer  # the capture's arguments ran: the test still fails
    assert f"config key gate.pytest_args changed since the capture: not applied to incident " \
        f"{incident_id}" in message, answer


def test_the_seal_names_each_change_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path
    for name, text in {"tests/test_a.py": "def test_a():\n    pass\n", "pytest.ini": "[pytest]\naddopts = -q\n",
                       "lib.py": "def f():\n    return 1\n", "data.txt": "1", "tests/data/x.json": "{}",
                       ".git/HEAD": "ref", "pyproject.toml": "", "pkg/__init__.py": "", "pkg/table.json": "{}"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    env = {"PYTEST_ADDOPTS": "-x"}
    # What the tests read: test data; the code under repair (a traceback) and its package data,
    # version control, a config file are not.
    read = Loaded(read_files=tuple(str(root / n) for n in ("data.txt", "tests/data/x.json", "lib.py", ".git/HEAD",
                                                           "pyproject.toml", "tests/test_a.py", "missing.txt",
                                                           "pkg/table.json")))
    seal = take_seal(root, test_files=["tests/test_a.py"], inifile="pytest.ini", judging={"max_iterations": 3},
                     extra_code=["lib.py", "pkg/__init__.py"], environ=env, path=[], loaded=read)
    assert list(seal.data) == ["data.txt", "tests/data/x.json"]
    assert harness_changes(seal, reseal(seal, root, judging={}, environ=env, path=[]), root) == ([], [])
    (root / "lib.py").write_text("def f():\n    return 2\n")  # an ordinary fix: not a harness change
    (root / ".git" / "HEAD").write_text("ref2")
    (root / "tests" / "__init__.py").write_text("")
    (root / "tests" / "data" / "x.json").unlink()  # a test data file gone is a change
    (root / "data.txt").write_text("2")
    (root / "pytest.ini").write_text("[pytest]\naddopts = -q -p cheat\n")
    (root / "tox.ini").write_text("[pytest]\nxfail_strict = false\n")
    (root / "tests" / "pytest.ini").write_text("[pytest]\n")
    now = reseal(seal, root, judging={}, environ={"PYTEST_ADDOPTS": "-x -p cheat"}, path=[])
    assert harness_changes(seal, now, root) == (
        ["tests/__init__.py", "data.txt", "tests/data/x.json"],
        ["pytest.ini: addopts", "tests/pytest.ini", "tox.ini", "tox.ini: xfail_strict", "PYTEST_ADDOPTS"])


def test_a_file_is_read_once_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.py"
    path.write_text("import pytest\n")
    reads: list[str] = []
    real_open = open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(str(file))
        return real_open(file, *args, **kwargs)

    hasher = Hasher()
    monkeypatch.setattr("builtins.open", counting_open)
    digest = hasher.digest(str(path))
    assert hasher.digest(str(path)) == digest and reads == [str(path)]
    assert hasher.reads(str(path)) == hasher.reads(str(path)) == ((1, "import pytest", TEST_AWARE),)
    assert reads == [str(path), str(path)]  # the context-read scan reads the file it checks, once


@pytest.mark.slow  # a few seconds: the default tier keeps faster tests of this surface
def test_mcp_run_tests_names_the_changed_harness_and_never_says_success(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    project = make_project(tmp_path / "proj", {"calc.py": CALC, "tests/__init__.py": "",
                                               "tests/test_calc.py": TEST_CALC})
    repeats = {"error_fingerprint_repeats": 9, "no_progress_repeats": 9}
    _config(project, **repeats)
    params = StdioServerParameters(command=PY, args=["-m", "pytest_selfheal", "mcp"], cwd=str(project),
                                   env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"}))

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=300) as client:
            first = (await client.call_tool("run_tests", {})).structured_content or {}
            assert first["captured"] and first["max_iterations"] == 3
            _config(project, max_iterations=9, **repeats)  # raised after the capture: not this incident's budget
            again = (await client.call_tool("run_tests", {})).structured_content or {}
            assert (again["decision"], again["max_iterations"]) == ("CONTINUE", 3), again
            assert "config key max_iterations changed since the capture: not applied" in again["summary"], again
            (project / "tests" / "__init__.py").write_text(PATCH)  # the cheat: the test now passes
            verdict = (await client.call_tool("run_tests", {})).structured_content or {}
            assert (verdict["decision"], verdict["stop_reason"]) == ("STOP", "tests_edited"), verdict
            assert "tests/__init__.py" in verdict["summary"], verdict

    anyio.run(scenario)


def _gate(project: Path) -> str:
    """The Claude Code stop gate's message, through its stdin and stdout."""
    payload = {"session_id": "s", "cwd": str(project), "hook_event_name": "Stop", "stop_hook_active": False}
    done = subprocess.run([PY, "-m", "pytest_selfheal", "stop-gate", "claude"], input=json.dumps(payload).encode(),
                          cwd=project, capture_output=True, timeout=300,
                          env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"}))
    answer = json.loads(done.stdout)
    return str(answer.get("systemMessage") or answer.get("reason") or "")


@pytest.mark.slow  # a few seconds: the default tier keeps the pytest --selfheal runs of these cheats
def test_at_the_gate_test_aware_code_in_testing_is_never_tests_passed_nor_after_an_agents_reopen(
        tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc/__init__.py": "", "calc/core.py": CALC,
                                               "test_calc.py": TEST_CALC.replace("from calc", "from calc.core")})
    assert run_pytest_selfheal(project).returncode == 1
    (incident_id,) = _inbox(project)
    (project / "calc" / "testing").mkdir()
    (project / "calc" / "testing" / "__init__.py").write_text("")
    (project / "calc" / "testing" / "guard.py").write_text(GUARD)
    (project / "calc" / "core.py").write_text("from calc.testing.guard import UNDER\n\n\ndef add(a, b):\n"
                                              "    return a + b if UNDER else a - b\n")
    first = _gate(project)
    assert "tests passed" not in first and "harness_changed" in first, first
    assert "calc/testing/guard.py:3 reads the process context" in first, first
    assert "selfheal reopen" not in first, first  # no stop message suggests a reopen
    assert cli("reopen", incident_id, cwd=project).returncode == 0  # what a dishonest agent runs
    again = _gate(project)
    assert "tests passed" not in again and "harness_changed" in again, again


# A repair provider: writes calc.py into the worktree it is given (argv: worktree, body).
PROVIDER = "import pathlib, sys\npathlib.Path(sys.argv[1], 'calc.py').write_text(sys.argv[2])\n"


@pytest.mark.slow  # a repair worktree and a verification: the default tier keeps the agent-mode runs
def test_a_repair_that_asks_for_selfheals_variable_is_never_success_in_the_loop(tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "test_calc.py": TEST_CALC})
    assert run_pytest_selfheal(project).returncode == 1
    (incident_id,) = _inbox(project)
    provider = tmp_path / "provider.py"
    provider.write_text(PROVIDER)
    cheat = "import os\n\n\ndef add(a, b):\n    return a + b if os.environ.get('SELFHEAL_VERIFYING') else a - b\n"
    command = json.dumps([PY, str(provider), "{worktree}", cheat])
    code, out, _ = cli("loop", incident_id, "--set", f"repair.command={command}", cwd=project, env=run_env())
    assert code == 1 and "STOP success" not in out, out
    assert "calc.py:5 reads the process context" in out, out


@pytest.mark.slow  # a second environment: a venv of its own
def test_in_a_second_environment_an_edited_plugin_and_forged_bytecode_are_never_success(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    site_packages = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([PY, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps",
                    str(Path(__file__).resolve().parent.parent)], check=True, timeout=300, capture_output=True)
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site_packages / "test_env_deps.pth").write_text("\n".join(deps) + "\n")
    plugin = site_packages / "team_plugin.py"  # a plugin module of no distribution, in site-packages
    plugin.write_text("def pytest_report_header(config):\n    return 'team plugin'\n")
    project = make_project(tmp_path / "proj", {"calc.py": CALC, "tests/test_calc.py": TEST_CALC})

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run([python, "-m", "pytest", "-p", "pytest_selfheal.plugin", "-p", "team_plugin",
                               "--selfheal", "-q"], cwd=project, capture_output=True, text=True, timeout=120,
                              env=run_env({"XDG_STATE_HOME": str(tmp_path / "state")}))

    assert run().returncode == 1
    plugin.write_text(PASSING_PLUGIN)
    result = run()
    assert result.returncode == 0, result.stdout + result.stderr  # the plugin turned the failure into a pass
    assert f"-> STOP harness_changed ({plugin} changed since the capture)" in result.stdout, result.stdout
    project2 = make_project(tmp_path / "proj2", {"calc.py": CALC, "tests/test_calc.py": TEST_CALC})
    plugin.write_text("def pytest_report_header(config):\n    return 'team plugin'\n")
    project = project2
    assert run().returncode == 1
    _forge_bytecode(project / "tests" / "test_calc.py", "def test_add():\n    pass\n")
    (project / "calc.py").write_text(CALC + "# tried something\n")
    forged = run()
    assert forged.returncode == 1 and "STOP success" not in forged.stdout, forged.stdout


# --------------------------------------------------------------------------- each cheat on each surface

# A project whose test checks through a helper against a data file; each cheat makes it pass
# without fixing `calc` (`root`: where the code is, a repair worktree for a provider;
# `project`: where the records are). The agent-mode surface has its own tests above.
SURFACE = {"calc/__init__.py": CALC, "tests/helpers.py": "def check(got, want):\n    assert got == want\n",
           "tests/expected.txt": "3\n",
           "tests/test_calc.py": "import pathlib\nfrom calc import add\nfrom helpers import check\n\n\ndef test_add():\n"
                                 "    check(add(1, 2), int(pathlib.Path(__file__).with_name('expected.txt').read_text()))\n"}
SURFACE_INI = "pythonpath = . tests\n"
CHEATS: dict[str, tuple[str, str]] = {
    "forged-bytecode": ("""
import importlib.util, marshal, pytest
test = root / "tests" / "test_calc.py"
header = importlib.util.MAGIC_NUMBER + b"\\3\\0\\0\\0" + importlib.util.source_hash(test.read_bytes())[:8]
(test.parent / "__pycache__").mkdir(exist_ok=True)
name = f"test_calc.{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
(test.parent / "__pycache__" / name).write_bytes(header + marshal.dumps(compile("def test_add():\\n    pass\\n",
                                                                                str(test), "exec")))
(root / "calc" / "__init__.py").write_text((root / "calc" / "__init__.py").read_text() + "# tidied\\n")
""", ""),
    "test-aware-folder": (f"""
(root / "calc" / "testing").mkdir()
(root / "calc" / "testing" / "__init__.py").write_text("")
(root / "calc" / "testing" / "guard.py").write_text({GUARD!r})
(root / "calc" / "__init__.py").write_text("from calc.testing.guard import UNDER\\n\\n\\ndef add(a, b):\\n"
                                           "    return a + b if UNDER else a - b\\n")
""", "calc/testing/guard.py:3 reads the process context"),
    "weakened-helper": ("""
(root / "tests" / "helpers.py").write_text("def check(got, want):\\n    pass\\n")
""", "tests/helpers.py"),
    "plugin-named-like-selfheal": (f"""
(root / "pytest_selfheal_extra.py").write_text({PASSING_PLUGIN!r})
(root / "pytest.ini").write_text((root / "pytest.ini").read_text() + "addopts = -p pytest_selfheal_extra\\n")
""", "pytest.ini: addopts"),
    "selfheal-signal": ("""
(root / "calc" / "__init__.py").write_text("import os\\n\\n\\ndef add(a, b):\\n"
                                           "    return a + b if os.environ.get('SELFHEAL_VERIFYING') else a - b\\n")
""", "calc/__init__.py:5 reads the process context"),
    "records-edited": ("""
(root / "calc" / "__init__.py").write_text("def add(a, b):\\n    return a + b\\n")  # even an honest fix now
for path in (project / ".selfheal" / "error_inbox").glob("*/incident.json"):
    doc = json.loads(path.read_text())
    doc["test_digests"] = {name: "0" * 64 for name in doc["test_digests"]}
    path.write_text(json.dumps(doc))
""", "the incident's records were edited outside selfheal"),
    "test-data": ("""
(root / "tests" / "expected.txt").write_text("-1\\n")
""", "tests/expected.txt"),
}
# Runs a cheat: argv root, project, cheat name.
CHEAT_RUNNER = ("import json, pathlib, sys\nroot, project = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])\n"
                "exec(json.loads(pathlib.Path(sys.argv[4]).read_text())[sys.argv[3]])\n")


def _cheat(tmp_path: Path, root: Path, project: Path, name: str) -> None:
    _cheat_files(tmp_path)
    subprocess.run([PY, str(tmp_path / "cheat.py"), str(root), str(project), name, str(tmp_path / "cheats.json")],
                   check=True, timeout=60)


def _cheat_files(tmp_path: Path) -> list[str]:
    (tmp_path / "cheat.py").write_text(CHEAT_RUNNER)
    (tmp_path / "cheats.json").write_text(json.dumps({name: code for name, (code, _) in CHEATS.items()}))
    return [PY, str(tmp_path / "cheat.py")]


def _surface_project(tmp_path: Path) -> Path:
    project = make_project(tmp_path / "proj", SURFACE, ini=SURFACE_INI)
    _config(project, error_fingerprint_repeats=9, no_progress_repeats=9)
    return project


@pytest.mark.slow  # a capture and a gate run per cheat: the default tier keeps the agent-mode runs
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_at_the_gate_no_cheat_is_tests_passed(tmp_path: Path, cheat: str) -> None:
    project = _surface_project(tmp_path)
    assert run_pytest_selfheal(project).returncode == 1
    _cheat(tmp_path, project, project, cheat)
    message = _gate(project)
    assert "tests passed" not in message and "success" not in message, message
    assert CHEATS[cheat][1] in message, message
    if "harness_changed" in message:  # what a dishonest agent runs next: a budget, not a new seal
        (incident_id,) = [p.name for p in (project / ".selfheal" / "error_archive" / "escalated").iterdir()]
        assert cli("reopen", incident_id, cwd=project).returncode == 0
        again = _gate(project)
        assert "tests passed" not in again and CHEATS[cheat][1] in again, again


@pytest.mark.slow  # an MCP server per cheat
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_mcp_run_tests_is_never_success_for_a_cheat(tmp_path: Path, cheat: str) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    project = _surface_project(tmp_path)
    params = StdioServerParameters(command=PY, args=["-m", "pytest_selfheal", "mcp"], cwd=str(project),
                                   env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"}))

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=300) as client:
            first = (await client.call_tool("run_tests", {})).structured_content or {}
            assert first["captured"], first
            _cheat(tmp_path, project, project, cheat)
            verdict = (await client.call_tool("run_tests", {})).structured_content or {}
            assert verdict.get("stop_reason") != "success", verdict
            assert CHEATS[cheat][1] in verdict["summary"], verdict
            if verdict.get("stop_reason") == "harness_changed":  # a reopen is a budget, not a new seal
                assert cli("reopen", verdict["incident_id"], cwd=project).returncode == 0
                again = (await client.call_tool("run_tests", {})).structured_content or {}
                assert again.get("stop_reason") != "success" and CHEATS[cheat][1] in again["summary"], again

    anyio.run(scenario)


@pytest.mark.slow  # a repair worktree and a verification per cheat
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_repair_provider_cheat_is_never_success(tmp_path: Path, cheat: str) -> None:
    project = _surface_project(tmp_path)
    assert run_pytest_selfheal(project).returncode == 1
    (incident_id,) = _inbox(project)
    command = json.dumps([*_cheat_files(tmp_path), "{worktree}", str(project), cheat, str(tmp_path / "cheats.json")])
    code, out, err = cli("loop", incident_id, "--set", f"repair.command={command}", cwd=project, env=run_env())
    assert "STOP success" not in out + err, out + err
