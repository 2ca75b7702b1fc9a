"""Suspects: the functions most likely to hold the bug, ranked for each root-cause group (pure).

The grouping of :mod:`pytest_selfheal.plan.groups` points at the *symptom*: the innermost
frame, or the functions a failing test names. One wrong line whose effects surface
elsewhere (a wrong eviction bound in a cache's shared ``__setitem__`` raising ``KeyError`` in
five subclasses' ``popitem``) then reads as five groups. Here every failure votes for the
functions its evidence names, each vote weighted by how directly it points
(:class:`EvidenceKind`), and a function's score is the spectrum-based fault-localisation
formula Ochiai, ``ef / sqrt(F * (ef + ep))``, over the incident's ``F`` failures (``ep`` = 0:
a capture sees no passing test's path). A function on the path of every failure therefore
outranks each symptom seen by a few: the shared callee comes first.

Each group's suspects are its members' candidates ranked by that score; groups whose top
suspect is the same function merge (one fault → one action), and the groups are ranked
by size, the largest first. A failure whose innermost frame is known votes only with its
traceback (frame and stack), never with the other functions its test calls: a test that
calls ``add`` and ``sub`` and fails inside ``sub`` says nothing against ``add``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Optional

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.plan.groups import Definition, Group
from pytest_selfheal.records.incident import CodeRef, Failure, RootCause
from pytest_selfheal.records.plan import Excerpt, PlanAction, SuspectEntry
from pytest_selfheal.records.vocab import EvidenceKind

# Suspects kept per group (plan.json, plan.md and every surface that shows them).
MAX_SUSPECTS = 5
# The most suspicious functions of the coverage spectrum kept per failing test in
# incident.json (with the functions its evidence names, whatever their rank).
MAX_SPECTRUM = 5
# With a spectrum, the share of a function's score that its evidence's votes make.
_EVIDENCE_SHARE = 0.1
# The first two suspects of a group whose scores differ by at most this are equals: the
# plan names both, with their code, and asks to check both (docs/loop.md "The plan").
NEAR_TIE = 0.02
# Failing tests of two files sharing less than this share of the functions they ran
# (Jaccard) are not taken to fail of one fault (:func:`failing_kin`).
KIN = 0.1

# A function of the spectrum: (repo-relative path, qualified name, line of its def).
FunctionKey = tuple[str, str, int]

# Reads a project file's lines (None when it cannot): the caller's I/O, so this stays pure.
Source = Callable[[str], Optional[Sequence[str]]]
# The excerpt around a top suspect's line: lines before and after it, each cut at a width.
EXCERPT_BEFORE = 2
EXCERPT_AFTER = 2
EXCERPT_LINE_CHARS = 160


# How much one failure's vote of each kind counts: the traceback is what happened, a call
# what may have happened, a class's method the weakest link.
_WEIGHT: dict[EvidenceKind, float] = {
    EvidenceKind.FRAME: 1.0,
    EvidenceKind.STACK: 1.0,
    EvidenceKind.CALLS: 0.8,
    EvidenceKind.CLASS: 0.5,
    EvidenceKind.SPECTRUM: 1.0,
}
_ORDER = {kind: i for i, kind in enumerate(EvidenceKind)}


@dataclass(frozen=True)
class Suspect:
    """One suspicious function of a group: where, how suspicious, and why."""

    path: str  # repo-relative file
    name: str  # qualified name (``Cache.__setitem__``)
    line: Optional[int]  # the line the evidence names: a frame's line, else the ``def``
    score: float  # Ochiai over the incident's failures, 0..1
    evidence: EvidenceKind  # the most direct kind of evidence that named it
    failures: int  # the group's failures whose evidence names it

    def entry(self) -> SuspectEntry:
        """The suspect in ``plan.json``'s ``suspects`` list (its score to 3 decimals)."""
        keys = ("path", "name", "line") if self.line is not None else ("path", "name")
        return SuspectEntry(path=self.path, name=self.name, score=round(self.score, 3), evidence=self.evidence.value,
                            line=self.line, failures=self.failures, keys=keys + ("score", "evidence", "failures"))

    @property
    def where(self) -> str:
        """``path:line`` (or the path alone when no line is known)."""
        return f"{self.path}:{self.line}" if self.line is not None else self.path


