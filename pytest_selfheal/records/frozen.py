"""Frozen dataclasses that cost less to define. Pure.

``@dataclasses.dataclass(frozen=True)`` compiles six methods per class with ``exec`` when
its module is imported (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``,
``__setattr__``, ``__delattr__``, the first in its slower frozen form): on Python 3.11
that is most of what importing the records, the settings and the policy costs, and every
``pytest --selfheal`` run pays it (docs/benchmarks.md, issue 10). Here :class:`Frozen`
defines five of them once, with the dataclass semantics, and ``__init__`` is made without
``exec`` where it can be ("the short way" below). A frozen dataclass of the package is declared::

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

A class that derives from no other dataclass is built on first use, not at import: its first instance, or the first
read of what the dataclass machinery sets on it (``dataclasses.fields``, ``is_dataclass``,
``__match_args__``). A run uses about half of the package's records: the others cost
nothing (docs/benchmarks.md). A class read before its first use shows the class body's
attributes (a ``field(...)`` default is still the ``Field``).
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import re
import reprlib
import sys
import typing
from collections.abc import Callable, Sequence
from functools import cache
from operator import attrgetter
from types import CellType, CodeType, FunctionType, MemberDescriptorType
from typing import TYPE_CHECKING, Any, ClassVar, Optional, cast

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


_shape = cache(_Shape)  # one per class


# What dataclasses.dataclass sets on a class: reading one of them builds a pending class.
_BUILT_ON_READ = frozenset({"__dataclass_fields__", "__dataclass_params__", "__match_args__"})
# Classes decorated but not built yet, with their dataclass parameters.
_PENDING: dict[type, dict[str, Any]] = {}


def _build(cls: type) -> None:
    """Make ``cls`` a dataclass if it is still pending (once)."""
    params = _PENDING.pop(cls, None)
    if params is None:
        return
    # dataclasses keeps an __init__ the class defines: take the placeholder away first.
    delattr(cls, "__init__")
    _make(cls, params)


def _make(cls: Any, params: dict[str, bool]) -> Any:
    """``dataclasses.dataclass(cls, **params)``: the short way (below) when it can."""
    # The short way knows the parameters every frozen record has (frozen, eq, repr: all off), no other.
    made = _fast_dataclass(cls) if params.keys() <= {"frozen", "eq", "repr"} else None
    if made is None:  # anything the short way does not handle: dataclasses does it all
        made = dataclasses.dataclass(cls, **params)
    made._init_sets = _settable(made)
    return made


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
        # An __init__ dataclasses generates sets each field once (a plain ``self.x = x``;
        # the short way's writes the instance's __dict__); after it, every field is set and
        # nothing else may be. Kept to two lookups and a store (a field is never a descriptor).
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
            return _make(cls, unfrozen)

        return wrap if cls is None else wrap(cls)


# --------------------------------------------------------------------------- the short way
# ``dataclasses.dataclass(cls, eq=False, repr=False)`` does three costly things per class:
# three regular-expression checks per field (is it a ClassVar, an InitVar, KW_ONLY?), and
# the ``exec`` of the source of ``__init__``. :func:`_fast_dataclass` does the same work
# with one check per field and no ``exec``: an ``__init__`` of n parameters is a copy of
# one compiled template of n parameters (names, keys and defaults its own). Whatever it
# does not handle (an InitVar, KW_ONLY, kw_only, a mutable default, a frozen base, a field
# named like the template's locals...) goes to dataclasses, which also raises its errors.
# tests/test_frozen.py compares every class of the package with what dataclasses makes.

_FIELD = getattr(dataclasses, "_FIELD", None)
_FIELD_CLASSVAR = getattr(dataclasses, "_FIELD_CLASSVAR", None)
_HAS_DEFAULT_FACTORY = getattr(dataclasses, "_HAS_DEFAULT_FACTORY", None)
_IDENTIFIER = re.compile(r"^(?:\s*(\w+)\s*\.)?\s*(\w+)").match  # dataclasses' own pattern
# An annotation's (qualifier, name) by that pattern (None: no match): the same few strings recur.
_NAMED: dict[str, Optional[tuple[Any, ...]]] = {}
_UNSEEN: Any = ()
_GENERIC_ALIAS = type(ClassVar[int])
_RESERVED = frozenset({"self", "_set"})


@dataclasses.dataclass(eq=False, repr=False)
class _Model:
    """A dataclass of no field: the parameters (and, on 3.13, ``__replace__``) every class shares."""


_PARAMS = vars(_Model)["__dataclass_params__"]
_REPLACE = vars(_Model).get("__replace__")
_TEMPLATES: dict[int, CodeType] = {}


def _template(arity: int) -> CodeType:
    """The code of an ``__init__`` of ``arity`` parameters ``_0``... that hands them, as one
    tuple, to the class's setter: compiled once per arity, renamed per class."""
    code = _TEMPLATES.get(arity)
    if code is None:
        params = "".join(f", _{i}" for i in range(arity))
        scope: dict[str, Callable[..., Any]] = {}
        exec(f"def make(_set):\n def __init__(self{params}):\n  _set(self, ({params[2:]}{',' if arity else ''}))\n return __init__", scope)
        code = _TEMPLATES[arity] = scope["make"](None).__code__
    return code


