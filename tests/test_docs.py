"""What the docs name exists: every ``selfheal`` subcommand, every ``--flag``, every dotted
config key, every Action input and output, every MCP tool and every relative link of
README.md and docs/ (cheap: reads files and builds the parsers in-process)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pytest_selfheal import hookspecs, plugin
from pytest_selfheal.cli.main import build_parser, command_names
from pytest_selfheal.config.keys import SCHEMA
from pytest_selfheal.records.attempt import RepairBlock
from pytest_selfheal.records.run_result import RunRepair

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Flags of other tools the docs show in their own commands, each with the tool it belongs to.
# pytest's own options are read from `pytest --help` (below), so they need no entry here.
OTHER_TOOLS = {
    "--binary": "git diff", "--detach": "git worktree add", "--no-checkout": "git worktree add",
    "--force": "git worktree remove", "--require-hashes": "pip", "--no-deps": "pip", "--no-binary": "pip download",
    "--no-build-isolation": "pip", "--no-index": "pip", "--target": "pip (also a conftest option in an example)",
    "--generate-hashes": "pip-compile", "--allow-unsafe": "pip-compile", "--strip-extras": "pip-compile",
    "--no-emit-index-url": "pip-compile", "--schemafile": "check-jsonschema", "--rm": "docker run",
    "--yes": "aider", "--message-file": "aider", "--no-auto-commits": "aider", "--permission-mode": "claude",
    "--allowedTools": "claude", "--full-auto": "codex exec", "--html": "pytest-html, in an example of a refused option",
    "--api-key": "any tool: redaction.md's options whose value is redacted", "--token": "any tool, likewise",
    "--password": "any tool, likewise", "--http-password": "wget, likewise", "--dist": "pytest-xdist",
    "--depth": "git fetch", "--reruns": "pytest-rerunfailures",
}
# Options the verification check refuses by name (loop/argcheck.py), pytest's or its plugins'.
REFUSED = ROOT / "pytest_selfheal" / "loop" / "argcheck.py"
# The names of ours that no parser registers (the selection file's option: pytest_selfheal/loop/selection.py).
NAMES = ROOT / "pytest_selfheal" / "names.py"


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _fences(text: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M)


def _spans(text: str) -> list[str]:
    """Inline code spans outside fenced blocks (one or two backticks)."""
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    return [m.group(2) for m in re.finditer(r"(`{1,2})(?!`)(.+?)(?<!`)\1(?!`)", prose)]


def _code(path: Path) -> list[str]:
    text = _text(path)
    return _fences(text) + _spans(text)


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:  # argparse has no public walk of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _subparsers(child)


def _selfheal_flags() -> set[str]:
    return {opt for p in _subparsers(build_parser()) for a in p._actions for opt in a.option_strings}


class _RecordingParser:
    """Stands in for pytest's parser: records what ``pytest_addoption`` registers."""

    def __init__(self) -> None:
        self.flags: set[str] = set()

    def getgroup(self, *args: Any, **kwargs: Any) -> _RecordingParser:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.flags.update(n for n in names if n.startswith("--"))

    def addini(self, *args: Any, **kwargs: Any) -> None:
        pass


def _plugin_flags() -> set[str]:
    recorder = _RecordingParser()
    plugin.pytest_addoption(recorder, pytest.PytestPluginManager())  # type: ignore[arg-type]
    return recorder.flags


@pytest.fixture(scope="module")
def pytest_flags() -> set[str]:
    """pytest's own options."""
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # pytest's own: seconds faster than every plugin's
    out = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], capture_output=True,
                         text=True, check=True, cwd=ROOT, env=env).stdout
    return set(re.findall(r"(?<![\w-])(--[A-Za-z][\w-]*)", out))


FLAG = re.compile(r"(?<![\w\-/.])--(\[no-\])?([A-Za-z][\w-]*)")


def _flags_named() -> Iterator[tuple[str, str, str]]:
    """(page, flag, the line it is on) for every --flag in the docs' code."""
    for path in PAGES:
        for code in _code(path):
            for line in code.splitlines():
                for m in FLAG.finditer(line):
                    yield _where(path), f"--{m.group(2)}", line
                    if m.group(1):
                        yield _where(path), f"--no-{m.group(2)}", line


def test_every_selfheal_command_named_is_a_real_subcommand() -> None:
    commands = set(command_names())
    named = {(_where(p), m.group(1)) for p in PAGES for code in _code(p)
             for line in code.splitlines() if not re.match(r"\s*name:", line)  # a workflow's name
             for m in re.finditer(r"(?:^|(?<=[\s`\"'(\[]))selfheal ([a-z][a-z-]*)", line)}
    assert len(named) > 40
    unknown = sorted((where, cmd) for where, cmd in named if cmd not in commands)
    assert not unknown, f"not selfheal subcommands: {unknown}"


def test_every_flag_named_exists(pytest_flags: set[str]) -> None:
    ours = _selfheal_flags() | _plugin_flags()
    refused = _text(REFUSED) + _text(NAMES)
    scripts = "\n".join(_text(p) for p in [*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "scripts").glob("*.py")])
    unknown = []
    for where, flag, _line in _flags_named():
        if flag in ours or flag in pytest_flags or flag in OTHER_TOOLS or f'"{flag}"' in refused:
            continue
        if re.search(rf"['\"]{re.escape(flag)}['\"]", scripts):  # an option of our benchmarks/ or scripts/
            continue
        unknown.append((where, flag))
    assert not unknown, f"flags no parser knows: {sorted(set(unknown))}"


def test_the_plugin_and_the_cli_flags_are_all_documented() -> None:
    docs = "\n".join(_text(p) for p in PAGES)
    missing = sorted(f for f in _plugin_flags() if f not in docs)
    assert not missing, f"pytest options of the plugin the docs never name: {missing}"


