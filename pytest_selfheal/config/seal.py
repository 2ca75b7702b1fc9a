"""The seal (edge: reads files and the interpreter's state): what decides what runs and how
a result is judged, taken when an incident is captured and compared at every verification.
Between a capture and a verdict only the code under repair may change: the project's
non-test modules. Sealed: the test files, conftests and project plugins; every other
module the run imported, by content; the test data the run read; pytest's configuration
(each key apart, so a change names the key) and the environment it reads options from;
the interpreter's start-up files; pytest's and the pytest11 plugins' distributions; and the
code under repair's reads of the process context (:func:`context_reads`), so that a read
added since the capture is flagged, quoted.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import posixpath
import re
import site
import sys
import sysconfig
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional, TypeVar, cast

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.analysis.testfiles import MISSING
from pytest_selfheal.config.files import PYTEST_CONFIG_FILES, pytest_section
from pytest_selfheal.errors import ConfigError
from pytest_selfheal.records.jsondoc import plain_json
from pytest_selfheal.records.seal import Seal

UNSET = "unset"
INIFILE = "inifile"
NO_INIFILE = "none"
# The environment pytest reads options and plugins from (``-p no:NAME`` too: turning a
# plugin off can pass a failure, e.g. the warnings plugin under ``filterwarnings = error``).
ENVIRONMENT: tuple[str, ...] = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")
STARTUP_MODULES: tuple[str, ...] = ("sitecustomize", "usercustomize")
TEST_AWARE = "reads the process context"
PATCHES = "patches another module"
_T = TypeVar("_T")

# Directories no conftest walk enters: pytest's default norecursedirs, caches, environments.
_SKIP_DIRS = frozenset({"_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}", "__pycache__",
                        "site-packages", "dist-packages"})
# A module below one of these is installed code, not the project's, wherever it lives.
_INSTALLED_DIRS = frozenset({"site-packages", "dist-packages"})

# The process context code can read to tell a test run (or a verification) from a real one.
# Where its own code was loaded from (``__file__``, ``__cached__``: a verification's fresh
# bytecode cache), its parent process and ``/proc`` (the environment it started with) too.
# The call stack by every road to a frame: a traceback's, a generator's or coroutine's frame,
# a frame's caller, a tracer's or profiler's callback, the garbage collector's object graph.
_FRAME_ROADS = frozenset({"_getframe", "_current_frames", "tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back",
                          "settrace", "setprofile", "get_referrers", "get_referents", "get_objects"})
_CONTEXT_ANYWHERE = frozenset({"environ", "environb", "getenv", "getenvb", "orig_argv", "cache_from_source",
                               "getppid", *_FRAME_ROADS})
_CONTEXT_NAMES = frozenset({"__file__", "__cached__", "__spec__", "__loader__"})
_CONTEXT_OF = {"sys": frozenset({"modules", "argv", "orig_argv", "_getframe", "pycache_prefix"}),
               "os": frozenset({"environ", "environb", "getenv", "getenvb", "getcwd", "getcwdb"}),
               "Path": frozenset({"cwd"}),
               "inspect": frozenset({"currentframe", "stack", "getouterframes", "getinnerframes", "getframeinfo",
                                      "trace"}),
               "traceback": frozenset({"extract_stack", "format_stack", "walk_stack", "walk_tb", "print_stack"})}
_CONTEXT_MODULES = frozenset({"pytest", "_pytest", "pytest_selfheal"})
_CONTEXT_WORDS = ("pytest", "selfheal", "/proc/")
# A line that may hold a patch (lower-cased): it names one of these, or a statement of it starts
# by assigning to (or deleting) a dotted name that is no ``self.``/``cls.`` attribute.
_PATCH = (rb"setattr|delattr|__dict__|vars[ \t]*\(|__builtins__|\bdel[ \t]|__import__|import_module"
          rb"|getattr\([^\n]*\)\."
          rb"|(?:^|;)[ \t]*(?!self\.|cls\.)[a-z_]\w*(?:\.\w+|\([^()\n]*\)|\[[^][\n]*\])*\.\w+[ \t]*"
          rb"(?:[-+*/%&|^@]|//|\*\*|<<|>>)?=(?!=)|(?:^|;)[ \t]*(?!self\.|cls\.)[a-z_]\w*(?:\.\w+)+[ \t]*,")
_PATCH_LINE = re.compile(_PATCH, re.MULTILINE)
# A line that may hold a read names one of these (lower-cased), or starts an import; or a patch.
_CONTEXT_LINE = re.compile(rb"environ|getenv|modules|argv|_getframe|_frame|f_back|settrace|setprofile|get_refer|get_objects"
                           rb"|inspect|traceback|walk_tb|__file__|cwd|pycache_prefix"
                           rb"|__cached__|__spec__|__loader__|cache_from_source|getppid|/proc/"
                           rb"|pytest|selfheal|^[ \t]*(?:from|import)[ \t]|" + _PATCH, re.MULTILINE)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _reads_context(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        owner = node.value
        if node.attr in _CONTEXT_ANYWHERE:
            return True
        if isinstance(owner, ast.Name):
            return owner.id in _CONTEXT_MODULES or node.attr in _CONTEXT_OF.get(owner.id, ())
        if isinstance(owner, ast.Attribute):  # ``pathlib.Path.cwd``: judged by the owner's own name
            return node.attr in _CONTEXT_OF.get(owner.attr, ())
        return isinstance(owner, ast.Call) and any(node.attr in names for names in _CONTEXT_OF.values())
    if isinstance(node, ast.Name):
        return node.id in _CONTEXT_NAMES
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(word in node.value.lower() for word in _CONTEXT_WORDS)
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] in _CONTEXT_MODULES for alias in node.names)
    if isinstance(node, ast.ImportFrom):
        module = (node.module or "").split(".")[0]
        return module in _CONTEXT_MODULES or any(
            alias.name in _CONTEXT_OF.get(module, ()) or alias.name in _CONTEXT_ANYWHERE for alias in node.names)
    return False


def called_name(func: ast.expr) -> str:
    """``f`` of a call of ``f(…)`` or ``x.f(…)``."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _is_namespace(node: ast.expr) -> bool:
    """``vars(X)``, ``X.__dict__`` or ``__builtins__``: a module's or a class's own namespace."""
    return (isinstance(node, ast.Call) and called_name(node.func) == "vars" and bool(node.args)
            or isinstance(node, ast.Attribute) and node.attr == "__dict__"
            or isinstance(node, ast.Name) and node.id == "__builtins__")


