"""History segments: the append-only, mergeable form of the failure history (this machine's
in ``<reports root>/history-segments/``). Each recorded run is written once as a *segment*, a small JSON document named by the hash of
its bytes: sharing segments never conflicts or duplicates, and the database is a cache
rebuilt from them (keyed by ``run_key``, so a run seen in two segments counts once). A
*compacted* segment holds many runs and the names of those it replaces, so a clone still
holding an old one does not bring it back. The folder is writable by the tests too: every
file is read back as untrusted input, and a run shares only the segments it recorded.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.history.records import (
    COMMIT_SHA,
    OUTCOMES,
    PASSED_ON_RERUN,
    RUN_FIELDS,
    RUN_KINDS,
    RunInfo,
    TestOutcome,
    plausible_ref_name,
    plausible_repository,
)
from pytest_selfheal.store.fsio import atomic_write_bytes, confine, ensure_dir

FORMAT = "selfheal-history-segment"
FORMAT_VERSION = 1
NAME_LENGTH = 40  # hex characters of sha256 kept: collisions are not a practical concern
# Not ".json": a segment is not a record of the store, and whatever reads the reports
# root's *.json documents (records, schemas) must never take one for a record.
SEGMENT_SUFFIX = ".segment"
# Where segments sit in the shared tree: fanned out by the first two characters of the name,
# so a push rewrites one small subtree, not a directory of every segment ever written.
SEGMENTS_DIR = "segments"
COMPACTED_DIR = "compacted"
# An empty file per segment a compaction replaced: a push sees from the tree listing alone
# (no compacted segment read) that a clone's old segment must not come back.
REPLACED_DIR = "replaced"

# Bounds of a segment taken from outside: a compacted segment of a busy project is a few MB.
MAX_SEGMENT_BYTES = 16 * 1024 * 1024
MAX_RUNS = 100_000
MAX_OUTCOMES = 25_000  # the junit reader keeps 10,000 failing tests; a re-run adds their passes
MAX_TEXT = 8192  # a node id is cut at 4,096 characters (records/redacted.py)
# The bounds of the integer fields of a run; every other field is an optional bounded string.
_INT_BOUNDS = {"iteration": 100_000, "tests_run": 100_000_000}
#: How far a run may seem to be in the future (another machine's clock).
CLOCK_SKEW = dt.timedelta(minutes=10)


class SegmentError(ValueError):
    """A document that is not a readable segment; ``str()`` says why in one line."""


@dataclass(frozen=True)
class SegmentRun:
    run: RunInfo
    outcomes: tuple[TestOutcome, ...]


@dataclass(frozen=True)
class Segment:
    """A segment: its runs, and (compacted segments only) the names of the segments it replaces."""

    runs: tuple[SegmentRun, ...]
    replaces: tuple[str, ...] = ()


def encode(segment: Segment) -> bytes:
    """The segment's canonical bytes: sorted keys, no spaces, UTF-8 — equal runs, equal bytes."""
    replaces = {"replaces": sorted(set(segment.replaces))} if segment.replaces else {}
    data = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "runs": [
            {"run": asdict(item.run),
             "outcomes": [list(astuple(o)) for o in item.outcomes]}
            for item in segment.runs
        ],
        **replaces,
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def segment_name(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:NAME_LENGTH]


def is_segment_name(text: str) -> bool:
    return len(text) == NAME_LENGTH and all(c in "0123456789abcdef" for c in text)


def tree_path(name: str, *, compacted: bool) -> str:
    """Where the segment ``name`` sits in the shared tree."""
    return f"{COMPACTED_DIR}/{name}{SEGMENT_SUFFIX}" if compacted else f"{SEGMENTS_DIR}/{name[:2]}/{name}{SEGMENT_SUFFIX}"


def replaced_path(name: str) -> str:
    """Where the marker of a segment a compaction replaced sits in the shared tree."""
    return f"{REPLACED_DIR}/{name[:2]}/{name}"


def name_of_path(path: str) -> Optional[tuple[str, str]]:
    """``(name, folder)`` of a path :func:`tree_path` or :func:`replaced_path` writes; None for anything else."""
    name = path.rsplit("/", 1)[-1].removesuffix(SEGMENT_SUFFIX)
    if not is_segment_name(name):
        return None
    made = {REPLACED_DIR: replaced_path(name), COMPACTED_DIR: tree_path(name, compacted=True),
            SEGMENTS_DIR: tree_path(name, compacted=False)}
    return next(((name, folder) for folder, there in made.items() if there == path), None)


def _optional_str(value: object, what: str) -> Optional[str]:
    if value is None or (isinstance(value, str) and len(value) <= MAX_TEXT):
        return value
    raise SegmentError(f"{what}: expected a string of at most {MAX_TEXT} characters or null")


