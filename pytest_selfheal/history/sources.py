"""Where the history's inputs come from (edge): the quarantine file and the run's context.

For an event that tests code not merged yet the quarantine list is read from the base
revision through git (``history/event.py``: a pull request cannot quarantine its own
failure); for merged code and outside Actions from the working tree.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Optional

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.gitrepo import GitFailed, run_git
from pytest_selfheal.history.event import RunBase, judge_event
from pytest_selfheal.history.quarantine import QuarantineEntry, parse_quarantine
from pytest_selfheal.store.fsio import project_path

MAX_QUARANTINE_BYTES = 1024 * 1024


def _relative_inside(relative: str) -> Optional[str]:
    """``relative`` as a git path inside the project, or None when it would leave it."""
    path = PurePosixPath(relative.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return None
    return path.as_posix()


def quarantine_path(project_root: Path, relative: str) -> Path:
    """The quarantine file ``relative`` (``history.quarantine_file``) in the working tree, once
    the whole path is checked: relative, inside the project with every link on the way
    resolved, not itself a link. ``RefusedError`` (one line) otherwise: never read or written
    outside the project."""
    inside = _relative_inside(relative)
    if inside is None:
        raise RefusedError(f"{relative}: the quarantine file must be a path inside the project")
    path = project_path(project_root, inside, "history.quarantine_file")
    if path.is_symlink():
        raise RefusedError(f"{inside}: a symbolic link; the quarantine file must be a real file")
    return path


def read_quarantine(
    project_root: Path, relative: str, *, revision: Optional[str] = None, today: Optional[dt.date] = None
) -> tuple[list[QuarantineEntry], list[str]]:
    """``(entries in force, warnings)`` of the quarantine file ``relative`` to the project root,
    at ``revision`` (git) when given, else in the working tree. A missing file is no entries."""
    day = today or dt.datetime.now(dt.timezone.utc).date()
    inside = _relative_inside(relative)
    if inside is None:
        return [], [f"{relative}: the quarantine file must be a path inside the project; quarantine ignored"]
    if revision is not None:
        where = f"{inside}@{revision[:12]}"
        try:
            # No replace refs: the tested code could have planted one over the base's blob.
            plain = {"GIT_NO_REPLACE_OBJECTS": "1"}
            listed = run_git(project_root, ["ls-tree", "--name-only", revision, "--", inside], env=plain)
            if not listed.strip():
                return [], []
            data = run_git(project_root, ["show", f"{revision}:{inside}"], env=plain)
        except GitFailed as exc:
            return [], [f"{where}: cannot read the base revision ({exc.first_line}); quarantine ignored"]
    else:
        where = inside
        try:
            path = quarantine_path(project_root, inside)
        except RefusedError as exc:
            return [], [f"{exc}; quarantine ignored"]
        if not path.is_file():
            return [], []
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_QUARANTINE_BYTES + 1)
        except OSError as exc:
            return [], [f"{where}: cannot read ({exc.strerror}); quarantine ignored"]
    if len(data) > MAX_QUARANTINE_BYTES:
        return [], [f"{where}: larger than {MAX_QUARANTINE_BYTES} bytes; quarantine ignored"]
    return parse_quarantine(data.decode("utf-8", errors="replace"), where, day)


MAX_EVENT_BYTES = 16 * 1024 * 1024


def read_actions_event(path: str) -> tuple[dict[str, object], Optional[str]]:
    """The webhook payload of the triggering event in the file ``path`` (``$GITHUB_EVENT_PATH``)
    and None, or ``{}`` and the one-line reason it could not be read (the caller decides
    whether to warn). The one reader of the payload: ``selfheal ci`` and the history read it here."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_EVENT_BYTES + 1)
    except OSError as exc:
        return {}, f"Could not read the event payload {path}: {exc.strerror or exc.__class__.__name__}"
    if len(raw) > MAX_EVENT_BYTES:
        return {}, f"The event payload {path} is larger than {MAX_EVENT_BYTES} bytes."
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return {}, f"The event payload {path} is not valid JSON: {str(exc).splitlines()[0][:200]}"
    if not isinstance(data, dict):
        return {}, f"The event payload {path} is not a JSON object."
    return data, None


def actions_event(env: Mapping[str, str]) -> dict[str, object]:
    """The Actions event payload (``GITHUB_EVENT_PATH``), ``{}`` outside Actions or when unreadable."""
    path = env.get("GITHUB_EVENT_PATH")
    return read_actions_event(path)[0] if path else {}


def run_base(env: Mapping[str, str], project_root: Path, configured_branch: str = "main",
             event: Optional[Mapping[str, object]] = None) -> RunBase:
    """The judgement of this run's Actions event (:func:`~pytest_selfheal.history.event.judge_event`);
    ``event`` read from ``GITHUB_EVENT_PATH`` when not given."""
    return judge_event(env, event if event is not None else actions_event(env), project_root, configured_branch)


def quarantine_in_force(
    project_root: Path, relative: str, env: Mapping[str, str], event: Optional[Mapping[str, object]] = None,
    *, base: Optional[RunBase] = None,
) -> tuple[list[QuarantineEntry], list[str]]:
    """The quarantine every surface applies: for an event that tests code not merged yet the
    file at the base revision (``base``, else judged from ``env`` and ``event``), never the
    tested code's; none at all, and one warning, where no base revision was found; the working
    tree's for merged code and outside Actions. ``(entries, warnings)``."""
    judged = base if base is not None else run_base(env, project_root, event=event)
    if judged.problem is not None:
        return [], [judged.problem]
    return read_quarantine(project_root, relative, revision=judged.revision)
