"""Small gitpython helpers shared by the demo, context and repair code (edge: git)."""

from __future__ import annotations

import os
from pathlib import Path

# Identity used for commits the tool makes itself (demo repos, worktree snapshots).
TOOL_NAME = "pytest-selfheal"
TOOL_EMAIL = "pytest-selfheal@localhost"


def init_repo(path: Path, message: str) -> None:
    """``git init`` + commit everything in ``path`` with the tool's identity."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    import git

    repo = git.Repo.init(path)
    try:
        repo.git.add(A=True)
        actor = git.Actor(TOOL_NAME, TOOL_EMAIL)
        repo.index.commit(message, author=actor, committer=actor)
    finally:
        repo.close()