def _optional_int(value: object, what: str, bound: int) -> Optional[int]:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound):
        raise SegmentError(f"{what}: expected an integer from 0 to {bound} or null")
    return value


def recorded_time(text: str) -> dt.datetime:
    """A run's ``recorded_at`` as a time (UTC when it names no zone); ValueError when it is none."""
    when = dt.datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def _when(text: str, now: Optional[dt.datetime]) -> None:
    """``recorded_at`` must be a time, and (given ``now``) not later than the clock skew allows:
    a run "recorded" in 9999 would stay inside every window forever."""
    try:
        when = recorded_time(text)
    except ValueError:
        raise SegmentError(f"run.recorded_at: not an ISO time: {text[:40]!r}") from None
    if now is not None and when > now + CLOCK_SKEW:
        raise SegmentError(f"run.recorded_at {text[:40]!r} is in the future")


def _run(data: object, now: Optional[dt.datetime]) -> RunInfo:
    if not isinstance(data, Mapping):
        raise SegmentError("a run is not an object")
    # Checked in RUN_FIELDS order (the first bad field is the one named).
    values: dict[str, Any] = {
        name: _optional_int(data.get(name), f"run.{name}", _INT_BOUNDS[name]) if name in _INT_BOUNDS
        else _optional_str(data.get(name), f"run.{name}") for name in RUN_FIELDS}
    if not values["run_key"] or not values["recorded_at"] or not values["kind"]:
        raise SegmentError("a run without run_key, recorded_at or kind")
    run = RunInfo(**values)
    if run.kind not in RUN_KINDS:
        raise SegmentError(f"run.kind {run.kind[:40]!r} is not one of {', '.join(RUN_KINDS)}")
    _when(run.recorded_at, now)
    if run.commit is not None and not COMMIT_SHA.match(run.commit):
        raise SegmentError("run.commit: not a commit id")
    if run.branch is not None and not plausible_ref_name(run.branch):
        raise SegmentError(f"run.branch {run.branch[:40]!r} is not a branch name")
    if run.repository is not None and not plausible_repository(run.repository):
        raise SegmentError(f"run.repository {run.repository[:40]!r} is not owner/name")
    return run


def _outcome(data: object) -> TestOutcome:
    if not isinstance(data, list) or len(data) != 4:
        raise SegmentError("an outcome is not [nodeid, outcome, fingerprint, failure_class]")
    nodeid, outcome, fingerprint, failure_class = data
    if not isinstance(nodeid, str) or not nodeid or len(nodeid) > MAX_TEXT or outcome not in OUTCOMES:
        raise SegmentError(f"an outcome with a bad node id or outcome {str(outcome)[:40]!r}")
    return TestOutcome(nodeid, str(outcome), _optional_str(fingerprint, "fingerprint"),
                       _optional_str(failure_class, "failure_class"))


def decode(data: bytes, *, now: Optional[dt.datetime] = None) -> Segment:
    """The segment of ``data``, or :class:`SegmentError`; runs recorded after ``now`` (and the skew) are refused."""
    if len(data) > MAX_SEGMENT_BYTES:
        raise SegmentError(f"{len(data):,} bytes, over the bound of {MAX_SEGMENT_BYTES:,}")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SegmentError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise SegmentError("not a history segment")
    if document.get("version") != FORMAT_VERSION:
        raise SegmentError(f"segment version {document.get('version')!r}; this pytest-selfheal reads {FORMAT_VERSION}")
    runs = document.get("runs")
    replaces = document.get("replaces", [])
    if not isinstance(runs, list) or not isinstance(replaces, list):
        raise SegmentError("runs and replaces must be lists")
    if len(runs) > MAX_RUNS:
        raise SegmentError(f"{len(runs):,} runs, over the bound of {MAX_RUNS:,}")
    items = []
    for entry in runs:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("outcomes"), list):
            raise SegmentError("a run entry without outcomes")
        if len(entry["outcomes"]) > MAX_OUTCOMES:
            raise SegmentError(f"a run of {len(entry['outcomes']):,} outcomes, over the bound of {MAX_OUTCOMES:,}")
        items.append(SegmentRun(_run(entry.get("run"), now), tuple(_outcome(o) for o in entry["outcomes"])))
    if not all(isinstance(n, str) and is_segment_name(n) for n in replaces):
        raise SegmentError("replaces holds something that is not a segment name")
    return Segment(tuple(items), tuple(replaces))


def accept(name: str, data: bytes, *, now: Optional[dt.datetime] = None) -> Segment:
    """The segment called ``name`` with bytes ``data``, taken as untrusted input (a file a
    test could have written, a blob anyone who pushed could have made): named by the hash of
    its bytes, within the bounds, nothing recorded after ``now`` (default: the current time)."""
    if segment_name(data) != name:
        raise SegmentError("its name is not the hash of its bytes")
    return decode(data, now=now or dt.datetime.now(dt.timezone.utc))


