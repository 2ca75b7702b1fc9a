"""Frozen dataclasses that cost less to define. Pure.

``@dataclasses.dataclass(frozen=True)`` compiles six methods per class with ``exec`` when
its module is imported (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__``, ``__delattr__``, the first in its slower frozen form): on Python 3.11
that is most of what importing the records, the settings and the policy costs, and every
``pytest --selfheal`` run pays it (docs/benchmarks.md, issue 10). Here only
``__init__`` is compiled per class; :class:`Frozen` defines the five others once, with the
dataclass semantics. A frozen dataclass of the package is declared::

    from pytest_selfheal.records.frozen import Frozen, dataclass

    @dataclass(frozen=True, eq=False, repr=False)
    class Thing(Frozen):
        ...

and behaves as ``@dataclasses.dataclass(frozen=True)`` would: equal when the other object
is of the same class and the fields that take part in comparison are equal as tuples,
hashed on the same fields, shown as ``Thing(a=1, b='x')`` with the fields whose ``repr``
is on, and ``FrozenInstanceError`` on any assignment or deletion once built
(tests/test_frozen.py checks each against the generated methods). Type checkers see
:func:`dataclass` as ``dataclasses.dataclass`` itself, so they check the frozen fields.

A class that derives from no other dataclass is built by
``dataclasses.dataclass`` on first use, not at import: its first instance, or the first
read of what the dataclass machinery sets on it (``dataclasses.fields``, ``is_dataclass``,
``__match_args__``). A run uses about half of the package's records: the others cost
nothing (docs/benchmarks.md). A class read before its first use shows the class body's
attributes (a ``field(...)`` default is still the ``Field``).
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, cast

_Values = Callable[[Any], tuple[Any, ...]]

# From Python 3.13 a dataclass compares field by field, no longer as tuples.
_FIELD_BY_FIELD = sys.version_info >= (3, 13)


def _values_of(names: Sequence[str]) -> _Values:
    """The tuple of the named attributes of an object (always a tuple, as dataclasses compare)."""
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    many: _Values = attrgetter(*names)
    return many


class _Shape:
    """What the methods of :class:`Frozen` need to know about one class, built on first use."""

    def __init__(self, cls: type) -> None:
        fields = dataclasses.fields(cls)
        self.compared = _values_of([f.name for f in fields if f.compare])
        # The dataclass rule: a field is hashed when ``hash`` says so, else when it is compared.
        self.hashed = _values_of([f.name for f in fields if (f.compare if f.hash is None else f.hash)])
        self.shown = tuple(f.name for f in fields if f.repr)


def _settable(cls: type) -> frozenset[str]:
    """The fields the generated ``__init__`` of ``cls`` sets (a field with init=False and a
    plain default is read from the class; a ``__post_init__`` sets the others with
    ``object.__setattr__``, as for any frozen dataclass)."""
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init or f.default_factory is not dataclasses.MISSING)


_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = _Shape(cls)
    return shape


# What dataclasses.dataclass sets on a class: reading one of them builds a pending class.
_BUILT_ON_READ = frozenset({"__dataclass_fields__", "__dataclass_params__", "__match_args__"})
# Classes decorated but not built yet, with their dataclass parameters.
_PENDING: dict[type, dict[str, Any]] = {}


def _build(cls: type) -> None:
    """Run ``dataclasses.dataclass`` on ``cls`` if it is still pending (once)."""
    params = _PENDING.pop(cls, None)
    if params is None:
        return
    # dataclasses keeps an __init__ the class defines: take the placeholder away first.
    delattr(cls, "__init__")
    built: Any = dataclasses.dataclass(cls, **params)
    built._init_sets = _settable(built)


def _first_init(cls: type) -> Callable[..., None]:
    """A pending class's ``__init__``: builds the class, then runs the generated one."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _build(cls)
        cast(Any, cls).__init__(self, *args, **kwargs)

    return __init__


class _BuiltOnUse(type):
    """The metaclass of :class:`Frozen`: a read of a dataclass attribute builds a pending class
    (only reads that find nothing reach ``__getattr__``: it costs nothing once built)."""

    def __getattr__(cls, name: str) -> Any:
        if name in _BUILT_ON_READ and cls in _PENDING:
            _build(cls)
            return getattr(cls, name)
        raise AttributeError(f"type object {cls.__qualname__!r} has no attribute {name!r}")


class Frozen(metaclass=_BuiltOnUse):
    """Base of the package's frozen dataclasses: ``==``, ``hash``, ``repr`` and the refusal
    to change a field as ``@dataclasses.dataclass(frozen=True)`` generates them, defined once
    (module docstring)."""

    __slots__ = ()
    # Set on each class by :func:`dataclass`: the names its __init__ may set, once each.
    _init_sets: ClassVar[frozenset[str]] = frozenset()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _shape(self.__class__).compared
        if not _FIELD_BY_FIELD:
            return compared(self) == compared(other)
        # Python 3.13's generated __eq__: identity, then field by field (a NaN field is
        # unequal to itself in another record, where a tuple compares it by identity).
        if self is other:
            return True
        result: Any = True
        for mine, theirs in zip(compared(self), compared(other)):
            result = mine == theirs
            if not result:
                break
        return cast(bool, result)

    def __hash__(self) -> int:
        return hash(_shape(self.__class__).hashed(self))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in _shape(self.__class__).shown)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: Any) -> None:
        # The generated __init__ sets each field once (a plain ``self.x = x``); after it,
        # every field is set and nothing else may be. Every record built pays this per
        # field: kept to two lookups and a store (a field is never a descriptor).
        state = self.__dict__
        if name in state or name not in self._init_sets:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        state[name] = value

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


if TYPE_CHECKING:
    from dataclasses import dataclass
else:

    def dataclass(cls=None, /, **params):
        """``dataclasses.dataclass``; with ``frozen=True`` (on a :class:`Frozen` class, with
        ``eq=False, repr=False``) only ``__init__`` is generated, :class:`Frozen` does the rest."""

        def wrap(cls):
            if not params.get("frozen"):
                return dataclasses.dataclass(cls, **params)
            if not issubclass(cls, Frozen) or params.get("eq", True) or params.get("repr", True):
                raise TypeError(f"{cls.__qualname__}: a frozen dataclass derives from Frozen, with eq=False, repr=False")
            unfrozen = dict(params, frozen=False)
            if "__init__" not in cls.__dict__ and not params.get("slots") and not any(
                    "__dataclass_fields__" in base.__dict__ or base in _PENDING for base in cls.__mro__[1:]):
                _PENDING[cls] = unfrozen
                cls.__init__ = _first_init(cls)
                return cls
            # A dataclass's subclass is built now: it would otherwise see its base's fields as its own.
            made = dataclasses.dataclass(cls, **unfrozen)
            made._init_sets = _settable(made)
            return made

        return wrap if cls is None else wrap(cls)


__all__ = ["Frozen", "dataclass"]
