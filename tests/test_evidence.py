"""The root-cause resolver (capture/evidence.py) on real imported modules: re-exports followed
to the defining module, project files only, the innermost project frame outside the tests;
and the fallback without evidence (capture/imports.py), which follows re-exports too."""

from __future__ import annotations

import importlib
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_selfheal.capture.evidence import Resolver, qualname, traceback_of
from pytest_selfheal.capture.imports import local_imports

CORE = """
    import functools
    import json

    __all__ = ["add", "Calc", "dumps_sorted", "wrapped", "Sub", "lookup"]

    def add(a, b):
        return a - b

    class Calc:
        def run(self, data):
            return data[5]

    def dumps_sorted(value):
        return json.dumps(value, sort_keys=True, default=_refuse)

    def _refuse(value):
        raise TypeError("not serialisable")

    def _decorate(func):
        @functools.wraps(func)
        def inner(*args):
            return func(*args)
        return inner

    @_decorate
    def wrapped(x):
        return x

    def halve(x):  # not exported: only a local import reaches it
        return x * 2

    class Base:
        def put(self, key):
            return self._store(key)

        def _store(self, key):
            raise KeyError(key)

    class Sub(Base):
        pass

    class Box:
        def __init__(self):
            self.items = {}

        def __setitem__(self, key, value):
            self.items[key] = value

        def __len__(self):
            return len(self.items)

        def size(self):
            return 0

        def __iter__(self):
            return iter(self.items)

    def _make_lookup():
        class Lookup:
            def __call__(self, name=None):
                return name
        return Lookup()

    lookup = _make_lookup()
"""

