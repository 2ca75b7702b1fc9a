"""Errors that reach the user as one line and a documented exit code (docs/exit-codes.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

# Exit codes of the `selfheal` command. Stable: scripts and the Action depend on them.
EXIT_OK = 0
EXIT_UNRESOLVED = 1  # the loop stopped without resolving the incident
EXIT_USAGE = 2  # bad arguments, bad config, invalid incident id
EXIT_BAD_INPUT = 3  # malformed junit XML, corrupted or schema-invalid incident files
EXIT_NOT_FOUND = 4  # the incident (or a report file given to merge) does not exist
EXIT_REFUSED = 5  # refused by policy: command not allowlisted, status transition refused
EXIT_IO = 6  # the reports root cannot be written or locked (disk full, read-only, lock timeout)
EXIT_PYTEST = 7  # selfheal ci: pytest itself gave no verdict (internal error, no tests, killed)
EXIT_CANCELLED = 130  # Ctrl-C / SIGTERM: state saved, clean exit


def one_line(text: str, limit: int = 300) -> str:
    """Collapse ``text`` to a single bounded line, for error messages."""
    flat = " ".join(str(text).replace("\x00", "\\0").split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def printable(text: str) -> str:
    """``text`` with every character a terminal acts on (a line break, an escape sequence, a bidi
    override) escaped: for a line built from names a test or a patch chose."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def describe_value(value: Any) -> str:
    """A short one-line rendering of a bad value for an error message."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return text if len(text) <= 80 else text[:76] + '..."'
    if isinstance(value, (int, float)):
        try:
            text = repr(value)
        except ValueError:  # an int too long to print
            return "a very large integer"
        return text if len(text) <= 40 else "a very large number"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return f"a {type(value).__name__}"


class SelfhealError(Exception):
    """Base error: its message is printed as one line, its exit code returned."""

    exit_code = EXIT_USAGE

    def __init_subclass__(cls, exit_code: Optional[int] = None) -> None:
        if exit_code is not None:  # else the parent's, or the class body's own
            cls.exit_code = exit_code

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(SelfhealError):
    """Bad command-line arguments or an invalid incident id."""


class ConfigError(SelfhealError):
    """A config file is malformed, has an unknown key or a value of the wrong type."""


class InputError(SelfhealError, exit_code=EXIT_BAD_INPUT):
    """Input that cannot be read: malformed junit XML, corrupted incident files."""


class NotFoundError(SelfhealError, exit_code=EXIT_NOT_FOUND):
    """An incident or file that does not exist."""


class RefusedError(SelfhealError, exit_code=EXIT_REFUSED):
    """Refused by policy: a command not on the allowlist, a status transition not allowed."""


class StoreIOError(SelfhealError, exit_code=EXIT_IO):
    """The reports root cannot be written or locked."""


class Cancelled(SelfhealError, exit_code=EXIT_CANCELLED):
    """Interrupted by Ctrl-C or SIGTERM after state was saved."""
