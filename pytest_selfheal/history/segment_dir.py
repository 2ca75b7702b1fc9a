"""The segments recorded on this machine: ``<reports root>/history-segments/`` (edge: files).

Every recorded run is also written here as one segment (``history/segments.py``), the
durable form the database is rebuilt from and ``selfheal history push`` shares. Files are
written atomically (``store/fsio.py``), inside the reports root, and never rewritten: a
segment's name is the hash of its bytes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from pytest_selfheal.history.segments import (
    SEGMENT_SUFFIX,
    Segment,
    SegmentError,
    decode,
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


def read_segment_file(path: Path) -> Segment:
    """The segment in ``path``; :class:`SegmentError` when it cannot be read or is not one."""
    try:
        data = path.read_bytes()  # written by this package (write_segment), never by a user
    except OSError as exc:
        raise SegmentError(f"cannot read ({exc.strerror})") from None
    return decode(data)


def read_segment_files(paths: Sequence[Path]) -> tuple[list[tuple[str, Segment]], list[str]]:
    """``(segments with their names, problems)`` of local segment files: a file that cannot
    be read is one line in problems, left in place (never deleted), and skipped."""
    segments: list[tuple[str, Segment]] = []
    problems: list[str] = []
    for path in paths:
        try:
            segments.append((path.name[:-len(SEGMENT_SUFFIX)], read_segment_file(path)))
        except SegmentError as exc:
            problems.append(f"{path}: not a readable history segment ({exc}); skipped")
    return segments, problems


__all__ = ["SEGMENTS_FOLDER", "local_segments", "read_segment_file", "read_segment_files", "segments_dir",
           "write_segment"]
