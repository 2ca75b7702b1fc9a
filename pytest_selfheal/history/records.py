"""What the failure history holds (pure): a recorded run and its test outcomes. Node ids arrive
already redacted: the history is written from the same redacted failures as the incident files."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Optional

# The outcome of one test in one recorded run.
FAILED = "failed"  # failed (or errored) and was not seen passing in that run
PASSED_ON_RERUN = "passed_on_rerun"  # failed, then passed when re-run with no code change
PASSED = "passed"  # a re-run (loop iteration) where it passed after a code change
QUARANTINED = "quarantined"  # failed, and a quarantine entry covered it
OUTCOMES: tuple[str, ...] = (FAILED, PASSED_ON_RERUN, PASSED, QUARANTINED)

# Which surface recorded a run.
CAPTURE = "capture"  # pytest --selfheal created an incident
LOOP = "loop"  # one verification iteration of the loop
AGENT = "agent"  # pytest --selfheal recorded as the next iteration of an open incident
NEW_TESTS = "new_tests"  # selfheal ci re-ran a pull request's new tests and found them flaky
RUN_KINDS: tuple[str, ...] = (CAPTURE, LOOP, AGENT, NEW_TESTS)


# owner/name as GitHub spells it: letters, digits, '-', '_', '.'; one slash.
_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$")
#: A commit SHA as git and GitHub write it, abbreviated or whole.
COMMIT_SHA = re.compile(r"^[0-9a-fA-F]{7,64}$")


def plausible_ref_name(name: str) -> bool:
    """True for a branch name git could have made (``git check-ref-format``'s rules, at most 255 characters)."""
    if not name or len(name) > 255 or name.startswith(("-", "/")) or name.endswith(("/", ".", ".lock")):
        return False
    if any(ord(c) < 0x20 or c in " ~^:?*[\\\x7f" for c in name) or ".." in name or "@{" in name or "//" in name:
        return False
    return all(part and not part.startswith(".") for part in name.split("/"))


def plausible_repository(name: str) -> bool:
    """True for an ``owner/name`` repository full name."""
    return bool(_REPOSITORY.match(name))


@dataclass(frozen=True)
class RunInfo:
    """One recorded run: when, where (commit, branch and its repository, CI job), how many tests ran;
    ``run_key`` keeps a run recorded twice (a resumed close-out, a merged shard) once."""

    run_key: str
    recorded_at: str  # ISO 8601, UTC
    kind: str
    incident_id: Optional[str] = None
    iteration: Optional[int] = None
    commit: Optional[str] = None
    branch: Optional[str] = None
    ci_workflow: Optional[str] = None
    ci_job: Optional[str] = None
    ci_run_id: Optional[str] = None
    tests_run: Optional[int] = None
    #: The repository (owner/name) whose branch this is: a fork's ``main`` is not the base's.
    repository: Optional[str] = None


RUN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunInfo))


@dataclass(frozen=True)
class TestOutcome:
    """One failing or re-run test of a recorded run."""

    __test__ = False  # not a pytest test class, whatever its name says

    nodeid: str
    outcome: str
    fingerprint: Optional[str] = None
    failure_class: Optional[str] = None


@dataclass(frozen=True)
class Sighting:
    """What the history knows of one fingerprint on one branch: first seen, how often."""

    fingerprint: str
    first_commit: Optional[str]
    first_seen_at: str
    occurrences: int


@dataclass(frozen=True)
class FlakeRate:
    """A test's flake record over a window: re-run passes among its recorded failures."""

    nodeid: str
    flaky: int  # runs where it passed on re-run
    failed: int  # runs where it failed (passed on re-run included)
    last_seen_at: str

    @property
    def rate(self) -> float:
        return self.flaky / self.failed if self.failed else 0.0