def _repair_record_fields() -> set[str]:
    """Fields of the ``repair`` block of attempts and run results: ``repair.applied`` in the
    docs is a record field, not a config key."""
    return {f.name for record in (RepairBlock, RunRepair) for f in dataclasses.fields(record)}


def test_every_dotted_config_key_named_exists() -> None:
    keys = {spec.key for spec in SCHEMA}
    sections = {k.split(".")[0] for k in keys if "." in k}
    record = _repair_record_fields()
    files = ("md", "py", "json", "yml", "yaml", "txt", "toml", "cfg", "ini", "log", "patch", "lock", "segment")
    unknown = []
    for path in PAGES:
        for span in _spans(_text(path)):
            m = re.fullmatch(r"(?:ralf_lite\.)?([a-z_]+)\.([a-z_]+)(?:: .*| = .*|=.*)?", span)
            if not m or m.group(1) not in sections or m.group(2) in files:
                continue
            key = f"{m.group(1)}.{m.group(2)}"
            if key not in keys and not (m.group(1) == "repair" and m.group(2) in record):
                unknown.append((_where(path), key))
        for code in _code(path):
            for m in re.finditer(r"--(?:selfheal-)?set[ =]'?(?:ralf_lite\.)?([a-z_.]+)=", code):
                if m.group(1) not in keys:
                    unknown.append((_where(path), m.group(1)))
    assert not unknown, f"config keys not in config/keys.py SCHEMA: {unknown}"


def test_every_action_input_and_output_named_exists() -> None:
    action = yaml.safe_load(_text(ROOT / "action.yml"))
    inputs, outputs = set(action["inputs"]), set(action["outputs"])
    workflow_keys = {"pull-requests", "persist-credentials", "fetch-depth", "if-no-files-found"}  # GitHub's own
    unknown = []
    for path in (ROOT / "README.md", ROOT / "docs" / "action.md", ROOT / "docs" / "github.md",
                 ROOT / "docs" / "exit-codes.md", ROOT / "docs" / "history.md"):
        text = _text(path)
        for span in _spans(text):
            m = re.fullmatch(r"([a-z]+(?:-[a-z]+)+): .+", span)
            if m and m.group(1) not in inputs | workflow_keys:
                unknown.append((_where(path), m.group(1)))
        for m in re.finditer(r"`([a-z]+(?:-[a-z]+)+)` (input|output)", text):
            if m.group(1) not in (inputs if m.group(2) == "input" else outputs):
                unknown.append((_where(path), f"{m.group(1)} ({m.group(2)})"))
    assert not unknown, f"not inputs/outputs of action.yml: {unknown}"


def test_the_mcp_tool_table_lists_every_tool_the_server_registers() -> None:
    source = _text(ROOT / "pytest_selfheal" / "mcp_server" / "server.py")
    registered = set(re.findall(r"@app\.tool\([^\n]*\)\n\s+(?:async )?def (\w+)", source))
    assert {"run_tests", "status", "apply"} <= registered
    section = _text(ROOT / "docs" / "mcp.md").split("\n## Tools\n", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))
    assert documented == registered
    readme = _text(ROOT / "README.md")
    assert all(f"`{tool}`" in readme for tool in registered), "README's MCP paragraph names every tool"


def test_every_hook_named_is_declared() -> None:
    declared = {n for n in dir(hookspecs) if n.startswith("pytest_selfheal_")}
    named = {m for p in PAGES for m in re.findall(r"\bpytest_selfheal_[a-z_]+", _text(p))}
    assert named and named <= declared, sorted(named - declared)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```[^\n]*\n.*?^```", "", _text(path), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_every_relative_link_and_anchor_exists() -> None:
    broken = []
    for path in PAGES:
        text = re.sub(r"^```[^\n]*\n.*?^```", "", _text(path), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append((_where(path), target))
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append((_where(path), target))
    assert not broken, f"broken links: {broken}"


def test_no_reference_to_a_document_outside_the_repository() -> None:
    cited: dict[str, list[str]] = {}
    for path in PAGES:
        hits = re.findall(r"SPEC(?:\.md| ?§)", _text(path))
        if hits:
            cited[_where(path)] = hits
    assert not cited


def _sections(path: Path) -> set[str]:
    """Headings and bold labels of a page, lower-case, without backticks."""
    text = re.sub(r"^```[^\n]*\n.*?^```", "", _text(path), flags=re.S | re.M)
    found = re.findall(r"^#{1,6} (.+)$", text, flags=re.M) + re.findall(r"\*\*([^*]+)\*\*", text)
    return {re.sub(r"\s+", " ", s.replace("`", "")).strip(" .:").lower() for s in found}


def test_the_code_cites_pages_and_sections_that_exist() -> None:
    """``docs/loop.md "Progress"`` in a docstring names a page and a heading (or bold label) of it."""
    missing = []
    sources = [*(ROOT / "pytest_selfheal").rglob("*.py"), *(ROOT / "scripts").glob("*.py"),
               *(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    for source in sources:
        for m in re.finditer(r"\b(docs/[\w/-]+\.md)(?:\s+\"([^\"]+)\")?", _text(source)):
            page = ROOT / m.group(1)
            if not page.exists():
                if source.name != "test_scope.py":  # its docs/ paths are test data
                    missing.append((_where(source), m.group(1)))
            elif m.group(2):
                wanted = re.sub(r"\s+", " ", m.group(2)).strip().lower()
                if not any(s.startswith(wanted) for s in _sections(page)):
                    missing.append((_where(source), f'{m.group(1)} "{m.group(2)}"'))
    assert not missing, f"the code cites what the docs do not have: {missing}"