TESTS = """
    import json
    import {pkg}
    from {pkg} import add, Calc, dumps_sorted, wrapped, Sub

    def _helper(n):
        return add(n, n)

    def test_direct():
        assert add(1, 2) == 3

    def test_module_attribute():
        assert {pkg}.add(2, 2) == 4

    def test_class_method():
        Calc().run([1])

    def test_through_a_test_helper():
        assert _helper(2) == 4

    def test_library_only():
        assert json.dumps(1) == "2"

    def test_json_through_core():
        dumps_sorted({{"a": object()}})

    def test_decorated():
        assert wrapped(1) == 2

    def test_nested_lambda():
        assert list(map(lambda v: add(v, 1), [1])) == [2]

    def _local_import_helper(n):
        from {pkg}.core import halve
        return halve(n)

    def test_through_a_helper_that_imports_locally():
        assert _local_import_helper(2) == 1

    def test_through_a_base_class():
        Sub().put("k")

    def test_a_callable_object():
        assert {pkg}.lookup("x") is None

    class TestOwned:
        Kind = {pkg}.core.Box

        def test_operators_on_a_local_object(self):
            box = self.Kind()
            box["k"] = 1
            assert len(box) == 2 and box.size() == 1 and sorted(box) == ["k"]
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, ModuleType]]:
    """A flat package re-exporting its core (`from .core import *`) and a test module importing it."""
    pkg = f"pkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("from .core import *\n")
    (tmp_path / pkg / "core.py").write_text(textwrap.dedent(CORE))
    (tmp_path / "tests").mkdir()
    name = f"test_ev_{uuid.uuid4().hex[:8]}"
    (tmp_path / "tests" / f"{name}.py").write_text(textwrap.dedent(TESTS.format(pkg=pkg)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(tmp_path / "tests"))
    module = importlib.import_module(name)
    yield tmp_path, module
    for mod in [m for m in sys.modules if m.startswith((pkg, name))]:
        del sys.modules[mod]


def evidence(project: tuple[Path, ModuleType], test: str) -> dict[str, Any]:
    root, module = project
    func = getattr(module, test)
    resolver = Resolver(str(root))
    try:
        func()
    except BaseException:
        info = pytest.ExceptionInfo.from_exc_info(sys.exc_info())  # type: ignore[arg-type]
        found = resolver.resolve(func, traceback_of(info))
    else:
        pytest.fail(f"{test} passed")
    assert found is not None
    return found.to_json()  # as incident.json holds it


def core(project: tuple[Path, ModuleType]) -> str:
    return next(p.name for p in project[0].iterdir() if p.name.startswith("pkg_")) + "/core.py"


def test_a_re_export_resolves_to_the_defining_module(project: tuple[Path, ModuleType]) -> None:
    # A called function carries the line of its def; the test's failing line is kept apart.
    assert evidence(project, "test_direct")["calls"] == [{"path": core(project), "name": "add", "line": 7}]
    # `pkg.add(...)`: the module's attribute named in the same code.
    assert evidence(project, "test_module_attribute")["calls"] == [{"path": core(project), "name": "add", "line": 7}]


def test_innermost_project_frame_outside_the_tests(project: tuple[Path, ModuleType]) -> None:
    found = evidence(project, "test_class_method")
    assert found["frame"] == {"path": core(project), "name": "Calc.run",
                              "line": 12}
    # The class, then the method of it the test names (defined at line 11).
    assert found["calls"] == [{"path": core(project), "name": "Calc"},
                              {"path": core(project), "name": "Calc.run", "line": 11}]
    # Through the standard library and back: the innermost *project* frame is _refuse.
    found = evidence(project, "test_json_through_core")
    assert found["frame"]["name"] == "_refuse" and found["frame"]["path"] == core(project)


def test_helpers_in_test_files_are_followed_libraries_ignored(project: tuple[Path, ModuleType]) -> None:
    assert evidence(project, "test_through_a_test_helper")["calls"] == [{"path": core(project), "name": "add", "line": 7}]
    root, module = project
    func = module.test_library_only
    assert Resolver(str(root)).resolve(func, []) is None  # json is not the project's
    assert evidence(project, "test_decorated")["calls"] == [{"path": core(project), "name": "wrapped", "line": 27}]  # the def, not @_decorate
    assert evidence(project, "test_nested_lambda")["calls"] == [{"path": core(project), "name": "add", "line": 7}]
    # A helper that imports inside its body (iniconfig's tests do): the module is found by its dotted name.
    assert evidence(project, "test_through_a_helper_that_imports_locally")["calls"] == [
        {"path": core(project), "name": "halve", "line": 30}]


def test_the_path_to_the_symptom_the_test_line_and_a_class_s_bases(project: tuple[Path, ModuleType]) -> None:
    """What localisation reads beyond the innermost frame: the project frames the traceback
    passed through (a shared callee shows there), the test's own failing line, a class's bases."""
    found = evidence(project, "test_through_a_base_class")
    # Named where defined on every Python (before 3.11 through the class of ``self``).
    assert found["frame"] == {"path": core(project), "name": "Base._store", "line": 38}
    assert found["stack"] == [{"path": core(project), "name": "Base.put", "line": 35}]
    test_file = f"tests/{project[1].__name__}.py"
    assert found["test_line"] == {"path": test_file, "line": 41}
    # An inherited method is named where it is defined: Base.put, not Sub.put.
    assert found["calls"] == [{"path": core(project), "name": "Sub", "bases": [f"{core(project)}::Base"]},
                              {"path": core(project), "name": "Base.put", "line": 34}]
    # An exception raised in the test itself: no frame, no stack, only the test's line.
    assert evidence(project, "test_direct")["test_line"] == {"path": test_file, "line": 10}


def test_a_callable_object_counts_as_a_call_of_its_call_method(project: tuple[Path, ModuleType]) -> None:
    """``pkg.lookup("x")`` where ``lookup`` is an instance a factory made (dateutil's
    ``tz.gettz``): the test calls its class's ``__call__``."""
    found = evidence(project, "test_a_callable_object")
    assert found["calls"] == [{"path": core(project), "name": "_make_lookup.<locals>.Lookup.__call__", "line": 61}]


def test_a_local_object_s_methods_and_operators_count_as_calls(project: tuple[Path, ModuleType]) -> None:
    """``box = self.Kind()`` (a project class bound on the unittest-style test class),
    ``box["k"] = 1``, ``len(box)``, ``box.size()``, ``sorted(box)`` (a builtin that iterates it): the class,
    the methods reached and its __init__ (it is built)."""
    root, module = project
    owner = module.TestOwned
    with pytest.raises(AssertionError) as info:
        owner().test_operators_on_a_local_object()
    found = Resolver(str(root)).resolve(owner.test_operators_on_a_local_object, traceback_of(info), None, owner)
    assert found is not None
    assert [(c.name, c.line) for c in found.calls] == [
        ("Box", None), ("Box.size", 53), ("Box.__len__", 50), ("Box.__iter__", 56), ("Box.__setitem__", 47),
        ("Box.__init__", 44)]
    # Without the test's class, `self.Kind` names nothing: no evidence at all.
    assert Resolver(str(root)).resolve(owner.test_operators_on_a_local_object, traceback_of(info)) is None


def test_files_outside_the_root_never_count(project: tuple[Path, ModuleType]) -> None:
    root, module = project
    # A resolver rooted elsewhere (the package is "installed" from its point of view).
    other = Resolver(str(root / "tests"))
    assert other.calls(module.test_direct) == []
    assert other.relative(str(root / "x.py")) is None
    assert Resolver(str(root)).relative(str(root / ".venv" / "lib" / "python3.11" / "site-packages" / "m.py")) is None


