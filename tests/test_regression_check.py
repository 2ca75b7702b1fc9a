"""The regression check before every `success`: a fix that breaks other tests is no success.

The scenario: `calc.py` (`_scale`, `add`, `mul`; the bug in `mul`), `tests/test_calc.py`
(`test_add`, `test_mul`), `tests/test_invoice.py` (`total()` in another module, built on
`add`) and `tests/test_unrelated.py` (imports nothing of the project). A repair that "fixes"
`mul` by changing the shared `_scale` breaks `test_add` and `test_total`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from fake_github import FakeGitHub
from helpers import GITIGNORE, cli, effective_config, git_commit_all, make_project, run_env, run_pytest_selfheal
from test_ci import actions_env, ours, outputs_of, run_ci
from test_mcp import session
from test_seal import FORGER as JUNIT_FORGER

from pytest_selfheal.errors import EXIT_OK, EXIT_UNRESOLVED, ConfigError
from pytest_selfheal.loop.decision import decide
from pytest_selfheal.loop.policy import PRECEDENCE, LoopPolicy, Observation
from pytest_selfheal.loop.regression import RunOutcomes, affected_test_files, check_regressions, covers, spectrum_reach
from pytest_selfheal.loop.verify import VerificationRun
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.stops import stop_facts
from pytest_selfheal.records.vocab import FinalStatus, StopReason

CALC = """\
def _scale(x):
    return x


def add(a, b):
    return _scale(a) + _scale(b)


def mul(a, b):
    return a * b - 1
