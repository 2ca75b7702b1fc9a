"""The action's inputs of ``selfheal ci``: :class:`CiOptions` and the ``INPUT_*`` parsers
(action.yml passes every input as one; ``--action-inputs`` reads them). Every bad value is a
UsageError naming the input (exit 2); nothing here runs a shell or anything else.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.errors import UsageError
from pytest_selfheal.history.records import COMMIT_SHA

DEFAULT_REPORT_NAME = "default"


@dataclass
class CiOptions:
    """What one ``selfheal ci`` run does (commands/ci.py builds it from flags and inputs)."""

    pytest_args: list[str] = field(default_factory=list)
    overrides: list[tuple[str, str]] = field(default_factory=list)  # (KEY=VALUE, origin), after the files
    reports_dir: Optional[Path] = None
    comment: bool = True
    fail_on_unresolved: bool = True
    pass_on_proposed_fix: bool = False  # exit 0 when the fix is only proposed (this commit still fails)
    fail_on_new_flaky: bool = True
    fail_on_new_unchecked: bool = True  # a new test not re-run its count fails the job too
    report_name: str = DEFAULT_REPORT_NAME
    report_path: Optional[Path] = None
    comment_from: Optional[Path] = None  # comment-only mode: post this report JSON (no pytest, no loop)
    # With comment_from: the comment only, no job summary or outputs (the step that ran the tests wrote them).
    post_only: bool = False
    pull_request: Optional[int] = None  # default: from the event payload / the report JSON
    expected_head_sha: Optional[str] = None  # comment only if the PR's head is this commit (the fork-PR recipe)
    working_directory: Optional[Path] = None


# Every parser takes an input's text and its name (``pytest-args``) for the one-line error.
def parse_bool(text: str, name: str) -> bool:
    """``true``/``false`` (also yes/no, on/off, 1/0, any case); else UsageError."""
    word = text.strip().lower()
    if word in ("true", "yes", "on", "1", "false", "no", "off", "0"):
        return word in ("true", "yes", "on", "1")
    raise UsageError(f"{name}: expected true or false, got {json.dumps(text)}")


def parse_pytest_args(text: str, name: str) -> list[str]:
    """Split ``text`` like a POSIX shell would -- but never run a shell: ``$(...)``, ``;``, ``|``
    stay literal characters of the arguments."""
    try:
        return shlex.split(text, comments=False, posix=True)
    except ValueError as exc:
        raise UsageError(f"{name}: cannot split {json.dumps(text)}: {exc}") from None


def parse_config_lines(text: str, name: str) -> list[tuple[str, str]]:
    """Newline-separated ``KEY=VALUE`` overrides; blank lines and ``#`` comments are skipped."""
    lines = [(number, raw.strip()) for number, raw in enumerate(text.splitlines(), start=1)]
    return [(line, f"{name} input line {number}") for number, line in lines if line and not line.startswith("#")]


def parse_repair_command(text: str, name: str) -> list[tuple[str, str]]:
    """A JSON argv list (``["aider", "--yes"]``) as a ``repair.command`` override: a command line
    string would invite shell-quoting mistakes, and no shell ever runs it."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not (isinstance(value, list) and value and all(isinstance(v, str) and v for v in value)):
        raise UsageError(f'{name}: expected a JSON list of strings such as ["aider", "--yes"], '
                         f"got {json.dumps(text[:200])}")
    return [("repair.command=" + json.dumps(value), f"{name} input")]


def parse_sha(text: str, name: str = "--expected-head-sha") -> str:
    """A commit SHA (7 to 64 hex digits); else UsageError."""
    sha = text.strip()
    if not COMMIT_SHA.match(sha):
        raise UsageError(f"{name}: expected a commit SHA, got {json.dumps(text[:80])}")
    return sha


def parse_new_test_reruns(text: str, name: str) -> list[tuple[str, str]]:
    """The re-runs of new tests as a config override: ``0`` switches the check off."""
    value = text.strip()
    if not value.isdigit() or len(value) > 6:
        raise UsageError(f"{name}: expected a whole number of re-runs (0 switches the check off), "
                         f"got {json.dumps(text[:80])}")
    override = "new_tests.enabled=false" if int(value) == 0 else f"new_tests.reruns={int(value)}"
    return [(override, f"{name} input")]


def _positive_int(text: str, name: str) -> int:
    value = text.strip()
    if not value.isdigit() or int(value) <= 0:
        raise UsageError(f"{name}: expected a pull request number, got {json.dumps(text)}")
    return int(value)


# The action's inputs as action.yml passes them: the variable, the CiOptions field it gives
# (the override inputs add up, in this order) and its parser.
ACTION_INPUTS: tuple[tuple[str, str, Callable[[str, str], Any]], ...] = (
    ("INPUT_PYTEST_ARGS", "pytest_args", parse_pytest_args),
    ("INPUT_WORKING_DIRECTORY", "working_directory", lambda text, name: Path(text.strip())),
    ("INPUT_CONFIG", "overrides", parse_config_lines),
    ("INPUT_REPAIR_COMMAND", "overrides", parse_repair_command),
    ("INPUT_NEW_TEST_RERUNS", "overrides", parse_new_test_reruns),
    ("INPUT_COMMENT", "comment", parse_bool),
    ("INPUT_FAIL_ON_UNRESOLVED", "fail_on_unresolved", parse_bool),
    ("INPUT_PASS_ON_PROPOSED_FIX", "pass_on_proposed_fix", parse_bool),
    ("INPUT_FAIL_ON_NEW_FLAKY", "fail_on_new_flaky", parse_bool),
    ("INPUT_FAIL_ON_NEW_UNCHECKED", "fail_on_new_unchecked", parse_bool),
    ("INPUT_REPORT_NAME", "report_name", lambda text, name: text.strip()),
    ("INPUT_COMMENT_FROM", "comment_from", lambda text, name: Path(text.strip())),
    ("INPUT_PULL_REQUEST_NUMBER", "pull_request", _positive_int),
    ("INPUT_EXPECTED_HEAD_SHA", "expected_head_sha", parse_sha),
)


def action_inputs(env: Mapping[str, str]) -> dict[str, Any]:
    """The :class:`CiOptions` fields the set ``INPUT_*`` variables give, parsed (an empty input is
    not set). Bad values raise UsageError naming the input (exit 2)."""
    given: dict[str, Any] = {}
    for variable, field_name, parse in ACTION_INPUTS:
        text = env.get(variable)
        if text is not None and text.strip():
            value = parse(text, variable.removeprefix("INPUT_").lower().replace("_", "-"))
            given[field_name] = [*given.get(field_name, ()), *value] if field_name == "overrides" else value
    return given
