"""The spelling the package's frozen dataclasses are still declared with: standard ones.

``@dataclass(frozen=True, eq=False, repr=False)`` on a :class:`Frozen` class is
``@dataclasses.dataclass(frozen=True)``: ``dataclasses`` generates ``==``, ``hash``,
``repr`` and the refusal to assign or delete a field. The declarations move to
``dataclasses`` itself, then this module goes.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any


class Frozen:
    """The (empty) base of the package's frozen dataclasses."""

    __slots__ = ()


if TYPE_CHECKING:
    from dataclasses import dataclass
else:

    def dataclass(cls=None, /, **params: Any):
        """``dataclasses.dataclass``; ``frozen=True`` with ``eq=False, repr=False`` means a
        standard frozen dataclass (its ``==``, ``hash`` and ``repr`` generated)."""
        if params.get("frozen"):
            params = {key: value for key, value in params.items() if key not in ("eq", "repr")}
        return dataclasses.dataclass(cls, **params) if cls is not None else dataclasses.dataclass(**params)


__all__ = ["Frozen", "dataclass"]
