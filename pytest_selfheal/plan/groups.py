"""Failures grouped by root cause, not by message (pure; docs/loop.md "The plan"): by frame,
else by called definition, else by failure type and normalised message."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, replace
from typing import Optional

from pytest_selfheal.analysis.frames import is_test_file, repo_relative
from pytest_selfheal.records.incident import CodeRef, Failure
from pytest_selfheal.records.plan import GroupKey
from pytest_selfheal.records.redacted import runnable_nodeid
from pytest_selfheal.records.vocab import EvidenceKind

Definition = tuple[str, str]  # (repo-relative path, qualified name)


@dataclass(frozen=True)
class Group:
    evidence: EvidenceKind  # frame, calls or fingerprint (or the top suspect's kind once ranked)
    path: Optional[str]  # the defining file (None for a fingerprint group)
    name: Optional[str]  # the function or class (None for a fingerprint group)
    members: tuple[Failure, ...] = ()

    def key(self) -> GroupKey:
        """The action's ``root_cause`` in ``plan.json``."""
        return GroupKey(self.evidence, self.path, self.name)


def _ref(ref: Optional[CodeRef]) -> Optional[Definition]:
    if ref is None or not ref.path or is_test_file(ref.path):
        return None
    return ref.path, ref.name


def frame_of(failure: Failure) -> Optional[Definition]:
    return _ref(failure.root_cause.frame) if failure.root_cause is not None else None


def calls_of(failure: Failure) -> list[Definition]:
    out: list[Definition] = []
    for item in failure.root_cause.calls if failure.root_cause is not None else ():
        ref = _ref(item)
        if ref is not None and ref not in out:
            out.append(ref)
    return out


def _explains(frame: Definition, call: Definition) -> bool:
    """A called definition is the frame's function, or the class the frame's method belongs to."""
    return frame[0] == call[0] and bool(call[1]) and (frame[1] == call[1] or frame[1].startswith(call[1] + "."))


def group_by_root_cause(
    failures: Sequence[Failure], fingerprint_key: Callable[[Failure], Hashable]
) -> list[Group]:
    """The failures in root-cause groups, in order of first failure; ``fingerprint_key`` for the rest."""
    frames = [frame_of(f) for f in failures]
    calls = [calls_of(f) for f in failures]
    sizes = Counter(frame for frame in frames if frame is not None)
    # How many failing tests (without a frame) call each definition: the most shared is the suspect.
    shared = Counter(call for frame, called in zip(frames, calls) if frame is None for call in called)
    groups: dict[tuple[Group, Hashable], list[Failure]] = {}
    for failure, frame, called in zip(failures, frames, calls):
        # The same function failed with an exception elsewhere: the largest such group.
        explained = [f for f in sizes if any(_explains(f, c) for c in called)] if frame is None else []
        if frame is not None or explained:
            head = Group(EvidenceKind.FRAME, *(frame or max(explained, key=sizes.__getitem__)))
        elif called:
            head = Group(EvidenceKind.CALLS, *max(called, key=lambda c: (shared[c], -called.index(c))))
        else:
            head = Group(EvidenceKind.FINGERPRINT, None, None)
        groups.setdefault((head, fingerprint_key(failure) if head.path is None else None), []).append(failure)
    return [replace(head, members=tuple(members)) for (head, _), members in groups.items()]


def selection_file(selection: str) -> Optional[str]:
    """The repo-relative file part of a pytest node id, or None (junit identities have none)."""
    path = selection.split("::", 1)[0].replace("\\", "/")
    # "tests/test_x.py::t" has a file; "tests.test_x::t" (a junit classname) does not.
    if not (path.endswith(".py") or ("/" in path and "." in path.rsplit("/", 1)[1])):
        return None
    return repo_relative(path, ".")


def evidence_paths(group: Group) -> list[str]:
    """The source files the group's evidence points at, its own definition first (never a test file)."""
    paths: list[str] = [group.path] if group.path else []
    for member in group.members:
        for ref in [frame_of(member), *calls_of(member)]:
            if ref is not None and ref[0] not in paths:
                paths.append(ref[0])
    return paths


def selected_by(nodeid: str, words: Collection[str]) -> bool:
    """True when ``words`` select ``nodeid``: itself, its runnable parent, or its test file."""
    if nodeid in words or runnable_nodeid(nodeid) in words:
        return True
    path = selection_file(nodeid)
    return path is not None and path in words
