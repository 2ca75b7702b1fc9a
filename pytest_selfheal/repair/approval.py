"""Who may say yes to a repair's diff (docs/repair.md "Approval").

A diff is never applied, nor the scope widened, without approval: given up front
(``--approve``, ``--selfheal-approve``, ``repair.approve: true``) or typed at a terminal
(stdin *and* stdout are TTYs). Otherwise the answer is no: a CI job or an agent piping the
output never gets an implicit yes. Questions go to stderr (stdout may carry JSON).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, TextIO


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
