"""The arguments of a verification command, judged by their value (edge: resolves paths,
reads the installed distributions' entry points; docs/loop.md "What a verification run executes").

One check for every option wherever it comes from (a plan, the capture's recorded options,
``verification.args``, ``--set``, MCP): selections inside the root; no ``@FILE`` (options
this check would never see); the options the loop sets itself never replayed; ``-p``, ``-o``
and ``-c`` judged by their value; a few options that only select, print or stop early safe;
any other only as recorded, with a value naming no path outside the root.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Optional

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.names import SELECTION_OPTION

PYTEST_RUNNERS = frozenset({"pytest", "py.test"})
SAFE_FLAGS = frozenset({
    "-q", "--quiet", "-v", "--verbose", "-x", "--exitfirst", "-l", "--showlocals", "-s",
    "--no-header", "--no-summary", "--collect-only", "--co", "--strict-markers", "--disable-warnings",
    "--disable-pytest-warnings",
})
_TB_STYLES = frozenset({"auto", "long", "short", "line", "native", "no"})


def _count(value: str) -> bool:
    return value.isdigit() and len(value) < 10


SAFE_VALUED: dict[str, Callable[[str], bool]] = {
    "--tb": lambda value: value in _TB_STYLES,
    "-r": lambda value: value.isalnum() or value == "",
    "-k": lambda value: True,  # pytest's own expression language, never Python's eval
    "-m": lambda value: True,
    "--maxfail": _count,
    "--durations": _count,
    "--color": lambda value: value in ("yes", "no", "auto"),
    "--capture": lambda value: value in ("fd", "sys", "no", "tee-sys"),
    "--deselect": lambda value: True,  # checked as a selection by check_arguments
}
# Options the loop sets itself, or that write or read outside the root: refused from every
# source (the capture never records them: capture/options.py).
NEVER_REPLAYED = frozenset({
    "--rootdir", "--basetemp", "--confcutdir", "--junitxml", "--junit-xml", "--debug", "--pyargs",
    "--report-log", "--result-log", "--resultlog", SELECTION_OPTION,
})
# Options judged by their value wherever they come from: (short, long) spellings.
_PLUGIN = ("-p",)
_OVERRIDE = ("-o", "--override-ini")
_CONFIG = ("-c", "--config-file", "--inifile")
_JUDGED = frozenset({*_PLUGIN, *_OVERRIDE, *_CONFIG})
# ini keys whose value is one or more paths (each must resolve inside the root).
PATH_INI_KEYS = frozenset({"cache_dir", "pythonpath", "testpaths", "confcutdir", "log_file", "junit_suite_name_file"})


class ArgumentRefused(RefusedError):
    """An argument of a verification command refused by :func:`check_arguments`."""


def inside_root(word: str, root: Path) -> bool:
    """The path part of a selection word resolves inside ``root`` (symlinks followed)."""
    path = word.split("::", 1)[0]
    if not path or "\x00" in path:
        return False
    base = root.resolve()
    try:
        resolved = (base / path).resolve()  # an absolute `path` replaces base
    except (OSError, RuntimeError, ValueError):  # a symlink loop, an unusable name
        return False
    return resolved == base or base in resolved.parents


def option_groups(tokens: Sequence[str]) -> list[tuple[str, Optional[str]]]:
    """``(option, value)`` pairs of options-only words (one not starting with ``-``: the value before it)."""
    groups: list[tuple[str, Optional[str]]] = []
    for token in tokens:
        if token.startswith("--") and "=" in token:
            name, _, value = token.partition("=")
            groups.append((name, value))
        elif token.startswith("-") and token != "-":
            groups.append((token, None))
        elif groups and groups[-1][1] is None:
            groups[-1] = (groups[-1][0], token)
        else:
            groups.append(("", token))  # a positional word: checked as a selection
    return groups


@functools.lru_cache(maxsize=1)
def installed_plugins() -> frozenset[str]:
    """The names ``-p NAME`` may load: every ``pytest11`` entry point's name, module and packages."""
    names: set[str] = set()
    for entry in importlib.metadata.entry_points(group="pytest11"):
        names.add(entry.name)
        parts = entry.value.split(":", 1)[0].strip().split(".")
        names.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
    return frozenset(names)


def _builtin_plugin(name: str) -> bool:
    # pytest's own plugins (`-p pytester`) live in the installed `_pytest` package.
    if not name.isidentifier():
        return False
    try:
        return importlib.util.find_spec(f"_pytest.{name}") is not None
    except (ImportError, ValueError):
        return False


def plugin_problem(value: str) -> Optional[str]:
    """Why ``-p value`` is refused (a plugin not installed in the environment), or None."""
    if value.startswith("no:"):
        return None if len(value) > 3 and "/" not in value and "\\" not in value else "an empty or path-like 'no:' name"
    if value in installed_plugins() or _builtin_plugin(value):
        return None
    return f"'-p {value}' loads code that is not a pytest plugin installed in this environment"


def _path_pieces(value: str) -> list[str]:
    """The parts of an option value that look like paths (``html:/abs/report``)."""
    pieces: list[str] = []
    for chunk in value.replace(",", " ").replace(";", " ").replace("=", " ").split():
        if "://" in chunk:
            continue  # a URL names a host, not a path of ours
        pieces.extend(part for part in chunk.split(":") if "/" in part or "\\" in part or part == "..")
    return pieces


def _expands(piece: str) -> bool:
    """pytest expands ``~`` and ``$VAR`` in some path values: no path this check can resolve."""
    return piece.startswith("~") or "$" in piece


