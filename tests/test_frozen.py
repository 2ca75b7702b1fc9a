"""records/frozen.py: the package's frozen dataclasses compare, hash and print exactly as
``@dataclass(frozen=True)`` would, with the three methods defined once (issue 10)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
import pkgutil
import subprocess
import sys
import types
from collections.abc import Callable
from dataclasses import field
from typing import Any, Optional

import pytest

import pytest_selfheal
from pytest_selfheal.records.frozen import Frozen, dataclass
from pytest_selfheal.records.incident import CodeRef, FailureEntry, Incident, RootCause

# One field list, two classes: generated methods (Gen*) and Frozen's (Our*).
_MANY_FIELDS: list[Any] = [
    ("a", int),
    ("b", str, field(default="x")),
    ("hidden", Optional[tuple[str, ...]], field(default=None, repr=False, compare=False)),
    ("shown_not_compared", int, field(default=0, compare=False)),
    ("not_hashed", tuple[int, ...], field(default=(), hash=False)),
    ("hashed_not_compared", str, field(default="", compare=False, hash=True)),
    ("nested", Any, field(default=None)),
]


def _both(name: str, fields: list[Any]) -> tuple[Any, Any]:
    """The same class body twice: generated methods (Gen*) and Frozen's (Our*)."""

    def body(ns: dict[str, Any]) -> None:
        ns["__annotations__"] = {f[0]: f[1] for f in fields}
        ns.update({f[0]: f[2] for f in fields if len(f) > 2})
        ns["__module__"] = __name__

    generated: Any = dataclasses.dataclass(frozen=True)(types.new_class(f"Gen{name}", (), {}, body))
    ours: Any = dataclass(frozen=True, eq=False, repr=False)(types.new_class(f"Our{name}", (Frozen,), {}, body))
    return generated, ours


GenMany, OurMany = _both("Many", _MANY_FIELDS)
GenOne, OurOne = _both("One", [("only", float)])
GenNone, OurNone = _both("None", [])


def _pairs() -> list[tuple[Any, Any, Any, Any]]:
    """(generated a, ours a, generated b, ours b): the same values in both kinds of class."""
    nan = float("nan")
    many: list[dict[str, Any]] = [
        dict(a=1),
        dict(a=1, b="y"),
        dict(a=1, hidden=("k",)),
        dict(a=1, shown_not_compared=5),
        dict(a=1, not_hashed=(1, 2)),
        dict(a=1, hashed_not_compared="h"),
        dict(a=1, nested=[1, {"k": "v"}]),
    ]
    out = [(GenMany(**x), OurMany(**x), GenMany(**y), OurMany(**y)) for x in many for y in many]
    for x, y in [(1.0, 1.0), (1.0, 2.0), (nan, nan), (0.0, -0.0)]:
        out.append((GenOne(x), OurOne(x), GenOne(y), OurOne(y)))
    out.append((GenOne(nan), OurOne(nan), GenOne(nan), OurOne(nan)))
    out.append((GenNone(), OurNone(), GenNone(), OurNone()))
    return out


@pytest.mark.parametrize("gen_a, our_a, gen_b, our_b", _pairs())
def test_eq_hash_repr_are_the_generated_ones(gen_a: Any, our_a: Any, gen_b: Any, our_b: Any) -> None:
    assert (our_a == our_b) is (gen_a == gen_b)
    assert (our_a != our_b) is (gen_a != gen_b)
    assert (our_a == our_a) is (gen_a == gen_a)  # a NaN field: identity first, as in a tuple
    assert repr(our_a).replace("Our", "Gen", 1) == repr(gen_a)
    try:
        expected = hash(gen_a)
    except TypeError:  # an unhashable field value: ours refuses too
        with pytest.raises(TypeError):
            hash(our_a)
    else:
        assert hash(our_a) == expected


def test_other_classes_are_never_equal() -> None:
    assert OurOne(1.0) != GenOne(1.0)
    assert OurOne(1.0).__eq__(GenOne(1.0)) is NotImplemented
    assert OurOne(1.0) != (1.0,)

    @dataclass(frozen=True, eq=False, repr=False)
    class Sub(OurOne):  # type: ignore[misc,valid-type]
        pass

    assert Sub(1.0) != OurOne(1.0)
    assert repr(Sub(1.0)) == "test_other_classes_are_never_equal.<locals>.Sub(only=1.0)"


@pytest.mark.parametrize("kind", ["Gen", "Our"])
def test_still_frozen_and_replaceable(kind: str) -> None:
    cls = GenMany if kind == "Gen" else OurMany
    one = cls(a=1)
    changes: list[Callable[[], None]] = [
        lambda: setattr(one, "a", 2), lambda: setattr(one, "new", 2), lambda: delattr(one, "a"),
        lambda: delattr(one, "new"), lambda: setattr(one, "b", "y"),
    ]
    for change in changes:
        with pytest.raises(dataclasses.FrozenInstanceError) as raised:
            change()
        assert str(raised.value).startswith(("cannot assign to field '", "cannot delete field '"))
    assert (one.a, one.b) == (1, "x")
    assert dataclasses.replace(one, a=2) == cls(a=2)
    assert {cls(a=1), cls(a=1, hidden=("x",))} == {cls(a=1)}