@dataclass(frozen=True)
class Vote:
    """One failure's evidence for one function."""

    definition: Definition
    kind: EvidenceKind
    line: Optional[int] = None
    score: Optional[float] = None  # a spectrum vote carries its Ochiai score


@dataclass(frozen=True)
class RankedGroup:
    """A root-cause group with its ranked suspects (the first is the group's cause)."""

    group: Group
    suspects: tuple[Suspect, ...] = field(default=())


@dataclass(frozen=True)
class Located:
    """What a plan action says about *where* (:func:`locate`); None or empty: not known."""

    assertion: Optional[str] = None  # the first failure's test line
    where: Optional[str] = None  # the top suspect's path:line
    suspects: tuple[SuspectEntry, ...] = ()
    excerpt: Optional[Excerpt] = None
    also_where: Optional[str] = None  # the second suspect's path:line when it ties with the top
    also_excerpt: Optional[Excerpt] = None

    def action_keys(self) -> tuple[str, ...]:
        """The action keys it fills, in the order ``plan.json`` writes them."""
        known = (("assertion", self.assertion is not None), ("where", self.where is not None),
                 ("suspects", bool(self.suspects)), ("excerpt", self.excerpt is not None),
                 ("also_where", self.also_where is not None), ("also_excerpt", self.also_excerpt is not None))
        return tuple(key for key, filled in known if filled)


def _ref(ref: Optional[CodeRef]) -> Optional[tuple[Definition, Optional[int]]]:
    if ref is None or not ref.path or not ref.name or is_test_file(ref.path):
        return None
    return (ref.path, ref.name), ref.line


def _names_line(ref: CodeRef) -> bool:
    """The reference has a ``line`` key: a called function (a called class has none)."""
    return ref.line is not None or (ref.keys is not None and "line" in ref.keys)


def votes_of(failure: Failure, methods: Mapping[Definition, list[Definition]]) -> list[Vote]:
    """The functions ``failure``'s evidence names, each once with its most direct kind.

    ``methods`` maps a class to the functions of it that some failure's traceback names
    (a test that only uses ``LRUCache`` votes weakly for ``Cache.__setitem__`` seen failing).
    """
    evidence = failure.root_cause
    if evidence is None:
        return []
    found: dict[Definition, Vote] = {}

    def add(definition: Definition, kind: EvidenceKind, line: Optional[int]) -> None:
        known = found.get(definition)
        if known is None or _ORDER[kind] < _ORDER[known.kind]:
            found[definition] = Vote(definition, kind, line, known.score if known is not None else None)

    for item in evidence.spectrum:
        ref, score = _ref(item), item.score
        if ref is not None and score is not None:
            found[ref[0]] = Vote(ref[0], EvidenceKind.SPECTRUM, ref[1], float(score))

    frame = _ref(evidence.frame)
    if frame is not None:
        add(frame[0], EvidenceKind.FRAME, frame[1])
        for item in evidence.stack:
            ref = _ref(item)
            if ref is not None:
                add(ref[0], EvidenceKind.STACK, ref[1])
        return list(found.values())
    # A class is never a suspect itself: it stands for its methods, those the test names
    # (its ``__init__`` when the test builds one) and those some failure's traceback names.
    for item in evidence.calls:
        ref = _ref(item)
        if ref is None:
            continue
        if _names_line(item):
            add(ref[0], EvidenceKind.CALLS, ref[1])
            continue
        classes = [ref[0]] + [_definition(b) for b in item.bases if "::" in b]
        for method in (m for cls in classes for m in methods.get(cls, [])):
            add(method, EvidenceKind.CLASS, None)
    return list(found.values())