def path_problem(value: str, root: Path) -> Optional[str]:
    """Why ``value`` is refused (it names a path outside ``root``), or None."""
    for piece in _path_pieces(value):
        if _expands(piece) or not inside_root(piece, root):
            return f"{piece!r} is a path outside the project root {root}"
    return None


def _ini_problem(value: str, root: Path, trusted: bool) -> Optional[str]:
    key, eq, setting = value.partition("=")
    key = key.strip()
    if not eq or not key:
        return f"'-o {value}' is not KEY=VALUE"
    if key == "addopts":
        try:
            words = shlex.split(setting)
        except ValueError:
            return "'-o addopts=' that does not split into words"
        try:
            # Inside a trusted `-o addopts=` every word was recorded whole.
            _check_words(words, root, lambda option, value: trusted, shown=f"addopts={setting}")
        except ArgumentRefused as exc:
            return f"'-o addopts=' carries a refused option ({exc.message})"
        return None
    if key in PATH_INI_KEYS:
        for piece in setting.split():
            if _expands(piece) or not inside_root(piece, root):
                return f"'-o {key}=' names {piece!r}, outside the project root {root}"
        return None
    return path_problem(setting, root)


def judge(option: str, value: Optional[str], root: Path, trusted: bool = False) -> Optional[str]:
    """Why a value-judged or never-replayed ``option value`` is refused, or None."""
    if option in NEVER_REPLAYED:  # pytest refuses abbreviations (allow_abbrev=False): the name is exact
        return f"{option} is set by the loop itself and never replayed"
    if value is None:
        return None
    if option in _PLUGIN:
        return plugin_problem(value)
    if option in _OVERRIDE:
        return _ini_problem(value, root, trusted)
    if option in _CONFIG:
        return None if inside_root(value, root) else f"'{option} {value}': a config file outside the project root"
    return path_problem(value, root)


def _split(words: Sequence[str], index: int) -> tuple[str, Optional[str], int]:
    """``(option, value, words used)`` at ``words[index]`` (a value only where we know how to find it)."""
    word = words[index]
    following = words[index + 1] if index + 1 < len(words) else None
    if word.startswith("--"):
        name, eq, attached = word.partition("=")
        if eq:
            return name, attached, 1
        if (name in _JUDGED or name in SAFE_VALUED or name in NEVER_REPLAYED) and following is not None:
            return name, following, 2
        return name, None, 1
    short = word[:2]
    if short in _JUDGED or short in SAFE_VALUED:
        if len(word) > 2:
            return short, word[2:], 1
        if following is not None:
            return short, following, 2
    return word, None, 1


def _safe(option: str, value: Optional[str], used: int, word: str) -> bool:
    if option in SAFE_FLAGS and value is None:
        return True
    if option in SAFE_VALUED and value is not None:
        return SAFE_VALUED[option](value)
    # -q, -vv, -qx: a cluster of safe one-letter flags.
    letters = word[1:] if used == 1 and not word.startswith("--") else ""
    return bool(letters) and all(f"-{letter}" in SAFE_FLAGS for letter in letters)


def _refuse(shown: str, why: str) -> ArgumentRefused:
    return ArgumentRefused(f"refusing verification command {shown!r}: {why}")


def _check_words(words: Sequence[str], root: Path, recorded_as: Callable[[str, Optional[str]], bool], *, shown: str,
                 pytest_runner: bool = True) -> None:
    """``recorded_as(option, value)``: whether the capture recorded that option, a command may repeat it."""
    for word in words:
        if word.startswith("@"):
            raise _refuse(shown, f"{word[:80]!r}: pytest reads more arguments from an @file, which is never accepted")
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            raise _refuse(shown, "'--' is not accepted")
        if not word.startswith("-") or word == "-":
            if not inside_root(word, root):
                raise _refuse(shown, f"{word[:200]!r} is not a node id or path inside the project root {root}")
            index += 1
            continue
        name, eq, attached = word.partition("=")
        option, value, used = _split(words, index) if pytest_runner else (name, attached if eq else None, 1)
        if pytest_runner and _safe(option, value, used, word):
            if option == "--deselect" and value is not None and not inside_root(value, root):
                raise _refuse(shown, "--deselect outside the project root")
            index += used
            continue
        recorded = recorded_as(option, value) or recorded_as(word, None)
        if not recorded and used == 1 and index + 1 < len(words) and recorded_as(word, words[index + 1]):
            value, used, recorded = words[index + 1], 2, True  # a recorded option with its own value
        problem = judge(option, value, root, trusted=recorded) if pytest_runner or recorded else None
        if problem:
            raise _refuse(shown, problem)
        if option in _JUDGED and pytest_runner and value is not None:
            index += used
            continue
        if not recorded:
            raise _refuse(
                shown,
                f"option {option!r} is not a safe verification option (it can load code or touch paths outside "
                "the project) and the capture did not record it",
            )
        index += used


def check_arguments(
    words: Sequence[str], *, root: Path, trusted: Sequence[str] = (), pytest_runner: bool = True, shown: str = ""
) -> None:
    """Refuse (``RefusedError``, exit 5) any word after the runner these rules do not accept;
    another runner than pytest gets selections and ``trusted`` options only."""
    groups = frozenset(option_groups(trusted))
    _check_words(words, root, lambda option, value: (option, value) in groups, shown=shown or " ".join(words)[:200],
                 pytest_runner=pytest_runner)
