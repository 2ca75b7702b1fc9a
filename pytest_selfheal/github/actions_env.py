"""The GitHub Actions environment: step summary, step outputs, event payload, annotations.

An edge module (files and stdout). Everything here is a no-op outside Actions: the file
paths come from ``GITHUB_STEP_SUMMARY`` / ``GITHUB_OUTPUT`` / ``GITHUB_EVENT_PATH`` and a
missing variable means "not in Actions", never an error. docs/github.md describes the
variables read.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Optional

from pytest_selfheal.history.event import PULL_REQUEST_EVENTS
from pytest_selfheal.history.sources import read_actions_event

#: GitHub's size limit for the step summary of one step (bytes, after appending).
STEP_SUMMARY_LIMIT = 1024 * 1024

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_SERVER_URL = "https://github.com"

# Output names GitHub accepts in practice; anything else could break the file's format.
_OUTPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


# --- workflow commands ------------------------------------------------------------------------


def escape_data(message: str) -> str:
    """Escape a workflow command's message like actions/toolkit does (% CR LF)."""
    return message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _command(name: str, message: str, stream: Optional[IO[str]]) -> None:
    out = stream if stream is not None else sys.stdout
    # Workflow commands are read from stdout, one per line: the escaping keeps a multi-line
    # message (or one containing "::") from injecting further commands.
    out.write(f"::{name}::{escape_data(message)}\n")
    out.flush()


def warning(message: str, *, stream: Optional[IO[str]] = None) -> None:
    """Print a ``::warning::`` workflow command (a yellow annotation on the run)."""
    _command("warning", message, stream)


# --- step summary -----------------------------------------------------------------------------


def _truncate_note(over: int, full_report: Optional[str]) -> str:
    where = full_report or "the selfheal report artifact"
    return (
        f"\n> Report truncated: {over:,} bytes over GitHub's 1 MiB step summary limit. "
        f"Full report: {where}\n"
    )


def _cut_at_line(data: bytes, budget: int) -> bytes:
    """The longest prefix of ``data`` within ``budget`` bytes ending at a line boundary
    (or at a character boundary when one line alone is too long)."""
    if budget <= 0:
        return b""
    head = data[:budget]
    newline = head.rfind(b"\n")
    if newline >= 0:
        return head[: newline + 1]
    # No line fits whole: cut at a UTF-8 character boundary ("\n" is never inside one).
    return head.decode("utf-8", errors="ignore").encode("utf-8")


def _open_fence(text: bytes) -> bool:
    """Whether ``text`` ends inside a ``` code fence (the note would render as code)."""
    fences = sum(1 for line in text.split(b"\n") if line.lstrip().startswith(b"```"))
    return fences % 2 == 1


def fit_step_summary(markdown: str, existing_size: int = 0, *, full_report: Optional[str] = None) -> Optional[str]:
    """``markdown`` cut to fit the step summary after ``existing_size`` bytes already there.

    Returns the text to append (possibly truncated at a line boundary, with a note saying by
    how much and where the full report is), or None when not even the note fits. Pure.
    """
    if not markdown.endswith("\n"):
        markdown += "\n"
    data = markdown.encode("utf-8")
    available = STEP_SUMMARY_LIMIT - max(existing_size, 0)
    if len(data) <= available:
        return markdown
    over = len(data) - available
    note = _truncate_note(over, full_report).encode("utf-8")
    closer = b"```\n"
    budget = available - len(note) - len(closer)
    if budget <= 0:
        return None
    kept = _cut_at_line(data, budget)
    if _open_fence(kept):
        if not kept.endswith(b"\n"):
            kept += b"\n"
        kept += closer
    return (kept + note).decode("utf-8")


def write_step_summary(
    markdown: str,
    *,
    path: Optional[str] = None,
    full_report: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
) -> bool:
    """Append ``markdown`` to the job summary, within GitHub's 1 MiB per-step limit.

    ``path`` defaults to ``$GITHUB_STEP_SUMMARY``; the size already in the file counts
    towards the limit. When it does not fit, the text is cut at a line boundary and ends
    with ``> Report truncated: N bytes over GitHub's 1 MiB step summary limit. Full report:
    <full_report>``. Returns whether anything was written (False outside Actions, when the
    file cannot be written -- a ``::warning::`` is printed then -- or when nothing fits).
    """
    source = os.environ if env is None else env
    target = path if path is not None else source.get("GITHUB_STEP_SUMMARY")
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
    """Append ``text`` to the file ``target``; a ``::warning::`` naming ``what`` when it cannot."""
    try:
        # newline="": the bytes on disk are what was measured, and a value's "\n" stays "\n".
        with open(target, "a", encoding="utf-8", newline="") as handle:
            handle.write(text)
    except OSError as exc:
        warning(f"Could not write {what}: {exc.strerror or exc.__class__.__name__}")
        return False
    return True


# --- step outputs -----------------------------------------------------------------------------


