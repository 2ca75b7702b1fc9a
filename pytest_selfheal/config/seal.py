"""The seal (edge: reads files and the interpreter's state): what decides what runs and how
a result is judged, taken when an incident is captured and compared at every verification.

- the files: the collected test modules, the ``__init__.py`` and ``conftest.py`` of every
  package between them and the rootdir, every ``conftest.py`` under the rootdir, and the
  project's own plugins (``-p`` modules, ``pytest_plugins`` that resolve to project files);
- pytest's configuration: pytest's section of every config file pytest may read it from
  (each key apart, so a change names the key), the inifile the capture used, and the
  environment variables pytest reads options and plugins from;
- the interpreter's start-up customisation: ``sitecustomize`` / ``usercustomize`` where they
  resolve on ``sys.path``, and the ``.pth`` files of the site directories;
- the installed distributions that can act on a run: pytest itself and every distribution
  that registers a ``pytest11`` plugin, with their versions;
- test-aware code: the non-test modules of the project the run imported that ask whether
  they run under a test (``PYTEST_CURRENT_TEST``, ``"pytest" in sys.modules``, an import of
  ``pytest``): a module that starts to ask (or asks differently) is flagged.

Cheap by design: a file's content is hashed once per run (:class:`Hasher`, stat first: size
and mtime_ns key the run's cache; across runs only content hashes are compared), and a run
with nothing to judge (green, no incident open) never takes a seal (recorder/finish.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
import site
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import iniconfig

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.analysis.testfiles import MISSING
from pytest_selfheal.config.files import PYTEST_CONFIG_FILES, toml_loads
from pytest_selfheal.records.jsondoc import plain_json
from pytest_selfheal.records.seal import Seal

UNSET = "unset"
INIFILE = "inifile"
NO_INIFILE = "none"
# The environment pytest reads options and plugins from. Turning plugins off (`-p no:NAME`,
# PYTEST_DISABLE_PLUGIN_AUTOLOAD) adds nothing that could pass a failure: not sealed.
ENVIRONMENT: tuple[str, ...] = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
STARTUP_MODULES: tuple[str, ...] = ("sitecustomize", "usercustomize")

# Directories no conftest walk enters: pytest's default norecursedirs, caches, environments.
_SKIP_DIRS = frozenset({"_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}", "__pycache__",
                        "site-packages", "dist-packages"})
# Code that asks whether it runs under a test: pytest's variables, a look into sys.modules, an import.
TEST_AWARE = re.compile(
    rb"""PYTEST_CURRENT_TEST|PYTEST_VERSION|PYTEST_XDIST_WORKER"""
    rb"""|["']_?pytest["']\s*(?:not\s+)?in\s+sys\.modules"""
    rb"""|sys\.modules\s*(?:\.get\s*\(|\[)\s*["']_?pytest"""
    rb"""|(?:import_module|find_spec|__import__)\s*\(\s*["']_?pytest"""
    rb"""|^[ \t]*(?:import|from)[ \t]+_?pytest\b""",
    re.MULTILINE,
)


def sha256(data: bytes) -> str:
    """The hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _test_aware(data: bytes) -> tuple[bytes, ...]:
    """The test-aware constructs in a file's bytes, sorted: the pattern runs only on the lines
    that name pytest at all (a regular expression over every byte costs 100x more)."""
    if b"pytest" not in data and b"PYTEST" not in data:
        return ()
    found = {m.group(0).strip() for line in data.splitlines() if b"pytest" in line or b"PYTEST" in line
             for m in TEST_AWARE.finditer(line)}
    return tuple(sorted(found))


@dataclass
class Hasher:
    """Reads each file once per run: ``(size, mtime_ns)`` keys this run's cache of its sha256
    (and, for the modules checked for test-aware code, of what it asks). Never kept across
    runs: an mtime can lie."""

    _digests: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    _aware: dict[str, tuple[int, int, tuple[bytes, ...]]] = field(default_factory=dict)

    @staticmethod
    def _read(path: str) -> Optional[tuple[int, int, bytes]]:
        try:
            st = os.stat(path)
            with open(path, "rb") as handle:
                return st.st_size, st.st_mtime_ns, handle.read()
        except OSError:  # missing, a directory, unreadable
            return None

    @staticmethod
    def _stat(path: str) -> Optional[tuple[int, int]]:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns

    def digest(self, path: str) -> str:
        """sha256 of the file's bytes; ``missing`` when it does not exist or cannot be read."""
        known = self._digests.get(path)
        if known is not None and known[:2] == self._stat(path):
            return known[2]
        read = self._read(path)
        if read is None:
            return MISSING
        self._digests[path] = (read[0], read[1], sha256(read[2]))
        return self._digests[path][2]

    def test_aware(self, path: str) -> str:
        """sha256 of the test-aware constructs in the file, or "" when it has none."""
        known = self._aware.get(path)
        if known is None or known[:2] != self._stat(path):
            read = self._read(path)
            if read is None:
                return ""
            known = self._aware[path] = (read[0], read[1], _test_aware(read[2]))
        return sha256(b"\n".join(known[2])) if known[2] else ""


