"""The one home of git: every git command and gitpython call of the package, each an argv
list, never a shell (edge: git). The snapshot runs the git binary as gitpython would: importing
gitpython costs more than a capture's whole git work; only the demo's repository uses it.

The diff hash (the loop's "code diff changed") covers what a code change can touch in the
repository containing the project: ``git diff HEAD --binary`` (never an external diff
driver), the paths and contents of untracked, non-ignored files (a new module counts), and
the commit HEAD points at (an agent that commits its fix leaves ``git diff HEAD`` empty).
Left out by pathspec: the reports root, which changes at every iteration, and every file in
a hidden folder (``.claude/``, ``.vscode/``: an agent's or editor's settings, no tests).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tempfile
import threading
import tokenize
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple, Optional

from pytest_selfheal.errors import RefusedError, one_line
from pytest_selfheal.records.context import SNAPSHOT_KEYS, GitContext

# Identity used for commits the tool makes itself (demo repos).
TOOL_NAME = "pytest-selfheal"
TOOL_EMAIL = "pytest-selfheal@localhost"


def _gitpython() -> Any:
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # no git binary: fail per call, not at import
    import git  # gitpython, lazily: slow to import, and the plugin loads on every pytest run

    return git


HASH_LENGTH = 16  # hex characters of sha256 kept
_CHUNK = 1024 * 1024

# Build and cache litter: never a code change (projects without a .gitignore have it untracked).
JUNK_PATHSPECS: tuple[str, ...] = (
    ":(exclude,glob)**/__pycache__/**",
    ":(exclude,glob)**/*.py[co]",
    ":(exclude,glob)**/.pytest_cache/**",
)

# Files in a hidden folder, at any depth: no code under test (see the module docstring).
_HIDDEN_FOLDERS = ":(exclude,glob)**/.*/**"


def relative_inside(path: Path, top: Path) -> Optional[str]:
    """``path`` relative to ``top``, links resolved, POSIX ("" for ``top``); None outside it."""
    try:
        rel = Path(os.path.realpath(path)).relative_to(Path(os.path.realpath(top))).as_posix()
    except ValueError:
        return None
    return "" if rel == "." else rel


def hash_file(digest: hashlib._Hash, path: Path) -> None:
    """Feed ``path``'s bytes to ``digest``; an unreadable file feeds its errno."""
    try:
        with open(path, "rb") as handle:
            while True:
                block = handle.read(_CHUNK)
                if not block:
                    break
                digest.update(block)
    except OSError as exc:  # vanished or unreadable between listing and reading
        digest.update(f"<unreadable: {exc.errno}>".encode())


def _start(head: Optional[str], diff: bytes) -> hashlib._Hash:
    digest = hashlib.sha256()
    digest.update(b"head\0" + (head or "").encode() + b"\0diff\0")
    digest.update(behaviour_diff(diff))
    return digest


# What makes a file's diff more than its lines (a new, deleted, renamed or re-moded file).
_FILE_HEADERS = (b"new file", b"deleted file", b"rename ", b"copy ", b"old mode", b"new mode", b"similarity", b"Binary")


def behaviour_diff(diff: bytes) -> bytes:
    """``git diff`` output without the sections of Python files (not new, deleted, renamed or
    re-moded) whose removed and added lines are the same code once comments and blank lines
    are dropped: no code change for the loop (docs/loop.md "Progress")."""
    if b"\ndiff --git " not in b"\n" + diff:
        return diff
    sections = re.split(rb"(?m)^(?=diff --git )", diff)
    return b"".join(section for section in sections if not _comments_only(section))


def _comments_only(section: bytes) -> bool:
    head, _, body = section.partition(b"\n@@")
    first = head.split(b"\n", 1)[0]
    if not first.startswith(b"diff --git ") or not first.endswith(b".py") or not body:
        return False
    if any(line.startswith(_FILE_HEADERS) for line in head.split(b"\n")[1:]):
        return False
    lines = [line for line in (b"@@" + body).split(b"\n") if line[:1] in (b"+", b"-")]
    removed = [code for line in lines if line[:1] == b"-" for code in [_code_of(line[1:])] if code]
    added = [code for line in lines if line[:1] == b"+" for code in [_code_of(line[1:])] if code]
    return bool(lines) and removed == added


def _code_of(line: bytes) -> bytes:
    """A Python line without its comment, as the tokenizer sees it; whole when it cannot be read
    alone (inside a multi-line string)."""
    text = line.decode("utf-8", errors="replace")
    try:
        for token in tokenize.generate_tokens(io.StringIO(text.strip() + "\n").readline):
            if token.type == tokenize.COMMENT:
                return text.strip()[: token.start[1]].rstrip().encode()
    except (tokenize.TokenError, SyntaxError):
        return line.strip()
    return line.strip()