def _kind(annotation: object, module: dict[str, object]) -> Any:
    """``_FIELD`` or ``_FIELD_CLASSVAR`` as dataclasses decides, or None (for dataclasses to decide)."""
    target: Any = annotation
    if isinstance(annotation, str):
        named = _NAMED.get(annotation, _UNSEEN)
        if named is _UNSEEN:
            match = _IDENTIFIER(annotation)
            named = _NAMED[annotation] = None if match is None else match.group(1, 2)
        if named is None:
            return _FIELD
        qualifier, name = named
        if not qualifier:
            target = module.get(name)
        elif module.get(qualifier) is typing:
            target = getattr(typing, name, None)
        elif module.get(qualifier) is dataclasses:
            return None
        else:
            return _FIELD
    if target is ClassVar or (type(target) is _GENERIC_ALIAS and getattr(target, "__origin__", None) is ClassVar):
        return _FIELD_CLASSVAR
    if target is dataclasses.InitVar or type(target) is dataclasses.InitVar or target is dataclasses.KW_ONLY:
        return None
    return _FIELD


def _fast_dataclass(cls: Any) -> Any:
    """``dataclasses.dataclass(cls, eq=False, repr=False)`` with no ``exec``, or None when
    the class needs something this does not do."""
    module = sys.modules.get(cls.__module__)
    if _FIELD is None or module is None or "__slots__" in vars(cls):
        return None
    namespace = vars(module)
    fields: dict[str, dataclasses.Field[Any]] = {}
    for base in cls.__mro__[-1:0:-1]:
        base_fields = getattr(base, "__dataclass_fields__", None)
        if base_fields is not None:
            if base.__dataclass_params__.frozen:
                return None
            fields.update((f.name, f) for f in base_fields.values())
    annotations = vars(cls).get("__annotations__", {})
    own: list[tuple[Any, bool]] = []
    for name, annotation in annotations.items():
        kind = _kind(annotation, namespace)
        default: Any = getattr(cls, name, dataclasses.MISSING)
        declared = isinstance(default, dataclasses.Field)
        if isinstance(default, MemberDescriptorType):
            return None
        f: Any = default if declared else dataclasses.field(default=default)
        if kind is None or f.kw_only not in (dataclasses.MISSING, False) or name in _RESERVED:
            return None
        if kind is _FIELD_CLASSVAR and f.default_factory is not dataclasses.MISSING:
            return None
        if kind is _FIELD and (f.default.__class__.__hash__ is None or isinstance(f.default, (list, dict, set))):
            return None
        if kind is _FIELD and not f.init and f.default_factory is not dataclasses.MISSING:
            return None
        own.append((f, declared))
        f.name, f.type, f._field_type = name, annotation, kind
        if kind is _FIELD:
            f.kw_only = False
    if any(isinstance(value, dataclasses.Field) and name not in annotations for name, value in vars(cls).items()):
        return None
    fields.update((f.name, f) for f, _ in own)
    params = [f for f in fields.values() if getattr(f, "_field_type", None) is _FIELD and f.init]
    seen_default = False
    for f in params:
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            seen_default = True
        elif seen_default:
            return None
    for f, declared in own:
        if declared:
            if f.default is dataclasses.MISSING:
                delattr(cls, f.name)
            else:
                setattr(cls, f.name, f.default)
    cls.__dataclass_params__ = _PARAMS
    cls.__dataclass_fields__ = fields
    if "__init__" not in vars(cls):
        cls.__init__ = _init_of(cls, params, hasattr(cls, "__post_init__"), namespace)
    if _REPLACE is not None and "__replace__" not in vars(cls):
        cls.__replace__ = _REPLACE
    if not cls.__doc__:
        try:
            text_sig = str(inspect.signature(cls)).replace(" -> None", "")
        except (TypeError, ValueError):
            text_sig = ""
        cls.__doc__ = cls.__name__ + text_sig
    if "__match_args__" not in vars(cls):
        setattr(cls, "__match_args__", tuple(f.name for f in params))  # noqa: B010 - mypy refuses the assignment
    abc.update_abstractmethods(cls)
    return cls


def _init_of(cls: type, params: list[Any], post_init: bool, namespace: dict[str, object]) -> Any:
    """The ``__init__`` dataclasses would generate for ``params`` (same signature, annotations,
    defaults), storing the fields straight into the instance's ``__dict__``, in order."""
    names = tuple(f.name for f in params)
    made = [(i, f.default_factory) for i, f in enumerate(params) if f.default_factory is not dataclasses.MISSING]
    state = attrgetter("__dict__")

    def set_fields(self: Any, values: tuple[Any, ...]) -> None:
        if made:
            values = list(values)  # type: ignore[assignment]
            for i, factory in made:
                if values[i] is _HAS_DEFAULT_FACTORY:
                    values[i] = factory()  # type: ignore[index]
        state(self).update(zip(names, values))
        if post_init:
            self.__post_init__()

    template = _template(len(params))
    code = template.replace(co_varnames=("self", *names))
    defaults = tuple(
        f.default if f.default is not dataclasses.MISSING else _HAS_DEFAULT_FACTORY
        for f in params
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    )
    init = FunctionType(code, namespace, "__init__", defaults or None, (CellType(set_fields),))
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**dict(zip(names, (f.type for f in params))), "return": None}
    return init


__all__ = ["Frozen", "dataclass"]
