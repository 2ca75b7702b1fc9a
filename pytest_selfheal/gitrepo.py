"""The one home of git: every gitpython call of the package (edge: git).

No other module imports ``git`` (an import-linter contract in pyproject.toml). gitpython
runs the ``git`` binary for every command here, argv lists only, never a shell.

- the working-tree diff hash the loop's progress check compares (:func:`diff_hash`);
- the git part of an incident's ``context.json`` (:func:`git_context`);
- the commands of the repair worktrees (:func:`run_git`, :func:`repo_top`;
  ``repair/worktree.py`` holds what they are for);
- a committed repository for the demo (:func:`init_repo`).

The diff hash. SPEC §8: progress includes "the code diff (gitpython, hashed) changed". The
hash covers everything a code change can touch in the repository containing the project:

- ``git diff HEAD --no-ext-diff --binary`` — staged and unstaged changes of tracked
  files, binary-safe, never through a user's external diff driver;
- the paths and contents of untracked, non-ignored files (``git ls-files --others
  --exclude-standard -z``) — a new module an agent wrote counts as a change;
- the commit HEAD points at — an agent that *commits* its fix between two iterations
  leaves ``git diff HEAD`` empty both times, and that is a code change too.

The reports root (``.selfheal/`` by default) usually lives inside the tree and changes
at every iteration: it is excluded explicitly by pathspec (and should be in .gitignore).
Two git calls, no shell.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from pytest_selfheal.errors import RefusedError

# Identity used for commits the tool makes itself (demo repos).
TOOL_NAME = "pytest-selfheal"
TOOL_EMAIL = "pytest-selfheal@localhost"


def _gitpython() -> Any:
    """The ``git`` module; raises when gitpython cannot load."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")  # no git binary: fail per call, not at import
    import git  # gitpython, lazily: slow to import, and the plugin loads on every pytest run

    return git


def _gitpython_or_refuse() -> Any:
    try:
        return _gitpython()
    except Exception as exc:  # pragma: no cover - gitpython is a dependency
        raise RefusedError(f"repair providers need git and gitpython: {exc}") from None


def _open_repo(path: Path) -> Any:
    """The gitpython ``Repo`` containing ``path`` (searching upwards); None outside git or without git."""
    try:
        return _gitpython().Repo(path, search_parent_directories=True)
    except Exception:
        return None


# --- the diff hash ---------------------------------------------------------------

HASH_LENGTH = 16  # hex characters of sha256 kept
_CHUNK = 1024 * 1024


# Build and cache litter: never a code change (projects without a .gitignore have it untracked).
JUNK_PATHSPECS: Tuple[str, ...] = (
    ":(exclude,glob)**/__pycache__/**",
    ":(exclude,glob)**/*.py[co]",
    ":(exclude,glob)**/.pytest_cache/**",
)


def _exclude_specs(top: Path, exclude: Sequence[Path]) -> List[str]:
    specs = []
    for path in exclude:
        try:
            rel = Path(os.path.realpath(path)).relative_to(Path(os.path.realpath(top)))
        except ValueError:
            continue  # outside the repository: nothing to exclude
        if rel.parts:
            specs.append(f":(exclude){rel.as_posix()}")
    return specs


def _hash_file(digest: "hashlib._Hash", path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            while True:
                block = handle.read(_CHUNK)
                if not block:
                    break
                digest.update(block)
    except OSError as exc:  # vanished or unreadable between listing and reading
        digest.update(f"<unreadable: {exc.errno}>".encode())


def _start(head: Optional[str], diff: bytes) -> "hashlib._Hash":
    digest = hashlib.sha256()
    digest.update(b"head\0" + (head or "").encode() + b"\0diff\0")
    digest.update(diff)
    return digest


def clean_tree_hash(commit: str) -> str:
    """The :func:`diff_hash` of a clean working tree (no diff, no untracked file) at ``commit``.

    Lets the loop know the capture's hash when the capture recorded only ``context.json``'s
    git state (commit + ``dirty: false``) and not the hash itself.
    """
    return _start(commit, b"").hexdigest()[:HASH_LENGTH]


def diff_hash(project_root: Path, exclude: Sequence[Path] = ()) -> Optional[str]:
    """sha256 (first 16 hex) of the repository's working-tree changes against HEAD.

    ``exclude``: absolute paths (the reports root) left out of the hash. Returns None
    outside a git repository, when git is unavailable, or on any git error (an unknown
    hash never counts as progress, see docs/loop.md). An unborn HEAD (no commit yet)
    hashes the staged files instead of ``git diff HEAD``.
    """
    repo = _open_repo(project_root)
    if repo is None:
        return None
    try:
        if repo.working_tree_dir is None:  # a bare repository
            return None
        top = Path(repo.working_tree_dir)
        specs = [".", *_exclude_specs(top, exclude), *JUNK_PATHSPECS]
        runner: Any = repo.git
        base = ["HEAD"] if repo.head.is_valid() else ["--cached"]
        diff = runner.diff(*base, "--no-ext-diff", "--no-color", "--binary", "--", *specs, stdout_as_string=False)
        listed = runner.ls_files("--others", "--exclude-standard", "-z", "--", *specs, stdout_as_string=False)
        head = repo.head.commit.hexsha if repo.head.is_valid() else None
        digest = _start(head, diff if isinstance(diff, bytes) else str(diff).encode())
        names = sorted(n for n in (listed if isinstance(listed, bytes) else str(listed).encode()).split(b"\0") if n)
        for name in names:
            digest.update(b"\0untracked\0" + name + b"\0")
            _hash_file(digest, top / os.fsdecode(name))
        return digest.hexdigest()[:HASH_LENGTH]
    except Exception:  # a broken repository must not stop the loop
        return None
    finally:
        repo.close()


# --- run context -----------------------------------------------------------------


def git_context(path: Path) -> Optional[Dict[str, Any]]:
    """Commit, branch, dirty state and diff stat of the repo containing ``path``; None outside git."""
    repo = _open_repo(path)
    if repo is None:
        return None
    try:
        info: Dict[str, Any] = {"root": str(repo.working_tree_dir)}
        try:
            info["commit"] = repo.head.commit.hexsha
        except ValueError:  # no commits yet
            info["commit"] = None
        info["branch"] = None if repo.head.is_detached else repo.active_branch.name
        info["dirty"] = repo.is_dirty(untracked_files=True)
        info["diff_stat"] = repo.git.diff("HEAD", "--stat") if info["commit"] else ""
        info["untracked"] = len(repo.untracked_files)
        return info
    except Exception as exc:  # a broken repo must not stop the capture
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    finally:
        repo.close()


# --- commands (repair worktrees) ----------------------------------------------------


# Variables that point git at a repository. A selfheal run started from a git hook
# (pre-commit running pytest sets GIT_INDEX_FILE) would otherwise aim every git command
# of the worktree — and the provider's — at the user's own index.
GIT_LOCATING_ENV: Tuple[str, ...] = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_NAMESPACE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
)


