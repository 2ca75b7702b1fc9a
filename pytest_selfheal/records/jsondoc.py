"""The machinery every on-disk record shares: typed fields parsed once, an exact round trip. Pure.

A record is a frozen dataclass; its fields are the JSON keys it knows and their types give the
parsers (an ``Annotated`` type says what a type cannot: :func:`fields_of`). ``keys`` (the key order
read; None for a record built in code) and ``extra`` (the unknown keys, frozen, in order) make
``json.dumps(R.from_json(doc, where).to_json())`` byte-identical to ``json.dumps(doc)``, but for an
integer field written as an integral float (``3.0``), which comes back as ``3``.

A bad value raises one line, ``<where>: invalid <kind>: field <path>: <problem>``. The shipped
JSON Schemas are generated from the same parsers (:func:`schema_of`), so the two never disagree.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from functools import cache, partial
from types import MappingProxyType
from typing import Annotated, Any, ClassVar, Optional, TypeVar, Union, cast

from pytest_selfheal.errors import InputError, one_line
from pytest_selfheal.names import INCIDENT_ID_PATTERN

R = TypeVar("R", bound="JsonRecord")
T = TypeVar("T")

Parser = Callable[[Any, str], Any]
Extra = tuple[tuple[str, Any], ...]
# A fingerprint list per iteration; older files hold a single string or null instead.
FingerprintsEntry = Union[tuple[str, ...], str, None]


class FieldError(Exception):
    """One bad value at the dotted field ``path``; ``expected`` (the JSON types that would do)
    or ``options`` (the allowed values) let a nullable field add null to the message."""

    def __init__(self, path: str, problem: str, expected: str = "", options: tuple[Any, ...] = ()) -> None:
        super().__init__(f"field {path}: {problem}" if path else problem)
        self.path, self.expected, self.options = path, expected, options


def not_one_of(path: str, value: Any, options: tuple[Any, ...]) -> FieldError:
    shown = ", ".join("null" if o is None else str(o) for o in options)
    return FieldError(path, f"{one_line(repr(value), 80)} is not one of {shown}", options=options)


_TYPE_NAMES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (Mapping, "object"))


def type_name(value: Any) -> str:
    """The JSON type name of ``value``, for messages."""
    return next((name for kind, name in _TYPE_NAMES if isinstance(value, kind)), type(value).__name__)


def child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _expected(path: str, names: str, value: Any) -> FieldError:
    return FieldError(path, f"expected {names}, got {type_name(value)}", expected=names)


# The two JSON object types of the package's documents: as ``json.loads`` gives and ``json.dumps``
# takes one (what ``to_json`` writes, a JSON Schema), and as a record holds one it does not
# model, read-only (``freeze``). Records type everything else.
JsonObject = dict[str, Any]
FrozenObject = Mapping[str, Any]
Schema = JsonObject
# The JSON Schema of each parser, built on demand (a record's schema names other records').
_SCHEMAS: dict[Callable[..., Any], Callable[[], Schema]] = {}
P = TypeVar("P", bound=Callable[..., Any])


def _declares(parse: P, schema: Callable[[], Schema]) -> P:
    _SCHEMAS[parse] = schema
    return parse


def schema_of(parse: Parser) -> Schema:
    """The JSON Schema (a fresh dict) of the values ``parse`` accepts: the schema files' source."""
    owner = getattr(parse, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, JsonRecord):
        return owner.schema()
    return _SCHEMAS[parse]()


def freeze(value: Any) -> Any:
    """A deep read-only copy of a JSON value: lists become tuples, objects read-only mappings."""
    if isinstance(value, list):
        return tuple(freeze(item) for item in value)
    if isinstance(value, dict):
        return MappingProxyType({key: freeze(item) for key, item in value.items()})
    return value


_SCALARS = frozenset({str, int, float, bool, type(None)})


