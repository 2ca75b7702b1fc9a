"""The shared history: segments on a dedicated ref of the project's own git remote (edge: git).

``refs/selfheal/history`` is a ref no user checks out; its one commit's tree holds every
segment and an empty marker per segment a compaction replaced. Segments are content-addressed
files, so writers never conflict: a push that loses the race fetches again and retries. Only
git and the remote's own credentials, no shell, no user hook; only merged code writes. Every
segment read is untrusted input (``segments.accept``); a blob over the bound is never read.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import random
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Optional, TypeVar

from pytest_selfheal.errors import EXIT_IO, RefusedError, SelfhealError, one_line
from pytest_selfheal.gitrepo import TOOL_EMAIL, TOOL_NAME, GitFailed, run_git
from pytest_selfheal.history.db import HistoryDB, HistoryUnavailable
from pytest_selfheal.history.segments import (
    MAX_SEGMENT_BYTES,
    REPLACED_DIR,
    Segment,
    SegmentError,
    accept,
    compact,
    encode,
    local_segments,
    name_of_path,
    read_segment_files,
    recorded_time,
    replaced_path,
    segment_name,
    tree_path,
)
from pytest_selfheal.history.sources import DEFAULT_REMOTE, ActionsContext, judge_event
from pytest_selfheal.redact import default_redactor

HISTORY_REF = "refs/selfheal/history"
PUSH_ATTEMPTS = 16  # eight writers at once: each round lets at least one through
READ_BATCH_BYTES = 32 * 1024 * 1024  # the most segment bytes a pull holds at once
_BACKOFF_BASE_S = 0.05
_BACKOFF_CAP_S = 2.0
# What git says when a push lost a race (the ref moved since our fetch, or another push held its
# lock on the remote); anything else (no permission, a protected ref) is not retried.
_RACE_MARKERS = ("[rejected]", "non-fast-forward", "fetch first", "cannot lock ref", "failed to update ref",
                 "incorrect old value")
_NO_REMOTE_REF = "couldn't find remote ref"


class SharedHistoryError(SelfhealError):
    """git could not read or update the shared history (remote unreachable, no permission)."""

    exit_code = EXIT_IO

    def __init__(self, message: str) -> None:
        # A remote URL may carry credentials (https://user:token@host/…), and git's own
        # error lines may quote it: the one line is redacted before anyone sees it.
        super().__init__(one_line(default_redactor().redact(message)))


@dataclass(frozen=True)
class PushResult:
    """Segments added to the remote, those it had, attempts made, one line per segment not pushed."""

    pushed: int
    already: int
    attempts: int
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class PullResult:
    """Segments read (those the database lacked, shared and local), their runs, the runs new to it."""

    segments: int
    runs: int
    added: int
    commit: Optional[str]
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompactResult:
    """Segments merged into one, and the runs it holds."""

    replaced: int
    runs: int


class _Entry(NamedTuple):
    """One segment file of the shared tree (``size``: the blob's, as git lists it)."""

    name: str
    blob: str
    path: str
    size: int


@dataclass
class _Tree:
    segments: dict[str, _Entry] = field(default_factory=dict)
    replaced: set[str] = field(default_factory=set)


class Repo(NamedTuple):
    """Where git works, and the environment every command there gets (a token's, or none)."""

    path: Path
    env: Mapping[str, str] = {}


def token_env(token: str) -> dict[str, str]:
    """The environment that makes git send ``token`` to an https remote (as GitHub takes an
    Actions token) and read no global or system git configuration."""
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode("ascii")
    return {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "http.extraheader", "GIT_CONFIG_VALUE_0": f"AUTHORIZATION: basic {basic}"}


@contextmanager
def _repository(project_root: Path, auth: Optional[Mapping[str, str]]) -> Iterator[Repo]:
    """The project's repository; with a token (``auth``), a private scratch repository
    instead, so the token never meets a git configuration the tests could have written
    (``.git/config``: a remote's URL, a proxy, a credential helper)."""
    if auth is None:
        yield Repo(project_root)
        return
    with tempfile.TemporaryDirectory(prefix="selfheal-history-git-") as scratch:
        repo = Repo(Path(scratch), auth)
        _git(repo, ["init", "--quiet", "--bare", scratch])
        yield repo


def refuse_unless_merged(env: Mapping[str, str], what: str, project_root: Path) -> None:
    """Only runs of merged code (``history/sources.py``) or a person outside Actions write the
    shared history; every other event reads it only."""
    base = judge_event(ActionsContext.from_env(env), None, project_root)
    if base.unmerged:
        raise RefusedError(f"selfheal history {what}: the {base.event} event tests code not merged yet: it reads "
                           "the shared history and never writes it (its runs stay in this job's own history)")


def _run(repo: Repo, args: Sequence[str], env: Optional[Mapping[str, str]] = None,
         stdin: Optional[bytes] = None) -> bytes:
    with tempfile.TemporaryDirectory(prefix="selfheal-hooks-") as hooks:
        return run_git(repo.path, args, env={**repo.env, **(env or {})}, stdin=stdin, hooks_dir=Path(hooks))


def _git(repo: Repo, args: Sequence[str], *, env: Optional[Mapping[str, str]] = None,
         stdin: Optional[bytes] = None) -> bytes:
    try:
        return _run(repo, args, env, stdin)
    except GitFailed as exc:
        raise SharedHistoryError(one_line(f"git {args[0]}: {exc.first_line}")) from None


def fetch(repo: Repo, remote: str) -> Optional[str]:
    """Fetch the remote's history ref into the same ref of ``repo``; its commit, None when it has none."""
    try:
        _run(repo, ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", remote, f"+{HISTORY_REF}:{HISTORY_REF}"])
    except GitFailed as exc:
        if _NO_REMOTE_REF in exc.stderr:
            try:
                _run(repo, ["update-ref", "-d", HISTORY_REF])  # the remote dropped it: so do we
            except GitFailed:
                pass  # there was no local ref either
            return None
        raise SharedHistoryError(one_line(f"git fetch {remote}: {exc.first_line}")) from None
    return _git(repo, ["rev-parse", "--verify", "--quiet", f"{HISTORY_REF}^{{commit}}"]).decode().strip() or None


def _tree(root: Repo, commit: Optional[str]) -> _Tree:
    """The segments and replaced markers of the commit's tree; other files are ignored."""
    tree = _Tree()
    if commit is None:
        return tree
    # -l: each blob's size, so that no blob over the bound is ever read.
    for record in _git(root, ["ls-tree", "-r", "-l", "-z", commit]).split(b"\0"):
        if not record:
            continue
        meta, _, path = record.decode("utf-8", "replace").partition("\t")
        parts = meta.split()
        found = name_of_path(path)
        if found is None or len(parts) != 4 or parts[1] != "blob" or not parts[3].isdigit():
            continue
        if found[1] == REPLACED_DIR:
            tree.replaced.add(found[0])
        else:
            tree.segments[found[0]] = _Entry(found[0], parts[2], path, int(parts[3]))
    return tree


def _read_blobs(root: Repo, blobs: Sequence[str]) -> list[bytes]:
    """The contents of ``blobs``, in order, with one ``git cat-file --batch`` (the caller bounds them)."""
    if not blobs:
        return []
    out = _git(root, ["cat-file", "--batch"], stdin="".join(f"{b}\n" for b in blobs).encode())
    contents: list[bytes] = []
    position = 0
    for blob in blobs:
        end = out.index(b"\n", position)
        header = out[position:end].split()
        if len(header) != 3 or header[1] != b"blob":
            raise SharedHistoryError(f"git cat-file: {blob} is not a readable blob")
        size = int(header[2])
        contents.append(out[end + 1:end + 1 + size])
        position = end + 1 + size + 1  # the content, then one newline
    return contents


def _decode_all(root: Repo, entries: Sequence[_Entry]) -> tuple[list[tuple[str, Segment]], list[tuple[str, str]]]:
    """``(segments, (name, the one line why) refused)`` of shared ``entries``: a blob over the bound
    (by the size git lists) is refused unread, the others read in batches and accepted or refused."""
    segments: list[tuple[str, Segment]] = []
    refused: list[tuple[str, str]] = []
    now = dt.datetime.now(dt.timezone.utc)
    batches: list[list[_Entry]] = [[]]
    size = 0
    for entry in entries:
        if entry.size > MAX_SEGMENT_BYTES:
            refused.append((entry.name, f"{entry.path}: {entry.size:,} bytes, over the bound of "
                                        f"{MAX_SEGMENT_BYTES:,}; not read, skipped"))
            continue
        if batches[-1] and size + entry.size > READ_BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(entry)
        size += entry.size
    for batch in batches:
        for entry, data in zip(batch, _read_blobs(root, [e.blob for e in batch])):
            try:
                segments.append((entry.name, accept(entry.name, data, now=now)))
            except SegmentError as exc:
                refused.append((entry.name, f"{entry.path}: not a readable history segment ({exc}); skipped"))
    return segments, refused


def _commit(root: Repo, parent: Optional[str], adds: Sequence[tuple[str, str]], removes: Sequence[_Entry],
            message: str) -> str:
    """A commit of ``parent``'s tree with ``adds`` (blob, path) and without ``removes``, built in
    a private index: the user's index and working tree are never touched."""
    with tempfile.TemporaryDirectory(prefix="selfheal-history-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp, "index"))}
        _git(root, ["read-tree", parent] if parent else ["read-tree", "--empty"], env=env)
        info = "".join(f"0 {e.blob}\t{e.path}\n" for e in removes) + "".join(f"100644 {b}\t{p}\n" for b, p in adds)
        _git(root, ["update-index", "--add", "--index-info"], env=env, stdin=info.encode("utf-8"))
        tree = _git(root, ["write-tree"], env=env).decode().strip()
    identity = {"GIT_AUTHOR_NAME": TOOL_NAME, "GIT_AUTHOR_EMAIL": TOOL_EMAIL,
                "GIT_COMMITTER_NAME": TOOL_NAME, "GIT_COMMITTER_EMAIL": TOOL_EMAIL}
    return _git(root, ["commit-tree", tree, *(["-p", parent] if parent else []), "-m", message],
                env=identity).decode().strip()


def _push(root: Repo, remote: str, commit: str) -> bool:
    """Push ``commit`` to the remote's history ref (fast-forward only); False when the push lost a race."""
    try:
        _run(root, ["push", "--quiet", "--no-verify", remote, f"{commit}:{HISTORY_REF}"])
    except GitFailed as exc:
        if any(marker in exc.stderr for marker in _RACE_MARKERS):
            return False
        raise SharedHistoryError(one_line(f"git push {remote}: {exc.first_line}")) from None
    _git(root, ["update-ref", HISTORY_REF, commit])
    return True


_T = TypeVar("_T")


def _update(repo: Repo, remote: str, sleep: Callable[[float], None], gave_up: str,
            step: Callable[[Optional[str], _Tree, int], tuple[Optional[str], _T]]) -> _T:
    """Fetch the history ref, let ``step`` commit on it (None: nothing to do) and push; on a lost
    race, again after a jittered backoff (collided writers do not collide again in step)."""
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        parent = fetch(repo, remote)
        commit, result = step(parent, _tree(repo, parent), attempt)
        if commit is None or _push(repo, remote, commit):
            return result
        if attempt < PUSH_ATTEMPTS:
            sleep(random.uniform(0, min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2 ** attempt)))
    raise SharedHistoryError(f"git push {remote}: {HISTORY_REF} kept moving; gave up{gave_up}")


def push(project_root: Path, reports_root: Path, *, remote: str = DEFAULT_REMOTE, sleep: Callable[[float], None] = time.sleep,
         auth: Optional[Mapping[str, str]] = None, only: Optional[Collection[str]] = None) -> PushResult:
    """Add this machine's segments (``only`` those, the ones one run recorded) the remote lacks to
    its history ref; each is read as untrusted input first. ``auth``: :func:`token_env` of a token."""
    local, problems = _pushable(reports_root, only)
    blobs: dict[str, str] = {}

    def step(parent: Optional[str], tree: _Tree, attempt: int) -> tuple[Optional[str], PushResult]:
        missing = sorted(name for name in local if name not in tree.segments and name not in tree.replaced)
        if not missing:
            return None, PushResult(0, len(local), attempt, problems)
        unwritten = [name for name in missing if name not in blobs]
        if unwritten:
            written = _git(repo, ["hash-object", "-w", "--stdin-paths"],
                           # absolute: git runs in the project root, --dir may be relative to here
                           stdin="".join(f"{local[n].absolute()}\n" for n in unwritten).encode("utf-8")).split()
            blobs.update(zip(unwritten, (b.decode() for b in written)))
        commit = _commit(repo, parent, [(blobs[n], tree_path(n, compacted=False)) for n in missing], [],
                         f"selfheal history: {len(missing)} segment(s)")
        return commit, PushResult(len(missing), len(local) - len(missing), attempt, problems)

    with _repository(project_root, auth) as repo:
        return _update(repo, remote, sleep, f" after {PUSH_ATTEMPTS} attempts (the segments are still here: push again)",
                       step)


def _pushable(reports_root: Path, only: Optional[Collection[str]]) -> tuple[dict[str, Path], tuple[str, ...]]:
    found = local_segments(reports_root)
    problems = [f"{name}: no such history segment here; not pushed" for name in sorted(set(only or ()) - set(found))]
    wanted = sorted(found if only is None else set(only) & set(found))
    accepted, refused = read_segment_files([found[name] for name in wanted])
    problems += [line.replace("; skipped", "; not pushed") for _, line in refused]
    return {name: found[name] for name, _ in accepted}, tuple(problems)


def _recorded(reports_root: Path) -> set[str]:
    try:
        with HistoryDB.open(reports_root, create=False) as db:
            return db.recorded_segments() | db.refused_segments()
    except HistoryUnavailable:
        return set()  # no database yet (or an old one): everything is read, and pull says why if it cannot write


def pull(project_root: Path, reports_root: Path, *, remote: str = DEFAULT_REMOTE,
         auth: Optional[Mapping[str, str]] = None) -> PullResult:
    """Fetch the remote's history ref and record the runs of its segments and this machine's own in
    the database, in one transaction, reading only the segments it lacks. A segment refused is
    one line in ``problems`` once, and never read again. ``auth``: as for :func:`push`."""
    with _repository(project_root, auth) as repo:
        commit = fetch(repo, remote)
        done = _recorded(reports_root)
        tree = _tree(repo, commit)
        shared, refused = _decode_all(repo, [entry for name, entry in sorted(tree.segments.items())
                                             if name not in done])
    mine, local_refused = read_segment_files([path for name, path in sorted(local_segments(reports_root).items())
                                              if name not in done and name not in tree.segments])
    named, refused = shared + mine, refused + local_refused
    items = [(item.run, item.outcomes) for _, segment in named for item in segment.runs]
    try:
        with HistoryDB.open(reports_root) as db:
            db.refuse_segments(refused)
            added = db.import_runs(items, segments=[name for name, _ in named])
    except HistoryUnavailable as exc:
        raise SharedHistoryError(str(exc).replace("; continuing without history", "")) from None
    return PullResult(len(named), len(items), added, commit, tuple(line for _, line in refused))


def compact_shared(project_root: Path, *, older_than_days: float, remote: str = DEFAULT_REMOTE,
                   now: Optional[dt.datetime] = None, auth: Optional[Mapping[str, str]] = None) -> CompactResult:
    """Merge the shared segments whose runs are all older than ``older_than_days`` into one and push it."""
    cutoff = (now or dt.datetime.now(dt.timezone.utc)) - dt.timedelta(days=older_than_days)

    def step(parent: Optional[str], tree: _Tree, attempt: int) -> tuple[Optional[str], CompactResult]:
        decoded, _ = _decode_all(repo, sorted(tree.segments.values(), key=lambda e: e.path))
        # Accepted segments only: every recorded_at is a time.
        old = [(name, seg) for name, seg in decoded
               if seg.runs and all(recorded_time(item.run.recorded_at) < cutoff for item in seg.runs)]
        if len(old) < 2:
            return None, CompactResult(0, sum(len(s.runs) for _, s in old))
        merged = compact(old)
        data = encode(merged)
        blob = _git(repo, ["hash-object", "-w", "--stdin"], stdin=data).decode().strip()
        empty = _git(repo, ["hash-object", "-w", "--stdin"], stdin=b"").decode().strip()
        markers = [(empty, replaced_path(name)) for name, _ in old]
        commit = _commit(repo, parent, [(blob, tree_path(segment_name(data), compacted=True)), *markers],
                         [tree.segments[name] for name, _ in old],
                         f"selfheal history: compact {len(old)} segment(s) older than {older_than_days:g} days")
        return commit, CompactResult(len(old), len(merged.runs))

    with _repository(project_root, auth) as repo:
        return _update(repo, remote, time.sleep, f" compacting after {PUSH_ATTEMPTS} attempts", step)
