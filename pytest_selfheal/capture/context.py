"""Run context for an incident: git state, versions, platform, CI metadata (edge: git, env)."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

# CI metadata worth keeping; values only, never tokens (redaction runs on the result too).
_CI_KEYS = (
    "CI",
    "GITHUB_ACTIONS",
    "GITHUB_REPOSITORY",
    "GITHUB_REF",
    "GITHUB_SHA",
    "GITHUB_RUN_ID",
    "GITHUB_RUN_ATTEMPT",
    "GITHUB_WORKFLOW",
    "GITHUB_JOB",
    "GITHUB_EVENT_NAME",
    "GITHUB_HEAD_REF",
    "GITHUB_BASE_REF",
    "RUNNER_OS",
    "GITLAB_CI",
    "CI_PIPELINE_ID",
    "BUILDKITE",
    "JENKINS_URL",
)


def git_context(path: Path) -> Optional[Dict[str, Any]]:
    """Commit, branch, dirty state and diff stat of the repo containing ``path``; None outside git."""
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    try:
        import git  # gitpython: imported lazily, it is slow to import and needs a git binary
    except Exception:
        return None
    try:
        repo = git.Repo(path, search_parent_directories=True)
    except Exception:
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


def ci_context(env: Mapping[str, str]) -> Dict[str, str]:
    """The CI variables present in ``env`` (a fixed list, no secrets)."""
    return {key: env[key] for key in _CI_KEYS if key in env}


def run_context(
    rootdir: Path, args: Sequence[str], env: Mapping[str, str] = os.environ
) -> Dict[str, Any]:
    """Everything ``context.json`` records about the run."""
    import pytest

    return {
        "rootdir": str(rootdir),
        "git": git_context(rootdir),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "pytest": pytest.__version__,
        "platform": platform.platform(),
        "invocation_args": list(args),
        "cwd": os.getcwd(),
        "ci": ci_context(env),
    }
