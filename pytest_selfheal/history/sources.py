"""The history's inputs (edge: the environment, git, files): the Actions variables, the CI
event's judgement and the quarantine file. Every Actions event is judged once, by what the tested code can reach. Code not merged yet
reads its quarantine list at a *base revision* it cannot change (``pull_request.base.sha``,
``merge_group.base_sha``, else the default branch's tip as fetched), counts a failure as
known only when seen on the base repository's own branch, and never writes the shared
history; with no base revision found it fails closed (no quarantine, one line saying so).
Merged code (a ``schedule``, a push or manual run on the default branch) is told from the
event payload, never from config the tested code could change. Outside Actions nothing is
judged: a developer's run reads its own working tree.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Optional

from pytest_selfheal.errors import RefusedError
from pytest_selfheal.gitrepo import GitFailed, run_git
from pytest_selfheal.history.records import COMMIT_SHA, plausible_ref_name, plausible_repository
from pytest_selfheal.history.triage import QuarantineEntry, parse_quarantine
from pytest_selfheal.store.fsio import project_path

#: Events whose payload carries ``pull_request``.
PULL_REQUEST_EVENTS = frozenset(
    {"pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment"}
)
#: Events that test merged code when they run on the default branch (``schedule`` always does).
MERGED_ON_DEFAULT = ("push", "workflow_dispatch")
SCHEDULE = "schedule"
MERGE_GROUP = "merge_group"
DEFAULT_REMOTE = "origin"

_HEADS = "refs/heads/"

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_SERVER_URL = "https://github.com"


def dig(mapping: object, *keys: str) -> object:
    """``mapping[k1][k2]…`` of a JSON payload, None where a level is missing or not an object."""
    for key in keys:
        mapping = mapping.get(key) if isinstance(mapping, Mapping) else None
    return mapping


def _text(value: object) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def _sha(value: object) -> Optional[str]:
    return value if isinstance(value, str) and COMMIT_SHA.match(value) else None


def _repository(value: object) -> Optional[str]:
    return value if isinstance(value, str) and plausible_repository(value) else None


def _branch(ref: Optional[str]) -> Optional[str]:
    """``main`` of ``refs/heads/main`` (or of ``main``); None for a tag or anything implausible."""
    name = ref.removeprefix(_HEADS) if ref is not None else ""
    return name if not name.startswith("refs/") and plausible_ref_name(name) else None


@dataclass(frozen=True)
class ActionsContext:
    """The GitHub Actions variables: the one reader of ``GITHUB_*`` (no token in the ``repr``)."""

    api_url: str = DEFAULT_API_URL
    server_url: str = DEFAULT_SERVER_URL
    in_actions: bool = False
    # Each field from here on is its ``GITHUB_`` variable; an empty value counts as unset.
    repository: Optional[str] = None  # owner/name
    event_name: Optional[str] = None
    event_path: Optional[str] = None
    sha: Optional[str] = None
    ref: Optional[str] = None
    ref_name: Optional[str] = None
    head_ref: Optional[str] = None
    base_ref: Optional[str] = None
    workflow: Optional[str] = None
    job: Optional[str] = None
    run_id: Optional[str] = None
    run_attempt: Optional[str] = None
    token: Optional[str] = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> ActionsContext:
        given = {f.name: env.get(f"GITHUB_{f.name.upper()}") or None for f in fields(cls)[3:]}
        return cls((env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/"),
                   (env.get("GITHUB_SERVER_URL") or DEFAULT_SERVER_URL).rstrip("/"),
                   env.get("GITHUB_ACTIONS") == "true", **given)

    @property
    def judged_event(self) -> Optional[str]:
        """The event a run is judged by: only inside Actions."""
        return self.event_name if self.in_actions else None

    @property
    def run_url(self) -> Optional[str]:
        if not self.repository or not self.run_id:
            return None
        url = f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"
        if self.run_attempt and self.run_attempt != "1":
            url += f"/attempts/{self.run_attempt}"
        return url

    def event(self, warn: Optional[Callable[[str], None]] = None) -> dict[str, object]:
        """The event payload; ``{}`` without one, or when unreadable (``warn`` gets the line why)."""
        payload, problem = read_actions_event(self.event_path) if self.event_path else ({}, None)
        if problem is not None and warn is not None:
            warn(problem)
        return payload


@dataclass(frozen=True)
class RunBase:
    """The judgement of one run's event: what its quarantine list and "known" triage are read
    against, which repository its runs are recorded for, and whether it may share history."""

    #: ``GITHUB_EVENT_NAME`` (None outside Actions).
    event: Optional[str] = None
    #: The code under test is not merged yet (only ever True in Actions): it reads the shared
    #: history and never writes it.
    unmerged: bool = False
    #: Where the quarantine list is read (None: the working tree, or nowhere when ``problem``).
    revision: Optional[str] = None
    #: The branch whose failures count as known (``known on <branch>``).
    branch: str = "main"
    #: The repository whose branch that is (None outside Actions: the branch alone decides).
    repository: Optional[str] = None
    #: Unmerged, and no base revision found: the one line saying the quarantine is not applied.
    problem: Optional[str] = None


def _default_tip(project_root: Path, branch: str) -> Optional[str]:
    try:
        out = run_git(project_root, ["rev-parse", "--verify", "--quiet",
                                     f"refs/remotes/{DEFAULT_REMOTE}/{branch}^{{commit}}"],
                      env={"GIT_NO_REPLACE_OBJECTS": "1"})
    except GitFailed:
        return None
    return _sha(out.decode("ascii", "replace").strip())


def head_repository(actions: ActionsContext, event: Mapping[str, object]) -> Optional[str]:
    """The repository (owner/name) whose branch the tested code is on: a pull request's head
    repository (a fork's), else ``GITHUB_REPOSITORY``; None outside Actions or when unknown."""
    if actions.judged_event in PULL_REQUEST_EVENTS:
        return _repository(dig(event, "pull_request", "head", "repo", "full_name"))
    return _repository(actions.repository) if actions.judged_event else None


def judge_event(actions: ActionsContext, event: Optional[Mapping[str, object]], project_root: Path,
                configured_branch: str = "main") -> RunBase:
    """The :class:`RunBase` of the run ``actions`` describes, with ``event`` its payload (read
    before any test ran; None: read it now). ``configured_branch``: ``history.base_branch``,
    the branch "known" refers to where the event names none."""
    name = actions.judged_event
    if name is None:
        return RunBase(branch=configured_branch)
    event = actions.event() if event is None else event
    repository = _repository(actions.repository)
    default = _branch(_text(dig(event, "repository", "default_branch")))
    ref = actions.ref or _text(dig(event, "ref"))
    if name in PULL_REQUEST_EVENTS:
        pull = dig(event, "pull_request")
        base_branch = _branch(_text(dig(pull, "base", "ref"))) or _branch(actions.base_ref)
        return _unmerged(name, _sha(dig(pull, "base", "sha")), base_branch or configured_branch,
                         _repository(dig(pull, "base", "repo", "full_name")) or repository, "pull_request.base.sha")
    if name == MERGE_GROUP:
        group = dig(event, "merge_group")
        return _unmerged(name, _sha(dig(group, "base_sha")), _branch(_text(dig(group, "base_ref"))) or configured_branch,
                         repository, "merge_group.base_sha")
    on_default = default is not None and _branch(ref) == default
    if name == SCHEDULE or (name in MERGED_ON_DEFAULT and on_default):
        return RunBase(event=name, branch=configured_branch, repository=repository)
    if default is None:
        return RunBase(event=name, unmerged=True, branch=configured_branch, repository=repository,
                       problem=_fail_closed(name, "its payload names no default branch"))
    return _unmerged(name, _default_tip(project_root, default), default, repository,
                     f"refs/remotes/{DEFAULT_REMOTE}/{default} (fetch the default branch)")


def _unmerged(name: str, revision: Optional[str], branch: str, repository: Optional[str], where: str) -> RunBase:
    problem = None if revision is not None else _fail_closed(name, f"no base revision was found ({where})")
    return RunBase(event=name, unmerged=True, revision=revision, branch=branch, repository=repository, problem=problem)


def _fail_closed(name: str, why: str) -> str:
    return f"the {name} event tests code not merged yet and {why}: the quarantine list is not applied"


MAX_QUARANTINE_BYTES = 1024 * 1024


def _relative_inside(relative: str) -> Optional[str]:
    """``relative`` as a git path inside the project, or None when it would leave it."""
    path = PurePosixPath(relative.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or not path.parts:
        return None
    return path.as_posix()


def quarantine_path(project_root: Path, relative: str) -> Path:
    """The quarantine file ``relative`` in the working tree, once checked to be relative, inside the
    project with every link on the way resolved, not itself a link; ``RefusedError`` otherwise."""
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
    """``(entries in force, warnings)`` of the quarantine file at ``revision`` (git), else in the working tree."""
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
    """``(the event payload in the file path, None)``, or ``({}, the one line why not)``: the one
    reader of ``$GITHUB_EVENT_PATH`` (the caller decides whether to warn)."""
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


def quarantine_in_force(project_root: Path, relative: str, base: RunBase) -> tuple[list[QuarantineEntry], list[str]]:
    """``(entries, warnings)`` of the quarantine every surface applies: the base revision's file for
    code not merged yet, none and one warning where no base revision was found, the working
    tree's for merged code and outside Actions."""
    if base.problem is not None:
        return [], [base.problem]
    return read_quarantine(project_root, relative, revision=base.revision)
