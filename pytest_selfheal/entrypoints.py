"""The installed entry points of a group, read from the distributions on ``sys.path`` (edge:
reads the ``entry_points.txt`` of each ``*.dist-info`` / ``*.egg-info`` directory).

``importlib.metadata.entry_points(group=...)`` answers the same question, but importing it
loads the ``email`` and ``zipfile`` packages: on Python 3.11, with junitparser (which imports
it), 80 M of the 670 M instructions a ``selfheal loop`` parent ran (docs/benchmarks.md).
This reads what it reads, in the same order: ``sys.path`` in order, ``.dist-info`` before ``.egg-info`` in a
directory, the first distribution of a (normalised) name only. Distributions inside zip files
or served by a custom ``sys.meta_path`` finder are not seen; pytest, which loads its own
``pytest11`` plugins, still sees them.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from typing import NamedTuple

_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?(\[.*\]\s*)?$")
_METADATA_DIRS = (".dist-info", ".egg-info")


class EntryPoint(NamedTuple):
    """One ``name = module:attr`` line of a group."""

    name: str
    value: str
    group: str

    def load(self) -> object:
        """Import the module and return the object the value names (as importlib.metadata does)."""
        match = _VALUE.match(self.value)
        if match is None:
            raise ValueError(f"not an entry point value: {self.value!r}")
        module = importlib.import_module(match.group("module"))
        attrs = (match.group("attr") or "").split(".")
        return functools.reduce(getattr, filter(None, attrs), module)


def _normalised(basename: str) -> str:
    return re.sub(r"[-_.]+", "_", os.path.splitext(basename)[0].partition("-")[0]).lower()


def _metadata_dirs(entry: str) -> list[str]:
    """The distributions' metadata directories in one ``sys.path`` entry, dist-info first."""
    try:
        names = os.listdir(entry or ".")
    except OSError:  # a zip file, a missing directory
        return []
    return [os.path.join(entry or ".", name) for suffix in _METADATA_DIRS
            for name in names if name.lower().endswith(suffix)]


def _group_lines(text: str, group: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section == group and "=" in line:
            name, _, value = line.partition("=")
            pairs.append((name.strip(), value.strip()))
    return pairs


def entry_points_in(group: str) -> list[EntryPoint]:
    """The installed entry points of ``group``."""
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in sys.path:
        for directory in _metadata_dirs(entry):
            name = _normalised(os.path.basename(directory))
            if name in seen:
                continue
            seen.add(name)
            try:
                with open(os.path.join(directory, "entry_points.txt"), encoding="utf-8") as handle:
                    text = handle.read()
            except (OSError, UnicodeDecodeError):  # no entry points, or an .egg-info file
                continue
            found.extend(EntryPoint(key, value, group) for key, value in _group_lines(text, group))
    return found


__all__: list[str] = ["EntryPoint", "entry_points_in"]
