"""The redaction and truncation markers of node ids, and what such an id still selects
(pure; docs/redaction.md): the plan and the loop run such a test through its nearest
selectable parent.
"""

from __future__ import annotations

from typing import Optional

#: What a redacted value is replaced with.
REDACTED = "[REDACTED]"
#: What the password of URL credentials is replaced with: brackets are not allowed in the
#: userinfo part of a URL, so ``***`` keeps the URL parseable (same convention as git).
URL_MASK = "***"
#: Characters of a test name (a node id's last part, its parametrize id included) kept; a
#: longer one is cut here and marked. Well under what the junit reader keeps of an attribute
#: (64 KiB of escaped bytes), so every document of one test yields the same cut name.
MAX_NAME = 4096
#: What ends a test name cut at MAX_NAME characters.
TRUNCATED = "[... truncated by selfheal]"


def is_redacted(text: str) -> bool:
    """Whether ``text`` carries a redaction marker (it was a secret, or held one)."""
    return REDACTED in text or f":{URL_MASK}@" in text or f"//{URL_MASK}@" in text


def bounded_name(name: str) -> str:
    """``name`` cut to :data:`MAX_NAME` characters and marked when longer; a name already
    marked is kept as it is."""
    if len(name) <= MAX_NAME or TRUNCATED in name:
        return name
    return name[:MAX_NAME] + TRUNCATED


def bounded_nodeid(nodeid: str) -> str:
    """``nodeid`` with its test name (last part and parametrize id) cut as :func:`bounded_name`."""
    if len(nodeid) <= MAX_NAME:
        return nodeid
    path, bracket, params = nodeid.partition("[")
    head, sep, last = path.rpartition("::")
    name = last + bracket + params
    bounded = bounded_name(name)
    return nodeid if bounded is name else head + sep + bounded


def _unselectable(text: str) -> bool:
    return is_redacted(text) or TRUNCATED in text


def runnable_nodeid(nodeid: str) -> Optional[str]:
    """What pytest can select for ``nodeid`` once it was redacted or cut: itself without a
    marker, else its nearest selectable parent (the test without its parametrize id, which runs
    every parameter, else the class or the file); None when even the file part holds a marker."""
    if not _unselectable(nodeid):
        return nodeid
    bracket = nodeid.find("[")
    cut = nodeid.find(TRUNCATED)
    # A "[" in the kept head opens the parametrize id; the marker's own "[" does not.
    if bracket > 0 and (cut < 0 or bracket < cut) and not _unselectable(nodeid[:bracket]):
        return nodeid[:bracket]
    parts = nodeid.split("::")
    while parts and _unselectable("::".join(parts)):
        parts.pop()
    return "::".join(parts) or None