def plain_json(value: Any) -> Any:
    """The JSON value of a frozen value or record (the inverse of ``freeze``)."""
    kind = type(value)
    if kind in _SCALARS:  # the most frequent values first, by exact type (an enum member is not one)
        return value
    if isinstance(value, tuple):
        return [plain_json(item) for item in value]
    if isinstance(value, Mapping):
        return {key: plain_json(item) for key, item in value.items()}
    to_json = getattr(value, "to_json", None)  # a record: JsonRecord, or one of the report's
    if to_json is None and dataclasses.is_dataclass(value):
        return dataclass_json(value)
    return value if to_json is None else to_json()


def dataclass_json(record: Any) -> JsonObject:
    """Each dataclass field of ``record`` by name, as JSON (nested records by their ``to_json``)."""
    return {spec.name: plain_json(getattr(record, spec.name)) for spec in dataclasses.fields(record)}


def _json_type(name: str, *types: type) -> Parser:
    """The parser of one JSON type: a value of ``types`` (a boolean only for ``boolean``), frozen."""

    def parse(value: Any, path: str) -> Any:
        if not isinstance(value, types) or isinstance(value, bool) is not (types == (bool,)):
            raise _expected(path, name, value)
        return freeze(value)

    return _declares(parse, lambda: {"type": name})


string: Callable[[Any, str], str] = _json_type("string", str)
number: Callable[[Any, str], float] = _json_type("number", int, float)
boolean: Callable[[Any, str], bool] = _json_type("boolean", bool)
json_object: Callable[[Any, str], FrozenObject] = _json_type("object", dict)
json_array: Callable[[Any, str], tuple[Any, ...]] = _json_type("array", list)
any_value: Parser = _declares(lambda value, path: freeze(value), dict)


@partial(_declares, schema=lambda: {"type": "integer"})
def integer(value: Any, path: str) -> int:
    """An integer; an integral float counts, as in JSON Schema."""
    if isinstance(value, float) and value.is_integer() or isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    raise _expected(path, "integer", value)


def nullable(parse: Callable[[Any, str], T]) -> Callable[[Any, str], Optional[T]]:
    """``parse``, or None for ``null`` (the message then names both types)."""

    def parse_nullable(value: Any, path: str) -> Optional[T]:
        if value is None:
            return None
        try:
            return parse(value, path)
        except FieldError as exc:
            if exc.path == path and exc.expected:
                raise _expected(path, f"{exc.expected} or null", value) from None
            if exc.path == path and exc.options:
                raise not_one_of(path, value, (*exc.options, None)) from None
            raise

    def schema() -> Schema:
        inner = schema_of(parse)
        inner["type"] = [inner["type"], "null"]
        if "enum" in inner:
            inner["enum"] = [*inner["enum"], None]
        return inner

    return _declares(parse_nullable, schema)


def array_of(parse: Callable[[Any, str], T]) -> Callable[[Any, str], tuple[T, ...]]:

    def parse_array(value: Any, path: str) -> tuple[T, ...]:
        if not isinstance(value, list):
            raise _expected(path, "array", value)
        return tuple(parse(item, f"{path}[{index}]") for index, item in enumerate(value))

    return _declares(parse_array, lambda: {"type": "array", "items": schema_of(parse)})


def object_of(parse: Callable[[Any, str], T]) -> Callable[[Any, str], Mapping[str, T]]:

    def parse_object(value: Any, path: str) -> Mapping[str, T]:
        if not isinstance(value, dict):
            raise _expected(path, "object", value)
        return MappingProxyType({key: parse(item, child(path, key)) for key, item in value.items()})

    return _declares(parse_object, lambda: {"type": "object", "additionalProperties": schema_of(parse)})


strings = array_of(string)

E = TypeVar("E", bound=Enum)


def one_of(enum: type[E], *only: E) -> Callable[[Any, str], E]:
    """A string that is the value of a member of ``enum`` (or of ``only``, when given): the member."""
    check = checked(string, enum=only or enum)
    return _declares(lambda value, path: enum(check(value, path)), lambda: schema_of(check))