def test_memoised_per_code_object(project: tuple[Path, ModuleType]) -> None:
    root, module = project
    resolver = Resolver(str(root))
    first = resolver.calls(module.test_direct)
    assert resolver.calls(module.test_direct) is first  # one resolution per test function


def test_hostile_objects_give_no_evidence_not_an_error(tmp_path: Path) -> None:
    class Hostile:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("no")

    def test_x() -> None:
        Hostile()

    resolver = Resolver(str(tmp_path))
    assert resolver.resolve(test_x, [object(), None]) is None
    assert resolver.resolve(None, []) is None


def test_fixture_values_of_project_classes_stand_for_the_methods_the_test_names(
    project: tuple[Path, ModuleType]
) -> None:
    root, module = project
    calc_class = module.Calc  # re-exported: defined in core.py

    def test_with_fixture(calc: Any, factory: Any, data: Any) -> None:
        calc.run([1])

    resolver = Resolver(str(root))
    args = {"calc": calc_class(), "factory": module.add, "data": {"a": 1}}
    found = resolver.fixture_calls(test_with_fixture, args)
    assert found == [(core(project), "Calc.run"), (core(project), "add")]  # the dict is not the project's
    # In the evidence when the test's own code names no project definition.
    evidence = resolver.resolve(test_with_fixture, [], args)
    assert evidence is not None and evidence.to_json() == {"calls": [{"path": core(project), "name": "Calc.run", "line": 11},
                                  {"path": core(project), "name": "add", "line": 7}]}
    # A fixture whose class has none of the names the test uses: the class itself.
    assert resolver.fixture_calls(lambda calc: calc.other(), {"calc": calc_class()}) == [(core(project), "Calc")]
    # A test that names a project function itself: that is the evidence, not its fixtures.
    evidence = resolver.resolve(module.test_direct, [], {"calc": calc_class()})
    assert evidence is not None and evidence.to_json() == {"calls": [{"path": core(project), "name": "add", "line": 7}]}


def test_without_evidence_the_imports_fallback_follows_a_package_re_export(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .core import *\nfrom .more import helper\nimport json\n")
    (tmp_path / "pkg" / "core.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "pkg" / "more.py").write_text("def helper():\n    pass\n")
    (tmp_path / "test_x.py").write_text("from pkg import add\n")
    assert local_imports("test_x.py", tmp_path) == ["pkg/__init__.py", "pkg/core.py", "pkg/more.py"]
    # Read once per version of the __init__.py: an edit is seen.
    (tmp_path / "pkg" / "__init__.py").write_text("from .more import helper  # now longer than before\n")
    assert local_imports("test_x.py", tmp_path) == ["pkg/__init__.py", "pkg/more.py"]


def test_the_imports_fallback_finds_the_statements_ast_walk_finds_in_its_order() -> None:
    import ast

    from pytest_selfheal.capture.imports import _statements

    source = textwrap.dedent("""\
        import a
        try:
            from b import c
        except ImportError:
            def f():
                import d
        else:
            import e
        finally:
            pass
        match x:
            case 1:
                class K:
                    from .g import h
        with y as z:
            import i
        import j
    """)
    tree = ast.parse(source)
    walked = [node for node in ast.walk(tree) if isinstance(node, ast.stmt)]
    assert list(_statements(tree)) == walked and len(walked) == 13


@pytest.mark.skipif(sys.version_info < (3, 11), reason="code objects carry their qualified name from 3.11")
def test_a_lambda_or_comprehension_is_named_after_the_function_it_is_in() -> None:
    def outer() -> list[Callable[[], int]]:
        return [lambda: 0 for _ in range(1)]

    (inner,) = outer()  # its code: outer.<locals>.<listcomp>.<lambda> (outer.<locals>.<lambda> from 3.12)
    assert qualname(inner.__code__) == qualname(outer.__code__)
    assert qualname(outer.__code__).endswith("_it_is_in.<locals>.outer")


def test_a_module_s_function_of_the_same_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``import parse; parse.parse(...)``: the function, though it has its module's name."""
    name = f"same_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(f"def {name}(text):\n    return text\n")
    (tmp_path / f"test_{name}.py").write_text(f"import {name}\n\ndef test_it():\n    assert {name}.{name}('a') == 'b'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    test = importlib.import_module(f"test_{name}")
    try:
        assert Resolver(str(tmp_path)).calls(test.test_it) == [(f"{name}.py", name)]
    finally:
        for mod in (name, f"test_{name}"):
            sys.modules.pop(mod, None)
