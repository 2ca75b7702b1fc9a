"""The redaction markers and what a redacted node id still selects (pure; docs/redaction.md).

The one home of the markers: ``pytest_selfheal.redact`` writes them, the plan and the loop read them to
run a test whose node id held a secret (its parametrize id) through its nearest selectable
parent.
"""

from __future__ import annotations

from typing import Optional

#: What a redacted value is replaced with.
REDACTED = "[REDACTED]"
#: What the password of URL credentials is replaced with: brackets are not allowed in the
#: userinfo part of a URL, so ``***`` keeps the URL parseable (same convention as git).
URL_MASK = "***"


def is_redacted(text: str) -> bool:
    """Whether ``text`` carries a redaction marker (it was a secret, or held one)."""
    return REDACTED in text or f":{URL_MASK}@" in text or f"//{URL_MASK}@" in text


def runnable_nodeid(nodeid: str) -> Optional[str]:
    """What pytest can select for ``nodeid`` once it was redacted (docs/redaction.md).

    A node id without a marker is itself. A redacted one cannot be selected any more (pytest
    knows the real id only): the nearest selectable parent is, the test without its
    parametrize id (``test_db.py::test_url[...]`` -> ``test_db.py::test_url``, which runs
    every parameter, the redacted one included), else a marker-free ``::`` prefix. None
    when even the file part holds a marker.
    """
    if not is_redacted(nodeid):
        return nodeid
    bracket = nodeid.find("[")
    if bracket > 0 and not is_redacted(nodeid[:bracket]):
        return nodeid[:bracket]
    parts = nodeid.split("::")
    while parts and is_redacted("::".join(parts)):
        parts.pop()
    return "::".join(parts) or None


__all__ = ["REDACTED", "URL_MASK", "is_redacted", "runnable_nodeid"]
