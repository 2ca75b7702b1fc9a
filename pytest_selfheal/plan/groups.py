"""Failures grouped by root cause, and selections that stay readable (pure).

One plan action per *root cause*, not per message. A failure's evidence (``root_cause`` in
``incident.json``, resolved at capture: docs/store.md) decides its group, in this order:

1. **frame** — the innermost traceback frame in the project outside the test files: every
   failure raised in (or through) ``core.py::add`` is one group, whatever its message;
2. **calls** — the project definitions the test calls. A failure whose calls include the
   function of a frame group joins it (the same bug, seen as a wrong return value instead
   of an exception); otherwise it joins the group of its definition that the most failing
   tests call (ties: the test's own order) — the likely culprit of an off-by-one that fails
   161 tests calling ``paginate`` beside various helpers;
3. **fingerprint** — no evidence (a collection error, another runner's junit): failures
   with the same failure type and normalised message, as before.

A long selection collapses to its test files (:data:`MAX_SELECTION_NODEIDS`,
:data:`MAX_SELECTION_CHARS`): a command with 161 node ids is unreadable and the loop maps
every test of a file selection back to its node id anyway.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from pytest_selfheal.analysis.frames import is_test_file, repo_relative
from pytest_selfheal.records.redacted import runnable_nodeid

EVIDENCE_FRAME = "frame"
EVIDENCE_CALLS = "calls"
EVIDENCE_FINGERPRINT = "fingerprint"

# A selection with more node ids than this, or longer than MAX_SELECTION_CHARS in total, is
# written as its test files (docs/loop.md "The plan").
MAX_SELECTION_NODEIDS = 20
MAX_SELECTION_CHARS = 2000

Definition = tuple[str, str]  # (repo-relative path, qualified name)


@dataclass
class Group:
    """One root cause: how it was found, where it points, and the failures it explains."""

    evidence: str  # EVIDENCE_FRAME | EVIDENCE_CALLS | EVIDENCE_FINGERPRINT
    path: Optional[str]  # the defining file (None for a fingerprint group)
    name: Optional[str]  # the function or class (None for a fingerprint group)
    members: list[Mapping[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The action's ``root_cause`` object in ``plan.json``."""
        data: dict[str, Any] = {"evidence": self.evidence}
        if self.path is not None:
            data["path"] = self.path
        if self.name is not None:
            data["name"] = self.name
        return data


def _ref(value: Any) -> Optional[Definition]:
    if not isinstance(value, Mapping):
        return None
    path, name = value.get("path"), value.get("name")
    if not isinstance(path, str) or not path or is_test_file(path):
        return None
    return path, name if isinstance(name, str) else ""


def frame_of(failure: Mapping[str, Any]) -> Optional[Definition]:
    """The failure's innermost project frame outside the tests, from its ``root_cause``."""
    evidence = failure.get("root_cause")
    return _ref(evidence.get("frame")) if isinstance(evidence, Mapping) else None


def calls_of(failure: Mapping[str, Any]) -> list[Definition]:
    """The project definitions the failing test calls, from its ``root_cause``."""
    evidence = failure.get("root_cause")
    calls = evidence.get("calls") if isinstance(evidence, Mapping) else None
    out: list[Definition] = []
    for item in calls if isinstance(calls, (list, tuple)) else []:
        ref = _ref(item)
        if ref is not None and ref not in out:
            out.append(ref)
    return out


def _explains(frame: Definition, call: Definition) -> bool:
    """A called definition is the frame's function, or the class the frame's method belongs to."""
    return frame[0] == call[0] and bool(call[1]) and (frame[1] == call[1] or frame[1].startswith(call[1] + "."))


