"""Every command that a report, a decision point, a handoff or a terminal line suggests works
as printed: the commands are collected from real runs that end in each
kind of stop, then each one is run through ``helpers.cli`` on a copy of the project as it
was when the command was printed, and must not fail with a usage, state or not-found error.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import (
    DETERMINISTIC,
    TOOLING,
    clone_project,
    flaky_project,
    incident_ids,
    make_project,
    run_pytest_selfheal,
    selfheal,
)

from pytest_selfheal.errors import EXIT_BAD_INPUT, EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE

# `selfheal <subcommand>` then its arguments: flags, an incident id, a bucket, a number.
# "selfheal:" (a status line) and "selfheal ci:" are not commands.
COMMAND = re.compile(
    r"(?<![-\w])selfheal (?P<sub>[a-z]+)(?![:\w])"
    r"(?P<args>(?: (?:--?[a-z][\w-]*(?:=[^\s,;)`]+)?|incident_[0-9a-z_]+|resolved|escalated|latest|\d+))*)"
)
FAILED_AS_PRINTED = {EXIT_USAGE: "usage", EXIT_BAD_INPUT: "bad input", EXIT_NOT_FOUND: "not found",
                     EXIT_REFUSED: "refused"}

# A stand-in agent that weakens the test (out of the repair scope by default): WORKTREE.
WEAKEN = (
    "import pathlib, sys\n"
    "t = pathlib.Path(sys.argv[1], 'test_calc.py')\n"
    "t.write_text(t.read_text().replace('assert sub(5, 2) == 3', 'assert True'))\n"
)


def _strings(value: object) -> Iterator[str]:
    """Every string inside a JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def suggested_commands(project: Path, incident_id: str, *outputs: str) -> set[str]:
    """The ``selfheal`` commands in the terminal ``outputs``, the report (markdown and text)
    and every JSON file and event of the incident."""
    texts: list[str] = list(outputs)
    for fmt in ("md", "text"):
        code, out, err = selfheal(project, "report", incident_id, "--format", fmt)
        assert code in (0, 1), err
        texts.append(out)
    root = project / ".selfheal"
    for path in sorted(root.rglob("*.json")) + sorted(root.rglob("audit_tail.jsonl")):
        if incident_id in str(path):
            for line in path.read_text(encoding="utf-8").splitlines() if path.suffix == ".jsonl" else [path.read_text()]:
                texts.extend(_strings(json.loads(line)))
    found = set()
    for text in texts:
        for match in COMMAND.finditer(text):
            found.add(match.group(0).strip())
    return found


def assert_each_works(project: Path, incident_id: str, commands: set[str], tmp_path: Path) -> dict[str, int]:
    """Run each command on its own copy of ``project``; none fails as a usage/state error."""
    codes: dict[str, int] = {}
    for n, command in enumerate(sorted(commands)):
        argv = shlex.split(command)[1:]
        if argv[0] == "apply":
            argv.append("--yes")  # printed for a human at a terminal, who answers the question
        copy = clone_project(project, tmp_path / f"copy{n}")
        code, out, err = selfheal(copy, *argv)
        assert code not in FAILED_AS_PRINTED, (
            f"`{command}` failed as printed ({FAILED_AS_PRINTED.get(code)}, exit {code}): {err}{out}")
        codes[command] = code
    return codes


def _deterministic(tmp_path: Path) -> Path:
    return make_project(tmp_path / "det", {"test_calc.py": DETERMINISTIC})


def _loop(*settings: str) -> Callable[[Path, str], str]:
    def run(project: Path, incident_id: str) -> str:
        args = [a for s in settings for a in ("--set", s)]
        result = selfheal(project, "loop", incident_id, *args)
        assert result.returncode == 1, result.stdout + result.stderr
        return result.stdout + result.stderr
    run.settings = settings  # type: ignore[attr-defined]  # judging keys: the capture takes them too
    return run