def clean_tree_hash(commit: str) -> str:
    """The :func:`diff_hash` of a clean working tree at ``commit`` (a capture that recorded only
    ``context.json``'s git state)."""
    return _start(commit, b"").hexdigest()[:HASH_LENGTH]


class GitSnapshot(NamedTuple):  # NamedTuple: cheaper to define than a frozen dataclass
    """One read of the working tree: ``context.json``'s git part and the diff hash."""

    context: Optional[GitContext]  # None outside a git repository
    diff_hash: Optional[str]  # None when unknown (outside git, a git error)


class _Status(NamedTuple):
    head: Optional[str]  # the commit HEAD points at; None while unborn
    branch: Optional[str]  # None when detached
    changed: bool  # a staged or unstaged change of a tracked file (or an unmerged one)
    untracked: int  # untracked, non-ignored files


def _read_git(cwd: Path, args: Sequence[str]) -> bytes:
    """:func:`run_git`'s stdout without its trailing newline (as gitpython drops it)."""
    out = run_git(cwd, args)
    return out[:-1] if out.endswith(b"\n") else out


def _as_given(path: Path, top: str) -> Path:
    """``top`` spelled as the ancestor of ``path`` that resolves to it (as gitpython kept it)."""
    real_top = os.path.realpath(top)
    current = os.path.abspath(path)
    while True:
        if os.path.realpath(current) == real_top:
            return Path(current)
        parent = os.path.dirname(current)
        if parent == current:
            return Path(top)
        current = parent


def _parse_status(raw: bytes) -> _Status:
    """``git status --porcelain=v2 --branch -z`` output reduced to what the snapshot needs."""
    head: Optional[str] = None
    branch: Optional[str] = None
    changed = False
    untracked = 0
    entries = iter(raw.split(b"\0"))
    for entry in entries:
        if entry.startswith(b"# branch.oid "):
            oid = entry[len(b"# branch.oid "):].decode("ascii", "replace")
            head = None if oid == "(initial)" else oid
        elif entry.startswith(b"# branch.head "):
            name = entry[len(b"# branch.head "):].decode("utf-8", "replace")
            branch = None if name == "(detached)" else name
        elif entry.startswith(b"? "):
            untracked += 1
        elif entry[:2] in (b"1 ", b"2 ", b"u "):
            changed = True
            if entry[:2] == b"2 ":
                next(entries, None)  # a rename's original path is the next field
    return _Status(head, branch, changed, untracked)


def git_snapshot(project_root: Path, exclude: Sequence[Path] = (), *, context: bool = True,
                 diff_hash: bool = True) -> GitSnapshot:
    """The git context and the diff hash of the repository containing ``project_root``: a clean
    tree takes two git commands, the others run only when the status shows something for them."""
    try:
        top = _as_given(project_root, os.fsdecode(_read_git(project_root, ["rev-parse", "--show-toplevel"])))
    except GitFailed:  # outside git, a bare repository, or no git binary
        return GitSnapshot(None, None)
    try:
        status = _parse_status(
            _read_git(top, ["status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all"])
        )
    except GitFailed as exc:
        return GitSnapshot(GitContext.failed(one_line(f"git {exc.args_list[0]}: {exc}")) if context else None, None)
    info: Optional[GitContext] = None
    if context:
        try:
            stat = _read_git(top, ["diff", "HEAD", "--stat"]) if status.head and status.changed else b""
            info = GitContext(root=str(top), commit=status.head, branch=status.branch,
                              dirty=status.changed or status.untracked > 0,
                              diff_stat=stat.decode("utf-8", "replace"), untracked=status.untracked,
                              keys=SNAPSHOT_KEYS)
        except GitFailed as exc:
            info = GitContext.failed(one_line(f"git {exc.args_list[0]}: {exc}"))
    return GitSnapshot(info, _hash_tree(top, status, exclude) if diff_hash else None)


def _hash_tree(top: Path, status: _Status, exclude: Sequence[Path]) -> Optional[str]:
    inside = [rel for rel in (relative_inside(path, top) for path in exclude) if rel]
    specs = [".", *(f":(exclude){rel}" for rel in inside), *JUNK_PATHSPECS, _HIDDEN_FOLDERS]
    base = ["HEAD"] if status.head else ["--cached"]
    try:
        # Nothing changed or untracked anywhere: the pathspec-limited commands would print nothing.
        diff = b""
        if status.changed:
            diff = _read_git(top, ["diff", *base, "--no-ext-diff", "--no-color", "--binary", "--", *specs])
        listed = b""
        if status.untracked:
            listed = _read_git(top, ["ls-files", "--others", "--exclude-standard", "-z", "--", *specs])
    except GitFailed:  # an unknown hash never counts as progress (docs/loop.md)
        return None
    digest = _start(status.head, diff)
    for name in sorted(n for n in listed.split(b"\0") if n):
        digest.update(b"\0untracked\0" + name + b"\0")
        hash_file(digest, top / os.fsdecode(name))
    return digest.hexdigest()[:HASH_LENGTH]


