"""What a repair may touch without asking, and who may say yes when it asks (docs/repair.md).

Globs match the whole project-relative POSIX path (``*`` crosses ``/``), case-sensitive
everywhere: one config gives one answer on Linux and macOS. Approval is given up front or
typed at a terminal (stdin and stdout TTYs): a CI job or an agent piping the output never
gets an implicit yes. Questions go to stderr (stdout may carry JSON).
"""

from __future__ import annotations

import fnmatch
import posixpath
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, TextIO

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.records.plan import Plan


def normalise(path: str) -> str:
    """A path as the scope compares it: POSIX, no ``./``, no trailing slash; ``..`` kept, so a
    path escaping the project matches no target path."""
    text = path.replace("\\", "/").strip()
    norm = posixpath.normpath(text) if text else ""
    return "" if norm == "." else norm


def plan_target_paths(plan: Plan, field: str = "target_paths") -> list[str]:
    """The union of every action's ``target_paths`` (or ``test_paths``), normalised, in order."""
    return list(dict.fromkeys(n for action in plan.actions for p in getattr(action, field) if (n := normalise(p))))


def out_of_scope(
    files: Iterable[str], target_paths: Sequence[str], globs: Sequence[str] = (), *, allow_test_edits: bool = False
) -> list[str]:
    """The files (normalised, each once) that are neither target paths nor match a glob; a test
    file named by the plan too unless ``allow_test_edits`` (only an explicit glob lets it in)."""
    targets = {normalise(t) for t in target_paths}
    stripped = [g.replace("\\", "/").strip() for g in globs]
    # A glob ending in "/" is a directory: everything below it.
    patterns = [(g + "*" if g.endswith("/") else g).removeprefix("./") for g in stripped if g]
    out: list[str] = []
    for path in files:
        norm = normalise(path)
        if not norm or norm in out:
            continue
        if any(fnmatch.fnmatchcase(norm, pattern) for pattern in patterns):
            continue
        if norm in targets and (allow_test_edits or not is_test_file(norm)):
            continue
        out.append(norm)
    return out


def allowed_paths(plan: Plan, globs: Sequence[str] = (), *, allow_test_edits: bool = False) -> tuple[list[str], list[str]]:
    """``(target_paths, globs)``: the scope of a repair, the ``test_paths`` only when ``allow_test_edits``."""
    targets = plan_target_paths(plan)
    if allow_test_edits:
        targets += [t for t in plan_target_paths(plan, "test_paths") if t not in targets]
    return targets, [g for g in globs if isinstance(g, str) and g.strip()]


def is_interactive(stdin: Any = None, stdout: Any = None) -> bool:
    """Whether a human can answer: stdin and stdout are terminals."""
    try:
        return all(stream is not None and stream.isatty() for stream in (stdin or sys.stdin, stdout or sys.stdout))
    except (AttributeError, ValueError, OSError):  # closed or replaced streams
        return False


def ask_on_stderr(question: str) -> str:
    """Ask on stderr, read one line from stdin (EOF → ``EOFError``)."""
    sys.stderr.write(question)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    return line.rstrip("\r\n")


@dataclass
class Approver:
    """Answers approval questions: ``approved`` up front, or asks through ``input_fn`` when ``interactive``."""

    approved: bool = False
    interactive: bool = False
    input_fn: Callable[[str], str] = ask_on_stderr
    out: Optional[TextIO] = None  # where details are shown before a question (default stderr)

    def confirm(self, question: str, *, details: str = "") -> bool:
        """Yes when approved up front, or a human typed y/yes; no otherwise (also on EOF)."""
        if self.approved or not self.interactive:
            return self.approved
        stream = self.out if self.out is not None else sys.stderr
        if details:
            stream.write(details.rstrip("\n") + "\n")
            stream.flush()
        try:
            answer = self.input_fn(f"{question} [y/N] ")
        except (EOFError, OSError):
            answer = ""
        return answer.strip().lower() in ("y", "yes")

    @property
    def how(self) -> str:
        return "approved" if self.approved else "interactive" if self.interactive else "none"


def approver_from(
    *,
    approve: bool = False,
    config_approve: Any = False,
    interactive: Optional[bool] = None,
    input_fn: Optional[Callable[[str], str]] = None,
) -> Approver:
    """The approver for one run: ``approve`` (the flag) or ``config_approve`` (``repair.approve``,
    only a real ``True``); ``interactive`` None detects terminals."""
    return Approver(approved=bool(approve) or config_approve is True,
                    interactive=is_interactive() if interactive is None else bool(interactive),
                    input_fn=input_fn if input_fn is not None else ask_on_stderr)