"""
FILES = {
    "calc.py": CALC,
    "invoice.py": "from calc import add\n\n\ndef total(items):\n    out = 0\n    for item in items:\n"
                  "        out = add(out, item)\n    return out\n",
    "tests/test_calc.py": "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
                          "def test_mul():\n    assert mul(2, 3) == 6\n",
    "tests/test_invoice.py": "from invoice import total\n\n\ndef test_total():\n    assert total([1, 2]) == 3\n",
    # Appends a line each time it runs: the check must never run it (it imports nothing changed).
    "tests/test_unrelated.py": "import json\nimport pathlib\n\n\ndef test_json():\n"
                               "    with open(pathlib.Path(__file__).parent.parent / 'unrelated.runs', 'a') as f:\n"
                               "        f.write('ran\\n')\n    assert json.loads('1') == 1\n",
}
INI = "pythonpath = .\n"

# The "agent": MODE WORKTREE. `good` fixes mul alone; `bad` fixes mul and breaks the shared helper.
AGENT = textwrap.dedent(
    """
    import pathlib, sys
    mode, worktree = sys.argv[1:3]
    calc = pathlib.Path(worktree, "calc.py")
    text = calc.read_text().replace("a * b - 1", "a * b")
    if mode == "bad":
        text = text.replace("    return x\\n", "    return x + 1\\n", 1)
    calc.write_text(text)
    """
)


def _project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj", FILES, ini=INI, gitignore=GITIGNORE + "*.runs\n")


def _capture(project: Path, *args: str) -> str:
    result = run_pytest_selfheal(project, *args)
    assert result.returncode == 1, result.stdout + result.stderr
    (incident,) = [p.name for p in (project / ".selfheal" / "error_inbox").iterdir()]
    return incident


# Appends a line at every pytest session in the project: the capture, the run, the check's own runs.
SESSIONS = ("import pathlib\n\n\ndef pytest_sessionstart(session):\n"
            "    with open(pathlib.Path(__file__).parent / 'sessions.runs', 'a') as f:\n        f.write('ran\\n')\n")


def _runs(project: Path, marker: str = "unrelated.runs") -> int:
    path = project / marker
    return len(path.read_text().splitlines()) if path.exists() else 0


def _attempts(project: Path, incident_id: str) -> list[dict[str, Any]]:
    found = list((project / ".selfheal").glob(f"**/{incident_id}"))
    runs = [p for p in found if p.parent.name == "error_runs"] or found
    return [json.loads(p.read_text()) for p in sorted(runs[0].glob("attempt_*.json"))]


def _loop(project: Path, incident_id: str, mode: str, agent: Path) -> Any:
    command = json.dumps([sys.executable, str(agent), mode, "{worktree}"])
    return cli("loop", incident_id, "--set", f"repair.command={command}",
               cwd=project)


# --------------------------------------------------------------------------- which tests can reach the change


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_only_the_test_modules_that_import_the_change_directly_or_through_project_modules(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    assert affected_test_files(root, ["calc.py"]) == ["tests/test_calc.py", "tests/test_invoice.py"]
    assert affected_test_files(root, ["invoice.py"]) == ["tests/test_invoice.py"]
    assert affected_test_files(root, ["tests/test_unrelated.py"]) == ["tests/test_unrelated.py"]
    assert affected_test_files(root, ["README.md"]) == []


def test_relative_imports_and_packages_are_followed(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "src/shop/__init__.py": "",
        "src/shop/cart.py": "from .prices import price\n",
        "src/shop/prices.py": "def price():\n    return 1\n",
        "tests/test_cart.py": "from shop import cart\n",
        "tests/test_other_test.py": "import os\n",
        "tests/other_test.py": "import shop.cart\n",
    })
    assert affected_test_files(root, ["src/shop/prices.py"]) == ["tests/other_test.py", "tests/test_cart.py"]


def test_what_cannot_be_known_statically_runs_the_whole_command(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**FILES, "conftest.py": "", "plugin_mod.py": "X = 1\n", "data.json": "{}"})
    assert affected_test_files(root, ["conftest.py"]) is None  # a conftest reaches every test below it
    assert affected_test_files(root, ["pyproject.toml"]) is None
    assert affected_test_files(root, ["data.json"]) is None  # who reads it cannot be known
    assert affected_test_files(root, ["plugin_mod.py"]) is None  # imported by nothing: by name, at run time


def test_a_module_importing_by_a_computed_name_may_reach_any_change(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**FILES, "loader.py": "import importlib\n\n\ndef load(n):\n"
                                                  "    return importlib.import_module(n)\n",
                            "tests/test_loader.py": "from loader import load\n",
                            "named.py": "import importlib\nimportlib.import_module('invoice')\n",
                            "tests/test_named.py": "import named\n"})
    assert affected_test_files(root, ["invoice.py"]) == ["tests/test_invoice.py", "tests/test_loader.py",
                                                         "tests/test_named.py"]


def test_code_reached_by_name_without_an_import_statement_is_followed(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**FILES, **{
        "tests/test_skip.py": "import pytest\ncalc = pytest.importorskip('calc')\n",
        "tests/test_run.py": "import runpy\nNS = runpy.run_module('invoice')\n",
        "tests/test_path.py": "import importlib.util\nSPEC = importlib.util.spec_from_file_location('m', '../calc.py')\n",
        "tests/test_child.py": "import subprocess\nsubprocess.run(['python', '-c', 'import invoice'])\n",
    }})
    assert affected_test_files(root, ["calc.py"]) == [
        "tests/test_calc.py", "tests/test_child.py", "tests/test_invoice.py", "tests/test_path.py",
        "tests/test_run.py", "tests/test_skip.py"]
    assert "tests/test_unrelated.py" not in (affected_test_files(root, ["calc.py"]) or [])
    shop = _tree(tmp_path / "shop", {"src/shop/__init__.py": "", "src/shop/prices.py": "",
                                     "tests/test_words.py": "def test_words():\n    assert 'prices' != 'shop.cart'\n",
                                     "tests/test_whole.py": "import pytest\nprices = pytest.importorskip('shop.prices')\n"})
    assert affected_test_files(shop, ["src/shop/prices.py"]) == ["tests/test_whole.py"]  # a bare word names nothing


def test_a_fixture_or_hook_reaching_the_change_reaches_the_tests_that_use_it(tmp_path: Path) -> None:
    fixture = "import pytest\nimport calc\n\n\n@pytest.fixture\ndef c():\n    return calc\n"
    root = _tree(tmp_path, {**FILES, "tests/unit/conftest.py": fixture,
                            "tests/unit/test_fx.py": "def test_fx(c):\n    assert c.add(1, 1) == 2\n",
                            "tests/pkg/__init__.py": "import invoice\n", "tests/pkg/test_in.py": "X = 1\n"})
    assert affected_test_files(root, ["calc.py"]) == [
        "tests/pkg/test_in.py", "tests/test_calc.py", "tests/test_invoice.py", "tests/unit/test_fx.py"]
    # A plugin loaded by configuration: which tests use its fixtures cannot be known.
    plugin = _tree(tmp_path / "plugin", {**FILES, "tests/plug.py": fixture,
                                         "tests/test_pl.py": "def test_pl(c):\n    assert c.add(1, 1) == 2\n"})
    assert affected_test_files(plugin, ["calc.py"]) is None


# A test that loads `fmt.py` from a path named in a data file: no import or string names it.
LOADED = {
    "fmt.py": "SEP = ','\n\n\ndef fmt(x):\n    return str(x)\n\n\ndef other(x):\n    return x\n",
    "app.py": "from fmt import fmt\n\n\ndef show(x):\n    return fmt(x)\n",
    "plugins.txt": "fmt\n",
    "loader.py": "import importlib.util\nimport pathlib\n\nHERE = pathlib.Path(__file__).parent\n\n\n"
                 "def load():\n    name = (HERE / 'plugins.txt').read_text().strip()\n"
                 "    spec = importlib.util.spec_from_file_location(name, HERE / (name + '.py'))\n"
                 "    module = importlib.util.module_from_spec(spec)\n    spec.loader.exec_module(module)\n"
                 "    return module\n",
    "tests/test_app.py": "from app import show\n\n\ndef test_show():\n    assert show(1) == '1'\n",
    "tests/test_loader.py": "from loader import load\n\n\ndef test_load():\n    assert load().fmt(1) == '1'\n",
}


def test_a_test_whose_recorded_spectrum_entered_a_changed_function_runs_too(tmp_path: Path) -> None:
    root = make_project(tmp_path / "proj", LOADED)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    spectrum = {"tests/test_loader.py::test_load": {("loader.py", "load", 7), ("fmt.py", "fmt", 4)},
                "tests/test_app.py::test_show": {("app.py", "show", 4), ("fmt.py", "fmt", 4)}}
    # The imports alone never find the loader's test: nothing names fmt.py there.
    assert affected_test_files(root, ["fmt.py"]) == ["tests/test_app.py"]
    (root / "fmt.py").write_text(LOADED["fmt.py"].replace("str(x)", "repr(x)"))
    assert spectrum_reach(root, commit, ["fmt.py"], spectrum) == {"tests/test_app.py", "tests/test_loader.py"}
    # A function no recorded test entered: none; module level: every test that ran the file.
    (root / "fmt.py").write_text(LOADED["fmt.py"].replace("return x", "return -x"))
    assert spectrum_reach(root, commit, ["fmt.py"], spectrum) == set()
    (root / "fmt.py").write_text(LOADED["fmt.py"].replace("SEP = ','", "SEP = ';'"))
    assert spectrum_reach(root, commit, ["fmt.py"], spectrum) == {"tests/test_app.py", "tests/test_loader.py"}
    assert spectrum_reach(root, commit, ["fmt.py"], {}) == set()


@pytest.mark.slow
def test_a_capture_with_a_spectrum_checks_the_test_that_loads_the_change_at_run_time(tmp_path: Path) -> None:
    files = {**LOADED, "fmt.py": LOADED["fmt.py"] + "\n\ndef parse(s):\n    return int(s) + 1\n",
             "tests/test_app.py": "from fmt import parse\n\n\ndef test_parse():\n    assert parse('2') == 2\n"}
    project = make_project(tmp_path / "proj", files, ini=INI)
    incident_id = _capture(project, "--selfheal-spectrum")
    # Fixes parse, and breaks fmt, which only the loader's test runs.
    (project / "fmt.py").write_text(files["fmt.py"].replace("int(s) + 1", "int(s)").replace("str(x)", "str(x) + '!'"))
    result = run_pytest_selfheal(project)
    assert "fixed `test_parse`; broke `test_load`" in result.stdout, result.stdout + result.stderr
    assert "1 test module(s) that import the change, 1 whose recorded spectrum ran it" in result.stdout
    assert _attempts(project, incident_id)[-1]["regressions"] == ["tests/test_loader.py::test_load"]


def test_a_change_that_patches_another_module_may_reach_any_test(tmp_path: Path) -> None:
    root = _tree(tmp_path, FILES)
    for patch in ("json.loads = str\n", "import json as j\nj.loads += 1\n", "setattr(json, 'loads', str)\n",
                  "del json.loads\n"):
        (root / "calc.py").write_text("import json\n" + patch + CALC)
        assert affected_test_files(root, ["calc.py"]) is None, patch
    (root / "calc.py").write_text("import json\nDATA = json.loads('1')\nitems = {}\nitems.x = 1\n" + CALC)
    assert affected_test_files(root, ["calc.py"]) == ["tests/test_calc.py", "tests/test_invoice.py"]


# --------------------------------------------------------------------------- flaky, or made intermittent


def _turns(under_change: list[bool], on_captured: list[bool]) -> Any:
    """A runner whose `test_add` passes (True) or fails by turn, in the changed tree and in
    the captured one: what each pytest child would have written to its junit."""
    turns = {"changed": iter(under_change), "captured": iter(on_captured)}

    def runner(argv: list[str], *, cwd: Path, junit_path: Path, **_: Any) -> VerificationRun:
        passed = next(turns[cwd.name])
        junit_path.write_text('<testsuite><testcase classname="tests.test_calc" name="test_add">'
                              + ("" if passed else '<failure message="assert 6 == 5"/>') + "</testcase></testsuite>")
        return VerificationRun(argv, 0 if passed else 1, False, 0.1, "", junit_path)
    return runner


@pytest.mark.parametrize(("on_captured", "verdict"), [
    ([True, True, True], "broken"),  # stable on the captured code: the change made it intermittent
    ([True, False], "flaky"),  # intermittent there too
])
def test_a_test_passing_its_re_runs_is_flaky_only_if_the_captured_code_fails_it_too(
        tmp_path: Path, on_captured: list[bool], verdict: str) -> None:
    trees = [_tree(tmp_path / name, {"tests/test_calc.py": ""}) for name in ("changed", "captured")]
    check = check_regressions(
        mode="full", incident=Incident(step="tests/test_calc.py::test_mul", failure_class="", message="",
                                       error_signature=""),
        tree=trees[0], runner=_turns([False, True, True], on_captured), base_argv=["python", "-m", "pytest"],
        trusted=[], whole_command=[], selection=["tests/test_calc.py::test_mul"], budget_seconds=60, commit=None,
        captured_tree=trees[1])
    assert check is not None
    assert (check.broken, check.flaky) == ((("tests/test_calc.py::test_add",), ()) if verdict == "broken" else
                                           ((), ("tests/test_calc.py::test_add",)))
    if verdict == "broken":
        assert check.intermittent == ("`test_add` became intermittent under the change: failed 1 of 3, "
                                      "passed 3 of 3 on the captured code",)


# --------------------------------------------------------------------------- the decision (pure)


def _green(iteration: int, regressions: tuple[str, ...] = ()) -> Observation:
    outcomes = {"tests/test_calc.py::test_mul": "passed", **{n: "failed" for n in regressions}}
    fingerprints = tuple(f"fp-{n}" for n in regressions)
    return Observation(iteration, outcomes, fingerprints, ("ASSERTION",) * len(fingerprints), f"h{iteration}",
                       repair_result="diff", regressions=regressions)


CAPTURE = Observation(0, {"tests/test_calc.py::test_mul": "failed"}, ("fp-mul",), ("ASSERTION",), "h0")
BROKEN = ("tests/test_calc.py::test_add", "tests/test_invoice.py::test_total")


def test_a_fix_that_broke_tests_continues_while_the_budget_lasts_then_stops_regression() -> None:
    policy = LoopPolicy(max_iterations=2)
    first = decide(policy, [CAPTURE, _green(1, BROKEN)])
    assert first.action == "continue" and first.tests_fixed == ("tests/test_calc.py::test_mul",)
    last = decide(policy, [CAPTURE, _green(1, BROKEN), _green(2, BROKEN)])
    assert last.stop_reason == StopReason.REGRESSION and last.final_status == FinalStatus.ESCALATED
    # It outranks the exhaustion it ends with: the repeat and the iteration budget.
    assert {StopReason.REPEATED_FINGERPRINT, StopReason.MAX_ITERATIONS} <= set(last.conditions)
    assert "test_add, test_total" in last.message
    assert decide(policy, [CAPTURE, _green(1, BROKEN), _green(2)]).stop_reason == StopReason.SUCCESS


def test_regression_sits_after_the_specific_stops_and_before_exhaustion() -> None:
    at = PRECEDENCE.index(StopReason.REGRESSION)
    assert PRECEDENCE.index(StopReason.SUCCESS) < at < PRECEDENCE.index(StopReason.REPEATED_FINGERPRINT)
    assert at > PRECEDENCE.index(StopReason.TOOLING_ENV) and at < PRECEDENCE.index(StopReason.MAX_ITERATIONS)
    assert stop_facts(StopReason.REGRESSION).final_status == FinalStatus.ESCALATED


def test_the_mode_is_one_of_affected_full_off(tmp_path: Path) -> None:
    assert effective_config(tmp_path).settings.verification.regression == "affected"
    assert effective_config(tmp_path, "verification.regression=off").settings.verification.regression == "off"
    with pytest.raises(ConfigError, match="one of affected, full, off"):
        effective_config(tmp_path, "verification.regression=some")


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_a_repair_that_breaks_neighbours_is_not_a_success_and_names_them(tmp_path: Path) -> None:
    project = _project(tmp_path)
    incident_id = _capture(project)
    assert _runs(project) == 1
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    result = _loop(project, incident_id, "bad", agent)
    assert result.returncode == EXIT_UNRESOLVED, result.stdout + result.stderr
    assert "fixed `test_mul`; broke `test_add`, `test_total`" in result.stdout
    assert "STOP regression" in result.stdout and "STOP success" not in result.stdout
    attempts = _attempts(project, incident_id)
    assert [a["regressions"] for a in attempts] == [list(BROKEN)] * 3
    assert attempts[-1]["stop_reason"] == "regression"
    prompt = next((project / ".selfheal").glob(f"**/{incident_id}/prompt_02.md")).read_text()
    assert "The last repair fixed `test_mul`; it broke `test_add`, `test_total`" in prompt
    assert attempts[0]["regression_tests_run"] == 3  # test_calc.py and test_invoice.py: never test_unrelated.py
    assert _runs(project) == 1
    assert (project / ".selfheal" / "error_archive" / "escalated" / incident_id).is_dir()


@pytest.mark.slow
def test_a_correct_fix_of_mul_alone_is_still_a_success(tmp_path: Path) -> None:
    project = _project(tmp_path)
    incident_id = _capture(project)
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    result = _loop(project, incident_id, "good", agent)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "STOP success" in result.stdout
    assert "the regression check ran 3 test(s) (2 test module(s) that import the change): nothing broken" in result.stdout
    assert _runs(project) == 1
    # The localisation run kept what the failing test's passing neighbours ran, for the check.
    kept = json.loads(next((project / ".selfheal").glob(f"**/{incident_id}/spectrum.json")).read_text())
    assert sorted(kept["tests"]["tests/test_calc.py::test_add"]) == [["calc.py", "_scale", 1], ["calc.py", "add", 5]]


@pytest.mark.slow
def test_the_captures_filters_narrow_its_localisation_run_never_its_regression_check(tmp_path: Path) -> None:
    heavy = "\n\n@pytest.mark.heavy\ndef test_heavy():\n    open('heavy.runs', 'a').write('ran\\n')\n"
    files = {**FILES, "tests/test_calc.py": "import pytest\n" + FILES["tests/test_calc.py"] + heavy,
             "tests/test_invoice.py": FILES["tests/test_invoice.py"] + "\n\ndef test_currency():\n    assert total([]) == 'EUR 0'\n"}
    project = make_project(tmp_path / "proj", files, ini=INI + "markers =\n    heavy\n", gitignore=GITIGNORE + "*.runs\n")
    # The run leaves out a heavy test and a test failing already.
    incident_id = _capture(project, "-m", "not heavy", "--deselect", "tests/test_invoice.py::test_currency")
    incident = json.loads(next((project / ".selfheal").glob(f"**/{incident_id}/incident.json")).read_text())
    assert incident["pytest_filters"] == ["-m", "not heavy", "--deselect", "tests/test_invoice.py::test_currency"]
    localised = cli("plan", incident_id, "--localise", cwd=project)
    assert "localising: running the 1 test file(s)" in localised.stderr, localised.stderr
    assert _runs(project, "heavy.runs") == 0  # the ranking learns from what the capture ran
    # The judge is not narrowed by what its invoker left out: the check runs them, and a test
    # failing on the captured code too is not the change's fault.
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    result = _loop(project, incident_id, "good", agent)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert ("the regression check ran 5 test(s) (2 test module(s) that import the change); "  # test_heavy too
            "1 failing on the captured code too: nothing broken") in result.stdout, result.stdout


@pytest.mark.slow
def test_a_check_whose_report_was_rewritten_knows_nothing(tmp_path: Path) -> None:
    project = _project(tmp_path)
    incident_id = _capture(project)
    agent = tmp_path / "agent.py"  # the bad repair, and code that deletes each <failure> as its run ends
    agent.write_text(AGENT + f"calc.write_text({JUNIT_FORGER!r} + calc.read_text())\n")
    result = _loop(project, incident_id, "bad", agent)
    assert "its junit report was changed after pytest wrote it" in result.stdout, result.stdout
    assert "STOP success" not in result.stdout


@pytest.mark.slow
def test_a_test_failing_on_the_captured_code_before_any_fix_does_not_block_success(tmp_path: Path) -> None:
    files = {**FILES, "tests/test_invoice.py": FILES["tests/test_invoice.py"]
             + "\n\ndef test_currency():\n    assert total([]) == 'EUR 0'\n"}
    project = make_project(tmp_path / "proj", files, ini=INI, gitignore=GITIGNORE + "*.runs\n")
    # The capture ran only test_calc.py: test_currency, failing already, was not part of it.
    incident_id = _capture(project, "tests/test_calc.py")
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    result = _loop(project, incident_id, "good", agent)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "1 failing on the captured code too" in result.stdout and "STOP success" in result.stdout


@pytest.mark.slow
def test_agent_mode_a_narrow_run_that_passes_mul_but_broke_neighbours_is_not_a_success(tmp_path: Path) -> None:
    project = _project(tmp_path)
    incident_id = _capture(project)
    (tmp_path / "agent.py").write_text(AGENT)
    subprocess.run([sys.executable, str(tmp_path / "agent.py"), "bad", str(project)], check=True)
    narrow = run_pytest_selfheal(project, "tests/test_calc.py::test_mul")
    assert narrow.returncode == 0, narrow.stdout + narrow.stderr
    assert f"incident {incident_id}: passes; not yet checked for regressions" in narrow.stdout
    assert "STOP" not in narrow.stdout and _attempts(project, incident_id) == []
    assert (project / ".selfheal" / "error_inbox" / incident_id).is_dir()
    # The capture's whole command runs the check: what the change broke keeps it open.
    result = run_pytest_selfheal(project)
    assert "fixed `test_mul`; broke `test_add`, `test_total`" in result.stdout
    assert "-> CONTINUE" in result.stdout and "STOP success" not in result.stdout
    assert _attempts(project, incident_id)[-1]["regressions"] == list(BROKEN)
    assert _runs(project) == 2  # the capture and the whole run: the check never ran it again


def test_a_narrower_passing_run_is_not_yet_checked_and_a_whole_run_is_checked_by_its_own_outcomes(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(calc=CALC, test_calc=FILES["tests/test_calc.py"], conftest=SESSIONS)
    (pytester.path / ".gitignore").write_text(".selfheal/\n__pycache__/\n*.runs\n")
    git_commit_all(pytester.path, "project")
    assert pytester.runpytest("--selfheal").ret == 1
    (incident,) = (pytester.path / ".selfheal" / "error_inbox").iterdir()
    pytester.makepyfile(calc=CALC.replace("a * b - 1", "a * b"))
    narrow = pytester.runpytest("--selfheal", "test_calc.py::test_mul")
    assert narrow.ret == 0
    narrow.stdout.fnmatch_lines([f"selfheal: incident {incident.name}: passes; not yet checked for regressions: "
                                 "this run is narrower than the capture's (its default selection), so it is not "
                                 "counted as an iteration; run pytest --selfheal *"])
    assert "STOP" not in narrow.stdout.str() and not list((pytester.path / ".selfheal").glob("**/attempt_*.json"))
    assert incident.is_dir() and (incident / "status.txt").read_text().strip() == "planned"
    # The whole run ran every test that can reach the change: the check takes its outcomes.
    whole = pytester.runpytest("--selfheal")
    whole.stdout.fnmatch_lines(["*-> STOP success", "*the regression check ran 2 test(s) (1 test module(s) that "
                                "import the change; 2 of them by this run itself): nothing broken"])
    # The capture, the narrow and the whole run, and the judged run of the failing test that
    # makes the whole run's pass a success: the check runs nothing of its own.
    assert _runs(pytester.path, "sessions.runs") == 4


def test_the_check_runs_only_what_the_run_asking_for_it_did_not() -> None:
    run = RunOutcomes({"tests/test_calc.py::test_add": "failed", "tests/test_calc.py::test_mul": "passed",
                       "tests/test_calc.py::test_ok[1]": "skipped", "tests/test_unrelated.py::test_json": "failed"},
                      ["tests/test_calc.py"])
    assert run.split(["tests/test_calc.py", "tests/test_invoice.py"], whole=False) == (
        ["tests/test_invoice.py"], {"tests/test_calc.py::test_add": "failed", "tests/test_calc.py::test_mul": "passed",
                                    "tests/test_calc.py::test_ok[1]": "skipped"})
    assert run.split(["tests/test_calc.py"], whole=False)[0] is None
    assert run.split([], whole=True) == ([], {})  # the capture ran pytest's default selection: wider than this run
    assert RunOutcomes(run.outcomes, []).split([], whole=True) == (None, dict(run.outcomes))
    # A module the run ran only part of is run whole by the check.
    part = RunOutcomes(run.outcomes, ["tests/test_calc.py::test_add"])
    assert part.split(["tests/test_calc.py"], whole=False) == (["tests/test_calc.py"], {})


def test_a_run_covers_the_capture_when_it_selects_all_it_selected() -> None:
    assert covers([], ["tests/test_calc.py"]) and covers(["."], ["tests/test_calc.py::test_mul"])
    assert covers(["tests"], ["tests/test_calc.py", "tests/test_invoice.py::test_total"])
    assert covers(["tests/test_calc.py::test_mul"], ["tests/test_calc.py::test_mul[1]"])
    assert not covers(["tests/test_calc.py::test_mul"], [])  # the capture ran pytest's default selection
    assert not covers(["tests/test_calc.py"], ["tests/test_calc.py", "tests/test_invoice.py"])
    assert not covers(["tests/test_calc"], ["tests/test_calc.py"])


@pytest.mark.slow
def test_agent_mode_the_check_runs_only_the_modules_the_run_did_not_and_names_what_the_run_broke(
        tmp_path: Path) -> None:
    project = make_project(tmp_path / "proj", {**FILES, "conftest.py": SESSIONS}, ini=INI,
                           gitignore=GITIGNORE + "*.runs\n")
    incident_id = _capture(project, "tests/test_calc.py")
    (tmp_path / "agent.py").write_text(AGENT)
    subprocess.run([sys.executable, str(tmp_path / "agent.py"), "bad", str(project)], check=True)
    # test_add failed in the run itself; test_invoice.py, which the run did not run, the check runs.
    result = run_pytest_selfheal(project, "tests/test_calc.py")
    assert "fixed `test_mul`; broke `test_add`, `test_total` (the regression check ran 3 test(s) (2 test module(s) " \
        "that import the change; 2 of them by this run itself))" in result.stdout, result.stdout
    assert "-> CONTINUE" in result.stdout and _attempts(project, incident_id)[-1]["regressions"] == list(BROKEN)
    # The capture and the run; the check's run of test_invoice.py and the re-run (the captured
    # code runs in a worktree of its own).
    assert _runs(project, "sessions.runs") == 4
    subprocess.run(["git", "checkout", "calc.py"], cwd=project, check=True)
    subprocess.run([sys.executable, str(tmp_path / "agent.py"), "good", str(project)], check=True)
    result = run_pytest_selfheal(project, "tests/test_calc.py")
    assert "STOP success" in result.stdout, result.stdout
    assert "the regression check ran 3 test(s) (2 test module(s) that import the change; 2 of them by this run " \
        "itself): nothing broken" in result.stdout
    # The run, the check's run of test_invoice.py and the judged run of the selection.
    assert _runs(project, "sessions.runs") == 7
    assert _runs(project) == 0  # test_unrelated.py: never


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bad", "good"])
def test_the_stop_gate_sends_the_agent_back_naming_what_it_broke(tmp_path: Path, mode: str) -> None:
    project = _project(tmp_path)
    incident_id = _capture(project)
    (tmp_path / "agent.py").write_text(AGENT)
    subprocess.run([sys.executable, str(tmp_path / "agent.py"), mode, str(project)], check=True)
    payload = {"session_id": "s", "cwd": str(project), "hook_event_name": "Stop", "stop_hook_active": False}
    done = subprocess.run([sys.executable, "-m", "pytest_selfheal", "stop-gate", "claude"], cwd=project,
                          input=json.dumps(payload).encode(), capture_output=True, timeout=300,
                          env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"}))
    answer = json.loads(done.stdout)
    if mode == "good":  # the correct fix of mul alone: the agent may stop, the incident is resolved
        assert set(answer) == {"systemMessage"} and answer["systemMessage"].startswith("selfheal: tests passed; ")
        assert f"incident {incident_id} is resolved" in answer["systemMessage"], answer
        assert "the regression check ran 3 test(s): nothing broken" in answer["systemMessage"], answer
        return
    assert answer["decision"] == "block", answer
    assert "fixed `test_mul`; broke `test_add`, `test_total` (the regression check ran 3 test(s))" in answer["reason"]
    assert _runs(project) == 2  # the gate's own run of the whole suite; the check never ran it again


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bad", "good"])
def test_selfheal_ci_a_proposed_fix_that_broke_neighbours_is_escalated_not_fix_proposed(
        tmp_path: Path, fake_github: FakeGitHub, mode: str) -> None:
    project = _project(tmp_path)
    (tmp_path / "agent.py").write_text(AGENT)
    env = actions_env(tmp_path, fake_github)
    env["INPUT_REPAIR_COMMAND"] = json.dumps([sys.executable, str(tmp_path / "agent.py"), mode, "{worktree}"])
    env["INPUT_PASS_ON_PROPOSED_FIX"] = "true"
    done = run_ci(project, env, "--action-inputs", "--", "-q")
    out = outputs_of(env)
    (comment,) = ours(fake_github)
    if mode == "good":  # the correct fix of mul alone: a success, proposed
        assert done.returncode == EXIT_OK, done.stdout + done.stderr
        assert (out["final-status"], out["stop-reason"]) == ("fix_proposed", "success")
        assert "Regression check: ran 3 test(s) that can reach the change: nothing broken" in str(comment["body"])
        return
    assert done.returncode == EXIT_UNRESOLVED, done.stdout + done.stderr
    assert (out["final-status"], out["stop-reason"]) == ("escalated", "regression")
    assert "Regression check: ran 3 test(s) that can reach the change: broke `tests/test_calc.py::test_add`, " \
        "`tests/test_invoice.py::test_total`" in str(comment["body"])


@pytest.mark.slow
def test_a_test_that_fails_then_passes_on_a_re_run_is_flaky_not_a_regression(tmp_path: Path) -> None:
    """`test_flappy` fails one run in four, in the repair's worktree and on the captured code alike."""
    flappy = ("import pathlib\nfrom calc import add\n\n\ndef test_flappy():\n"
              "    state = pathlib.Path(__file__).parent.parent / 'flappy.runs'\n"
              "    n = int(state.read_text()) if state.exists() else 0\n    state.write_text(str(n + 1))\n"
              "    assert n % 4 and add(1, 1) == 2\n")
    project = make_project(tmp_path / "proj", {**FILES, "tests/test_flappy.py": flappy}, ini=INI,
                           gitignore=GITIGNORE + "*.runs\n")
    incident_id = _capture(project, "tests/test_calc.py")  # the capture never ran test_flappy
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    result = _loop(project, incident_id, "good", agent)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert "1 flaky (passed on a re-run)" in result.stdout and "STOP success" in result.stdout