@contextmanager
def isolated_git_env() -> Iterator[None]:
    """Drop the git-locating variables (GIT_DIR, GIT_INDEX_FILE…) from ``os.environ`` for
    the duration: every git command (ours, the loop's diff hash, the provider's) must find
    the repository from its working directory."""
    saved = {k: os.environ.pop(k) for k in GIT_LOCATING_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


class GitFailed(Exception):
    """A git command failed (internal: callers turn it into a one-line user error)."""

    def __init__(self, args: Sequence[str], status: Optional[int], stderr: str) -> None:
        self.args_list = list(args)
        self.status = status
        self.stderr = stderr
        super().__init__(self.first_line)

    @property
    def first_line(self) -> str:
        """The most useful line of git's error output."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        for line in lines:
            if line.startswith(("error:", "fatal:")):
                return line
        return lines[0] if lines else f"git {' '.join(self.args_list[:2])} exited with {self.status}"


def run_git(
    cwd: Path,
    args: Sequence[str],
    *,
    env: Optional[Mapping[str, str]] = None,
    hooks_dir: Optional[Path] = None,
) -> bytes:
    """``git <args>`` in ``cwd`` (argv list, never a shell); stdout as bytes, exactly as git wrote it.

    ``hooks_dir``: an empty directory used as ``core.hooksPath`` (no user hook runs).
    Raises :class:`GitFailed` on a non-zero exit or when git cannot start.
    """
    git = _gitpython_or_refuse()
    options = ["core.fsmonitor=false", "gc.auto=0"]
    if hooks_dir is not None:
        options.append(f"core.hooksPath={hooks_dir}")
    extra = dict(env or {})
    extra.setdefault("GIT_TERMINAL_PROMPT", "0")
    runner = git.Git(str(cwd))(c=options)  # `git -c <option>...` before the command
    command = getattr(runner, args[0].replace("-", "_"))  # gitpython's command methods: runner.worktree(...)
    try:
        out = command(
            *args[1:],
            with_extended_output=False,
            stdout_as_string=False,
            strip_newline_in_stdout=False,  # a patch must keep its last newline
            shell=False,
            env=extra,
        )
    except git.GitCommandError as exc:
        stderr = exc.stderr if isinstance(exc.stderr, str) else str(exc.stderr or "")
        # gitpython wraps stderr as "  stderr: '...'"; keep the text only.
        text = stderr.strip()
        if text.startswith("stderr:"):
            text = text[len("stderr:"):].strip()
        text = text.strip("'")
        raise GitFailed(args, exc.status if isinstance(exc.status, int) else None, text) from None
    except (OSError, git.GitCommandNotFound) as exc:
        raise GitFailed(args, None, f"fatal: cannot run git: {exc}") from None
    return out if isinstance(out, bytes) else str(out).encode()


def repo_top(path: Path) -> Path:
    """The top of the git working tree containing ``path``.

    ``RefusedError`` (exit 5) outside a git repository, in a bare repository or when git
    is unavailable: repair providers run only in an isolated worktree.
    """
    _gitpython_or_refuse()
    repo = _open_repo(path)
    if repo is None:
        raise RefusedError(
            f"repair providers need a git repository: {path} is not inside one "
            "(repairs run in an isolated git worktree; run `git init` and commit, or unset ralf_lite.repair.command)"
        )
    try:
        if repo.working_tree_dir is None:
            raise RefusedError(f"repair providers need a working tree: {path} is a bare repository")
        if not repo.head.is_valid():
            raise RefusedError(
                f"repair providers need a commit to start from: the repository at {repo.working_tree_dir} "
                "has no commit yet (commit once, then resume the loop)"
            )
        return Path(repo.working_tree_dir).resolve()
    finally:
        repo.close()


# --- the demo ----------------------------------------------------------------------


def init_repo(path: Path, message: str) -> None:
    """``git init`` + commit everything in ``path`` with the tool's identity."""
    git = _gitpython()
    repo = git.Repo.init(path)
    try:
        repo.git.add(A=True)
        actor = git.Actor(TOOL_NAME, TOOL_EMAIL)
        repo.index.commit(message, author=actor, committer=actor)
    finally:
        repo.close()


__all__ = [
    "HASH_LENGTH",
    "JUNK_PATHSPECS",
    "TOOL_EMAIL",
    "TOOL_NAME",
    "GitFailed",
    "clean_tree_hash",
    "diff_hash",
    "git_context",
    "init_repo",
    "repo_top",
    "run_git",
]
