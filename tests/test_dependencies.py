"""Every third-party module the package imports is a declared runtime dependency, and every
declared runtime dependency is imported (docs/decisions.md "Dependencies")."""

from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_selfheal"


def _imported_top_names() -> set[str]:
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        if "demo" in path.relative_to(PACKAGE).parts:
            continue  # the demo project's own modules, copied out as a sample repository
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "import_module" and node.args
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                names.add(node.args[0].value.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("pytest_selfheal", "tomllib")}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    """The runtime dependencies of pyproject.toml (the source, not a possibly stale install),
    with those of the optional features' extras (``mcp``), not of ``test``."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = [req for name, reqs in project["optional-dependencies"].items() if name != "test" for req in reqs]
    return {_normalise(re.split(r"[\s;<>=!~\[]", req, maxsplit=1)[0]) for req in [*project["dependencies"], *extras]}


def _distribution(module: str, installed: dict[str, list]) -> str:
    # A module of an uninstalled conditional dependency (tomli on 3.11+) is named like it.
    return _normalise(installed.get(module, [module])[0])


def test_imports_and_declared_dependencies_match() -> None:
    installed = dict(metadata.packages_distributions())
    used = {_distribution(module, installed) for module in _imported_top_names()}
    declared = _declared()
    assert used - declared == set(), "imported but not declared"
    assert declared - used == set(), "declared but never imported"
    assert {"junitparser", "iniconfig", "tomli", "gitpython"} <= used
