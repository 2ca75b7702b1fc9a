"""Trust boundaries, second round: options replayed from disk and ``@argfile``.

Each test reproduces one finding of the second adversarial review and shows the boundary
holds (docs/reliability.md "Trust boundaries"): an option is judged by its value wherever it
comes from (plan, incident.json, config, MCP arguments), and ``@FILE`` is never accepted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import PY, capture, make_project, run_env, selfheal

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.loop.verify import check_command
from pytest_selfheal.store.root import Store

from .conftest import DETERMINISTIC, one_error_line


def _victim(tmp_path: Path, name: str) -> Path:
    victim = tmp_path / name
    victim.mkdir()
    (victim / "keep.txt").write_text("keep")
    return victim


def _set_plan(project: Path, incident_id: str, command: str) -> None:
    path = project / ".selfheal" / "error_plans" / incident_id / "plan.json"
    plan = json.loads(path.read_text())
    plan["verification_commands"] = [command]
    path.write_text(json.dumps(plan))


def _set_options(project: Path, incident_id: str, options: list[str]) -> None:
    path = project / ".selfheal" / "error_inbox" / incident_id / "incident.json"
    doc = json.loads(path.read_text())
    doc["pytest_options"] = options
    path.write_text(json.dumps(doc))


def _assert_refused(project: Path, incident_id: str, victim: Path, result: object) -> None:
    assert (victim / "keep.txt").read_text() == "keep", "a path outside the project was touched"
    assert result.returncode == 5, result.stdout + result.stderr  # type: ignore[attr-defined]
    assert "refusing verification command" in one_error_line(result.stderr)  # type: ignore[attr-defined]
    assert Store(project / ".selfheal").count_attempts(incident_id) == 0


def test_an_argfile_in_a_plan_command_is_refused_and_the_victim_survives(tmp_path: Path) -> None:
    """``@args.txt`` inside the project made pytest read ``--basetemp=/abs/victim``
    (which pytest wipes) and ``-o cache_dir=/abs``; both ``@x`` and ``@/abs/x`` passed as paths."""
    victim = _victim(tmp_path, "victim")
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC})
    incident_id = capture(project)
    (project / "args.txt").write_text(f"-o\ncache_dir={tmp_path / 'cache'}\n--basetemp={victim}\n")
    for word in ("@args.txt", f"@{project / 'args.txt'}", "@../../x"):
        _set_plan(project, incident_id, f"python -m pytest -q test_calc.py {word}")
        result = selfheal(project, "loop", incident_id)
        _assert_refused(project, incident_id, victim, result)
        assert "@file, which is never accepted" in result.stderr
    # ... also as the value of a safe option: argparse reads `-k @x` from the file too.
    _set_plan(project, incident_id, "python -m pytest -q test_calc.py -k @args.txt")
    _assert_refused(project, incident_id, victim, selfheal(project, "loop", incident_id))
    assert not (tmp_path / "cache").exists()


def test_options_hand_edited_into_incident_json_are_judged_by_their_value(tmp_path: Path) -> None:
    """``pytest_options`` in incident.json were trusted as "recorded at capture": a
    ``-c`` ini outside the project with ``addopts = --basetemp=VICTIM`` wiped the victim."""
    victim = _victim(tmp_path, "victim2")
    evil_ini = tmp_path / "evil.ini"
    evil_ini.write_text(f"[pytest]\naddopts = --basetemp={victim}\n")
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC})
    incident_id = capture(project)
    hostile = [
        ["-o", f"cache_dir={tmp_path / 'cache'}", "-c", str(evil_ini)],
        ["-c", str(evil_ini)],
        ["-o", f"cache_dir={tmp_path / 'cache'}"],
        ["-o", f"addopts=--basetemp={victim}"],
        ["--override-ini=addopts=-p evilmod"],
        ["-p", "evilmod"],
        ["--basetemp", str(victim)],
        ["--confcutdir", str(tmp_path)],
        ["--rootdir", str(tmp_path)],
        [f"@{tmp_path / 'args'}"],
        ["--html", str(victim / "report.html")],  # an unknown option: its value names a path outside
    ]
    for options in hostile:
        _set_options(project, incident_id, options)
        result = selfheal(project, "loop", incident_id)
        _assert_refused(project, incident_id, victim, result)
    assert not (tmp_path / "cache").exists()


def test_legitimate_recorded_options_keep_working(tmp_path: Path) -> None:
    """``-o addopts=``, ``-p no:cacheprovider``, ``-o cache_dir=`` inside the project and an
    installed plugin recorded at capture are replayed and the loop runs."""
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC})
    incident_id = capture(project, "-o", "addopts=", "-p", "no:cacheprovider", "-o", "cache_dir=.cache2",
                          "-W", "default")
    options = Store(project / ".selfheal").read_incident(incident_id).pytest_options
    assert list(options)[-8:] == ["-o", "addopts=", "-p", "no:cacheprovider", "-o", "cache_dir=.cache2",
                                  "-W", "default"]
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == 1, result.stdout + result.stderr  # ran, still failing
    assert Store(project / ".selfheal").count_attempts(incident_id) >= 1


@pytest.mark.parametrize(
    "argv",
    [
        ["pytest", "-o", "addopts="],
        ["pytest", "-p", "no:cacheprovider", "-p", "xdist", "-p", "pytester"],
        ["pytest", "-o", "cache_dir=.cache", "-o", "pythonpath=src lib", "-c", "pytest.ini"],
        ["pytest", "--override-ini=addopts=-q --strict-markers -p no:randomly"],
    ],
)
def test_value_judged_options_accepted_from_any_source(tmp_path: Path, argv: list[str]) -> None:
    check_command(argv, allowlist=["pytest"], root=tmp_path)


@pytest.mark.parametrize(
    "argv, why",
    [
        (["pytest", "@args"], "@file"),
        (["pytest", "-m", "@args"], "@file"),
        (["pytest", "-o", "cache_dir=/elsewhere"], "outside the project root"),
        (["pytest", "-o", "pythonpath=src /elsewhere"], "outside the project root"),
        (["pytest", "-o", "addopts=--basetemp=/elsewhere"], "carries a refused option"),
        (["pytest", "-o", "addopts=-p evil"], "carries a refused option"),
        (["pytest", "-o", "addopts=@args"], "carries a refused option"),
        (["pytest", "-o", "log_file=../../x.log"], "outside the project root"),
        (["pytest", "-o", "junk"], "not KEY=VALUE"),
        (["pytest", "-c", "/elsewhere/evil.ini"], "config file outside"),
        (["pytest", "-c/elsewhere/evil.ini"], "config file outside"),
        (["pytest", "--config-file=../evil.ini"], "config file outside"),
        (["pytest", "-pevil"], "not a pytest plugin installed"),
        (["pytest", "-p", "no:"], "empty or path-like"),
        (["pytest", "--basetemp", "inside"], "never replayed"),
    ],
)
def test_value_judged_options_refused_from_any_source(tmp_path: Path, argv: list[str], why: str) -> None:
    for trusted in ((), argv[1:]):  # a plan's own word, or one incident.json says was recorded
        with pytest.raises(RefusedError) as info:
            check_command(argv, allowlist=["pytest"], root=tmp_path, trusted=trusted)
        assert why in str(info.value)


def test_mcp_run_tests_refuses_argfiles_and_hostile_recorded_options(tmp_path: Path) -> None:
    """Both through MCP: ``selection: ["@/abs/evil_args"]`` and the documented first
    call, ``run_tests`` with no arguments, replaying a hand-edited incident.json."""
    import anyio
    from mcp import Client, StdioServerParameters

    victim = _victim(tmp_path, "victim")
    evil_args = tmp_path / "evil_args"
    evil_args.write_text(f"--basetemp={victim}\n")
    project = make_project(tmp_path / "p", {"test_calc.py": DETERMINISTIC})
    incident_id = capture(project)
    _set_options(project, incident_id, ["-o", f"cache_dir={tmp_path / 'cache'}", "--basetemp", str(victim)])
    params = StdioServerParameters(command=PY, args=["-m", "pytest_selfheal", "mcp"], cwd=str(project),
                                   env=run_env({"PYTEST_PLUGINS": "pytest_selfheal.plugin"}))
    texts: dict[str, str] = {}

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=300) as client:
            for name, arguments in (("argfile", {"selection": [f"@{evil_args}"]}), ("replay", {})):
                result = await client.call_tool("run_tests", arguments)
                assert result.is_error
                texts[name] = str(result.content[0].text)  # type: ignore[union-attr]

    anyio.run(scenario)
    assert "@file" in texts["argfile"] and "refusing verification command" in texts["replay"], texts
    assert (victim / "keep.txt").read_text() == "keep"
    assert not (tmp_path / "cache").exists()