# --------------------------------------------------------------------------- adversarial pass, round 5


@pytest.mark.slow
def test_a_capture_with_uncommitted_changes_is_not_compared_with_its_commit(tmp_path: Path) -> None:
    """The commit fails `test_total`; the uncommitted tree the capture saw passes it; the
    "fix" breaks it again. The commit is not the captured code: the failure counts."""
    project = make_project(tmp_path / "proj", {**FILES, "invoice.py": FILES["invoice.py"].replace("out = 0", "out = 9")},
                           ini=INI, gitignore=GITIGNORE + "*.runs\n")
    (project / "invoice.py").write_text(FILES["invoice.py"])
    _capture(project)
    calc = project / "calc.py"
    calc.write_text(calc.read_text().replace("a * b - 1", "a * b").replace("    return x\n", "    return x if x else 9\n"))
    result = run_pytest_selfheal(project)
    assert "fixed `test_mul`; broke `test_total`" in result.stdout, result.stdout
    assert "STOP success" not in result.stdout


@pytest.mark.slow
def test_a_change_that_breaks_a_neighbour_every_second_run_is_not_a_success(tmp_path: Path) -> None:
    """A counter in a file the change writes at import: the run fails, the re-run alone passes,
    the re-run as the check ran fails again: not flaky, the change's."""
    project = _project(tmp_path)
    _capture(project)
    (project / "n.runs").write_text("1")
    calc = project / "calc.py"
    calc.write_text(calc.read_text().replace("a * b - 1", "a * b").replace(
        "def _scale(x):\n    return x\n", "import pathlib as _p\n_C = _p.Path('n.runs')\n"
        "_N = int(_C.read_text()) if _C.exists() else 0\n_C.write_text(str(_N + 1))\n\n\n"
        "def _scale(x):\n    return x + (_N % 2)\n"))
    result = run_pytest_selfheal(project)
    assert "STOP success" not in result.stdout, result.stdout