def _definition(text: str) -> Definition:
    """``path::name`` (a base class as ``CodeRef.bases`` names it) as a definition."""
    path, name = text.split("::", 1)
    return path, name


def _traceback_methods(failures: Iterable[Failure]) -> dict[Definition, list[Definition]]:
    """Class → the methods of it that some failure's traceback (frame or stack) names."""
    out: dict[Definition, list[Definition]] = {}
    for failure in failures:
        evidence = failure.root_cause
        if evidence is None:
            continue
        for item in [evidence.frame, *evidence.stack]:
            ref = _ref(item)
            if ref is None or "." not in ref[0][1]:
                continue
            path, name = ref[0]
            owner = (path, name.rsplit(".", 1)[0])
            if ref[0] not in out.setdefault(owner, []):
                out[owner].append(ref[0])
    return out


def ochiai(failed: float, total_failed: int, passed: float = 0.0) -> float:
    """Ochiai's suspiciousness: ``ef / sqrt(F * (ef + ep))``, 0 when nothing failed there."""
    if failed <= 0 or total_failed <= 0:
        return 0.0
    return failed / math.sqrt(total_failed * (failed + passed))


def failing_kin(covered: Mapping[str, AbstractSet[FunctionKey]], failing: Iterable[str]) -> list[list[str]]:
    """The failing tests in kin, taken to fail of one fault: tests of one file, or of two that
    share at least :data:`KIN` of the functions either ran; and kin of kin (single linkage)."""
    # Tests that ran the same functions (a parametrised test's cases) are compared once.
    profiles: dict[frozenset[FunctionKey], list[str]] = {}
    for nodeid in failing:
        profiles.setdefault(frozenset(covered[nodeid]), []).append(nodeid)
    kin: list[tuple[set[str], list[frozenset[FunctionKey]], list[str]]] = []  # files, profiles, node ids
    for ran, nodeids in profiles.items():
        files = {n.split("::", 1)[0] for n in nodeids}
        near = [k for k in kin if k[0] & files or any(len(ran & o) >= KIN * len(ran | o) for o in k[1])]
        kin = [k for k in kin if all(k is not n for n in near)]
        kin.append((files.union(*(k[0] for k in near)), [ran, *(o for k in near for o in k[1])],
                    [*(n for k in near for n in k[2]), *nodeids]))
    return [k[2] for k in kin]


def spectrum_scores(
    covered: Mapping[str, AbstractSet[FunctionKey]], failed: AbstractSet[str], passed: AbstractSet[str]
) -> dict[FunctionKey, float]:
    """Ochiai of every function the failing tests ran: ``ef`` failing and ``ep`` passing tests
    ran it, out of ``F`` failing tests (tests neither failed nor passed do not count). ``ef``
    counts one kin of failing tests (:func:`failing_kin`), the function's best: a test failing
    for another reason (one that failed before the change) lends nothing to the functions it
    shares with the others, a helper every test calls."""
    ep: dict[FunctionKey, int] = {}
    for key in (k for nodeid, keys in covered.items() if nodeid in passed for k in keys):
        ep[key] = ep.get(key, 0) + 1
    failing = [n for n in covered if n in failed]
    ef: dict[FunctionKey, int] = {}
    for kin in failing_kin(covered, failing):
        counts: dict[FunctionKey, int] = {}
        for nodeid in kin:
            for key in covered[nodeid]:
                counts[key] = counts.get(key, 0) + 1
        for key, count in counts.items():
            ef[key] = max(ef.get(key, 0), count)
    return {key: ochiai(count, len(failing), ep.get(key, 0)) for key, count in ef.items()}


_SPECTRUM_KEYS = ("path", "name", "line", "score")