def format_outputs(
    outputs: Mapping[str, str], *, delimiter_factory: Optional[Callable[[], str]] = None
) -> str:
    """The ``$GITHUB_OUTPUT`` text for ``outputs``, each value in heredoc form.

    ``name<<ghadelimiter_<uuid>`` / value / delimiter: multi-line values are safe, and so are
    values that try to inject (``\\nname=evil`` or a fake delimiter): the delimiter is random
    and checked against the value. Names must match ``[A-Za-z_][A-Za-z0-9_-]*``
    (ValueError otherwise). Pure apart from the random delimiter.
    """
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


def write_outputs(
    outputs: Mapping[str, str],
    *,
    path: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
) -> bool:
    """Append step outputs to ``$GITHUB_OUTPUT`` (or ``path``) in heredoc form.

    Returns whether they were written (False outside Actions or when the file cannot be
    written; a ``::warning::`` is printed then). Invalid names raise ValueError.
    """
    text = format_outputs(outputs)
    source = os.environ if env is None else env
    target = path if path is not None else source.get("GITHUB_OUTPUT")
    if not target:
        return False
    return _append(target, text, "the step outputs")


# --- event payload ----------------------------------------------------------------------------


def read_event(path: Optional[str]) -> dict[str, Any]:
    """The webhook payload of the triggering event at ``path`` (``$GITHUB_EVENT_PATH``), or ``{}``.

    Tolerant: no path -> ``{}``; a missing, unreadable or invalid file -> ``{}`` and a
    ``::warning::`` (the caller goes on without a PR number).
    """
    if not path:
        return {}
    payload, problem = read_actions_event(path)
    if problem is not None:
        warning(problem)
    return payload


def _as_number(value: Any) -> Optional[int]:
    # bool is an int subclass; a PR number is a positive int (a string digit is tolerated).
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.isdigit():
        number = int(value)
        return number if number > 0 else None
    return None


def _get(mapping: Any, key: str) -> Any:
    return mapping.get(key) if isinstance(mapping, Mapping) else None


def pull_request_number(event_name: Optional[str], event: Mapping[str, Any]) -> Optional[int]:
    """The number of the pull request the event is about, or None.

    - ``pull_request``, ``pull_request_target`` (and ``pull_request_review[_comment]``):
      ``event["pull_request"]["number"]``, else ``event["number"]``;
    - ``workflow_run``: ``event["workflow_run"]["pull_requests"][0]["number"]`` when present
      (GitHub leaves that list empty for PRs from forks);
    - ``issue_comment``: ``event["issue"]["number"]`` when the issue is a pull request;
    - anything else: None.
    """
    if event_name in PULL_REQUEST_EVENTS:
        number = _as_number(_get(_get(event, "pull_request"), "number"))
        return number if number is not None else _as_number(_get(event, "number"))
    if event_name == "workflow_run":
        prs = _get(_get(event, "workflow_run"), "pull_requests")
        if isinstance(prs, list) and prs:
            return _as_number(_get(prs[0], "number"))
        return None
    if event_name == "issue_comment":
        issue = _get(event, "issue")
        if _get(issue, "pull_request"):
            return _as_number(_get(issue, "number"))
        return None
    return None


# --- context ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ActionsContext:
    """The standard Actions environment variables ``selfheal ci`` reads.

    ``token`` is excluded from ``repr`` so the context can be logged.
    """

    api_url: str = DEFAULT_API_URL
    server_url: str = DEFAULT_SERVER_URL
    repository: Optional[str] = None  # owner/name
    event_name: Optional[str] = None
    event_path: Optional[str] = None
    sha: Optional[str] = None
    run_id: Optional[str] = None
    run_attempt: Optional[str] = None
    in_actions: bool = False
    token: Optional[str] = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> ActionsContext:
        """Read the context from ``env`` (default ``os.environ``); empty values count as unset."""
        source = os.environ if env is None else env

        def get(name: str) -> Optional[str]:
            value = source.get(name)
            return value if value else None

        return cls(
            api_url=(get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/"),
            server_url=(get("GITHUB_SERVER_URL") or DEFAULT_SERVER_URL).rstrip("/"),
            repository=get("GITHUB_REPOSITORY"),
            event_name=get("GITHUB_EVENT_NAME"),
            event_path=get("GITHUB_EVENT_PATH"),
            sha=get("GITHUB_SHA"),
            run_id=get("GITHUB_RUN_ID"),
            run_attempt=get("GITHUB_RUN_ATTEMPT"),
            in_actions=source.get("GITHUB_ACTIONS") == "true",
            token=get("GITHUB_TOKEN"),
        )

    @property
    def run_url(self) -> Optional[str]:
        """Link to this workflow run, or None when repository or run id is unknown."""
        if not self.repository or not self.run_id:
            return None
        url = f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"
        if self.run_attempt and self.run_attempt != "1":
            url += f"/attempts/{self.run_attempt}"
        return url

    def event(self) -> dict[str, Any]:
        """The event payload (:func:`read_event` on ``event_path``; ``{}`` when absent)."""
        return read_event(self.event_path)

    def pull_request_number(self) -> Optional[int]:
        """The PR this run is about (:func:`pull_request_number` on the payload), or None."""
        return pull_request_number(self.event_name, self.event()) if self.event_name else None
