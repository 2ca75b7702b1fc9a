"""Root-cause evidence of a failing test, resolved inside the pytest process (edge: live objects):
its innermost project frame and the project definitions its code names (docs/loop.md "The plan")."""

from __future__ import annotations

import dis
import inspect
import linecache
import os
import sys
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Optional

from pytest_selfheal.analysis.frames import is_test_file, repo_relative
from pytest_selfheal.records.incident import CodeRef, RootCause

# A definition: (repo-relative path, qualified name).
Definition = tuple[str, str]

# Called definitions recorded per failing test; more say nothing new and bloat incident.json.
MAX_CALLS = 12
# Project frames kept on a traceback's path to its innermost frame: where a shared callee shows.
MAX_STACK = 8
# Project base classes recorded for a called class (its methods' bugs are its bugs too).
MAX_BASES = 4
# Helpers in test files are followed this many levels below the test function.
_HELPER_DEPTH = 1
# The keys a code reference writes, in order, whatever its values (a frame's line may be null).
_FRAME_KEYS = ("path", "name", "line")
_TEST_LINE_KEYS = ("path", "line")
_CALL_KEYS = ("path", "name")
# Decorator lines skipped at most before a function's ``def``.
_MAX_DECORATOR_LINES = 40


def _code_of(obj: Any) -> tuple[Any, Optional[types.CodeType]]:
    """The function under a decorated, bound or class method, and its code (None: not a function)."""
    func = inspect.unwrap(obj)
    func = getattr(func, "__func__", func)
    code = getattr(func, "__code__", None)
    return func, code if isinstance(code, types.CodeType) else None


def _code_names(code: types.CodeType) -> list[str]:
    names: list[str] = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_code_names(const))
    return list(dict.fromkeys(names))


def qualname(code: types.CodeType, frame: Optional[types.FrameType] = None) -> str:
    """The qualified name of ``code``'s function; a lambda or comprehension is named after its function."""
    name = getattr(code, "co_qualname", None)  # Python 3.11+
    if not isinstance(name, str):
        name = _method_name(code, frame) if frame is not None else code.co_name
    while ".<locals>.<" in name:
        name = name.rsplit(".<locals>.<", 1)[0]
    return name


def def_line(code: types.CodeType) -> int:
    first = code.co_firstlineno
    for line in range(first, first + _MAX_DECORATOR_LINES):
        text = linecache.getline(code.co_filename, line).lstrip()
        if not text:
            return first  # no source: the interpreter's first line
        if text.startswith(("def ", "async def ", "class ")):
            return line
        if not text.startswith(("@", "#")) and line == first:
            return first  # a lambda or a comprehension: its own line
    return first


def _method_name(code: types.CodeType, frame: types.FrameType) -> str:
    """Before Python 3.11: a method's class is the one along its first argument's class defining this code."""
    if not code.co_argcount:
        return code.co_name
    first = frame.f_locals.get(code.co_varnames[0])
    owner = first if isinstance(first, type) else type(first)
    for klass in owner.__mro__:
        attr = klass.__dict__.get(code.co_name)
        func = attr.fget if isinstance(attr, property) else getattr(attr, "__func__", attr)
        if getattr(func, "__code__", None) is code:
            return f"{klass.__qualname__}.{code.co_name}"
    return code.co_name