@partial(_declares, schema=lambda: {"type": ["array", "string", "null"], "items": {"type": "string"}})
def fingerprints_entry(value: Any, path: str) -> FingerprintsEntry:
    """One entry of ``fingerprints_per_iteration``: a list of strings, a string or null."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _expected(path, "array or string or null", value)
    return strings(value, path)


fingerprints_per_iteration = array_of(fingerprints_entry)


def checked(
    parse: Callable[[Any, str], T],
    *,
    enum: Union[type[Enum], Iterable[Any], None] = None,
    pattern: str = "",
    minimum: Optional[float] = None,
    maximum: Optional[float] = None,
    description: str = "",
) -> Callable[[Any, str], T]:
    """``parse``, then the allowed values: one of ``enum`` (values, or an ``Enum``'s member values),
    a ``pattern`` match, ``minimum``/``maximum``. The schema files say the same (``schema_of``);
    ``description`` is for them only."""
    # Every enum is of strings and every bound is on a number: ``parse`` checked the type first.
    options = None if enum is None else tuple(m.value if isinstance(m, Enum) else m for m in enum)
    search = re.compile(pattern).search if pattern else None

    def parse_checked(value: Any, path: str) -> T:
        result = parse(value, path)
        if options is not None and value not in options:
            raise not_one_of(path, value, options)
        if minimum is not None and value < minimum:
            raise FieldError(path, f"{value} is less than the minimum {minimum}")
        if maximum is not None and value > maximum:
            raise FieldError(path, f"{value} is more than the maximum {maximum}")
        if search is not None and search(value) is None:
            raise FieldError(path, f"{one_line(repr(value), 80)} does not match {pattern}")
        return result

    def schema() -> Schema:
        out = schema_of(parse)  # every parser states its type; none states the words below
        words = {"enum": None if options is None else list(options), "pattern": pattern, "minimum": minimum,
                 "maximum": maximum, "description": description}
        return {"type": out.pop("type"), **{key: value for key, value in words.items() if value not in (None, "")}, **out}

    return _declares(parse_checked, schema)


# The package's own identifiers, as the schema files state them.
TIMESTAMP_PATTERN = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?\+00:00$"
incident_id = checked(string, pattern=INCIDENT_ID_PATTERN)
timestamp = checked(
    string, pattern=TIMESTAMP_PATTERN, description="ISO-8601 timestamp in UTC with an explicit +00:00 offset."
)


@dataclass(frozen=True)
class Field:
    """One known JSON key of a record, as derived from its dataclass field (:func:`fields_of`)."""

    key: str
    parse: Parser
    required: bool = False
    name: str = ""  # the dataclass attribute holding the value
    kind: Any = None  # its type


@dataclass(frozen=True)
class JsonKey:
    """In a field's ``Annotated`` type: the JSON key, where it is not the attribute's name."""

    key: str


# In a field's ``Annotated`` type: the document must have the key although the record has a default.
REQUIRED = "required"


def parser_for(kind: Any) -> Parser:
    """The parser of a field's type (``Optional[X]``: a key may be null or absent alike)."""
    simple = {str: string, int: integer, float: number, bool: boolean, Any: any_value}.get(kind)
    if simple is not None:
        return simple
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin is Union and len(args) == 2 and type(None) in args:
        return nullable(parser_for(next(arg for arg in args if arg is not type(None))))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return json_array if args[0] is Any else strings if args[0] is str else array_of(parser_for(args[0]))
    if origin is Mapping and args[0] is str:
        return json_object if args[1] is Any else object_of(parser_for(args[1]))
    if isinstance(kind, type) and issubclass(kind, (JsonRecord, LenientRecord)):
        return kind.parse
    if isinstance(kind, type) and issubclass(kind, Enum):
        return one_of(kind)
    raise TypeError(f"no JSON parser for {kind!r}: name one in its Annotated type")


def fields_of(cls: type) -> tuple[Field, ...]:
    """The JSON keys of a record class, in its fields' order. A field's type gives its parser
    and its key is required when it has no default; an ``Annotated`` type may add a parser (a
    ``checked`` one: allowed values, a description), a :class:`JsonKey` or ``REQUIRED``.
    ``keys`` and ``extra`` are not keys."""
    return _shape(cls).fields


def every_key(cls: type, *without: str) -> tuple[str, ...]:
    """The JSON keys of ``cls`` in its fields' order but ``without``: a record written whole, nulls too."""
    return tuple(field.key for field in fields_of(cls) if field.key not in without)


class _Shape:
    """What ``parse`` and ``to_json`` read of a record class's fields, worked out once per class."""

    def __init__(self, cls: type) -> None:
        hints = typing.get_type_hints(cls, include_extras=True)
        fields = []
        # Compared with, never handed out: a factory's value (an empty mapping or list) is made once.
        self.defaults: dict[str, object] = {}
        for spec in dataclasses.fields(cast(Any, cls)):
            if spec.default is not dataclasses.MISSING:
                self.defaults[spec.name] = spec.default
            elif spec.default_factory is not dataclasses.MISSING:
                self.defaults[spec.name] = spec.default_factory()
            if spec.name in ("keys", "extra") and spec.kw_only:  # the base's, not a record's own
                continue
            kind, said = hints[spec.name], []
            if typing.get_origin(kind) is Annotated:
                kind, *said = typing.get_args(kind)
            key = next((item.key for item in said if isinstance(item, JsonKey)), spec.name)
            parse = next((item for item in said if callable(item) and not isinstance(item, JsonKey)), None)
            required = REQUIRED in said or spec.name not in self.defaults
            fields.append(Field(key, parse or parser_for(kind), required, spec.name, kind))
        self.fields = tuple(fields)
        # key -> (attribute, parser), in the fields' order.
        self.known = {field.key: (field.name, field.parse) for field in fields}
        self.required = tuple(field.key for field in fields if field.required)

    def read(self, doc: Any, path: str, written: tuple[str, ...] = ()) -> tuple[JsonObject, list[tuple[str, Any]]]:
        """The parsed values of ``doc``'s known keys by attribute, and its other keys but ``written``, frozen."""
        if not isinstance(doc, dict):
            raise _expected(path, "object", doc)
        for key in (*written, *self.required):
            if key not in doc:
                raise FieldError(child(path, key), "required field missing")
        values, extra = {}, []
        for key, value in doc.items():
            spec = self.known.get(key)
            if spec is not None:
                values[spec[0]] = spec[1](value, child(path, key))
            elif key not in written:
                extra.append((key, freeze(value)))
        return values, extra


# One per record class (typed as the call it is: a class is hashable, whatever mypy says of type[R]).
_shape = cast("Callable[[type], _Shape]", cache(_Shape))


@dataclass(frozen=True)
class JsonRecord:
    """Base of the on-disk records. A record built in code (``keys`` None) writes its required
    fields, then every other field that differs from its default, then ``extra``; a field changed
    with ``dataclasses.replace`` that the document did not have is written after the read keys.
    """

    # The word in messages: the class name's words (``PlanAction``: ``plan action``) unless it says another.
    KIND: ClassVar[str] = "document"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "KIND" not in cls.__dict__:
            cls.KIND = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()

    keys: Optional[tuple[str, ...]] = dataclasses.field(default=None, repr=False, compare=False, kw_only=True)
    extra: Extra = dataclasses.field(default=(), kw_only=True)

    @classmethod
    def schema(cls) -> Schema:
        fields = fields_of(cls)
        required = [field.key for field in fields if field.required]
        return {"type": "object", **({"required": required} if required else {}),
                "properties": {field.key: schema_of(field.parse) for field in fields}, "additionalProperties": True}

    @classmethod
    def from_json(cls: type[R], doc: Any, where: str) -> R:
        """The record of ``doc`` read from ``where``, else ``InputError``: ``<where>: invalid <kind>: field <path>: <problem>``."""
        try:
            return cls.parse(doc, "")
        except FieldError as exc:
            raise InputError(one_line(f"{where}: invalid {cls.KIND}: {exc}")) from None

    @classmethod
    def parse(cls: type[R], doc: Any, path: str) -> R:
        """The record of the object ``doc`` found at ``path`` (a nested field's parser)."""
        values, extra = _shape(cls).read(doc, path)
        build = cast("Callable[..., R]", cls)  # a string: not built again on every call
        return build(**values, keys=tuple(doc), extra=tuple(extra))

    def to_json(self) -> JsonObject:
        """The JSON document (a fresh dict): the read keys in their order, then new ones."""
        shape = _shape(type(self))
        known, defaults = shape.known, shape.defaults
        extras = dict(self.extra)
        order: list[str] = list(self.keys) if self.keys is not None else list(shape.required)
        seen = set(order)
        order += [key for key, (name, _) in known.items() if key not in seen and getattr(self, name) != defaults.get(name)]
        order += [key for key, _ in self.extra if key not in seen]
        doc: JsonObject = {}
        for key in order:
            spec = known.get(key)
            if spec is not None:
                doc[key] = plain_json(getattr(self, spec[0]))
            elif key in extras:
                doc[key] = plain_json(extras[key])
        return doc

    def get_extra(self, key: str, default: Any = None) -> Any:
        return dict(self.extra).get(key, default)


def empty_map() -> FrozenObject:
    return MappingProxyType({})


L = TypeVar("L", bound="LenientRecord")


@dataclass(frozen=True)
class LenientRecord:
    """A record whose document may be a hand's or another version's (a report): ``parse`` checks it
    as :class:`JsonRecord` does, ``from_json`` reads it so that one odd value never stops a rendering;
    ``to_json`` writes every field (``OMITTED`` ones only when not None), then ``extra``."""

    WRITTEN: ClassVar[tuple[str, ...]] = ()  # keys always written that are no fields
    OMITTED: ClassVar[tuple[str, ...]] = ()

    extra: FrozenObject = dataclasses.field(default_factory=empty_map, kw_only=True)

    @classmethod
    def parse(cls: type[L], doc: Any, path: str) -> L:
        values, extra = _shape(cls).read(doc, path, cls.WRITTEN)
        return cls(**values, extra=MappingProxyType(dict(extra)))

    @classmethod
    def from_json(cls: type[L], doc: FrozenObject) -> L:
        """The record of ``doc``, read leniently: each value as its field's parser reads it, else
        :func:`lenient`; a required key missing reads as its type's empty value."""
        shape = _shape(cls)
        extra = {key: value for key, value in doc.items() if key not in shape.known and key not in cls.WRITTEN}
        return cls(**{f.name: lenient(f, doc.get(f.key)) for f in shape.fields if f.key in doc or f.required},
                   extra=freeze(extra) if extra else empty_map())

    def to_json(self) -> JsonObject:
        doc = {key: value for key, value in dataclass_json(self).items() if key != "extra"
               and (value is not None or key not in self.OMITTED)}
        return {**doc, **plain_json(self.extra)}


def lenient(spec: Field, value: Any) -> Any:
    """``value`` as the field ``spec`` reads it, else what fits: a boolean's truth, the items of
    a list and the entries of an object that fit, else None or the type's empty value."""
    try:
        return spec.parse(value, spec.key)
    except FieldError:
        pass
    kind, optional = spec.kind, typing.get_origin(spec.kind) is Union
    if optional:
        kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if kind is bool:
        return bool(value)
    if origin is tuple:
        item = Field(spec.key, parser_for(args[0]), kind=Optional[args[0]])
        return tuple(v for v in (lenient(item, v) for v in value) if v is not None) if isinstance(value, list) else ()
    if origin is Mapping:
        entry = Field(spec.key, parser_for(args[1]), kind=Optional[args[1]])
        kept = {k: lenient(entry, v) for k, v in value.items()} if isinstance(value, dict) else {}
        return MappingProxyType({k: v for k, v in kept.items() if v is not None})
    if isinstance(kind, type) and issubclass(kind, LenientRecord) and isinstance(value, dict):
        return kind.from_json(value)
    return None if optional else {str: "", int: 0, float: 0.0}.get(kind)