def group_by_root_cause(
    failures: Sequence[Mapping[str, Any]], fingerprint_key: Any
) -> list[Group]:
    """The failures in root-cause groups, in order of each group's first failure.

    ``fingerprint_key(failure)`` gives the key of a failure without evidence (its type and
    normalised message).
    """
    groups: dict[tuple[Any, ...], Group] = {}
    assigned: list[tuple[Any, ...]] = []
    frames: dict[Definition, tuple[Any, ...]] = {}
    frame_sizes: dict[tuple[Any, ...], int] = {}
    for failure in failures:
        frame = frame_of(failure)
        if frame is not None:
            key: tuple[Any, ...] = (EVIDENCE_FRAME, *frame)
            frames.setdefault(frame, key)
            frame_sizes[key] = frame_sizes.get(key, 0) + 1
            groups.setdefault(key, Group(EVIDENCE_FRAME, frame[0], frame[1]))
    # How many failing tests (without a frame) call each definition: the most shared is the suspect.
    shared: dict[Definition, int] = {}
    for failure in failures:
        if frame_of(failure) is None:
            for call in calls_of(failure):
                shared[call] = shared.get(call, 0) + 1
    for failure in failures:
        frame = frame_of(failure)
        calls = calls_of(failure)
        if frame is not None:
            key = frames[frame]
        elif calls and any(_explains(f, c) for f in frames for c in calls):
            # The same function failed with an exception elsewhere: the largest such group.
            matching = [frames[f] for f in frames if any(_explains(f, c) for c in calls)]
            key = max(matching, key=lambda k: frame_sizes[k])
        elif calls:
            best = max(calls, key=lambda c: (shared.get(c, 0), -calls.index(c)))
            key = (EVIDENCE_CALLS, *best)
            groups.setdefault(key, Group(EVIDENCE_CALLS, best[0], best[1]))
        else:
            key = (EVIDENCE_FINGERPRINT, fingerprint_key(failure))
            groups.setdefault(key, Group(EVIDENCE_FINGERPRINT, None, None))
        assigned.append(key)
    for failure, key in zip(failures, assigned):
        groups[key].members.append(failure)
    # In order of each group's first failure, not of its first frame.
    return [groups[key] for key in dict.fromkeys(assigned)]


def selection_file(selection: str) -> Optional[str]:
    """The repo-relative file part of a pytest node id, or None (junit identities have none)."""
    path = selection.split("::", 1)[0].replace("\\", "/")
    # "tests/test_x.py::t" has a file; "tests.test_x::t" (a junit classname) does not.
    if not (path.endswith(".py") or ("/" in path and "." in path.rsplit("/", 1)[1])):
        return None
    return repo_relative(path, ".")


def evidence_paths(group: Group) -> list[str]:
    """The source files the group's evidence points at: its own definition first, then the
    other frames and called definitions of its failures (never a test file)."""
    paths: list[str] = [group.path] if group.path else []
    for member in group.members:
        for ref in [frame_of(member), *calls_of(member)]:
            if ref is not None and ref[0] not in paths:
                paths.append(ref[0])
    return paths


def collapse_selection(nodeids: Sequence[str]) -> list[str]:
    """``nodeids``, or their test files (each once, in order) when the list is long.

    Kept as node ids when some of them have no file (junit identities of another runner).
    """
    # Measured as run: a redacted or cut id is selected through its parent (records/redacted.py).
    length = sum(len(runnable_nodeid(n) or n) + 1 for n in nodeids)
    if len(nodeids) <= MAX_SELECTION_NODEIDS and length <= MAX_SELECTION_CHARS:
        return list(nodeids)
    files = [selection_file(n) for n in nodeids]
    if any(f is None for f in files):
        return list(nodeids)
    return list(dict.fromkeys(f for f in files if f is not None))


def selected_by(nodeid: str, words: Collection[str]) -> bool:
    """True when a command's ``words`` select ``nodeid``: the node id itself, its runnable
    parent when it was redacted (records/redacted.py), or its test file."""
    if nodeid in words or runnable_nodeid(nodeid) in words:
        return True
    path = selection_file(nodeid)
    return path is not None and path in words


__all__ = [
    "EVIDENCE_CALLS",
    "EVIDENCE_FINGERPRINT",
    "EVIDENCE_FRAME",
    "Group",
    "MAX_SELECTION_CHARS",
    "MAX_SELECTION_NODEIDS",
    "calls_of",
    "collapse_selection",
    "evidence_paths",
    "frame_of",
    "group_by_root_cause",
    "selected_by",
    "selection_file",
]
