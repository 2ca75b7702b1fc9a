"""What a repair may touch without asking, and who may say yes when it asks (docs/repair.md
"Scope", "Approval").

The scope is the plan's ``target_paths`` plus the ``repair.allowed_paths`` globs; the failing
tests' files join only with ``repair.allow_test_edits``. Globs match the whole project-relative
POSIX path with :func:`fnmatch.fnmatchcase` (``*`` crosses ``/``; ``docs/`` means
``docs/*``), case-sensitive everywhere: one config gives one answer on Linux and macOS.

A diff is never applied, nor the scope widened, without approval: given up front
(``--approve``, ``--selfheal-approve``, ``repair.approve: true``) or typed at a terminal
(stdin *and* stdout are TTYs). Otherwise the answer is no: a CI job or an agent piping the
output never gets an implicit yes. Questions go to stderr (stdout may carry JSON).
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
    if not text:
        return ""
    norm = posixpath.normpath(text)
    return "" if norm == "." else norm


def _normalised(paths: Iterable[str]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        norm = normalise(path)
        if norm and norm not in seen:
            seen.append(norm)
    return seen


def plan_target_paths(plan: Plan) -> list[str]:
    """The union of every action's ``target_paths``, normalised, in order."""
    return _normalised(path for action in plan.actions for path in action.target_paths)


def plan_test_paths(plan: Plan) -> list[str]:
    return _normalised(path for action in plan.actions for path in action.test_paths)


def _glob_matches(path: str, pattern: str) -> bool:
    pat = pattern.replace("\\", "/").strip()
    if not pat:
        return False
    if pat.endswith("/"):
        pat += "*"  # a directory: everything below it
    if pat.startswith("./"):
        pat = pat[2:]
    return fnmatch.fnmatchcase(path, pat)


def out_of_scope(
    files: Iterable[str], target_paths: Sequence[str], globs: Sequence[str] = (), *, allow_test_edits: bool = False
) -> list[str]:
    """The files (normalised, each once) that are neither target paths nor match a glob. Unless
    ``allow_test_edits``, a test file named by the plan is out of scope too: only an explicit
    glob lets a repair that could weaken the test in without asking."""
    targets = {normalise(t) for t in target_paths}
    out: list[str] = []
    for path in files:
        norm = normalise(path)
        if not norm or norm in out:
            continue
        if any(_glob_matches(norm, g) for g in globs):
            continue
        if norm in targets and (allow_test_edits or not is_test_file(norm)):
            continue
        out.append(norm)
    return out


def allowed_paths(plan: Plan, globs: Sequence[str] = (), *, allow_test_edits: bool = False) -> tuple[list[str], list[str]]:
    """``(target_paths, globs)``: the scope of a repair, the ``test_paths`` only when ``allow_test_edits``."""
    targets = plan_target_paths(plan)
    if allow_test_edits:
        targets += [t for t in plan_test_paths(plan) if t not in targets]
    return targets, [g for g in globs if isinstance(g, str) and g.strip()]


def _stream_is_tty(stream: Any) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError, OSError):  # closed or replaced streams
        return False


def is_interactive(stdin: Any = None, stdout: Any = None) -> bool:
    """True when a human can answer: both stdin and stdout are terminals."""
    return _stream_is_tty(stdin or sys.stdin) and _stream_is_tty(stdout or sys.stdout)


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
    """Answers approval questions (``approved``: given up front; ``interactive``: a human may be
    asked through ``input_fn``)."""

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
        if self.approved:
            return "approved"
        return "interactive" if self.interactive else "none"


def approver_from(
    *,
    approve: bool = False,
    config_approve: Any = False,
    interactive: Optional[bool] = None,
    input_fn: Optional[Callable[[str], str]] = None,
    out: Optional[TextIO] = None,
) -> Approver:
    """The approver for one run: ``approve`` (the flag) or ``config_approve`` (``repair.approve``,
    only a real ``True``); ``interactive`` None detects terminals."""
    return Approver(
        approved=bool(approve) or config_approve is True,
        interactive=is_interactive() if interactive is None else bool(interactive),
        input_fn=input_fn if input_fn is not None else ask_on_stderr,
        out=out,
    )
