"""Finding and reading the config files (edge: file I/O; the merge is settings.py's).

The global file, the project's ``.planning/config.{yml,yaml,json}`` and the ``selfheal*``
options of the pytest config file pytest would use. Only the ``ralf_lite`` key of the
JSON/YAML files is ours; every file is read and checked before anything is returned.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import iniconfig

from pytest_selfheal import names
from pytest_selfheal.config.keys import ROOT_KEY
from pytest_selfheal.config.settings import (
    ConfigLayer,
    EffectiveConfig,
    IniValue,
    Override,
    build_effective_config,
    config_error,
)
from pytest_selfheal.errors import describe_value
from pytest_selfheal.names import INI_OVERRIDES, project_config_paths

# Config files are a few hundred bytes; the bound keeps a stray huge file from eating memory.
MAX_CONFIG_BYTES = 8 * 1024 * 1024

# pytest's own config files in its order of precedence (pytest 9; older pytest reads a
# subset of them, in the same order).
PYTEST_CONFIG_FILES = (
    "pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini",
    "setup.cfg",
)


def global_config_path(env: Mapping[str, str] = os.environ) -> Path:
    """``${OPENCODE_CONFIG_DIR:-~/.config/opencode}/get-shit-done/config.json``
    (:func:`pytest_selfheal.names.global_config_path`); ConfigError when HOME is unknown."""
    path = names.global_config_path(env)
    if path is None:
        raise config_error("cannot locate the global config: HOME is not set "
                           "(set HOME or OPENCODE_CONFIG_DIR)")
    return path


def _read_text(path: Path) -> Optional[str]:
    """The file's text, None when it does not exist; ConfigError when it cannot be read."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise config_error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise config_error(f"{path}: cannot read: not a regular file")
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise config_error(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise config_error(f"{path}: file too large (over {MAX_CONFIG_BYTES} bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise config_error(f"{path}: not UTF-8 text (bad byte at offset {exc.start})") from None


def _parse_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise config_error(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: "
                           f"{exc.msg}") from None
    except RecursionError:
        raise config_error(f"{path}: invalid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal longer than Python accepts
        raise config_error(f"{path}: invalid JSON: {exc}") from None


def _parse_yaml(path: Path, text: str) -> Any:
    # Lazy: pyyaml is slow to import and most projects have no YAML config file.
    import yaml  # type: ignore[import-untyped,unused-ignore]

    try:
        return yaml.safe_load(text)  # safe_load only: no python tags, no code
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = " ".join(str(exc.problem or exc.context or "malformed").split())
        raise config_error(f"{path}: invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise config_error(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise config_error(f"{path}: invalid YAML: nested too deeply") from None


def read_config_section(path: Path) -> Optional[Any]:
    """The ``ralf_lite`` value of a JSON or YAML config file, unchecked; None when there is
    none (a YAML ``ralf_lite:`` whose keys are all commented out is null)."""
    text = _read_text(path)
    if text is None:
        return None
    is_json = path.suffix == ".json"
    document = _parse_json(path, text) if is_json else _parse_yaml(path, text)
    if document is None and not is_json:
        return None  # an empty YAML file
    if not isinstance(document, dict):
        kind = "a JSON object" if is_json else "a YAML mapping"
        raise config_error(f"{path}: expected {kind} at the top level, "
                           f"got {describe_value(document)}")
    return document.get(ROOT_KEY)


def _ini_text(name: str, value: object) -> str:
    """A TOML value as the text an ini file would hold, keeping list items apart."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and name == INI_OVERRIDES:
        return "\n".join(str(item) for item in value)
    return json.dumps(value, default=str)  # true/false, numbers, a flow list (parsed as YAML)


def pytest_section(path: Path, text: str) -> Optional[dict[str, Any]]:
    """pytest's section of its config file ``path``, values as the file gives them; None when
    the file holds none (``pytest.ini`` counts even when empty, as pytest counts it)."""
    name = path.name
    if name.endswith(".toml"):
        try:
            if sys.version_info >= (3, 11):
                import tomllib

                document = tomllib.loads(text)
            else:  # tomli, a declared dependency there (pytest requires it too)
                import tomli  # type: ignore[import-not-found,unused-ignore]  # installed below 3.11 only

                document = dict(tomli.loads(text))
        except (ValueError, RecursionError) as exc:  # TOMLDecodeError is a ValueError
            raise config_error(f"{path}: invalid TOML: {exc}") from None
        if name != "pyproject.toml":
            table = document.get("pytest", {})
            return table if isinstance(table, dict) else {}
        tool = document.get("tool", {})
        pytest_table = tool.get("pytest") if isinstance(tool, dict) else None
        if not isinstance(pytest_table, dict):
            return None
        # pytest refuses a file with both: the native table, else the ini-style one.
        section = {k: v for k, v in pytest_table.items() if k != "ini_options"} or pytest_table.get("ini_options")
        return section if isinstance(section, dict) else None
    try:
        ini = iniconfig.IniConfig(str(path), data=text)
    except iniconfig.ParseError as exc:
        raise config_error(f"{path}: invalid ini file at line {exc.lineno + 1}: {exc.msg}") from None
    section_name = "tool:pytest" if name == "setup.cfg" else "pytest"
    if section_name in ini.sections:
        return dict(ini[section_name].items())
    return {} if name in ("pytest.ini", ".pytest.ini") else None


def find_pytest_ini(project_root: Path) -> Optional[tuple[Path, dict[str, str]]]:
    """The config file pytest would use in ``project_root`` and its ``selfheal*`` options as
    ini text."""
    for name in PYTEST_CONFIG_FILES:
        path = Path(project_root, name)
        text = _read_text(path)
        if text is None:
            continue
        section = pytest_section(path, text)
        if section is not None:
            return path, {key: _ini_text(key, value) for key, value in section.items() if key.startswith("selfheal")}
    return None


def find_project_root(start: Path) -> Path:
    """The directory pytest takes as its rootdir when run in ``start`` without arguments, by
    pytest's rules: the ``selfheal`` commands find the reports root ``pytest --selfheal``
    wrote from any subdirectory of the project."""
    start = Path(start).resolve()
    chain = [start, *start.parents]
    for folder in chain:
        if find_pytest_ini(folder) is not None:
            return folder
    for marker in ("setup.py", "pyproject.toml"):
        for folder in chain:
            if (folder / marker).is_file():
                return folder
    return start


def is_project(start: Path) -> bool:
    """Whether ``start`` is inside a project: an ancestor (``start`` included) holds a pytest
    config file, a ``setup.py``, a ``pyproject.toml`` or a ``.git``. A home directory or ``/``
    usually holds none; running the tests of everything below them is never what was meant."""
    for folder in (start, *start.parents):
        if find_pytest_ini(folder) is not None or any(
                (folder / marker).exists() for marker in ("setup.py", "pyproject.toml", ".git")):
            return True
    return False


def load_config(
    project_root: Path,
    *,
    env: Mapping[str, str] = os.environ,
    ini: Optional[Mapping[str, IniValue]] = None,
    overrides: Sequence[Override] = (),
    ini_origin: Optional[str] = None,
) -> EffectiveConfig:
    """The effective config: defaults ← global ← project ← pytest ini ← overrides, every value
    checked. ``ini=None`` reads the pytest config file in ``project_root`` (the ``selfheal``
    command); the plugin passes what ``config.getini`` gave it."""
    # Global then project layers, for the files that have a ``ralf_lite`` section: every file
    # is read and parsed, then each section checked (ConfigError naming its file).
    sections = [(str(path), read_config_section(path))
                for path in (global_config_path(env), *project_config_paths(Path(project_root)))]
    file_layers = [ConfigLayer.of(origin, section) for origin, section in sections if section is not None]
    if ini is None:
        found = find_pytest_ini(Path(project_root))
        ini = found[1] if found else {}
        if found:
            ini_origin = f"pytest ini ({found[0]})"
    effective = build_effective_config(file_layers, ini=ini, ini_origin=ini_origin or "pytest ini",
                                       overrides=overrides, project_root=os.path.abspath(project_root))
    return effective if env is os.environ else dataclasses.replace(effective, environ=env)