class Resolver:
    def __init__(self, rootdir: str) -> None:
        self.root = os.path.realpath(rootdir)
        self._paths: dict[str, Optional[str]] = {}
        self._defs: dict[int, tuple[Any, Optional[Definition]]] = {}  # id -> (object kept alive, definition)
        self._calls: dict[tuple[types.CodeType, int], list[Definition]] = {}
        self._objects: dict[Definition, Any] = {}  # a definition's object: its def line, its bases

    def relative(self, filename: str) -> Optional[str]:
        if filename in self._paths:
            return self._paths[filename]
        rel = repo_relative(filename, self.root) if filename else None
        if rel is None and filename and not filename.startswith("<"):
            rel = repo_relative(os.path.realpath(filename), self.root)  # a symlinked checkout
        self._paths[filename] = rel
        return rel

    def frames(self, traceback: Iterable[Any]) -> tuple[Optional[CodeRef], list[CodeRef], Optional[CodeRef]]:
        """The innermost project frame outside the tests, the project frames on the way, the last test line."""
        found: list[CodeRef] = []
        in_test: Optional[CodeRef] = None
        for entry in traceback:
            if not isinstance(entry, types.TracebackType):
                continue
            code, lineno = entry.tb_frame.f_code, entry.tb_lineno
            rel = self.relative(code.co_filename)
            if rel is None:
                continue
            if is_test_file(rel):
                in_test = CodeRef(rel, line=lineno, keys=_TEST_LINE_KEYS)
                continue
            found.append(CodeRef(rel, qualname(code, entry.tb_frame), lineno, keys=_FRAME_KEYS))
        if not found:
            return None, [], in_test
        stack: list[CodeRef] = []
        for item in found[:-1]:  # a recursive function once, at its innermost call
            stack = [s for s in stack if (s.path, s.name) != (item.path, item.name)] + [item]
        return found[-1], stack[-MAX_STACK:], in_test

    def definition(self, obj: Any) -> Optional[Definition]:
        key = id(obj)
        cached = self._defs.get(key)
        if cached is not None and cached[0] is obj:
            return cached[1]
        result = self._definition(obj)
        self._defs[key] = (obj, result)
        return result

    def _definition(self, obj: Any) -> Optional[Definition]:
        try:
            if inspect.isclass(obj):
                module = sys.modules.get(getattr(obj, "__module__", "") or "")
                filename = getattr(module, "__file__", None) or ""
                name = str(getattr(obj, "__qualname__", obj.__name__))
            else:
                func, code = _code_of(obj)
                if code is None:
                    return None
                filename, name = code.co_filename, str(getattr(func, "__qualname__", code.co_name))
        except Exception:  # an object with a hostile __getattr__ or unwrap loop says nothing
            return None
        rel = self.relative(filename)
        if rel is None:
            return None
        self._objects.setdefault((rel, name), obj)
        return rel, name

    def calls(self, function: Any, owner: Any = None) -> list[Definition]:
        """The project definitions ``function``'s code names (and names the test class ``owner`` binds)."""
        func, code = _code_of(function)
        if code is None:
            return []
        namespace: dict[str, object] = getattr(func, "__globals__", {})
        if inspect.isclass(owner):
            bound = {n: inspect.getattr_static(owner, n, None) for n in _code_names(code) if n not in namespace}
            bound = {n: v for n, v in bound.items() if inspect.isclass(v) or inspect.isfunction(v)}
            if bound:
                return self._code_calls(code, {**namespace, **bound}, _HELPER_DEPTH, owner)
        return self._code_calls(code, namespace, _HELPER_DEPTH)

    def _code_calls(self, code: types.CodeType, namespace: Mapping[str, object], depth: int,
                    owner: Any = None) -> list[Definition]:
        memo = (code, id(owner))
        cached = self._calls.get(memo)
        if cached is not None:
            return cached
        self._calls[memo] = []  # a recursive helper ends here
        names = _code_names(code)
        found: list[Definition] = []
        for name in names:
            # A module imported inside the function (`from pkg.core import add` in a test
            # helper) is named by its dotted path and never reaches the globals.
            obj = namespace.get(name) or sys.modules.get(name)
            if obj is None:
                continue
            if inspect.ismodule(obj):
                # `calc.add(...)`: the module's attributes named in the same code.
                if self.relative(getattr(obj, "__file__", None) or "") is None:
                    continue
                candidates = [getattr(obj, n, None) for n in names]  # `parse.parse(...)` too
            else:
                candidates = [obj]
            for candidate in candidates:
                if not (inspect.isfunction(candidate) or inspect.isclass(candidate) or inspect.ismethod(candidate)):
                    # A callable object (dateutil's ``tz.gettz``, an instance a factory made): its ``__call__``.
                    candidate = inspect.getattr_static(type(candidate), "__call__", None)
                    if not inspect.isfunction(candidate):
                        continue
                where = self.definition(candidate)
                if where is None or where in found:
                    continue
                if is_test_file(where[0]):
                    helper, helper_code = _code_of(candidate)
                    if depth > 0 and helper_code is not None:
                        globs = getattr(helper, "__globals__", {})
                        found.extend(d for d in self._code_calls(helper_code, globs, depth - 1) if d not in found)
                    continue
                found.append(where)
                if inspect.isclass(candidate):
                    found.extend(d for d in self._methods(candidate, code) if d not in found)
        self._calls[memo] = found
        return found

    def _methods(self, cls: type, code: types.CodeType) -> list[Definition]:
        """The project methods of ``cls`` that ``code`` names or reaches through an operator, and its __init__."""
        found: list[Definition] = []
        for name in [*_code_names(code), *_implied_dunders(code), "__init__"]:  # a class named is built
            attr = inspect.getattr_static(cls, name, None)
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            elif isinstance(attr, property):
                attr = attr.fget
            if not inspect.isfunction(attr):
                continue
            where = self.definition(attr)
            if where is not None and not is_test_file(where[0]) and where not in found:
                found.append(where)
        return found

    def doctest(self, dtest: Any, excinfo: Any) -> Optional[RootCause]:
        """The evidence of a failing doctest, so it joins the code failures that share its cause."""
        try:
            module, owner = _doctest_owner(str(getattr(dtest, "name", "") or ""))
            found: list[Definition] = []
            if owner is not None and not inspect.ismodule(owner):
                where = self.definition(owner)
                if where is not None and not is_test_file(where[0]):
                    found.append(where)
            namespace = dict(vars(module)) if module is not None else {}
            for example in getattr(dtest, "examples", ())[:MAX_CALLS]:
                try:
                    code = compile(str(example.source), "<doctest>", "exec")
                except (SyntaxError, ValueError):
                    continue
                found.extend(d for d in self._code_calls(code, namespace, _HELPER_DEPTH) if d not in found)
            raised = getattr(getattr(excinfo, "value", None), "exc_info", None)  # doctest.UnexpectedException
            frame = self.frames(_links(raised[2]))[0] if isinstance(raised, tuple) and len(raised) == 3 else None
            calls = [self.where(d) for d in found[:MAX_CALLS]]
        except Exception:  # evidence is best effort: a capture never fails for it
            return None
        return _evidence(frame, calls)

    def fixture_calls(self, function: Any, funcargs: Mapping[str, object]) -> list[Definition]:
        _, code = _code_of(function)
        if code is None or not funcargs:
            return []
        names = _code_names(code)
        found: list[Definition] = []
        for arg in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]:
            value = funcargs.get(arg)
            if value is None:
                continue
            if inspect.isfunction(value) or inspect.isclass(value) or inspect.ismethod(value):
                candidates: list[Any] = [value]
            else:
                cls = type(value)
                if self.definition(cls) is None:
                    continue
                methods = [inspect.getattr_static(cls, n, None) for n in names]
                candidates = [m for m in methods if inspect.isfunction(m)] or [cls]
            for candidate in candidates:
                where = self.definition(candidate)
                if where is not None and not is_test_file(where[0]) and where not in found:
                    found.append(where)
        return found

    def where(self, definition: Definition) -> CodeRef:
        """A called definition as evidence: the line of a function's ``def``, a class's project bases."""
        path, name = definition
        obj = self._objects.get(definition)
        if obj is None:
            return CodeRef(path, name, keys=_CALL_KEYS)
        if inspect.isclass(obj):
            bases = [self.definition(b) for b in obj.__mro__[1:]]
            named = tuple(f"{b[0]}::{b[1]}" for b in bases if b is not None and not is_test_file(b[0]))
            return CodeRef(path, name, bases=named[:MAX_BASES], keys=_CALL_KEYS + (("bases",) if named else ()))
        _, code = _code_of(obj)
        if code is not None:
            return CodeRef(path, name, def_line(code), keys=_FRAME_KEYS)
        return CodeRef(path, name, keys=_CALL_KEYS)

    def resolve(
        self, function: Any, traceback: Sequence[Any], funcargs: Optional[Mapping[str, object]] = None,
        owner: Any = None, error: Optional[BaseException] = None,
    ) -> Optional[RootCause]:
        """The ``root_cause`` evidence of one failing test, or None when nothing points into the project."""
        try:
            frame, stack, in_test = self.frames(traceback)
            called = self.calls(function, owner) if function is not None else []
            if function is not None and funcargs and not called:
                # Weaker than what the test's own code names: only when that is nothing.
                called = self.fixture_calls(function, funcargs)
            calls = [self.where(d) for d in called[:MAX_CALLS]]
            found = _evidence(frame, calls, stack, in_test)
            if found is not None and isinstance(error, Exception) and not isinstance(error, AssertionError):
                found = replace(found, exception=exception_name(error), raised=self.raised(traceback))
        except Exception:  # evidence is best effort: a capture never fails for it
            return None
        return found

    def raised(self, traceback: Sequence[Any]) -> Optional[CodeRef]:
        """The traceback's innermost frame when outside the project, relative to its import root."""
        last = traceback[-1] if traceback else None
        if not isinstance(last, types.TracebackType) or self.relative(last.tb_frame.f_code.co_filename) is not None:
            return None
        code, lineno = last.tb_frame.f_code, last.tb_lineno
        filename = os.path.realpath(code.co_filename)
        roots = sorted((os.path.realpath(p) for p in sys.path if p), key=len, reverse=True)
        root = next((r for r in roots if filename.startswith(r + os.sep)), None)
        path = filename[len(root) + 1:] if root is not None else os.path.basename(filename)
        return CodeRef(path.replace(os.sep, "/"), qualname(code), lineno, keys=_FRAME_KEYS)


