"""The GitHub Actions environment: step summary, step outputs, annotations, an event's pull
request (edge; docs/github.md). A missing variable means "not in Actions", never an error."""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import IO, Any, Optional

from pytest_selfheal.history.sources import PULL_REQUEST_EVENTS, dig

STEP_SUMMARY_LIMIT = 1024 * 1024

# Output names GitHub accepts in practice; anything else could break the file's format.
_OUTPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def warning(message: str, *, stream: Optional[IO[str]] = None) -> None:
    """Print a ``::warning::`` workflow command, escaped as actions/toolkit does (% CR LF): a
    multi-line message (or one holding "::") cannot inject further commands."""
    out = stream if stream is not None else sys.stdout
    out.write("::warning::" + message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A") + "\n")
    out.flush()


def closed_fence(kept: str) -> str:
    """``kept`` with the code fence it leaves open closed: a note after it must not render as code."""
    if sum(1 for line in kept.split("\n") if line.lstrip().startswith("```")) % 2:
        kept += ("" if kept.endswith("\n") else "\n") + "```\n"
    return kept


def fit_step_summary(markdown: str, existing_size: int = 0, *, full_report: Optional[str] = None) -> Optional[str]:
    """``markdown`` cut at a line boundary, with a note, to fit after ``existing_size`` bytes; None: nothing fits."""
    if not markdown.endswith("\n"):
        markdown += "\n"
    size, available = len(markdown.encode("utf-8")), STEP_SUMMARY_LIMIT - max(existing_size, 0)
    if size <= available:
        return markdown
    note = (f"\n> Report truncated: {size - available:,} bytes over GitHub's 1 MiB step summary limit. "
            f"Full report: {full_report or 'the selfheal report artifact'}\n")
    budget = available - len(note.encode("utf-8")) - len("```\n")
    if budget <= 0:
        return None
    # At a line boundary, or at a UTF-8 character boundary when one line alone is too long.
    kept = markdown.encode("utf-8")[:budget].decode("utf-8", errors="ignore")
    return closed_fence(kept[:kept.rfind("\n") + 1] or kept) + note


def write_step_summary(markdown: str, env: Mapping[str, str], *, full_report: Optional[str] = None) -> bool:
    """Append ``markdown`` to the job summary within GitHub's 1 MiB per-step limit; whether it was written."""
    target = env.get("GITHUB_STEP_SUMMARY")
    if not target:
        return False
    try:
        existing = os.path.getsize(target)
    except OSError:
        existing = 0
    text = fit_step_summary(markdown, existing, full_report=full_report)
    if text is None:
        warning("The job summary is full (GitHub's 1 MiB step limit): the report was not added to it.")
        return False
    return _append(target, text, "the job summary")


def _append(target: str, text: str, what: str) -> bool:
    try:
        # newline="": the bytes on disk are what was measured, and a value's "\n" stays "\n".
        with open(target, "a", encoding="utf-8", newline="") as handle:
            handle.write(text)
    except OSError as exc:
        warning(f"Could not write {what}: {exc.strerror or exc.__class__.__name__}")
        return False
    return True


def format_outputs(outputs: Mapping[str, str], *, delimiter_factory: Optional[Callable[[], str]] = None) -> str:
    """The ``$GITHUB_OUTPUT`` text for ``outputs`` in heredoc form, with a random delimiter checked
    against the value: multi-line values and ones that try to inject (``\\nname=evil``) are safe."""
    make: Callable[[], str] = delimiter_factory or (lambda: f"ghadelimiter_{uuid.uuid4()}")
    parts: list[str] = []
    for name, value in outputs.items():
        if not isinstance(name, str) or not _OUTPUT_NAME.match(name):
            raise ValueError(f"invalid output name {name!r}")
        text = "" if value is None else str(value)
        delimiter = make()
        while delimiter in text:  # astronomically unlikely with a uuid4, but free to check
            delimiter = make()
        parts.append(f"{name}<<{delimiter}\n{text}\n{delimiter}\n")
    return "".join(parts)


def write_outputs(outputs: Mapping[str, str], env: Mapping[str, str]) -> bool:
    """Append step outputs to ``$GITHUB_OUTPUT``; whether they were written."""
    target = env.get("GITHUB_OUTPUT")
    return bool(target) and _append(str(target), format_outputs(outputs), "the step outputs")


def _as_number(value: Any) -> Optional[int]:
    # bool is an int subclass; a PR number is a positive int (a string digit is tolerated).
    number = value if isinstance(value, int) and not isinstance(value, bool) else (
        int(value) if isinstance(value, str) and value.isdigit() else 0)
    return number if number > 0 else None


def pull_request_number(event_name: Optional[str], event: Mapping[str, Any]) -> Optional[int]:
    """The number of the pull request the event is about, or None (a fork's, under ``workflow_run``)."""
    if event_name in PULL_REQUEST_EVENTS:
        number = _as_number(dig(event, "pull_request", "number"))
        return number if number is not None else _as_number(dig(event, "number"))
    if event_name == "workflow_run":
        prs = dig(event, "workflow_run", "pull_requests")
        return _as_number(dig(prs[0], "number")) if isinstance(prs, list) and prs else None
    return _as_number(dig(event, "issue", "number")) if event_name == "issue_comment" and dig(
        event, "issue", "pull_request") else None