@dataclass(frozen=True)
class Spectrum:
    """A run's coverage spectrum as the plan reads it: per failing test its
    :data:`MAX_SPECTRUM` most suspicious functions, and the score of every function a
    failing test ran (:meth:`for_failure` adds those its evidence names)."""

    top: Mapping[str, tuple[CodeRef, ...]]  # node id → its most suspicious functions, best first
    scores: Mapping[FunctionKey, float]  # every function a failing test ran → its Ochiai score

    @cached_property
    def _by_definition(self) -> dict[Definition, FunctionKey]:
        # A function redefined under one name (a conditional def): its most suspicious one.
        out: dict[Definition, FunctionKey] = {}
        for key, score in self.scores.items():
            known = out.get(key[:2])
            if known is None or score > self.scores[known]:
                out[key[:2]] = key
        return out

    def for_failure(self, nodeid: Optional[str], root_cause: Optional[RootCause]) -> tuple[CodeRef, ...]:
        """The ``spectrum`` list of ``nodeid``'s ``root_cause``: its most suspicious functions
        and every one its evidence votes for (:func:`named_by`) that a failing test ran, most
        suspicious first."""
        found = {(r.path, r.name): r for r in self.top.get(nodeid or "", ())}
        for definition in named_by(root_cause):
            key = self._by_definition.get(definition)
            if key is not None and definition not in found:
                found[definition] = _spectrum_ref(key, self.scores[key])
        return tuple(sorted(found.values(), key=lambda r: -(r.score or 0.0)))  # stable: ties keep their order

    def root_cause(self, nodeid: Optional[str], root_cause: Optional[RootCause]) -> Optional[RootCause]:
        """``root_cause`` with its test's ``spectrum`` (:meth:`for_failure`), or as it is when
        the spectrum ranked no such failing test."""
        if nodeid is None or nodeid not in self.top:
            return root_cause
        return replace(root_cause or RootCause(), spectrum=self.for_failure(nodeid, root_cause))


def named_by(root_cause: Optional[RootCause]) -> list[Definition]:
    """The definitions ``root_cause`` votes with by name: its traceback's (frame and stack)
    when it has a frame in the project, else those it calls."""
    if root_cause is None:
        return []
    frame = _ref(root_cause.frame)
    refs = [root_cause.frame, *root_cause.stack] if frame is not None else list(root_cause.calls)
    return [found[0] for found in map(_ref, refs) if found is not None]


def _spectrum_ref(key: FunctionKey, score: float) -> CodeRef:
    path, name, line = key
    return CodeRef(path, name, line, score=round(score, 3), keys=_SPECTRUM_KEYS)


def spectrum_evidence(
    covered: Mapping[str, AbstractSet[FunctionKey]], failed: AbstractSet[str], passed: AbstractSet[str]
) -> Spectrum:
    """The run's :class:`Spectrum`: Ochiai of every function the failing tests ran, and per
    failing test the :data:`MAX_SPECTRUM` most suspicious functions it ran."""
    scores = spectrum_scores(covered, failed, passed)
    top: dict[str, tuple[CodeRef, ...]] = {}
    for nodeid in sorted(failed):
        keys = sorted(covered.get(nodeid, ()), key=lambda k: (-scores.get(k, 0.0), k))[:MAX_SPECTRUM]
        if keys:
            top[nodeid] = tuple(_spectrum_ref(k, scores.get(k, 0.0)) for k in keys)
    return Spectrum(top, scores)


# The functions each passing test ran, kept per incident (``error_runs/<id>/``) from a capture
# with ``--selfheal-spectrum`` or the loop's localisation run: the regression check reads them.
PASSING_SPECTRUM_FILE = "spectrum.json"


def passing_spectrum(covered: Mapping[str, AbstractSet[FunctionKey]], passed: Iterable[str]) -> dict[str, object]:
    """The :data:`PASSING_SPECTRUM_FILE` of the tests in ``passed``: ``{"tests": {node id: [[path, name, line], …]}}``."""
    return {"tests": {n: sorted([*k] for k in covered[n]) for n in sorted(passed) if covered.get(n)}}


