"""pytest's junit identity of a node id, and the escape of what XML cannot carry (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pytest_selfheal.records.redacted import bounded_name

# Characters that XML 1.0 cannot carry, escaped visibly as pytest does (#xNN): the
# complement of pytest's legal ranges, spelled as its few illegal ones.
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def xml_escape_visible(text: str) -> str:
    """Replace characters XML cannot hold by a visible ``#xNN`` form."""

    def repl(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"#x{code:02X}" if code <= 0xFF else f"#x{code:04X}"

    return _ILLEGAL_XML.sub(repl, text)


def mangle_nodeid(nodeid: str, prefix: str = "") -> tuple[str, str]:
    """pytest's junit (classname, name) for a node id, each part cut as the junit reader cuts
    it: ``tests/test_a.py::TestX::test_b[1]`` → (``tests.test_a.TestX``, ``test_b[1]``)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    classnames = names[:-1]
    if prefix:
        classnames.insert(0, prefix)
    # A file or test name may hold a control character XML cannot carry (`test_\x01.py`).
    return bounded_name(xml_escape_visible(".".join(classnames))), bounded_name(xml_escape_visible(names[-1]))


def nodeid_by_identity(nodeids: Sequence[str], prefix: str = "") -> dict[str, str]:
    """Map the junit identity ``classname::name`` back to node ids."""
    mapping = {}
    for nodeid in nodeids:
        classname, name = mangle_nodeid(nodeid, prefix)
        mapping[f"{classname}::{name}" if classname else name] = nodeid
    return mapping
