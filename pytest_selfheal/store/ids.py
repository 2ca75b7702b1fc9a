"""Incident ids: ``incident_YYYYMMDD_HHMMSS_<run>`` (UTC). Any id from outside goes through
``validate_incident_id`` before it is joined to a path, so ``../x``, absolute paths, dots, NUL
bytes, non-ASCII and very long names never reach the file system."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Optional

from pytest_selfheal.errors import NotFoundError, UsageError
from pytest_selfheal.names import INCIDENT_ID_PATTERN, INCIDENT_PREFIX
from pytest_selfheal.records.vocab import first_few

INCIDENT_ID_RE = re.compile(INCIDENT_ID_PATTERN)

MAX_RUN_TOKEN = 40
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+", re.ASCII)


def utc(now: Optional[datetime] = None) -> datetime:
    """``now`` (default: the current time) in UTC; a naive datetime is taken to be UTC already."""
    if now is None:
        return datetime.now(timezone.utc)
    return now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now.astimezone(timezone.utc)


def new_run_token() -> str:
    """Six random hex characters: two processes in the same second never share one in practice."""
    return os.urandom(3).hex()


def new_incident_id(now: Optional[datetime] = None, run: Optional[str] = None) -> str:
    """A fresh incident id for ``now`` (UTC), with ``run`` made safe for a path (unsafe characters
    become ``-``, its length bounded) or a random token."""
    token = _UNSAFE.sub("-", run).strip("-")[:MAX_RUN_TOKEN] if run is not None else ""
    return f"{INCIDENT_PREFIX}{utc(now).strftime('%Y%m%d_%H%M%S')}_{token or new_run_token()}"


def new_run_id(now: Optional[datetime] = None) -> str:
    return "run_" + utc(now).strftime("%Y%m%d_%H%M%S_%f")


def is_incident_id(text: object) -> bool:
    return isinstance(text, str) and INCIDENT_ID_RE.fullmatch(text) is not None


def validate_incident_id(text: object) -> str:
    """``text`` if it is a well-formed incident id, else a one-line ``UsageError``."""
    if isinstance(text, str) and is_incident_id(text):
        return text
    shown = repr(text) if len(repr(text)) <= 60 else repr(text)[:57] + "..."
    raise UsageError(f"invalid incident id {shown}: expected incident_YYYYMMDD_HHMMSS_<run> "
                     "with <run> of 1-40 characters A-Z a-z 0-9 _ -")


LATEST = "latest"
# Any prefix of a well-formed id (a longer token is not a prefix of anything: a usage error).
_PREFIX_RE = re.compile(
    r"incident_(?:[0-9]{0,8}|[0-9]{8}_(?:[0-9]{0,6}|[0-9]{6}_[A-Za-z0-9_-]{0,40}))|" + LATEST, re.ASCII
)


def resolve_incident_ref(text: object, known: Iterable[str]) -> str:
    """The incident id a user's reference names among the ``known`` ids: ``latest`` (the
    newest: ids sort by creation time), an id, or a unique prefix of one. A shortened id is
    still well-formed, so a prefix is tried before the text is taken as an unknown full id."""
    if not isinstance(text, str) or not _PREFIX_RE.fullmatch(text):
        return validate_incident_id(text)  # raises the one-line usage error
    ids = sorted(set(known))
    if text == LATEST:
        if not ids:
            raise NotFoundError("no incident yet: `latest` names the newest one")
        return ids[-1]
    if text in ids:
        return text
    matches = [incident_id for incident_id in ids if incident_id.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        if is_incident_id(text):
            return text
        raise NotFoundError(f"no incident id starts with {text!r}")
    raise UsageError(f"incident id prefix {text!r} is ambiguous: {first_few(matches, 3)}")


def incident_timestamp(incident_id: str) -> Optional[datetime]:
    """The UTC creation time encoded in a valid id, or None if the digits are not a real date."""
    if INCIDENT_ID_RE.fullmatch(incident_id) is None:
        return None
    stamp = incident_id[len(INCIDENT_PREFIX):][:15]  # YYYYMMDD_HHMMSS
    try:
        return datetime.strptime(stamp, "%Y%m%d_%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