@dataclass(frozen=True)
class Loaded:
    """What the run in this process loaded (only known inside pytest): plugin module files
    (``config.pluginmanager.get_plugins()``) and every imported module's file."""

    plugin_files: tuple[str, ...] = ()
    module_files: tuple[str, ...] = ()


NOTHING_LOADED = Loaded()  # a check outside pytest: nothing of the run is known


def loaded_now(plugins: Iterable[object]) -> Loaded:
    """:class:`Loaded` of this process: the files of ``plugins`` and of ``sys.modules``."""
    def file_of(obj: object) -> Optional[str]:
        name = getattr(obj, "__file__", None)
        return name if isinstance(name, str) else None

    return Loaded(tuple(f for f in map(file_of, plugins) if f),
                  tuple(f for f in map(file_of, list(sys.modules.values())) if f))


# --------------------------------------------------------------------------- where to look


def _relative(rootdir: Path, path: str) -> Optional[str]:
    """``path`` as a rootdir-relative POSIX path, or None outside the rootdir (or in an
    environment or a hidden directory inside it)."""
    absolute = os.path.abspath(path)
    if not absolute.startswith(os.path.join(rootdir, "")):
        return None  # most of sys.modules: told apart without making a Path of each
    rel = Path(absolute).relative_to(rootdir)
    parts = rel.parts
    if not parts or any(p.startswith(".") or p in _SKIP_DIRS for p in parts[:-1]):
        return None
    return rel.as_posix()


def _folders(test_files: Iterable[str]) -> list[str]:
    """Every folder from the test files' up to the rootdir ("" is the rootdir), sorted."""
    found = {""}
    for path in test_files:
        folder = posixpath.dirname(path)
        while folder and folder not in found:
            found.add(folder)
            folder = posixpath.dirname(folder)
    return sorted(found)


def _conftests(rootdir: Path) -> list[str]:
    """Every ``conftest.py`` under the rootdir, outside environments, caches and hidden folders."""
    found = []
    for folder, dirs, files in os.walk(rootdir):
        dirs[:] = [d for d in dirs if not (d.startswith(".") or d.endswith(".egg") or d in _SKIP_DIRS
                                           or os.path.exists(os.path.join(folder, d, "pyvenv.cfg")))]
        if "conftest.py" in files:
            found.append(Path(folder, "conftest.py").relative_to(rootdir).as_posix())
    return found


def pytest_section(path: Path, text: str) -> Optional[dict[str, str]]:
    """pytest's section of the config file ``path`` as ``{key: value text}``; None when the
    file holds none (``pytest.ini`` counts even when empty, as pytest counts it)."""
    name = path.name
    if name.endswith(".toml"):
        document = toml_loads(text)
        if name == "pyproject.toml":
            tool = document.get("tool", {})
            table = tool.get("pytest") if isinstance(tool, dict) else None
        else:
            table = document.get("pytest", {})
        return {k: repr(v) for k, v in table.items()} if isinstance(table, dict) else None
    ini = iniconfig.IniConfig(str(path), data=text)
    section = "tool:pytest" if name == "setup.cfg" else "pytest"
    if section in ini.sections:
        return dict(ini[section].items())
    return {} if name in ("pytest.ini", ".pytest.ini") else None


def _config(rootdir: Path, folders: Iterable[str], inifile: Optional[str], hasher: Hasher) -> dict[str, str]:
    out: dict[str, str] = {INIFILE: inifile or NO_INIFILE}
    places = [Path(rootdir, folder) for folder in folders]
    if inifile:
        places.append(Path(rootdir, inifile).parent)  # `-c` may name a file anywhere
    for place in dict.fromkeys(places):
        for name in PYTEST_CONFIG_FILES:
            path = place / name
            shown = _relative(rootdir, str(path)) or str(path)
            if hasher.digest(str(path)) == MISSING:
                continue
            try:
                section = pytest_section(path, path.read_text(encoding="utf-8", errors="replace"))
            except (ValueError, RecursionError, iniconfig.ParseError):
                out[shown] = "unreadable " + hasher.digest(str(path))  # pytest refuses it: any change counts
                continue
            if section is None:
                continue
            out[shown] = "pytest section"
            for key, value in section.items():
                out[f"{shown}: {key}"] = sha256(value.encode("utf-8", "surrogatepass"))
    return out