class PendingSnapshot:
    """:func:`git_snapshot` in a thread, while the caller works; :meth:`result` waits for it."""

    def __init__(self, project_root: Path, exclude: Sequence[Path] = (), *, context: bool = True) -> None:
        self._done: list[GitSnapshot] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(
            target=self._run, args=(project_root, list(exclude), context), name="selfheal-git", daemon=True
        )
        self._thread.start()

    def _run(self, project_root: Path, exclude: Sequence[Path], context: bool) -> None:
        try:
            self._done.append(git_snapshot(project_root, exclude, context=context))
        except BaseException as exc:  # raised again in the caller's thread by result()
            self._error.append(exc)

    def result(self) -> GitSnapshot:
        self._thread.join()
        if self._error:
            raise self._error[0]
        return self._done[0]


def diff_hash(project_root: Path, exclude: Sequence[Path] = ()) -> Optional[str]:
    """The diff hash without the ``exclude`` paths; None outside git or on a git error."""
    return git_snapshot(project_root, exclude, context=False).diff_hash


# Variables that point git at a repository. A selfheal run started from a git hook
# (pre-commit running pytest sets GIT_INDEX_FILE) would otherwise aim every git command
# of the worktree — and the provider's — at the user's own index.
GIT_LOCATING_ENV: tuple[str, ...] = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_PREFIX",
                                     "GIT_NAMESPACE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES")