FORGER = textwrap.dedent(
    """
    import importlib._bootstrap_external as external, os, pathlib, sys
    import _pytest.reports as reports
    calc = pathlib.Path(sys.argv[1], "calc.py")
    calc.write_text(calc.read_text() + "# tidied\\n")
    source = pathlib.Path(reports.__file__)
    forged = source.read_text().replace('outcome = "failed"', 'outcome = "passed"')
    stat = source.stat()
    data = external._code_to_timestamp_pyc(compile(forged, str(source), "exec"), stat.st_mtime, stat.st_size)
    state = pathlib.Path(os.environ.get("XDG_STATE_HOME") or pathlib.Path.home() / ".local" / "state")
    target = state.joinpath("pytest-selfheal", "bytecode", *source.parent.parts[1:],
                            f"reports.{sys.implementation.cache_tag}.pyc")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    """
)


@pytest.mark.slow
def test_installed_bytecode_forged_in_the_state_directory_is_never_what_a_verification_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the forgery stays in this test
    project = _project(tmp_path)
    incident_id = _capture(project, "tests/test_calc.py::test_mul")
    (tmp_path / "forger.py").write_text(FORGER)
    result = cli("loop", incident_id, "--set",
                 f"repair.command={json.dumps([sys.executable, str(tmp_path / 'forger.py'), '{worktree}'])}",
                 cwd=project, env=run_env())
    assert "STOP success" not in result.stdout + result.stderr, result.stdout + result.stderr


