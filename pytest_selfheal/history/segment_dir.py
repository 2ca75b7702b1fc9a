"""The segments recorded on this machine: ``<reports root>/history-segments/`` (edge: files).

Every recorded run is also written here as one segment (``history/segments.py``), the
durable form the database is rebuilt from and ``selfheal history push`` shares. Files are
written atomically (``store/fsio.py``), inside the reports root, and never rewritten: a
segment's name is the hash of its bytes. The folder is writable by the tests too, so every
file is read back as untrusted input, and a run shares only the segments it recorded.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Optional

from pytest_selfheal.history.records import PASSED_ON_RERUN
from pytest_selfheal.history.segments import (
    MAX_SEGMENT_BYTES,
    SEGMENT_SUFFIX,
    Segment,
    SegmentError,
    accept,
    encode,
    is_segment_name,
    segment_name,
)
from pytest_selfheal.store.fsio import atomic_write_bytes, confine, ensure_dir

SEGMENTS_FOLDER = "history-segments"


def segments_dir(reports_root: Path) -> Path:
    """Where this machine's segments live."""
    return Path(reports_root) / SEGMENTS_FOLDER


def write_segment(reports_root: Path, segment: Segment) -> str:
    """Write ``segment`` (once: an existing file of that name already holds these bytes);
    its name. Raises a ``SelfhealError`` (one line) when the reports root refuses the write."""
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
    folder = segments_dir(reports_root)
    found: dict[str, Path] = {}
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        stem = entry.name[:-len(SEGMENT_SUFFIX)] if entry.name.endswith(SEGMENT_SUFFIX) else ""
        if is_segment_name(stem) and entry.is_file(follow_symlinks=False):
            found[stem] = Path(entry.path)
    return found


def read_segment_files(paths: Sequence[Path]) -> tuple[list[tuple[str, Segment]], list[tuple[str, str]]]:
    """``(segments with their names, refused)`` of local segment files, each taken as untrusted
    input (a test could have written it): at most :data:`MAX_SEGMENT_BYTES` + 1 bytes read, named
    by the hash of its bytes, plausible (``segments.accept``). ``refused``: ``(name, the one line
    why)`` of each file skipped (left in place, never deleted)."""
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


def _this_run(reports_root: Path, before: Collection[str], run_id: str,
              incident_id: Optional[str]) -> list[tuple[str, Segment]]:
    capture, loop = f"capture:{run_id}", f"loop:{incident_id}:" if incident_id else None
    fresh = [path for name, path in sorted(local_segments(reports_root).items()) if name not in before]
    accepted, _ = read_segment_files(fresh)
    return [(name, segment) for name, segment in accepted
            if segment.runs and not segment.compacted
            and all(item.run.run_key == capture or (loop is not None and item.run.run_key.startswith(loop))
                    for item in segment.runs)]


def this_run_segments(reports_root: Path, before: Collection[str], run_id: str,
                      incident_id: Optional[str] = None) -> list[str]:
    """The names of the segments one ``selfheal ci`` run recorded: written since ``before``
    (the names there when it started), plausible, and holding only the runs of its pytest
    (``capture:<run id>``: the capture's, or :func:`ci_capture_run_id`'s without an incident)
    and of its loop on ``incident_id`` (``loop:<incident id>:<n>``). Anything else a test
    dropped into the folder meanwhile is not this run's to share."""
    return [name for name, _ in _this_run(reports_root, before, run_id, incident_id)]


def passed_on_rerun_in(reports_root: Path, before: Collection[str], run_id: str) -> list[str]:
    """The tests the run ``capture:<run id>`` recorded as passed on a re-run (segments
    written since ``before`` only, as :func:`this_run_segments` reads them)."""
    return list(dict.fromkeys(outcome.nodeid for _, segment in _this_run(reports_root, before, run_id, None)
                              for item in segment.runs for outcome in item.outcomes
                              if outcome.outcome == PASSED_ON_RERUN))
