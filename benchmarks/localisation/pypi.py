"""The localisation benchmark's corpus of real projects: pinned PyPI sdists with their tests.

Each project is downloaded once (``pip download --no-binary :all:``) and unpacked below a
cache outside the repository (``$SELFHEAL_LOCALISATION_CACHE``, default
``~/.cache/selfheal-localisation``); no third-party code is ever committed. Faults are
injected by a small AST mutator with mutmut's classic operators, one token each: a
comparison flipped or loosened (``<`` → ``<=``, ``==`` → ``!=``, ``in`` → ``not in``), an
arithmetic operator swapped (``+`` ↔ ``-``, ``*`` → ``+``), an integer constant off by one,
``and`` ↔ ``or``, a ``not`` dropped. Candidates are drawn in a fixed pseudo-random order,
one per function before a second in any, so every fault is in a different function while
there are functions left; run.py keeps those that fail at least one test.

The answer of a mutant is the function whose body holds it (``Class.method``); mutants in
nested functions and lambdas are not drawn (the function a reader would name is ambiguous).
"""

from __future__ import annotations

import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple, Optional

from corpus import Mutant  # run.py puts this folder on sys.path


class Project(NamedTuple):
    name: str  # the PyPI name
    version: str  # pinned
    modules: tuple[str, ...]  # the files mutated, relative to the unpacked sdist
    tests: tuple[str, ...]  # pytest's arguments selecting the tests
    src: str  # the source folder FauxPy localises in (``--src``)
    exclude: str = ""  # FauxPy's ``--exclude`` (tests inside the package)
    options: tuple[str, ...] = ()  # more pytest arguments (a src layout's ``pythonpath``)
    note: str = ""


PROJECTS: list[Project] = [
    Project("cachetools", "5.5.0", ("src/cachetools/__init__.py",), ("tests",), "src",
            options=("-o", "pythonpath=src"), note="src layout; Cache, the shared base of eight caches"),
    Project("inflection", "0.5.1", ("inflection/__init__.py",), ("test_inflection.py",), "inflection",
            note="one module, 455 parametrised tests"),
    Project("parse", "1.20.2", ("parse.py",), ("tests",), ".", exclude="[tests]",
            note="one module; a Parser class and its converters"),
    Project("toolz", "1.0.0", ("toolz/itertoolz.py", "toolz/dicttoolz.py", "toolz/functoolz.py"), ("toolz/tests",),
            "toolz", exclude="[toolz/tests]", note="tests inside the package"),
    Project("more-itertools", "10.5.0", ("more_itertools/recipes.py",), ("tests/test_recipes.py",),
            "more_itertools", note="the recipes module and its tests"),
    Project("itsdangerous", "2.2.0", ("src/itsdangerous/encoding.py", "src/itsdangerous/signer.py",
                                      "src/itsdangerous/serializer.py"),
            ("tests/test_itsdangerous/test_encoding.py", "tests/test_itsdangerous/test_signer.py",
             "tests/test_itsdangerous/test_serializer.py"), "src", options=("-o", "pythonpath=src"),
            note="src layout; the tests that need no freezegun"),
    Project("boltons", "24.1.0", ("boltons/urlutils.py", "boltons/strutils.py", "boltons/iterutils.py"),
            ("tests/test_urlutils.py", "tests/test_strutils.py", "tests/test_iterutils.py"), "boltons",
            options=("--noconftest",), note="three utility modules; its conftest predates pytest 9's hooks"),
    Project("python-dateutil", "2.9.0.post0", ("src/dateutil/relativedelta.py", "src/dateutil/easter.py"),
            ("tests/test_relativedelta.py", "tests/test_easter.py"), "src", options=("-o", "pythonpath=src"),
            note="src layout; needs six in the benchmark environment"),
    Project("packaging", "24.2", ("src/packaging/version.py", "src/packaging/utils.py"), ("tests/test_utils.py",),
            "src", options=("-o", "pythonpath=src"),
            note="src layout; Version and the filename helpers, through test_utils.py (its others take minutes)"),
]

# Faults kept per project (9 projects: 117 in all).
PER_PROJECT = 13


def cache_dir() -> Path:
    return Path(os.environ.get("SELFHEAL_LOCALISATION_CACHE", "~/.cache/selfheal-localisation")).expanduser()


def unpacked(project: Project) -> Path:
    """The unpacked sdist of ``project`` in the cache, downloaded on first use."""
    return unpacked_sdist(project.name, project.version)