def test_fields_set_after_init_stay_as_frozen_dataclasses_allow() -> None:
    """A field with init=False is set by __post_init__ through object.__setattr__ (as a
    frozen dataclass must), and never by assignment; one with a plain default is read from
    the class and cannot be assigned either."""

    @dataclass(frozen=True, eq=False, repr=False)
    class Derived(Frozen):
        a: int
        double: int = field(init=False, compare=False)
        fixed: str = field(default="k", init=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "double", 2 * self.a)

    one = Derived(3)
    assert (one.double, one.fixed) == (6, "k") and one == Derived(3)
    for name in ("double", "fixed", "a"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(one, name, 0)
    with pytest.raises(TypeError, match="Frozen, with eq=False, repr=False"):
        dataclass(frozen=True)(type("Plain", (), {"__annotations__": {"a": int}}))


def test_copies_and_pickles_are_equal_and_still_frozen() -> None:
    one = FailureEntry.from_json({"nodeid": "t.py::x", "root_cause": {"calls": [{"path": "a.py"}]}, "later": [1]}, "x")
    for other in (copy.copy(one), copy.deepcopy(one), pickle.loads(pickle.dumps(one))):
        assert other == one and hash(other) == hash(dataclasses.replace(one)) and other.to_json() == one.to_json()
        with pytest.raises(dataclasses.FrozenInstanceError):
            other.nodeid = "t.py::y"  # type: ignore[misc]


def test_recursive_repr_as_dataclasses() -> None:
    gen, ours = GenMany(a=1, nested=[]), OurMany(a=1, nested=[])
    gen.nested.append(gen)
    ours.nested.append(ours)
    assert repr(ours).replace("Our", "Gen", 1) == repr(gen)
    assert "nested=[...]" in repr(ours)


def test_records_keep_their_behaviour() -> None:
    """A record with nested records, read keys and extra keys: equality ignores ``keys``."""
    doc = {"path": "src/a.py", "name": "f", "line": 3, "more": [1]}
    ref = CodeRef.from_json(doc, "x")
    assert ref == CodeRef(path="src/a.py", name="f", line=3, extra=(("more", (1,)),))
    assert ref != CodeRef(path="src/a.py", name="f", line=3)
    assert repr(ref) == "CodeRef(path='src/a.py', name='f', line=3, bases=(), score=None, extra=(('more', (1,)),))"
    entry = FailureEntry(nodeid="t::x", root_cause=RootCause(frame=ref))
    assert entry == dataclasses.replace(entry) and hash(entry) == hash(dataclasses.replace(entry))
    assert len({entry, dataclasses.replace(entry, keys=("nodeid",))}) == 1


def _package_classes() -> list[type]:
    found: list[type] = []
    for info in pkgutil.walk_packages(pytest_selfheal.__path__, "pytest_selfheal."):
        if ".demo" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found.extend(v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__)
    return found


def test_every_frozen_dataclass_of_the_package_uses_frozen() -> None:
    """The saving holds only if no frozen dataclass gets its own generated methods back."""
    classes = [c for c in _package_classes() if dataclasses.is_dataclass(c)]
    ours: list[type] = [c for c in classes if issubclass(c, Frozen)]
    assert Incident in ours and len(ours) > 40
    generated = [f"{c.__module__}.{c.__qualname__}" for c in classes if c.__dataclass_params__.frozen]  # type: ignore[attr-defined]
    assert generated == []
    methods = {"__eq__", "__hash__", "__repr__", "__setattr__", "__delattr__"}
    assert [f"{c.__module__}.{c.__qualname__}" for c in ours if methods & set(vars(c))] == []
    # Made by records.frozen.dataclass (which tells Frozen the fields __init__ sets).
    assert [f"{c.__module__}.{c.__qualname__}" for c in ours if "_init_sets" not in vars(c)] == []


def test_a_record_is_built_on_first_use_as_dataclasses_would_have_built_it() -> None:
    @dataclass(frozen=True, eq=False, repr=False)
    class Pending(Frozen):
        a: int
        b: list[int] = field(default_factory=list)

    @dataclass(frozen=True, eq=False, repr=False)
    class Unread(Frozen):
        c: str = "x"

    # Nothing is built at definition: the dataclass attributes appear on first use.
    assert "__dataclass_fields__" not in Pending.__dict__ and "__dataclass_fields__" not in Unread.__dict__
    first = Pending(1)
    assert "__dataclass_fields__" in Pending.__dict__
    assert (first.a, first.b, first == Pending(1, []), repr(first)) == (1, [], True, f"{Pending.__qualname__}(a=1, b=[])")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'a'"):
        Pending()  # type: ignore[call-arg]
    # Reading what the machinery sets builds a class too; a missing attribute stays missing.
    assert dataclasses.is_dataclass(Unread) and [f.name for f in dataclasses.fields(Unread)] == ["c"]
    assert Unread.__match_args__ == ("c",) and dataclasses.replace(Unread(), c="y") == Unread("y")
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        Unread.nothing  # type: ignore[attr-defined]  # noqa: B018


def test_a_subclass_of_an_unbuilt_record_has_its_own_fields_and_its_bases() -> None:
    @dataclass(frozen=True, eq=False, repr=False)
    class Base(Frozen):
        a: int

    @dataclass(frozen=True, eq=False, repr=False)
    class Sub(Base):
        c: str = "x"

    assert [f.name for f in dataclasses.fields(Sub)] == ["a", "c"]
    assert [f.name for f in dataclasses.fields(Base)] == ["a"]
    assert (Sub(1).a, Sub(1, "y").c, Sub(1) == Base(1)) == (1, "y", False)


def test_importing_the_records_builds_none_of_them() -> None:
    program = ("import pytest_selfheal.records.report as r, dataclasses\n"
               "print('__dataclass_fields__' in r.ReportDoc.__dict__, dataclasses.is_dataclass(r.ReportDoc),"
               " '__dataclass_fields__' in r.ReportDoc.__dict__)")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["False", "True", "True"]


def _as_dataclasses_makes_it(cls: Any) -> Any:
    """The same class body again, made by ``dataclasses.dataclass(eq=False, repr=False)``."""
    own = vars(cls)["__annotations__"]

    def body(ns: dict[str, Any]) -> None:
        ns.update(__annotations__=dict(own), __module__=cls.__module__, __qualname__=cls.__qualname__)
        ns.update((k, v) for k, v in vars(cls).items() if k in ("__doc__", "__post_init__") or k.isupper())
        for f in cls.__dataclass_fields__.values():
            if f.name in own and f._field_type is dataclasses._FIELD:  # type: ignore[attr-defined]
                ns[f.name] = field(default=f.default, default_factory=f.default_factory, init=f.init, repr=f.repr,
                                   hash=f.hash, compare=f.compare, metadata=dict(f.metadata) or None)

    twin: Any = dataclasses.dataclass(eq=False, repr=False)(types.new_class(cls.__name__, cls.__bases__, {}, body))
    twin._init_sets = frozenset(f.name for f in dataclasses.fields(twin))
    return twin


def _made(cls: Any, *args: Any) -> Any:
    """What building with ``args`` (or the required parameters only) leaves: the stored
    fields in order with their types, or the error."""
    params = inspect.signature(cls).parameters.values()
    try:
        one = cls(*args) if args else cls(**{p.name: "x" for p in params if p.default is inspect.Parameter.empty})
    except (TypeError, ValueError) as exc:
        return repr(exc)
    return [(k, type(v)) for k, v in vars(one).items()]


@pytest.mark.parametrize("cls", [OurMany, OurOne, OurNone, CodeRef, FailureEntry, Incident])
def test_made_as_dataclasses_makes_it(cls: Any) -> None:
    """frozen.dataclass makes a class without exec: fields, parameters, __init__ (signature,
    annotations, defaults, what it stores in which order), __match_args__ are dataclasses' own."""
    twin = _as_dataclasses_makes_it(cls)

    def shape(c: Any) -> Any:
        fields = [(f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare,
                   dict(f.metadata), f.kw_only, f._field_type) for f in c.__dataclass_fields__.values()]
        init = c.__init__
        return (fields, repr(c.__dataclass_params__), str(inspect.signature(c)), init.__annotations__,
                init.__defaults__, init.__kwdefaults__, init.__qualname__, init.__globals__ is twin.__init__.__globals__,
                c.__match_args__, c.__doc__, hasattr(c, "__replace__"),
                [getattr(c, f, "-") for f in c.__dataclass_fields__])

    assert shape(cls) == shape(twin)
    assert _made(cls) == _made(twin)
    assert _made(cls, *range(40)) == _made(twin, *range(40))


def test_every_frozen_class_is_made_as_dataclasses_makes_it() -> None:
    for cls in _package_classes():
        if isinstance(cls, type) and issubclass(cls, Frozen) and dataclasses.is_dataclass(cls):
            test_made_as_dataclasses_makes_it(cls)


def test_what_the_short_way_leaves_to_dataclasses() -> None:
    """InitVar, keyword-only fields and their errors: dataclasses makes the class."""

    @dataclass(frozen=True, eq=False, repr=False)
    class WithInitVar(Frozen):
        a: int
        scale: dataclasses.InitVar[int] = 2
        b: int = field(default=0, kw_only=True)
        doubled: int = field(init=False, default=0)

        def __post_init__(self, scale: int) -> None:
            object.__setattr__(self, "doubled", self.a * scale)

    one = WithInitVar(3, 5, b=1)
    assert (one.a, one.b, one.doubled) == (3, 1, 15) and "scale" not in dataclasses.fields(one)
    with pytest.raises(TypeError, match="non-default argument 'c' follows default argument"):

        @dataclass(frozen=True, eq=False, repr=False)
        class Bad(Frozen):
            a: int = 0
            c: int  # type: ignore[misc]

        dataclasses.fields(Bad)  # built on first use
