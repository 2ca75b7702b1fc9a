"""What a patch does, read from the whole patch as ``git apply`` reads it, before anyone
approves it (edge: git; docs/repair.md "What the approval question names"). Refused before
the question: a symlink whose target leaves the repository (every later open would reach
it) and, unless ``repair.allow_binary``, a binary change (nobody can review it).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.analysis.testfiles import patch_test_files
from pytest_selfheal.errors import RefusedError, printable
from pytest_selfheal.gitrepo import GitFailed, run_git
from pytest_selfheal.loop.argcheck import inside_root

SYMLINK_MODE = "120000"


@dataclass(frozen=True)
class PatchSummary:
    files: tuple[str, ...]  # every path git would write, in patch order, each once
    notes: tuple[str, ...]  # git's summary: "create mode 100644 x", "rename a => b (90%)", ...
    binary: tuple[str, ...]  # paths whose change is binary
    symlinks: tuple[tuple[str, Optional[str]], ...]  # (link, target; None: not found in the patch)
    # The tests, conftests and fixtures it writes, deletes or moves away (a rename's source too).
    test_files: tuple[str, ...] = ()

    def text(self) -> str:
        """One line for the approval question: the files, then what is special about them."""
        parts = [f"{len(self.files)} file(s): {', '.join(self.files)}"]
        parts.extend(self.notes)
        parts.extend(f"symlink {link} -> {target if target is not None else '?'}" for link, target in self.symlinks)
        if self.binary:
            parts.append(f"binary: {', '.join(self.binary)}")
        # A file name may hold a line break, an escape sequence or a bidi override that would
        # redraw or reorder the question on a terminal: shown escaped (``\n``, ``\x1b``, ``\u202e``).
        return printable("; ".join(parts))


def _symlink_targets(patch: bytes) -> list[tuple[str, Optional[str]]]:
    """``(link, target)`` of every git section that makes a symlink; the target is its added line."""
    found: list[tuple[str, Optional[str]]] = []
    link: Optional[str] = None
    header_path = ""
    target: Optional[str] = None
    in_hunk = False

    def close() -> None:
        if link is not None:
            found.append((link, target))

    for raw in patch.split(b"\n"):
        line = raw.decode("utf-8", errors="surrogateescape")
        if line.startswith("diff --git "):
            close()
            link, target, in_hunk = None, None, False
            header_path = line.rsplit(" b/", 1)[-1] if " b/" in line else line[len("diff --git "):]
            continue
        if not in_hunk and line.rstrip() in (f"new file mode {SYMLINK_MODE}", f"new mode {SYMLINK_MODE}"):
            link = header_path
        elif not in_hunk and line.startswith("+++ ") and link is not None:
            name = line[4:].strip()
            link = name[2:] if name.startswith("b/") else link
        elif line.startswith("@@"):
            in_hunk = True
        elif in_hunk and link is not None and target is None and line.startswith("+"):
            target = line[1:]
    close()
    return found


def summarise(top: Path, patch: bytes) -> PatchSummary:
    """The :class:`PatchSummary` of ``patch`` as git reads it against the tree at ``top``;
    a patch git cannot read is a RefusedError (5), one line."""
    try:
        numstat = run_git(top, ["apply", "--numstat", "-z"], stdin=patch)
        summary = run_git(top, ["apply", "--summary"], stdin=patch).decode("utf-8", errors="replace")
    except GitFailed as exc:
        raise RefusedError(f"the patch cannot be read by git apply: {exc.first_line}") from None
    files: dict[str, None] = {}
    binary: dict[str, None] = {}
    for entry in filter(None, numstat.split(b"\0")):
        added, _, rest = entry.partition(b"\t")
        path = rest.partition(b"\t")[2].decode("utf-8", errors="replace")
        if path:
            files[path] = None
        if added == b"-":
            binary[path] = None
    notes = tuple(line.strip() for line in summary.splitlines() if line.strip())
    tests = [f for f in files if is_test_file(f)] + patch_test_files(patch.decode("utf-8", errors="replace"))
    return PatchSummary(tuple(files), notes, tuple(binary), tuple(_symlink_targets(patch)), tuple(dict.fromkeys(tests)))


def _target_inside(top: Path, link: str, target: Optional[str]) -> bool:
    if not target or "\x00" in target:
        return False
    joined = target if target.startswith("/") else posixpath.join(posixpath.dirname(link), target)
    return inside_root(joined, top)


def refusal(summary: PatchSummary, top: Path, *, allow_binary: bool) -> Optional[str]:
    """Why the patch is refused before any question, or None."""
    outside = [f"{link} -> {target}" for link, target in summary.symlinks if not _target_inside(top, link, target)]
    if outside:
        return f"the patch makes a symlink pointing outside the repository ({', '.join(outside)})"
    if summary.binary and not allow_binary:
        return (f"the patch changes binary file(s) ({', '.join(summary.binary)}), which cannot be reviewed as a "
                "diff; set ralf_lite.repair.allow_binary: true to allow it")
    return None