def _weaken(project: Path, incident_id: str) -> str:
    agent = project.parent / "weaken.py"
    agent.write_text(WEAKEN)
    command = json.dumps([sys.executable, str(agent), "{worktree}"])
    result = selfheal(project, "loop", incident_id, "--set", f"repair.command={command}")
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stdout + result.stderr


def _resolve(project: Path, incident_id: str) -> str:
    result = selfheal(project, "loop", incident_id)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


SCENARIOS: dict[str, tuple[Callable[[Path], Path], Callable[[Path, str], str], str, str]] = {
    # name: (project, what runs after the capture, expected stop reason, expected bucket)
    "repeated_fingerprint": (_deterministic, _loop(), "repeated_fingerprint", "escalated"),
    "scope_expansion_denied": (_deterministic, _weaken, "scope_expansion_denied", "escalated"),
    "no_progress": (_deterministic, _loop("error_fingerprint_repeats=9", "max_iterations=5"), "no_progress",
                    "escalated"),
    "replan_requested": (
        _deterministic,
        _loop("error_fingerprint_repeats=9", "max_iterations=5", "auto_replan_on_no_progress=true"),
        "replan_requested", "error_inbox"),
    "tooling_env": (lambda tmp: make_project(tmp / "env", {"test_env.py": TOOLING}), _loop(), "tooling_env",
                    "escalated"),
    "resolved": (flaky_project, _resolve, "success", "resolved"),
    "planned_not_run": (_deterministic, lambda project, incident_id: "", "", "error_inbox"),
}


# Three kinds of suggestion by default (after a success, after a stop by repetition, after
# an environment stop); the slow tier follows every scenario's suggestion.
DEFAULT_SUGGESTIONS = {"resolved", "tooling_env"}


@pytest.mark.parametrize("scenario", [s if s in DEFAULT_SUGGESTIONS else pytest.param(s, marks=pytest.mark.slow)
                                      for s in sorted(SCENARIOS)])
def test_every_suggested_command_works_as_printed(scenario: str, tmp_path: Path) -> None:
    make, after, stop_reason, bucket = SCENARIOS[scenario]
    project = make(tmp_path)
    # The keys that judge an incident are the capture's: the scenario's loop settings go in at capture.
    captured = run_pytest_selfheal(project, *(a for s in getattr(after, "settings", ()) for a in ("--selfheal-set", s)))
    assert captured.returncode == 1, captured.stdout + captured.stderr
    (incident_id,) = incident_ids(project / ".selfheal")
    # What the capture printed works in the state the capture left.
    at_capture = clone_project(project, tmp_path / "at_capture")
    printed = suggested_commands(at_capture, incident_id, captured.stdout)
    assert f"selfheal loop {incident_id}" in printed or scenario == "tooling_env", printed
    assert_each_works(at_capture, incident_id, printed, tmp_path / "capture_copies")
    terminal = after(project, incident_id)
    run_result = project / ".selfheal" / "error_runs" / incident_id / "run_result.json"
    if stop_reason:
        assert json.loads(run_result.read_text())["stop_reason"] == stop_reason
    where = "error_inbox" if bucket == "error_inbox" else f"error_archive/{bucket}"
    assert (project / ".selfheal" / where / incident_id).is_dir()
    commands = suggested_commands(project, incident_id, terminal)
    if bucket in ("escalated", "resolved"):
        # An archived incident is looped again through a reopen, never a bare `selfheal loop ID`.
        assert f"selfheal loop {incident_id}" not in commands
        assert not any(c.startswith("selfheal archive") for c in commands), commands
    if bucket == "escalated":
        assert f"selfheal loop {incident_id} --reopen" in commands
    else:
        assert f"selfheal loop {incident_id}" in commands or scenario == "resolved"
    codes = assert_each_works(project, incident_id, commands, tmp_path)
    assert codes  # every scenario suggests something
