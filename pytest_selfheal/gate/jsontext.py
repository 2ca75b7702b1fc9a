"""A JSON file someone else owns, read and written back without changing its meaning (pure).

Numbers are held as their source text (``1e400`` stays ``1e400``), and what cannot be
written back as read is refused with one line instead of changed: a key given twice (the
last would silently win), ``NaN``, a lone surrogate escape, nesting deeper than :data:`MAX_DEPTH`.
"""

from __future__ import annotations

import json
from typing import Any

from pytest_selfheal.errors import InputError

MAX_DEPTH = 100  # settings files nest a few levels; the copy and the writer recurse per level


class Number(str):
    """A JSON number as its source text: written back exactly as it was read."""

    __slots__ = ()


def _no_constant(name: str) -> Any:
    raise InputError(f"{name} is not JSON")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise InputError(f"the key {json.dumps(key, ensure_ascii=True)} is given twice in one object "
                             "(only one would be kept)")
        obj[key] = value
    return obj


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(f"the string {json.dumps(value[:40])} holds a lone surrogate escape "
                         "(no character to write back)") from None


def loads(text: str) -> Any:
    """The JSON value of ``text``, numbers as :class:`Number`; ``InputError`` (one line) otherwise."""
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_float=Number, parse_int=Number,
                           parse_constant=_no_constant)
    except InputError:
        raise
    except RecursionError:
        raise InputError("nested too deeply") from None
    except ValueError as exc:
        raise InputError(f"not JSON ({exc})") from None
    _walk_strings(value)
    return value


def _walk_strings(value: Any) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)) and depth > MAX_DEPTH:
            raise InputError(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            for key, inner in item.items():
                _check_text(key)
                stack.append((inner, depth + 1))
        elif isinstance(item, list):
            stack.extend((inner, depth + 1) for inner in item)
        elif isinstance(item, str) and not isinstance(item, Number):
            _check_text(item)


def dumps(value: Any, level: int = 0) -> str:
    """``value`` as JSON text, indented by two spaces; a :class:`Number` as its source text."""
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, Number):
        return str.__str__(value)
    if isinstance(value, dict) and value:
        items = (f"{inner}{json.dumps(k, ensure_ascii=False)}: {dumps(v, level + 1)}" for k, v in value.items())
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        return "[\n" + ",\n".join(f"{inner}{dumps(v, level + 1)}" for v in value) + f"\n{pad}]"
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


__all__ = ["Number", "dumps", "loads"]