def _startup(hasher: Hasher, path: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for module in STARTUP_MODULES:
        out[module] = MISSING
        for entry in path:
            base = entry or os.getcwd()
            found = next((c for c in (os.path.join(base, f"{module}.py"), os.path.join(base, module, "__init__.py"))
                          if os.path.isfile(c)), None)
            if found is not None:
                out[module] = f"{hasher.digest(found)} {found}"
                break
    for folder in _site_dirs():
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            pth = os.path.join(folder, name)
            out[pth] = hasher.digest(pth)
    return out


def _site_dirs() -> list[str]:
    folders = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    return list(dict.fromkeys(folders))


def _distributions() -> dict[str, str]:
    # Imported here: only a seal taken inside pytest reads the installed distributions, and
    # the loop's parent process never imports importlib.metadata (docs/benchmarks.md).
    import importlib.metadata

    out = {"pytest": _version("pytest")}
    for entry in importlib.metadata.entry_points(group="pytest11"):
        dist = entry.dist
        if dist is not None:
            out[dist.name] = dist.version
    return out


def _version(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return MISSING


def _without_plugins_off(words: Sequence[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for index, word in enumerate(words):
        if skip:
            skip = False
        elif word == "-p" and index + 1 < len(words) and words[index + 1].startswith("no:"):
            skip = True
        elif not word.startswith("-pno:"):
            kept.append(word)
    return kept


def _environment(environ: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for name in ENVIRONMENT:
        value = environ.get(name)
        if name == "PYTEST_ADDOPTS" and value is not None:
            value = " ".join(_without_plugins_off(value.split())) or None
        if name == "PYTEST_PLUGINS" and value is not None:
            # Loading selfheal itself this way (the MCP server and the gates may) judges nothing.
            named = sorted(p.strip() for p in value.split(",") if p.strip() and p.strip().split(".")[0] != "pytest_selfheal")
            value = ",".join(named) or None
        out[name] = sha256(value.encode("utf-8", "surrogatepass")) if value is not None else UNSET
    return out


# --------------------------------------------------------------------------- take, compare


def _files(rootdir: Path, test_files: Sequence[str], plugin_files: Iterable[str], hasher: Hasher) -> dict[str, str]:
    names = set(test_files) | set(_conftests(rootdir))
    for folder in _folders(test_files):
        names.update(posixpath.join(folder, n) if folder else n for n in ("__init__.py", "conftest.py"))
    names.update(plugin_files)
    return {name: hasher.digest(str(rootdir / name)) for name in sorted(names)}


def _project_plugins(rootdir: Path, loaded: Loaded) -> list[str]:
    return [rel for rel in (_relative(rootdir, f) for f in loaded.plugin_files) if rel is not None]


def _project_code(rootdir: Path, loaded: Loaded, sealed: Iterable[str]) -> list[str]:
    skip = set(sealed)
    found = {rel for rel in (_relative(rootdir, f) for f in loaded.module_files)
             if rel is not None and rel.endswith(".py") and rel not in skip and not is_test_file(rel)}
    return sorted(found)


def _code_paths(paths: Iterable[str]) -> set[str]:
    return {p for p in paths if p.endswith(".py") and not is_test_file(p) and not p.startswith(("../", "/"))}


def take_seal(
    rootdir: Path,
    *,
    test_files: Iterable[str],
    inifile: Optional[str],
    judging: Mapping[str, Any],
    loaded: Loaded = NOTHING_LOADED,
    extra_code: Iterable[str] = (),
    environ: Optional[Mapping[str, str]] = None,
    path: Optional[Sequence[str]] = None,
    hasher: Optional[Hasher] = None,
) -> Seal:
    """The seal of a run in ``rootdir`` whose collected test modules are ``test_files``
    (rootdir-relative), with ``inifile`` (rootdir-relative, or absolute outside it) and the
    ``judging`` ralf_lite keys. ``loaded``: what the run loaded (inside pytest);
    ``extra_code``: more rootdir-relative modules to check for test-aware code (the failures'
    target paths: an xdist controller imports none of the code under test)."""
    hasher = hasher or Hasher()
    tests = sorted({posixpath.normpath(t) for t in test_files if t.endswith(".py") and not t.startswith(("../", "/"))})
    files = _files(rootdir, tests, _project_plugins(rootdir, loaded), hasher)
    code = sorted(set(_project_code(rootdir, loaded, files)) | _code_paths(extra_code))
    aware = {rel: digest for rel in code for digest in [hasher.test_aware(str(rootdir / rel))] if digest}
    return Seal(
        files=files,
        pytest_config=_config(rootdir, _folders(tests), inifile, hasher),
        environment=_environment(os.environ if environ is None else environ),
        startup=_startup(hasher, sys.path if path is None else path),
        distributions=_distributions(),
        code=tuple(code),
        test_aware=aware,
        judging=dict(judging),
    )


def reseal(recorded: Seal, rootdir: Path, *, judging: Mapping[str, Any], loaded: Loaded = NOTHING_LOADED,
           extra_code: Iterable[str] = (), environ: Optional[Mapping[str, str]] = None,
           path: Optional[Sequence[str]] = None, distributions: bool = True) -> Seal:
    """The seal now of what ``recorded`` sealed, in ``rootdir`` (the project, or a repair
    worktree): its files hashed again (with the conftests and plugins that appeared since),
    the same configuration places, start-up files and distributions; the code it checked
    plus ``extra_code`` (rootdir-relative, e.g. a repair's changed files) and what ``loaded`` holds.
    ``distributions``: False keeps the recorded ones (a check outside pytest: the loop's parent)."""
    hasher = Hasher()
    tests = [name for name in recorded.files if is_test_file(name)]
    names = set(recorded.files) | set(_conftests(rootdir)) | set(_project_plugins(rootdir, loaded))
    files = {name: hasher.digest(str(rootdir / name)) for name in sorted(names)}
    inifile = recorded.pytest_config.get(INIFILE)
    code = sorted(set(recorded.code) | _code_paths(extra_code) | set(_project_code(rootdir, loaded, files)))
    aware = {rel: digest for rel in code for digest in [hasher.test_aware(str(rootdir / rel))] if digest}
    return Seal(
        files=files,
        pytest_config=_config(rootdir, _folders(tests), None if inifile in (None, NO_INIFILE) else inifile, hasher),
        environment=_environment(os.environ if environ is None else environ),
        startup=_startup(hasher, sys.path if path is None else path),
        distributions=_distributions() if distributions else recorded.distributions,
        code=tuple(code),
        test_aware=aware,
        judging=dict(judging),
    )


def _differ(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    return [name for name in sorted(set(before) | set(after)) if before.get(name, MISSING) != after.get(name, MISSING)]


def harness_changes(recorded: Seal, now: Seal) -> list[str]:
    """What changed between two seals, each named: a file path, ``<config file>: <key>``, a
    variable, a start-up file, ``<distribution> <version>``, ``<module> (test-aware)``. The
    judging keys are not in it (:func:`judging_changes`: reported, not obeyed)."""
    changed = _differ(recorded.files, now.files) + _differ(recorded.pytest_config, now.pytest_config)
    changed += _differ(recorded.environment, now.environment)
    for name in _differ(recorded.startup, now.startup):
        where = now.startup.get(name) or recorded.startup.get(name) or ""
        changed.append(f"{name} ({where.split(' ', 1)[1]})" if name in STARTUP_MODULES and " " in where else name)
    for name in _differ(recorded.distributions, now.distributions):
        old, new = recorded.distributions.get(name, "not installed"), now.distributions.get(name, "not installed")
        changed.append(f"{name} {old} -> {new}")
    changed += [f"{name} (test-aware code)" for name in sorted(now.test_aware)
                if now.test_aware[name] != recorded.test_aware.get(name)]
    return changed


def judging_changes(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The judging keys whose value now differs from the recorded one, sorted (compared as
    JSON: a value read back from ``incident.json`` is a frozen copy)."""
    def text(values: Mapping[str, Any], key: str) -> str:
        return json.dumps(plain_json(values.get(key)), sort_keys=True)

    return sorted(key for key in set(recorded) | set(now) if text(recorded, key) != text(now, key))


__all__ = [
    "ENVIRONMENT",
    "Hasher",
    "Loaded",
    "TEST_AWARE",
    "harness_changes",
    "judging_changes",
    "loaded_now",
    "pytest_section",
    "reseal",
    "take_seal",
]