def exception_name(error: BaseException) -> str:
    """An exception's type as a reader names it: ``TypeError``, ``json.decoder.JSONDecodeError``."""
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _evidence(frame: Optional[CodeRef], calls: Sequence[CodeRef], stack: Sequence[CodeRef] = (),
              test_line: Optional[CodeRef] = None) -> Optional[RootCause]:
    if frame is None and not calls:
        return None
    return RootCause(frame=frame, stack=tuple(stack), test_line=test_line, calls=tuple(calls))


# The special method an instruction calls on its operand, by opcode.
_DUNDER_OPS = {dis.opmap[name]: dunder for name, dunder in (
    ("BINARY_SUBSCR", "__getitem__"), ("STORE_SUBSCR", "__setitem__"), ("DELETE_SUBSCR", "__delitem__"),
    ("CONTAINS_OP", "__contains__"), ("GET_ITER", "__iter__"))}
# The special method a builtin called by name calls (one that iterates its argument: ``__iter__``).
_DUNDER_BUILTINS = {"len": "__len__", "iter": "__iter__", "repr": "__repr__", "str": "__str__", "hash": "__hash__",
                    "reversed": "__reversed__",
                    **dict.fromkeys(("list", "tuple", "set", "frozenset", "sorted", "sum", "min", "max", "any", "all",
                                     "enumerate", "zip", "map", "filter"), "__iter__")}


