"""Run context for an incident: git state, versions, platform, CI metadata (edge: env)."""

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


def ci_context(env: Mapping[str, str]) -> Dict[str, str]:
    """The CI variables present in ``env`` (a fixed list, no secrets)."""
    return {key: env[key] for key in _CI_KEYS if key in env}


def run_context(
    rootdir: Path, args: Sequence[str], env: Mapping[str, str] = os.environ, *, git: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    """Everything ``context.json`` records about the run; ``git`` is
    :func:`~pytest_selfheal.gitrepo.git_snapshot`'s context (read with the diff hash)."""
    import pytest

    return {
        "rootdir": str(rootdir),
        "git": git,
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "pytest": pytest.__version__,
        "platform": platform.platform(),
        "invocation_args": list(args),
        "cwd": os.getcwd(),
        "ci": ci_context(env),
    }
