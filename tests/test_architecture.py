"""The house rules of the package layout, checked on the source itself.

- the import contracts in pyproject.toml (import-linter: layers, the CLI is a leaf, the
  pure core does no I/O);
- no import cycle between modules, counting imports inside functions;
- package-internal imports sit at the top of a module, except at most twelve listed in
  ``LAZY_IMPORTS`` (each one says why in a comment beside it);
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

# (module, imported module): the only package-internal imports allowed inside a function, each
# keeping what only some runs need off a path every run takes: pytest parses and compiles each
# module of the package a run imports where bytecode is not written.
LAZY_IMPORTS: set[tuple[str, str]] = {
    ("pytest_selfheal.plugin", "pytest_selfheal.recorder"),  # --selfheal
    ("pytest_selfheal.plugin", "pytest_selfheal.recorder.finish"),  # something to record
    ("pytest_selfheal.plugin", "pytest_selfheal.capture.localise"),  # the loop's localisation run
    ("pytest_selfheal.recorder", "pytest_selfheal.recorder.run_config"),  # a config to read
    ("pytest_selfheal.recorder", "pytest_selfheal.recorder.loop_side"),  # an incident on disk, --selfheal-loop
    ("pytest_selfheal.recorder", "pytest_selfheal.capture.evidence"),  # a failing test
    ("pytest_selfheal.recorder", "pytest_selfheal.capture.spectrum"),  # --selfheal-spectrum
    ("pytest_selfheal.config.keys", "pytest_selfheal.analysis.rules"),  # a config with rules or patterns
    ("pytest_selfheal.config.settings", "pytest_selfheal.redact"),  # a run's first redaction
    ("pytest_selfheal.run", "pytest_selfheal.repair.session"),  # a repair provider runs
    ("pytest_selfheal.cli.main", "pytest_selfheal.cli.table"),  # a command other than mcp, an MCP tool call
    ("pytest_selfheal.cli.main", "pytest_selfheal.cli.ci"),  # a CI or history command
}
MAX_LAZY_IMPORTS = 12

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


def _imports(path: Path, typing_too: bool = True) -> Iterator[tuple[ast.AST, str, bool]]:
    """(node, imported package module, inside a function or class) for each internal import
    (``typing_too``: those under ``if TYPE_CHECKING:`` as well)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nested: set[int] = set()
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            nested.update(id(n) for n in ast.walk(node) if n is not node)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            typing_only.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        if not typing_too and id(node) in typing_only:
            continue
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


def test_at_most_twelve_imports_inside_functions() -> None:
    inner = [node for path in MODULES.values() for node, _name, nested in _imports(path) if nested]
    assert len(LAZY_IMPORTS) <= MAX_LAZY_IMPORTS and len({id(node) for node in inner}) <= MAX_LAZY_IMPORTS


def test_no_import_cycle_counting_every_import_that_runs() -> None:
    """Imports inside functions count; a type-only import (``if TYPE_CHECKING:``) runs never."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for _node, name, _inner in _imports(path, typing_too=False):
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