def _implied_dunders(code: types.CodeType) -> list[str]:
    """The special methods ``code`` may call through an operator or a builtin (``len(c)``: ``__len__``)."""
    found = [_DUNDER_BUILTINS[n] for n in code.co_names if n in _DUNDER_BUILTINS]
    # Each instruction is two bytes, its opcode first: read without building an Instruction each.
    found.extend(_DUNDER_OPS[op] for op in code.co_code[::2] if op in _DUNDER_OPS)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_implied_dunders(const))
    return list(dict.fromkeys(found))


def _links(tb: Any) -> list[Any]:
    out: list[Any] = []
    while isinstance(tb, types.TracebackType):
        out.append(tb)
        tb = tb.tb_next
    return out


def _doctest_owner(name: str) -> tuple[Optional[types.ModuleType], Any]:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if isinstance(module, types.ModuleType):
            obj: Any = module
            for attr in parts[cut:]:
                obj = getattr(obj, attr, None)
            return module, obj
    return None, None


def traceback_of(excinfo: Any) -> list[Any]:
    """The raw traceback links of a pytest ``ExceptionInfo`` (cheaper than its wrappers, unfiltered)."""
    tb = getattr(excinfo, "tb", None)
    if not isinstance(tb, types.TracebackType):
        tb = getattr(getattr(excinfo, "value", None), "__traceback__", None)
    return _links(tb)


__all__ = ["MAX_CALLS", "MAX_STACK", "Resolver", "def_line", "exception_name", "qualname", "traceback_of"]
