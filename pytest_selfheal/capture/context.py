"""Run context for an incident: git state, versions, platform, CI metadata (edge: env)."""

from __future__ import annotations

import os
import platform
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from pytest_selfheal.records.context import GitContext, RunContext
from pytest_selfheal.redact import Redactor

# CI metadata worth keeping; values only, never tokens (redaction runs on the result too).
_CI_KEYS = (
    "CI", "GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_REF", "GITHUB_SHA", "GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT",
    "GITHUB_WORKFLOW", "GITHUB_JOB", "GITHUB_EVENT_NAME", "GITHUB_HEAD_REF", "GITHUB_BASE_REF", "RUNNER_OS",
    "GITLAB_CI", "CI_PIPELINE_ID", "BUILDKITE", "JENKINS_URL",
)


# platform.platform() runs a subprocess on its first call: probe_platform() starts it in a thread.
_PLATFORM_PROBE: list[threading.Thread] = []


def probe_platform() -> None:
    """Start reading the platform string in a thread, once per process: the capture need not wait for it."""
    if not _PLATFORM_PROBE:
        thread = threading.Thread(target=platform.platform, name="selfheal-platform", daemon=True)
        _PLATFORM_PROBE.append(thread)
        thread.start()


def ci_context(env: Mapping[str, str]) -> dict[str, str]:
    return {key: env[key] for key in _CI_KEYS if key in env}


def run_context(
    rootdir: Path,
    args: Sequence[str],
    env: Mapping[str, str] = os.environ,
    *,
    git: Optional[GitContext],
    redactor: Optional[Redactor] = None,
) -> RunContext:
    """Everything ``context.json`` records about the run, redacted; ``git``: the snapshot's context."""
    import pytest

    for probe in _PLATFORM_PROBE:
        probe.join()
    doc = {
        "rootdir": str(rootdir),
        "git": git.to_json() if git is not None else None,
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "pytest": pytest.__version__,
        "platform": platform.platform(),
        "invocation_args": list(args),
        "cwd": os.getcwd(),
        "ci": ci_context(env),
    }
    # The one place the document is built: redacted as JSON, then parsed (its key order kept).
    return RunContext.from_json(redactor.redact_obj(doc) if redactor is not None else doc, "context.json")