def read_passing_spectrum(doc: Any) -> dict[str, frozenset[FunctionKey]]:
    """What :func:`passing_spectrum` wrote, parsed; empty when it is not that (it only ever adds tests)."""
    try:
        tests = doc["tests"]
        return {str(n): frozenset((str(p), str(name), int(line)) for p, name, line in keys) for n, keys in tests.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def rank_groups(groups: Sequence[Group]) -> list[RankedGroup]:
    """``groups`` with their suspects, merged where their top suspect is the same function,
    the largest first (ties: the order of ``groups``)."""
    members = [m for g in groups for m in g.members]
    methods = _traceback_methods(members)
    votes = [votes_of(m, methods) for m in members]
    weight: dict[Definition, float] = {}  # the evidence's votes (traceback, calls)
    measured: dict[Definition, float] = {}  # the spectrum's score, which knows the passing tests
    for failure_votes in votes:
        for vote in failure_votes:
            weight.setdefault(vote.definition, 0.0)
            if vote.kind is not EvidenceKind.SPECTRUM:
                weight[vote.definition] += _WEIGHT[vote.kind]
            if vote.score is not None:
                measured[vote.definition] = max(measured.get(vote.definition, 0.0), vote.score)
    evidence = {d: ochiai(w, len(members)) for d, w in weight.items()}
    if measured and len(members) == 1:
        # One failing test: Ochiai can then only prefer what fewer passing tests ran (a
        # wrapper no other test calls over the helper that raised), so the function that
        # raised counts as the spectrum's best and leads.
        raised = next((v.definition for v in votes[0] if v.kind is EvidenceKind.FRAME), None)
        if raised in measured:  # not one the spectrum left out, which only re-raised the error
            measured[raised] = max(measured.values())
    # With a spectrum, it decides and the evidence makes a tenth of the score: enough to
    # tip close calls, and to lead where the spectrum cannot tell the functions apart (one
    # failing test and every function it ran run by many passing tests). The spectrum
    # scores every function the evidence names that a failing test ran; one it does not
    # score no failing test ran.
    scores = evidence
    if measured:
        scores = {d: (1 - _EVIDENCE_SHARE) * measured.get(d, 0.0) + _EVIDENCE_SHARE * evidence.get(d, 0.0)
                  for d in weight}
    by_id = {id(m): v for m, v in zip(members, votes)}
    merged: dict[Hashable, list[Group]] = {}
    for group in groups:
        ranked = _suspects(group, by_id, scores, evidence)
        key: Hashable = (ranked[0].path, ranked[0].name) if ranked else id(group)
        merged.setdefault(key, []).append(group)
    out: list[RankedGroup] = []
    for parts in merged.values():
        group = parts[0]
        if len(parts) > 1:
            group = Group(group.evidence, group.path, group.name, tuple(m for p in parts for m in p.members))
        ranked = _suspects(group, by_id, scores, evidence)
        if ranked:
            top = ranked[0]
            group = Group(top.evidence, top.path, top.name, group.members)
        out.append(RankedGroup(group, tuple(ranked)))
    order = {id(r): i for i, r in enumerate(out)}
    return sorted(out, key=lambda r: (-len(r.group.members), order[id(r)]))


def _suspects(group: Group, votes: Mapping[int, list[Vote]], scores: Mapping[Definition, float],
              evidence: Mapping[Definition, float]) -> list[Suspect]:
    counts: dict[Definition, int] = {}
    best: dict[Definition, Vote] = {}
    lines: dict[Definition, dict[int, int]] = {}
    for member in group.members:
        for vote in votes.get(id(member), []):
            d = vote.definition
            counts[d] = counts.get(d, 0) + 1
            if d not in best or _ORDER[vote.kind] < _ORDER[best[d].kind]:
                best[d] = vote
            if vote.line is not None:
                lines.setdefault(d, {})[vote.line] = lines.setdefault(d, {}).get(vote.line, 0) + 1
    first_seen = {d: i for i, d in enumerate(counts)}
    ranked = sorted(counts, key=lambda d: (-round(scores.get(d, 0.0), 3), -evidence.get(d, 0.0), -counts[d],
                                           _ORDER[best[d].kind], first_seen[d]))
    out: list[Suspect] = []
    for d in ranked[:MAX_SUSPECTS]:
        seen = lines.get(d)
        line = max(seen, key=lambda n: seen[n]) if seen else None  # the line most failures name
        out.append(Suspect(d[0], d[1], line, scores.get(d, 0.0), best[d].kind, counts[d]))
    return out


def excerpt(path: str, lines: Sequence[str], line: int) -> Optional[Excerpt]:
    """The lines of ``path`` around ``line`` (1-based), None when the file has no such line
    (it changed since the run)."""
    if line < 1 or line > len(lines):
        return None
    start = max(1, line - EXCERPT_BEFORE)
    shown = [str(text).rstrip("\r\n") for text in lines[start - 1: line + EXCERPT_AFTER]]
    cut = tuple(t if len(t) <= EXCERPT_LINE_CHARS else t[: EXCERPT_LINE_CHARS - 1] + "…" for t in shown)
    return Excerpt(path, start, line, cut)


def test_line_of(members: Sequence[Failure]) -> Optional[str]:
    """``path:line`` of the first failure's last test-file line (its assertion), or None."""
    for member in members:
        where = member.root_cause.test_line if member.root_cause is not None else None
        if where is not None:
            return f"{where.path}:{where.line}" if where.line is not None else where.path
    return None


def locate(ranked: RankedGroup, source: Optional[Source]) -> Located:
    """What the plan action says about *where*: its ``suspects``, ``assertion`` (the first
    failure's test line), ``where`` (the top suspect's ``path:line``) and ``excerpt`` (a few
    lines of code around it, when ``source`` can read the file)."""
    assertion = test_line_of(ranked.group.members)
    if not ranked.suspects:
        return Located(assertion)

    def code(suspect: Suspect) -> Optional[Excerpt]:
        lines = source(suspect.path) if source is not None and suspect.line is not None else None
        return excerpt(suspect.path, lines, suspect.line) if lines is not None and suspect.line is not None else None

    top = ranked.suspects[0]
    entries = tuple(s.entry() for s in ranked.suspects)
    if not near_tie(entries):
        return Located(assertion, top.where, entries, code(top))
    second = ranked.suspects[1]
    return Located(assertion, top.where, entries, code(top), second.where, code(second))


def near_tie(suspects: Sequence[SuspectEntry]) -> bool:
    """The first two suspects score within :data:`NEAR_TIE` of each other: neither is the verdict."""
    return len(suspects) > 1 and suspects[0].score - suspects[1].score <= NEAR_TIE + 1e-9


def where_lines(action: PlanAction) -> list[str]:
    """One line each for the top suspect (and its equal, :func:`near_tie`), the assertion and
    the other suspects of ``action`` (none when the plan predates suspects): what plan.md and
    the repair prompt say about *where*."""
    out: list[str] = []
    equals = 2 if action.also_where is not None and len(action.suspects) > 1 else 1
    if action.suspects:
        said = [f"{s.where} in {s.name} ({s.evidence}, {s.failures} failure(s), score {s.score:.2f})"
                for s in action.suspects[:equals]]
        out.append(f"Where: {said[0]}" if equals == 1 else
                   f"Where, two equal suspects (scores within {NEAR_TIE}): {said[0]}; {said[1]}. "
                   "Check both before choosing where to fix")
    if action.assertion:
        out.append(f"Assertion: {action.assertion}")
    if len(action.suspects) > equals:
        out.append("Other suspects: " + "; ".join(f"{s.name} ({s.where}, {s.score:.2f})"
                                                  for s in action.suspects[equals:]))
    return out