def _owner(node: ast.expr) -> ast.expr:
    """Whose state an assignment to ``node`` changes: ``X`` of ``X.a.b``, ``vars(X)[k]``,
    ``getattr(X, n).a``, ``X.context().a``; the call itself of ``import_module(n).a``."""
    while True:
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        elif isinstance(node, ast.Call) and node.args and (_is_namespace(node) or called_name(node.func) == "getattr"):
            node = node.args[0]
        elif isinstance(node, ast.Call) and called_name(node.func) not in _IMPORTS:
            node = node.func
        else:
            return node


def _unpacked(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for item in target.elts:
            yield from _unpacked(item)
    elif isinstance(target, ast.Starred):
        yield from _unpacked(target.value)
    else:
        yield target


_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_IMPORTS = frozenset({"__import__", "import_module"})  # calls that return a module


def _scoped(tree: ast.AST) -> Iterator[tuple[ast.AST, Optional[ast.AST]]]:
    """Every node with the function it runs in (None: the module's top level)."""
    stack: list[tuple[ast.AST, Optional[ast.AST]]] = [(tree, None)]
    while stack:
        node, scope = stack.pop()
        yield node, scope
        inner = node if isinstance(node, _FUNCTIONS) else scope
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def may_patch(data: bytes) -> bool:
    """Whether a module's source has a line that may patch another module (:func:`patches`)."""
    return _PATCH_LINE.search(data.lower()) is not None


def patches(tree: ast.AST) -> list[ast.expr]:
    """What a module changes of code it imports: ``json.loads = …``, ``del mod.f``,
    ``setattr(mod, …)``, ``vars(mod)[k] = …``, ``mod.__dict__.update(…)`` — each target whose
    owner is a name an import binds (or ``__builtins__``, or a module an import call returns),
    or another name given to one (``m = json``), not a function's local of that name. An item
    of a container it imports is no patch; code reached otherwise (a parameter, a loop
    variable, a container) is not seen."""
    imported = {"__builtins__"}
    local: dict[ast.AST, set[str]] = {}  # a function's own names: its parameters, what it assigns
    shared: dict[ast.AST, set[str]] = {}  # a function's names declared global or nonlocal
    aliases: list[tuple[str, ast.expr]] = []  # ``m = json``, ``d = json.decoder``: another name for it
    targets: list[tuple[ast.expr, Optional[ast.AST]]] = []
    for node, scope in _scoped(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and isinstance(node.value, (ast.Name, ast.Attribute)):
            aliases.extend((t.id, node.value) for t in ([node.target] if not isinstance(node, ast.Assign)
                                                        else node.targets) if isinstance(t, ast.Name))
        if isinstance(node, (ast.Global, ast.Nonlocal)) and scope is not None:
            shared.setdefault(scope, set()).update(node.names)
        elif isinstance(node, ast.arg) or isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if scope is not None:
                local.setdefault(scope, set()).add(node.arg if isinstance(node, ast.arg) else node.id)
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets.extend((t, scope) for target in node.targets for t in _unpacked(target))
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets.append((node.target, scope))
        elif isinstance(node, ast.Call) and node.args and called_name(node.func) in ("setattr", "delattr"):
            targets.append((ast.Attribute(node.args[0], "", ast.Store(), lineno=node.lineno), scope))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr == "__setattr__" or node.func.attr == "update" and _is_namespace(node.func.value)):
            targets.append((ast.Attribute(node.func.value, "", ast.Store(), lineno=node.lineno), scope))
    aliased: set[str] = set()
    while True:  # an alias of an alias too
        found = {name for name, value in aliases if isinstance(root := _owner(value), ast.Name)
                 and (root.id in imported or root.id in aliased)} - aliased
        if not found:
            break
        aliased |= found
    return [t for t, scope in targets
            if (isinstance(t, ast.Attribute) or isinstance(t, ast.Subscript) and _is_namespace(t.value))
            and (isinstance(owner := _owner(t), ast.Call) and called_name(owner.func) in _IMPORTS
                 or isinstance(owner, ast.Name) and (owner.id in aliased or owner.id in imported and (
                     scope is None or owner.id in shared.get(scope, ()) or owner.id not in local.get(scope, ()))))]


# A line of the code under repair that can pass a test without a fix: (number, stripped text, what it does).
Read = tuple[int, str, str]


def context_reads(data: bytes) -> tuple[Read, ...]:
    """Each line of a module that reads the process context (:func:`_reads_context`) or
    patches another module (:func:`patches`), docstrings left out; () when unparsable."""
    if not _CONTEXT_LINE.search(data.lower()):
        return ()
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    docstrings = {id(n.value) for n in ast.walk(tree)
                  if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    lines = data.decode("utf-8", "replace").split("\n")  # numbered as the parser numbers them
    found = {number: PATCHES for node in patches(tree) if 0 < (number := node.lineno) <= len(lines)}
    found.update({number: TEST_AWARE for node in ast.walk(tree) for number in [int(getattr(node, "lineno", 0))]
                  if 0 < number <= len(lines) and id(node) not in docstrings and _reads_context(node)})
    return tuple((number, lines[number - 1].strip(), found[number]) for number in sorted(found))


def _line_key(text: str) -> str:
    return sha256(text.encode("utf-8", "surrogatepass"))[:16]


def code_record(data: bytes) -> str:
    """A module of the code under repair as sealed: its sha256, then the short sha256 of each
    line that could read the process context, sorted. Found without parsing: the module is
    parsed only when it changed since."""
    lowered = data.lower()  # one pass over the file: far fewer matches than lines
    starts = {lowered.rfind(b"\n", 0, m.start()) + 1 for m in _CONTEXT_LINE.finditer(lowered)}
    lines = (data[start:end if (end := data.find(b"\n", start)) >= 0 else len(data)] for start in starts)
    keys = sorted(_line_key(line.strip().decode("utf-8", "replace")) for line in lines)
    return " ".join([sha256(data), *keys])


def added_reads(recorded: str, reads: Sequence[Read]) -> list[Read]:
    """The reads of ``reads`` whose lines ``recorded`` (a :func:`code_record`) does not hold."""
    left = Counter(recorded.split()[1:])
    added = []
    for read in reads:
        key = _line_key(read[1])
        if left[key] > 0:
            left[key] -= 1
        else:
            added.append(read)
    return added


@dataclass
class Hasher:
    """Reads each file once per run: ``(size, mtime_ns)`` keys the cache of what is derived
    from its bytes. Never kept across runs: an mtime can lie."""

    _cache: dict[tuple[str, Callable[[bytes], Any]], tuple[int, int, Any]] = field(default_factory=dict)

    def _derived(self, path: str, derive: Callable[[bytes], _T], unreadable: _T) -> _T:
        known = self._cache.get((path, derive))
        try:
            st = os.stat(path)
            if known is not None and known[:2] == (st.st_size, st.st_mtime_ns):
                return cast(_T, known[2])
            with open(path, "rb") as handle:
                value = derive(handle.read())
        except OSError:  # missing, a directory, unreadable
            return unreadable
        self._cache[(path, derive)] = (st.st_size, st.st_mtime_ns, value)
        return value

    def digest(self, path: str) -> str:
        """sha256 of the file's bytes; ``missing`` when it does not exist or cannot be read."""
        return self._derived(path, sha256, MISSING)

    def record(self, path: str) -> str:
        return self._derived(path, code_record, "")

    def reads(self, path: str) -> tuple[Read, ...]:
        return self._derived(path, context_reads, ())


@dataclass(frozen=True)
class Loaded:
    """The files of what the run in this process loaded (only known inside pytest)."""

    plugin_files: tuple[str, ...] = ()
    module_files: tuple[str, ...] = ()
    read_files: tuple[str, ...] = ()  # absolute: the files the tests opened for reading only


NOTHING_LOADED = Loaded()  # a check outside pytest: nothing of the run is known


def loaded_now(plugins: Iterable[object], read_files: Iterable[str] = ()) -> Loaded:
    def file_of(obj: object) -> Optional[str]:
        name = getattr(obj, "__file__", None)
        return name if isinstance(name, str) else None

    return Loaded(tuple(f for f in map(file_of, plugins) if f),
                  tuple(f for f in map(file_of, list(sys.modules.values())) if f), tuple(read_files))


def _relative(rootdir: Path, path: str) -> Optional[str]:
    """``path`` rootdir-relative, or None outside it or in an environment or hidden folder."""
    rel = _project_module(rootdir, path)
    if rel is None or any(part.startswith(".") or part in _SKIP_DIRS for part in rel.split("/")[:-1]):
        return None
    return rel


def _folders(test_files: Iterable[str]) -> list[str]:
    found = {""}
    for path in test_files:
        folder = posixpath.dirname(path)
        while folder and folder not in found:
            found.add(folder)
            folder = posixpath.dirname(folder)
    return sorted(found)


def _conftests(rootdir: Path) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(rootdir):
        dirs[:] = [d for d in dirs if not (d.startswith(".") or d.endswith(".egg") or d in _SKIP_DIRS
                                           or os.path.exists(os.path.join(folder, d, "pyvenv.cfg")))]
        if "conftest.py" in files:
            found.append(Path(folder, "conftest.py").relative_to(rootdir).as_posix())
    return found


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
            except ConfigError:
                out[shown] = "unreadable " + hasher.digest(str(path))  # pytest refuses it: any change counts
                continue
            if section is None:
                continue
            out[shown] = "pytest section"
            for key, value in section.items():
                text = repr(value) if name.endswith(".toml") else str(value)
                out[f"{shown}: {key}"] = sha256(text.encode("utf-8", "surrogatepass"))
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
    folders = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    for folder in dict.fromkeys(folders):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            pth = os.path.join(folder, name)
            out[pth] = hasher.digest(pth)
    return out


def _distributions() -> dict[str, str]:
    # Imported here: only a seal taken inside pytest reads the installed distributions, and
    # the loop's parent process never imports importlib.metadata (docs/benchmarks.md).
    import importlib.metadata

    try:
        out = {"pytest": importlib.metadata.version("pytest")}
    except importlib.metadata.PackageNotFoundError:
        out = {"pytest": MISSING}
    for entry in importlib.metadata.entry_points(group="pytest11"):
        dist = entry.dist
        if dist is not None:
            out[dist.name] = dist.version
    return out


def _environment(environ: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for name in ENVIRONMENT:
        value = environ.get(name)
        if name == "PYTEST_PLUGINS" and value is not None:
            # Loading selfheal itself this way (the MCP server and the gates may) judges nothing;
            # its modules by name: a plugin whose name only starts like it is another plugin.
            named = sorted(p.strip() for p in value.split(",") if p.strip() and p.strip().split(".")[0] != "pytest_selfheal")
            value = ",".join(named) or None
        out[name] = sha256(value.encode("utf-8", "surrogatepass")) if value is not None else UNSET
    return out


def _files(rootdir: Path, test_files: Sequence[str], plugin_files: Iterable[str], hasher: Hasher) -> dict[str, str]:
    names = set(test_files) | set(_conftests(rootdir))
    for folder in _folders(test_files):
        names.update(posixpath.join(folder, n) if folder else n for n in ("__init__.py", "conftest.py"))
    names.update(plugin_files)
    return {name: hasher.digest(str(rootdir / name)) for name in sorted(names)}


def _project_plugins(rootdir: Path, loaded: Loaded) -> list[str]:
    return [rel for rel in (_relative(rootdir, f) for f in loaded.plugin_files) if rel is not None]


def _project_module(rootdir: Path, path: str) -> Optional[str]:
    """``path`` rootdir-relative; None outside the rootdir or in an environment in it."""
    absolute = os.path.abspath(path)
    prefix = os.path.join(rootdir, "")
    if not absolute.startswith(prefix):
        return None  # most of sys.modules: told apart without making a Path of each
    rel = absolute[len(prefix):].replace(os.sep, "/")
    return None if any(part in _INSTALLED_DIRS for part in rel.split("/")[:-1]) else rel


def _test_module_name(rel: str) -> bool:
    name = posixpath.basename(rel)
    return name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py")


def _loaded_modules(rootdir: Path, loaded: Loaded, sealed: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(modules, code)`` the run loaded besides ``sealed``: what is sealed by content (test
    code rootdir-relative, anything outside the project absolute), the code under repair."""
    skip = set(sealed)
    modules: set[str] = set()
    code: set[str] = set()
    for path in dict.fromkeys((*loaded.plugin_files, *loaded.module_files)):
        rel = _project_module(rootdir, path)
        if rel is None:
            modules.add(os.path.abspath(path))
        elif rel in skip:
            continue
        elif is_test_file(rel):
            modules.add(rel)
        elif rel.endswith(".py"):
            code.add(rel)
    return sorted(modules), sorted(code)


# Read by a run but no test data: version control, the caches tools rewrite, environments.
_NOT_DATA = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".hypothesis", ".mypy_cache",
                       ".ruff_cache", ".tox", ".nox", *_INSTALLED_DIRS})


def _data(rootdir: Path, loaded: Loaded, sealed: Iterable[str], code: Iterable[str]) -> list[str]:
    """The test data ``loaded`` read: project files that are not the code under repair (a
    non-test ``.py``, which a traceback reads, or its package data), no config file,
    nothing ``sealed`` already, outside version control, caches and environments."""
    skip = set(sealed)
    packages = {folder for folder in map(posixpath.dirname, code) if folder}
    found = set()
    for path in loaded.read_files:
        rel = _project_module(rootdir, path)
        if rel is None or rel in skip or posixpath.basename(rel) in PYTEST_CONFIG_FILES:
            continue
        folders = rel.split("/")[:-1]
        if not is_test_file(rel) and (rel.endswith((".py", ".pyc")) or any(
                "/".join(folders[:i]) in packages for i in range(1, len(folders) + 1))):
            continue  # the code under repair's
        if not _NOT_DATA.isdisjoint(folders):
            continue
        if os.path.isfile(path):
            found.add(rel)
    return sorted(found)


def _code_paths(paths: Iterable[str]) -> set[str]:
    return {p for p in paths if p.endswith(".py") and not _test_module_name(p) and not p.startswith(("../", "/"))}


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
) -> Seal:
    """The seal of a run in ``rootdir`` that collected ``test_files``. ``extra_code``: more
    modules whose context reads are recorded (the failures' target paths: an xdist
    controller imports none of the code under test)."""
    hasher = Hasher()
    # A module of the code under test collected for its doctests (``--doctest-modules``) is
    # code under repair; its docstrings are test code, judged by the incident's test digests.
    tests = sorted({posixpath.normpath(t) for t in test_files
                    if t.endswith(".py") and not t.startswith(("../", "/")) and is_test_file(t)})
    files = _files(rootdir, tests, _project_plugins(rootdir, loaded), hasher)
    modules, loaded_code = _loaded_modules(rootdir, loaded, files)
    code = sorted(set(loaded_code) | _code_paths(extra_code))
    return Seal(
        files=files,
        modules={name: hasher.digest(str(rootdir / name)) for name in modules},
        data={name: hasher.digest(str(rootdir / name)) for name in _data(rootdir, loaded, [*files, *modules], code)},
        pytest_config=_config(rootdir, _folders(tests), inifile, hasher),
        environment=_environment(os.environ if environ is None else environ),
        startup=_startup(hasher, sys.path if path is None else path),
        distributions=_distributions(),
        code=tuple(code),
        test_aware={rel: record for rel in code if (record := hasher.record(str(rootdir / rel)))},
        judging=dict(judging),
    )


def reseal(recorded: Seal, rootdir: Path, *, judging: Mapping[str, Any], loaded: Loaded = NOTHING_LOADED,
           extra_code: Iterable[str] = (), environ: Optional[Mapping[str, str]] = None,
           path: Optional[Sequence[str]] = None, distributions: bool = True) -> Seal:
    """The seal now of what ``recorded`` sealed, in ``rootdir`` (the project, or a repair
    worktree), with the conftests, plugins and project modules new since.
    ``distributions``: False keeps the recorded ones (a check outside pytest: the loop's parent)."""
    hasher = Hasher()
    tests = [name for name in recorded.files if is_test_file(name)]
    names = set(recorded.files) | set(_conftests(rootdir)) | set(_project_plugins(rootdir, loaded))
    files = {name: hasher.digest(str(rootdir / name)) for name in sorted(names)}
    _, loaded_code = _loaded_modules(rootdir, loaded, files)
    new = {rel for rel in (_project_module(rootdir, f) for f in loaded.module_files)
           if rel is not None and rel.endswith(".py") and rel not in files and rel not in recorded.modules
           and not _test_module_name(rel)}
    code = sorted(set(recorded.code) | _code_paths(extra_code) | set(loaded_code) | new)
    inifile = recorded.pytest_config.get(INIFILE)
    return Seal(
        files=files,
        modules={name: hasher.digest(str(rootdir / name)) for name in recorded.modules},
        data={name: hasher.digest(str(rootdir / name)) for name in recorded.data},
        pytest_config=_config(rootdir, _folders(tests), None if inifile in (None, NO_INIFILE) else inifile, hasher),
        environment=_environment(os.environ if environ is None else environ),
        startup=_startup(hasher, sys.path if path is None else path),
        distributions=_distributions() if distributions else recorded.distributions,
        code=tuple(code),
        test_aware={rel: hasher.digest(str(rootdir / rel)) for rel in code},  # parsed only when changed
        judging=dict(judging),
    )


def differ(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """The names whose entry differs between two fingerprints, sorted."""
    return [name for name in sorted(set(before) | set(after)) if before.get(name, MISSING) != after.get(name, MISSING)]


def _quoted(rel: str, added: Sequence[Read]) -> str:
    number, text, what = added[0]
    text = text if len(text) <= 80 else text[:77] + "..."
    more = f" and {len(added) - 1} more" if len(added) > 1 else ""
    return f"{rel}:{number} {what}: {text!r}{more}"


def replaced_code(recorded: Seal, rootdir: Path, loaded: Loaded) -> list[str]:
    """Modules of the code under repair the capture ran that this run (``loaded``) imported
    by the same top-level name from outside the project (a ``PYTHONPATH`` or an install
    ahead of the project's): the tests ran other code than the project's."""
    tops = {_importable_as(rootdir, rel): rel for rel in recorded.code}
    outside = _outside_names(path for path in loaded.module_files if _project_module(rootdir, path) is None)
    replaced = {tops[name]: path for name, path in outside.items() if name in tops}
    return [f"{rel} (this run imported {path} instead)" for rel, path in sorted(replaced.items())]


def _outside_names(paths: Iterable[str]) -> dict[str, str]:
    """The top-level names modules outside the project are imported by, each with its first path."""
    roots = sorted({os.path.join(os.path.abspath(p), "") for p in (*sys.path, *(
        sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib"))) if p}, key=len, reverse=True)
    names: dict[str, str] = {}
    for path in paths:
        absolute = os.path.abspath(path)
        top = next((absolute[len(r):].split(os.sep, 1)[0] for r in roots if absolute.startswith(r)), "")
        if top.removesuffix(".py"):
            names.setdefault(top.removesuffix(".py"), path)
    return names


def _importable_as(root: Path, rel: str) -> str:
    """The top-level name a project module is imported by when its package's parent folder
    is on ``sys.path``: its top package's name, or its own below a folder that is no package."""
    parts = rel.split("/")
    top = len(parts) - 1
    while top > 0 and (root.joinpath(*parts[:top]) / "__init__.py").is_file():
        top -= 1
    name = parts[top]
    return name[:-3] if name.endswith(".py") else name


def _shadowing(recorded: Seal, now: Seal, root: Path) -> list[str]:
    """A module of the code under repair new since the capture that is named like a module
    the capture loaded from outside the project (``fractions.py`` beside the tests, where the
    test's expected value came from the standard library's): it replaces that module."""
    added = sorted(set(now.code) - set(recorded.code))
    outside = _outside_names(path for path in recorded.modules if os.path.isabs(path)) if added else {}
    return [f"{rel} (named like {outside[name]})" for rel in added
            if (name := _importable_as(root, rel)) in outside]


class Changes(NamedTuple):
    """What changed between two seals: ``tests``, test code and test data (a pass with them is
    ``tests_edited``), and ``harness``, the rest (``harness_changed``)."""

    tests: list[str]
    harness: list[str]


def harness_changes(recorded: Seal, now: Seal, root: Path) -> Changes:
    """What changed between two seals, each named (a path, ``<config file>: <key>``, a
    variable, ``<distribution> <old> -> <new>``, a quoted read of the process context). A
    sealed module gone is no change (deleting code cannot pass a failure); a test data file is."""
    files = differ(recorded.files, now.files)
    files += [name for name in sorted(recorded.modules)
              if now.modules.get(name, MISSING) not in (MISSING, recorded.modules[name])]
    tests = [name for name in files if not os.path.isabs(name) and is_test_file(name)]
    tests += differ(recorded.data, now.data)
    changed = [name for name in files if name not in tests]
    changed += differ(recorded.pytest_config, now.pytest_config)
    changed += differ(recorded.environment, now.environment)
    for name in differ(recorded.startup, now.startup):
        where = now.startup.get(name) or recorded.startup.get(name) or ""
        changed.append(f"{name} ({where.split(' ', 1)[1]})" if name in STARTUP_MODULES and " " in where else name)
    for name in differ(recorded.distributions, now.distributions):
        old, new = recorded.distributions.get(name, "not installed"), now.distributions.get(name, "not installed")
        changed.append(f"{name} {old} -> {new}")
    hasher = Hasher()
    for name in sorted(now.test_aware):
        before = recorded.test_aware.get(name, "")
        if now.test_aware[name].split()[:1] == before.split()[:1]:
            continue  # unchanged since the capture
        added = added_reads(before, hasher.reads(str(root / name)))
        if added:
            changed.append(_quoted(name, added))
    return Changes(tests, changed + _shadowing(recorded, now, root))


def judging_changes(recorded: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """The judging keys whose value differs, compared as JSON (a value read back is a frozen copy)."""
    def text(values: Mapping[str, Any], key: str) -> str:
        return json.dumps(plain_json(values.get(key)), sort_keys=True)

    return sorted(key for key in set(recorded) | set(now) if text(recorded, key) != text(now, key))

