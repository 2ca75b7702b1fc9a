"""The house rules of the package layout, checked on the source itself.

- the import contracts in pyproject.toml (import-linter: layers, the CLI is a leaf, the
  pure core does no I/O);
- no import cycle between modules, counting imports inside functions;
- package-internal imports sit at the top of a module, except the lazy imports listed
  in ``LAZY_IMPORTS`` (each one says why in a comment beside it);
- no module is over 800 lines: modules split by concern, not by size.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from importlinter.cli import lint_imports

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - tomli is a dependency below 3.11
    import tomli as tomllib

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_selfheal"
MAX_MODULE_LINES = 800

# (module, imported module): the only package-internal imports allowed inside a function.
# pytest parses and compiles every module of the package a run imports where bytecode is not
# written, so the plugin's side imports what only some runs need where they first need it.
_RECORDER_WAITS = {
    "pytest_selfheal.capture.evidence",  # a failing test's evidence
    "pytest_selfheal.capture.spectrum",  # --selfheal-spectrum
    "pytest_selfheal.config.files",  # a config to read (recorder.has_config)
    "pytest_selfheal.config.settings",  # a config to read, or something to record
    "pytest_selfheal.cleanroom",  # an open or stopped incident: a fresh bytecode cache
    "pytest_selfheal.errors",  # a config to read, or an open incident
    "pytest_selfheal.loop.agent_mode",  # an open incident
    "pytest_selfheal.loop.stopped",  # a stopped incident that may hold a passed test
    "pytest_selfheal.records.redacted",  # an open incident's ids holding a secret
    "pytest_selfheal.records.vocab",  # a line to show
    "pytest_selfheal.store.fsio",  # an open incident, or something to record
    "pytest_selfheal.store.root",  # an open incident, or something to record
}
LAZY_IMPORTS: set[tuple[str, str]] = {
    ("pytest_selfheal.plugin", "pytest_selfheal.recorder"),  # --selfheal
    ("pytest_selfheal.plugin", "pytest_selfheal.recorder.finish"),  # something to record
    ("pytest_selfheal.plugin", "pytest_selfheal.capture.localise"),  # the loop's localisation run
    *(("pytest_selfheal.recorder", waiting) for waiting in _RECORDER_WAITS),
    # The loop side: an open incident, a stopped one, or --selfheal-loop.
    ("pytest_selfheal.recorder.finish", "pytest_selfheal.loop.agent_mode"),
    ("pytest_selfheal.recorder.finish", "pytest_selfheal.loop.sticky"),
    ("pytest_selfheal.recorder.finish", "pytest_selfheal.run.entry"),
    # Only a config with patterns or rules loads their checks (and the failure records under them).
    ("pytest_selfheal.config.settings", "pytest_selfheal.analysis.rules"),
    ("pytest_selfheal.config.keys", "pytest_selfheal.analysis.rules"),
    # Reading the environment for secrets is I/O: merging the config does none.
    ("pytest_selfheal.config.settings", "pytest_selfheal.redact"),
    # The repair side (providers, worktrees, patches): only when a repair provider runs.
    ("pytest_selfheal.run.entry", "pytest_selfheal.repair.session"),
    # The report's records: a loop iteration records its history and triage, and builds no report.
    ("pytest_selfheal.history.triage", "pytest_selfheal.records.report"),
    # The MCP SDK, an optional extra, is imported by the server module.
    ("pytest_selfheal.cli.commands.mcp", "pytest_selfheal.mcp_server.server"),
    # ``selfheal mcp`` answers ``initialize`` first: what a tool runs loads when it is called.
    *(("pytest_selfheal.mcp_server.tools", f"pytest_selfheal.{name}") for name in (
        "cleanroom", "hooks", "process", "loop.agent_mode", "loop.attempts", "loop.messages", "loop.policy", "loop.seal_check",
        "loop.regression", "loop.sticky", "loop.verify", "repair.apply", "report.incident_view", "report.load", "report.sections",
        "run.entry", "run.pytest_run", "store.judging")),
    ("pytest_selfheal.mcp_server.digest", "pytest_selfheal.plan.build"),  # only a digest that shows the plan
    # A stop hook whose gate did not start (a bad argument, a broken install) still answers, redacted.
    ("pytest_selfheal.cli.main", "pytest_selfheal.redact"),
    # A ``selfheal`` run imports the one command it runs.
    *(("pytest_selfheal.cli.main", f"pytest_selfheal.cli.commands.{path.stem}")
      for path in (PACKAGE / "cli" / "commands").glob("[!_]*.py")),
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        if rel.parts[1] == "demo":
            continue  # the demo project is data, not the package
        parts = rel.parts[:-1] if rel.parts[-1] == "__init__" else rel.parts
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> Iterator[tuple[ast.AST, str, bool]]:
    """(node, imported package module, inside a function or class) for each internal import."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nested: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pytest_selfheal":
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.split(".")[0] == "pytest_selfheal"]
        for name in names:
            yield node, name, id(node) in nested


def test_import_contracts_hold() -> None:
    assert lint_imports(config_filename=str(PACKAGE.parent / "pyproject.toml"), no_cache=True) == 0


def test_no_internal_import_inside_a_function() -> None:
    hidden = sorted(
        f"{module} imports {name} (line {node.lineno})"  # type: ignore[attr-defined]
        for module, path in MODULES.items()
        for node, name, inner in _imports(path)
        if inner and (module, name) not in LAZY_IMPORTS
    )
    assert hidden == []


def test_no_import_cycle_counting_every_import() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for _node, name, _inner in _imports(path):
            if name in MODULES and name != module:
                graph[module].add(name)
    # Iterative DFS: a back edge is a cycle.
    state: dict[str, int] = {}
    cycles: list[list[str]] = []
    for start in graph:
        if start in state:
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                cycles.append(path[path.index(child):] + [child])
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    assert cycles == []


def test_no_module_over_800_lines() -> None:
    sizes = {module: len(path.read_text(encoding="utf-8").splitlines()) for module, path in MODULES.items()}
    assert {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def test_the_gitpython_contract_covers_every_module_but_gitrepo() -> None:
    """The contract lists its sources by name: a new top-level module must join it."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    (git,) = [c for c in config["tool"]["importlinter"]["contracts"] if c.get("forbidden_modules") == ["git"]]
    top_level = {".".join(name.split(".")[:2]) for name in MODULES if "." in name}
    assert top_level - set(git["source_modules"]) == {"pytest_selfheal.gitrepo"}