@contextmanager
def isolated_git_env() -> Iterator[None]:
    """``os.environ`` without :data:`GIT_LOCATING_ENV` for the duration: every git command (ours,
    the provider's) finds the repository from its working directory."""
    saved = {k: os.environ.pop(k) for k in GIT_LOCATING_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


class GitFailed(Exception):
    """A git command failed (internal: callers turn it into a one-line user error)."""

    def __init__(self, args: Sequence[str], status: Optional[int], stderr: str) -> None:
        self.args_list = list(args)
        self.stderr = stderr
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        # The most useful line of git's error output: its message.
        self.first_line = next((line for line in lines if line.startswith(("error:", "fatal:"))),
                               lines[0] if lines else f"git {' '.join(self.args_list[:2])} exited with {status}")
        super().__init__(self.first_line)


def run_git(
    cwd: Path,
    args: Sequence[str],
    *,
    env: Optional[Mapping[str, str]] = None,
    hooks_dir: Optional[Path] = None,
    stdin: Optional[bytes] = None,
) -> bytes:
    """``git <args>`` in ``cwd``: its stdout, exactly as git wrote it; :class:`GitFailed` on a
    non-zero exit or when git cannot start. The one git runner of the package.

    ``env``: set over ``os.environ``. ``hooks_dir``: an empty ``core.hooksPath`` (no user hook
    runs). ``stdin``: from a temporary file, so a large input never deadlocks a pipe.
    """
    options = ["core.fsmonitor=false", "gc.auto=0"]
    if hooks_dir is not None:
        options.append(f"core.hooksPath={hooks_dir}")
    executable = os.environ.get("GIT_PYTHON_GIT_EXECUTABLE") or "git"  # gitpython's override, honoured
    argv = [executable, *(word for option in options for word in ("-c", option)), *args]
    # As gitpython runs git: untranslated --stat and errors.
    full_env = {"GIT_TERMINAL_PROMPT": "0", **os.environ, "LANGUAGE": "C", "LC_ALL": "C", **(env or {})}
    with tempfile.TemporaryFile() as feed:
        if stdin is not None:
            feed.write(stdin)
            feed.seek(0)
        try:
            done = subprocess.run(argv, cwd=cwd, env=full_env, stdin=feed if stdin is not None else subprocess.DEVNULL,
                                  capture_output=True, check=False)
        except OSError as exc:
            raise GitFailed(args, None, f"fatal: cannot run git: {exc}") from None
    if done.returncode != 0:
        raise GitFailed(args, done.returncode, done.stderr.decode("utf-8", "replace").strip())
    return done.stdout


def repo_top(path: Path) -> Path:
    """The top of the git working tree containing ``path``; ``RefusedError`` outside one (or
    without git): repair providers run only in an isolated worktree."""
    try:
        bare = _read_git(path, ["rev-parse", "--is-bare-repository"]) == b"true"
    except GitFailed:
        raise RefusedError(
            f"repair providers need a git repository: {path} is not inside one "
            "(repairs run in an isolated git worktree; run `git init` and commit, or unset ralf_lite.repair.command)"
        ) from None
    if bare:
        raise RefusedError(f"repair providers need a working tree: {path} is a bare repository")
    top = Path(os.fsdecode(_read_git(path, ["rev-parse", "--show-toplevel"]))).resolve()
    if not has_commit(path, "HEAD"):
        raise RefusedError(
            f"repair providers need a commit to start from: the repository at {top} "
            "has no commit yet (commit once, then resume the loop)"
        )
    return top


_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def has_commit(cwd: Path, revision: str) -> bool:
    """Whether ``revision`` names a commit this clone has (a shallow clone may lack the base)."""
    try:
        run_git(cwd, ["cat-file", "-e", f"{revision}^{{commit}}"])
    except GitFailed:
        return False
    return True


def changed_lines(cwd: Path, base: str, paths: Sequence[str] = ("*.py",)) -> dict[str, list[tuple[int, int]]]:
    """The lines of the working tree that differ from commit ``base``: ``{path: [(first, last), …]}``,
    POSIX paths below ``cwd``, 1-based inclusive ranges of the new side (a deletion marks the
    line after it); files deleted since ``base`` left out. Raises :class:`GitFailed`."""
    raw = run_git(cwd, ["-c", "core.quotePath=false", "diff", "--relative", "--no-color", "--no-ext-diff", "--no-textconv", "-U0", "--find-renames",
                        "--diff-filter=d", base, "--", *paths])
    changed: dict[str, list[tuple[int, int]]] = {}
    current: Optional[list[tuple[int, int]]] = None
    for line in raw.splitlines():
        if line.startswith(b"+++ "):
            name = line[4:].decode("utf-8", "surrogateescape")
            current = changed.setdefault(name[2:], []) if name.startswith("b/") else None
        elif current is not None and (match := _HUNK.match(line)):
            first, count = int(match.group(1)), int(match.group(2) or 1)
            current.append((first, first + count - 1) if count else (first + 1, first + 1))
    return {path: ranges for path, ranges in changed.items() if ranges}


@contextmanager
def base_checkout(cwd: Path, revision: str) -> Iterator[Path]:
    """The directory where ``cwd`` lies in a detached worktree of ``revision``, removed on exit
    (no hook runs). Raises :class:`GitFailed`."""
    top = Path(os.fsdecode(_read_git(cwd, ["rev-parse", "--show-toplevel"])))
    scratch = Path(tempfile.mkdtemp(prefix="selfheal-base-"))
    hooks, tree = scratch / "hooks", scratch / "tree"
    hooks.mkdir()
    try:
        run_git(cwd, ["worktree", "add", "--detach", "--quiet", str(tree), revision], hooks_dir=hooks)
        yield tree / (relative_inside(cwd, top) or "")
    finally:
        remove_worktree(cwd, tree, scratch)


def remove_worktree(repo: Path, path: Path, scratch: Path, warnings: Optional[list[str]] = None) -> None:
    """Remove a worktree of ``repo`` at ``path`` and its scratch directory; never raises."""
    notes = warnings if warnings is not None else []
    hooks = scratch / "hooks" if (scratch / "hooks").is_dir() else None
    if path.exists():
        try:
            run_git(repo, ["worktree", "remove", "--force", "--force", str(path)], hooks_dir=hooks)
        except GitFailed as exc:
            notes.append(f"git worktree remove {path}: {exc.first_line}")
            shutil.rmtree(path, ignore_errors=True)
    try:
        run_git(repo, ["worktree", "prune"], hooks_dir=hooks)
    except GitFailed as exc:
        notes.append(f"git worktree prune: {exc.first_line}")
    shutil.rmtree(scratch, ignore_errors=True)


def ignored(cwd: Path, paths: Sequence[str]) -> set[str]:
    """Those of ``paths`` (relative to ``cwd``) git ignores and does not track (empty outside git)."""
    if not paths:
        return set()
    try:
        out = run_git(cwd, ["check-ignore", "-z", "--stdin"], stdin="\0".join(paths).encode() + b"\0")
    except GitFailed:  # exit 1: none is ignored; 128: not a repository
        return set()
    return {p for p in out.decode("utf-8", "surrogateescape").split("\0") if p}


def init_repo(path: Path, message: str) -> None:
    """``git init`` and commit everything in ``path`` with the tool's identity, on ``main``
    whatever git's default: ``history.base_branch``'s default, as on a real project."""
    git = _gitpython()
    repo = git.Repo.init(path)
    try:
        repo.git.symbolic_ref("HEAD", "refs/heads/main")  # works on every git, unlike init -b
        repo.git.add(A=True)
        actor = git.Actor(TOOL_NAME, TOOL_EMAIL)
        repo.index.commit(message, author=actor, committer=actor)
    finally:
        repo.close()