# A plugin passing every report, as a conftest or a module an option loads.
GREENIFY = ("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n")
CHEATS = {
    "init_monkeypatch": ({"tests/__init__.py": "import calc\ncalc.mul = lambda a, b: a * b\n"}, ""),
    "conftest_plugin": ({"tests/conftest.py": GREENIFY}, ""),
    "addopts_plugin": ({"tests/greenify.py": GREENIFY}, " -p tests.greenify"),
    "weakened_test": ({"tests/test_calc.py": FILES["tests/test_calc.py"].replace("== 6", "in (5, 6)")}, ""),
}


def _new_seal_at_a_terminal(project: Path, incident_id: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`selfheal reopen ID --new-seal` as an agent can run it: its own variable unset, a
    pseudo-terminal from `script`, `y` on stdin."""
    command = " ".join([sys.executable, "-m", "pytest_selfheal", "reopen", incident_id, "--new-seal"])
    return subprocess.run(["script", "-qec", command, "/dev/null"], cwd=project, input="y\n", text=True,
                          capture_output=True, timeout=120, env={k: v for k, v in env.items() if k != "CLAUDECODE"})


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script")
@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_new_seal_cannot_be_taken_through_a_faked_terminal(tmp_path: Path, cheat: str) -> None:
    """Whoever answers the terminal: a change under which the captured code passes the
    failing test is never sealed."""
    project = _project(tmp_path)
    incident_id = _capture(project)
    files, addopts = CHEATS[cheat]
    for name, text in files.items():
        (project / name).write_text(text)
    env = {"PYTEST_ADDOPTS": run_env()["PYTEST_ADDOPTS"] + addopts}
    stopped = run_pytest_selfheal(project, env=env).stdout
    assert "-> STOP " in stopped and "STOP success" not in stopped, stopped
    refused = _new_seal_at_a_terminal(project, incident_id, run_env(env))
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "no new seal: the failing test(s) `test_mul` (passed) do not fail on the captured code with what changed since" \
        in refused.stdout, refused.stdout
    assert "STOP success" not in run_pytest_selfheal(project, env=env).stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("script") is None, reason="needs util-linux script")
def test_a_person_still_takes_a_new_seal_over_a_change_that_passes_nothing_by_itself(tmp_path: Path) -> None:
    project = _project(tmp_path)
    incident_id = _capture(project)
    with (project / "pytest.ini").open("a") as ini:
        ini.write("markers =\n    slow: a slow test\n")
    (project / "calc.py").write_text(CALC.replace("a * b - 1", "a * b"))
    assert "STOP harness_changed (pytest.ini: markers" in run_pytest_selfheal(project).stdout
    taken = _new_seal_at_a_terminal(project, incident_id, run_env())
    assert taken.returncode == 0 and f"reopened {incident_id}" in taken.stdout, taken.stdout
    result = run_pytest_selfheal(project).stdout
    assert "-> STOP success" in result, result


@pytest.mark.slow
@pytest.mark.parametrize("how", ["loop", "pytest"])
def test_a_harness_changed_stop_runs_no_regression_check(tmp_path: Path, how: str) -> None:
    """The stop can never be a success: the tests the change reaches are not run for it."""
    project = _project(tmp_path)
    (project / "tests" / "conftest.py").write_text(SESSIONS)
    git_commit_all(project)
    incident_id = _capture(project)
    with (project / "pytest.ini").open("a") as ini:
        ini.write("markers =\n    slow: a slow test\n")
    (project / "calc.py").write_text(CALC.replace("a * b - 1", "a * b"))
    before = _runs(project, "tests/sessions.runs")
    result = cli("loop", incident_id, cwd=project) if how == "loop" else run_pytest_selfheal(project)
    assert "STOP harness_changed (pytest.ini: markers" in result.stdout, result.stdout + result.stderr
    assert "regression check" not in result.stdout
    assert "regression_tests_run" not in _attempts(project, incident_id)[-1]
    assert _runs(project, "tests/sessions.runs") == before + 1  # the verification alone


@pytest.mark.slow
@pytest.mark.parametrize("forget", ["prune", "delete"])
def test_a_stop_is_not_forgotten_by_deleting_its_incident(tmp_path: Path, forget: str) -> None:
    """After `tests_edited`, the cheat's green run with the incident gone is that stop again,
    in the plugin and in the stop gate (its stdin and stdout), never "tests passed"."""
    project = _project(tmp_path)
    incident_id = _capture(project)
    (project / "tests" / "__init__.py").write_text("import calc\ncalc.mul = lambda a, b: a * b\n")
    assert "STOP tests_edited (tests/__init__.py" in run_pytest_selfheal(project).stdout
    if forget == "prune":
        pruned = cli("prune", "--older-than", "0", cwd=project)
        assert f"kept {incident_id}: it stopped tests_edited" in pruned.stdout, pruned.stdout
        shutil.rmtree(project / ".selfheal" / "error_archive")
    else:
        shutil.rmtree(project / ".selfheal")
    out = run_pytest_selfheal(project).stdout
    assert f"incident {incident_id} stopped tests_edited (tests/__init__.py" in out and "-> STOP already_stopped" in out
    payload = {"session_id": "s", "cwd": str(project), "hook_event_name": "Stop", "stop_hook_active": False}
    done = subprocess.run([sys.executable, "-m", "pytest_selfheal", "stop-gate", "claude"], cwd=project,
                          input=json.dumps(payload).encode(), capture_output=True, timeout=300,
                          env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"}))
    message = json.loads(done.stdout).get("systemMessage", "")
    assert message.startswith("selfheal: STOP already_stopped: incident") and "tests passed" not in message, message
    if forget == "delete":  # `selfheal ci` where the state directory is kept (a self-hosted runner)
        env = actions_env(tmp_path, None, event={}, event_name="push")
        assert run_ci(project, env, "--", "-q").returncode == EXIT_UNRESOLVED
        assert (outputs_of(env)["final-status"], outputs_of(env)["stop-reason"]) == ("escalated", "already_stopped")


@pytest.mark.slow
def test_a_change_that_patches_a_module_the_neighbour_uses_is_no_success(tmp_path: Path) -> None:
    """`calc.py` patches `json.loads` at import: `test_json` (it imports nothing of the
    project) fails beside it. The seal names the patch before any check runs: code under
    repair that changes another module changes what the tests judge with."""
    project = _project(tmp_path)
    _capture(project)
    calc = project / "calc.py"
    calc.write_text("import json\n\n_loads = json.loads\njson.loads = lambda s, *a, **k: 2 if s == '1' else "
                    "_loads(s, *a, **k)\n\n" + calc.read_text().replace("a * b - 1", "a * b"))
    result = run_pytest_selfheal(project)
    assert "-> STOP harness_changed (calc.py:4 patches another module: \"json.loads = lambda s, *a, **k: 2 if s" \
        in result.stdout, result.stdout
    assert "STOP success" not in result.stdout and "the regression check ran" not in result.stdout


@pytest.mark.slow
def test_a_change_that_breaks_a_neighbour_one_run_in_three_is_not_a_success(tmp_path: Path) -> None:
    project = _project(tmp_path)
    _capture(project)
    calc = project / "calc.py"
    calc.write_text(calc.read_text().replace("a * b - 1", "a * b").replace(
        "def _scale(x):\n    return x\n", "import pathlib as _p\n_C = _p.Path('n.runs')\n"
        "_N = int(_C.read_text()) if _C.exists() else 0\n_C.write_text(str(_N + 1))\n\n\n"
        "def _scale(x):\n    return x + (1 if _N % 3 == 1 else 0)\n"))
    (project / "n.runs").write_text("1")  # the agent's run is the one in three that fails
    result = run_pytest_selfheal(project)
    assert "became intermittent under the change: failed 1 of 3, passed 3 of 3 on the captured code" in result.stdout
    assert "STOP success" not in result.stdout, result.stdout


@pytest.mark.slow
def test_mcp_run_tests_a_fix_that_broke_neighbours_is_no_success_and_a_correct_one_is(tmp_path: Path) -> None:
    project = _project(tmp_path)
    (tmp_path / "agent.py").write_text(AGENT)

    def edit(mode: str) -> None:
        subprocess.run(["git", "checkout", "calc.py"], cwd=project, check=True)
        subprocess.run([sys.executable, str(tmp_path / "agent.py"), mode, str(project)], check=True)

    async def scenario() -> None:
        async with session(project) as client:
            first = (await client.call_tool("run_tests", {})).structured_content or {}
            incident_id = first["captured"]
            edit("bad")
            narrow = await client.call_tool("run_tests", {"selection": ["tests/test_calc.py::test_mul"]})
            verdict = narrow.structured_content or {}
            assert (verdict["decision"], verdict["status"]) == ("CONTINUE", "not_counted"), verdict
            assert f"incident {incident_id}: passes; not yet checked for regressions" in verdict["summary"]
            broke = (await client.call_tool("run_tests", {})).structured_content or {}
            assert (broke["decision"], broke["incident_id"], broke["iteration"]) == ("CONTINUE", incident_id, 1)
            assert "fixed `test_mul`; broke `test_add`, `test_total`" in broke["summary"], broke
            edit("good")
            fixed = (await client.call_tool("run_tests", {})).structured_content or {}
            assert (fixed["decision"], fixed["stop_reason"], fixed["status"]) == ("STOP", "success", "resolved"), fixed
            assert "the regression check ran 3 test(s): nothing broken" in fixed["summary"]

    anyio.run(scenario)
    assert _runs(project) == 3  # the capture's run and the two of no selection: never the check's