def single_run(run: RunInfo, outcomes: Sequence[TestOutcome]) -> Segment:
    return Segment((SegmentRun(run, tuple(outcomes)),))


def compact(named: Iterable[tuple[str, Segment]]) -> Segment:
    """One compacted segment of ``named`` segments: every run once (by ``run_key``, the
    first kept), oldest first, replacing each name and whatever those replaced."""
    runs: dict[str, SegmentRun] = {}
    replaces: list[str] = []
    for name, segment in named:
        replaces.append(name)
        replaces.extend(segment.replaces)
        for item in segment.runs:
            runs.setdefault(item.run.run_key, item)
    ordered = sorted(runs.values(), key=lambda item: (item.run.recorded_at, item.run.run_key))
    return Segment(tuple(ordered), tuple(sorted(set(replaces))))


SEGMENTS_FOLDER = "history-segments"


def segments_dir(reports_root: Path) -> Path:
    return Path(reports_root) / SEGMENTS_FOLDER


def write_segment(reports_root: Path, segment: Segment) -> str:
    """Write ``segment`` unless a file of its name exists; its name (``SelfhealError`` when refused)."""
    data = encode(segment)
    name = segment_name(data)
    folder = segments_dir(reports_root)
    target = confine(reports_root, folder / f"{name}{SEGMENT_SUFFIX}")
    if not target.is_file():
        ensure_dir(folder)
        atomic_write_bytes(target, data)
    return name


def local_segments(reports_root: Path) -> dict[str, Path]:
    """``{name: path}`` of the segment files here (other files, temp files included, are not segments)."""
    try:
        entries = list(os.scandir(segments_dir(reports_root)))
    except OSError:
        return {}
    return {entry.name.removesuffix(SEGMENT_SUFFIX): Path(entry.path) for entry in entries
            if entry.name.endswith(SEGMENT_SUFFIX) and is_segment_name(entry.name.removesuffix(SEGMENT_SUFFIX))
            and entry.is_file(follow_symlinks=False)}


def read_segment_files(paths: Sequence[Path]) -> tuple[list[tuple[str, Segment]], list[tuple[str, str]]]:
    """``(segments with their names, refused)`` of local segment files, each read as untrusted
    input (:func:`accept`, at most :data:`MAX_SEGMENT_BYTES` + 1 bytes). ``refused``: ``(name,
    the one line why)`` of each file skipped (left in place, never deleted)."""
    segments: list[tuple[str, Segment]] = []
    refused: list[tuple[str, str]] = []
    now = dt.datetime.now(dt.timezone.utc)
    for path in paths:
        name = path.name[:-len(SEGMENT_SUFFIX)]
        try:
            with open(path, "rb") as handle:
                segments.append((name, accept(name, handle.read(MAX_SEGMENT_BYTES + 1), now=now)))
        except (OSError, SegmentError) as exc:
            why = f"cannot read ({exc.strerror})" if isinstance(exc, OSError) else exc
            refused.append((name, f"{path}: not a readable history segment ({why}); skipped"))
    return segments, refused


def ci_capture_run_id(token: str) -> str:
    """The run id under which the pytest of a ``selfheal ci`` run records a run that captured
    no incident (tests that passed on a re-run): its run token's digest, so that ci finds the
    run, and a test, which never sees the token, cannot make one that passes for it."""
    return "ci-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def this_run_segments(reports_root: Path, before: Collection[str], run_id: str,
                      incident_id: Optional[str] = None) -> list[tuple[str, Segment]]:
    """The segments one ``selfheal ci`` run recorded: written since ``before`` (the names there
    when it started), plausible, and holding only the runs of its pytest (``capture:<run id>``:
    the capture's, or :func:`ci_capture_run_id`'s without an incident) and of its loop on
    ``incident_id`` (``loop:<incident id>:<n>``). Anything else a test dropped into the folder
    meanwhile is not this run's to share."""
    capture, loop = f"capture:{run_id}", f"loop:{incident_id}:" if incident_id else None
    fresh = [path for name, path in sorted(local_segments(reports_root).items()) if name not in before]
    accepted, _ = read_segment_files(fresh)
    return [(name, segment) for name, segment in accepted
            if segment.runs and not segment.replaces  # a compacted segment is never one run's
            and all(item.run.run_key == capture or (loop is not None and item.run.run_key.startswith(loop))
                    for item in segment.runs)]


def passed_on_rerun_in(segments: Iterable[tuple[str, Segment]]) -> list[str]:
    """The tests ``segments`` record as passed on a re-run."""
    return list(dict.fromkeys(outcome.nodeid for _, segment in segments for item in segment.runs
                              for outcome in item.outcomes if outcome.outcome == PASSED_ON_RERUN))