def unpacked_sdist(name: str, version: str) -> Path:
    """The unpacked sdist of ``name`` ``version`` in the cache, downloaded on first use."""
    root = cache_dir()
    folder = root / "src" / f"{name}-{version}"
    if folder.is_dir():
        return folder
    sdists = root / "sdists"
    sdists.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{version}.tar.gz".lower().replace("-", "_")
    found = [p for p in sdists.glob("*.tar.gz") if p.name.lower().replace("-", "_") == stem]
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "-d", str(sdists), f"{name}=={version}"], check=True, stdin=subprocess.DEVNULL)
        found = [p for p in sdists.glob("*.tar.gz") if p.name.lower().replace("-", "_") == stem]
    archive = found[0]
    extract = root / "src" / f".partial-{os.getpid()}"  # two jobs may unpack the same sdist at once
    shutil.rmtree(extract, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(extract, filter="data")
    (only,) = list(extract.iterdir())
    try:
        only.rename(folder)
    except OSError:
        if not folder.is_dir():
            raise
    shutil.rmtree(extract, ignore_errors=True)
    return folder


# ---------------------------------------------------------------------- the mutator

_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BINARY = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.FloorDiv: ast.Mult, ast.Mod: ast.FloorDiv}


def _mutation(node: ast.AST) -> Optional[str]:
    """The replacement text of ``node`` by one operator, or None."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        return f"({ast.unparse(ast.Compare(node.left, [_COMPARE[type(node.ops[0])]()], node.comparators))})"
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY and not isinstance(node.left, ast.Constant):
        return f"({ast.unparse(ast.BinOp(node.left, _BINARY[type(node.op)](), node.right))})"
    if isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        return f"({ast.unparse(ast.BoolOp(other, node.values))})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return f"({ast.unparse(node.operand)})"
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return repr(node.value + 1)
    return None


def _sites(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """(qualified name of the enclosing function, node) for every mutable single-line node
    in a top-level function's or a class method's body."""

    def body_nodes(function: ast.AST) -> Iterator[ast.expr]:
        stack = list(ast.iter_child_nodes(function))
        while stack:
            node = stack.pop(0)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.arguments)):
                continue  # nested definitions; defaults and annotations run at def time
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # a docstring
            if isinstance(node, ast.expr):
                yield node
            stack.extend(ast.iter_child_nodes(node))

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.expr]]:
        for stmt in body:
            if isinstance(stmt, ast.ClassDef):
                yield from walk(stmt.body, f"{prefix}{stmt.name}.")
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in body_nodes(stmt):
                    if node.lineno == node.end_lineno:
                        yield f"{prefix}{stmt.name}", node

    yield from walk(tree.body, "")


def candidates(project: Project, folder: Path) -> list[Mutant]:
    """Every mutant of ``project``'s modules, in the benchmark's fixed order: shuffled with
    the project's name as seed, then one per function before a second in any."""
    found: list[Mutant] = []
    for rel in project.modules:
        text = (folder / rel).read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        for function, node in _sites(ast.parse(text)):
            new = _mutation(node)
            if new is None:
                continue
            line = lines[node.lineno - 1].encode()
            start, end = node.col_offset, node.end_col_offset or 0
            old_line = line.decode()
            new_line = (line[:start] + new.encode() + line[end:]).decode()
            mutated = "".join(lines[: node.lineno - 1]) + new_line + "".join(lines[node.lineno:])
            try:
                compile(mutated, rel, "exec")
            except SyntaxError:
                continue
            found.append(Mutant(project.name, rel, old_line, new_line, function, node.lineno))
    random.Random(project.name).shuffle(found)
    rounds: dict[tuple[str, str], int] = {}
    order: list[tuple[int, int, Mutant]] = []
    for index, mutant in enumerate(found):
        key = (mutant.path, mutant.function)
        rounds[key] = rounds.get(key, 0) + 1
        order.append((rounds[key], index, mutant))
    return [m for _, _, m in sorted(order, key=lambda t: (t[0], t[1]))]


def stem_of(project: Project) -> str:
    """The name of ``project``'s cache files."""
    return f"{project.name}-{project.version}"


def cached(stem: str, kind: str) -> dict[str, Any]:
    """What earlier benchmark runs remembered of each fault of the sdist ``stem`` (a mutant
    by ``path:line:new``): ``verdicts``, the plain run's exit code (a fault no test catches
    is not retried); ``fauxpy``, its result (FauxPy's ranking does not change with this
    project's code)."""
    path = cache_dir() / kind / f"{stem}.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}


def verdicts(stem: str) -> dict[str, int]:
    return {k: int(v) for k, v in cached(stem, "verdicts").items()}


def remember(stem: str, kind: str, known: Mapping[str, Any]) -> None:
    path = cache_dir() / kind / f"{stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(known, indent=0, sort_keys=True))


def key_of(mutant: Mutant) -> str:
    return f"{mutant.path}:{mutant.line}:{mutant.new.strip()}"
