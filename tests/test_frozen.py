"""records/frozen.py: the package's frozen dataclasses compare, hash and print exactly as
``@dataclass(frozen=True)`` would, with the three methods defined once (issue 10)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import pytest

import pytest_selfheal
from pytest_selfheal.records.frozen import Frozen
from pytest_selfheal.records.incident import CodeRef, FailureEntry, Incident, RootCause


# One field list, two classes: generated methods (Gen*) and Frozen's (Our*).
_MANY_FIELDS: List[Any] = [
    ("a", int),
    ("b", str, field(default="x")),
    ("hidden", Optional[Tuple[str, ...]], field(default=None, repr=False, compare=False)),
    ("shown_not_compared", int, field(default=0, compare=False)),
    ("not_hashed", Tuple[int, ...], field(default=(), hash=False)),
    ("hashed_not_compared", str, field(default="", compare=False, hash=True)),
    ("nested", Any, field(default=None)),
]


def _both(name: str, fields: List[Any]) -> Tuple[Any, Any]:
    generated = dataclasses.make_dataclass(f"Gen{name}", fields, frozen=True)
    ours = dataclasses.make_dataclass(f"Our{name}", fields, bases=(Frozen,), frozen=True, eq=False, repr=False)
    return generated, ours


GenMany, OurMany = _both("Many", _MANY_FIELDS)
GenOne, OurOne = _both("One", [("only", float)])
GenNone, OurNone = _both("None", [])


def _pairs() -> List[Tuple[Any, Any, Any, Any]]:
    """(generated a, ours a, generated b, ours b): the same values in both kinds of class."""
    nan = float("nan")
    many: List[Dict[str, Any]] = [
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


def test_still_frozen_and_replaceable() -> None:
    one = OurMany(a=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        one.a = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        del one.a
    assert dataclasses.replace(one, a=2) == OurMany(a=2)
    assert {OurMany(a=1), OurMany(a=1, hidden=("x",))} == {OurMany(a=1)}


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
    assert repr(ref) == "CodeRef(path='src/a.py', name='f', line=3, extra=(('more', (1,)),))"
    entry = FailureEntry(nodeid="t::x", root_cause=RootCause(frame=ref))
    assert entry == dataclasses.replace(entry) and hash(entry) == hash(dataclasses.replace(entry))
    assert len({entry, dataclasses.replace(entry, keys=("nodeid",))}) == 1


def _package_classes() -> List[type]:
    found: List[type] = []
    for info in pkgutil.walk_packages(pytest_selfheal.__path__, "pytest_selfheal."):
        if ".demo" in info.name or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        found.extend(v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__)
    return found


def test_every_frozen_dataclass_of_the_package_uses_frozen() -> None:
    """The saving holds only if no frozen dataclass gets its own generated methods back."""
    frozen = [c for c in _package_classes() if dataclasses.is_dataclass(c) and c.__dataclass_params__.frozen]  # type: ignore[attr-defined]
    assert Incident in frozen and len(frozen) > 40
    wrong = [f"{c.__module__}.{c.__qualname__}" for c in frozen
             if not issubclass(c, Frozen) or {"__eq__", "__hash__", "__repr__"} & set(vars(c))]
    assert wrong == []
