"""The records of ``selfheal ci`` at its GitHub seam: what one run concluded (:class:`CiVerdict`)
and a comment as the API returns it (:class:`IssueComment`). Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pytest_selfheal.records.jsondoc import dataclass_json
from pytest_selfheal.records.tolerant import as_str, opt_str

# The label of a new or changed test after its re-runs (github/new_tests.py).
NEW_FLAKY = "flaky (new)"  # passed and failed on the same code: fails the job by default
NEW_FAILING = "failing"  # failed every time: an ordinary failure, looped like any other
NEW_STABLE = "checked"  # passed every time
NEW_UNCHECKED = "unchecked"  # not re-run its count (the budget, a refusal, a collection error): fails the job by default


@dataclass(frozen=True)
class NewTestResult:
    """One test the pull request adds or changes, and how its runs went (the job's and the re-runs)."""

    nodeid: str
    passed: int
    failed: int
    first_failure: str = ""  # the first failure's message, one line, redacted
    fingerprint: str = ""  # the first failure's fingerprint (the history records it)
    reruns: int = 0  # the re-runs that ran it (passed, failed or skipped)
    planned: int = 0  # the re-runs the check meant to give it (new_tests.reruns)

    @property
    def label(self) -> str:
        if self.passed and self.failed:
            return NEW_FLAKY
        if self.reruns < max(self.planned, 1):
            return NEW_UNCHECKED
        return NEW_FAILING if self.failed else NEW_STABLE


@dataclass(frozen=True)
class NewTestsCheck:
    """What the check of new tests for flakiness did on one ``selfheal ci`` run."""

    note: str  # its one line: what was checked, or why nothing was
    tests: tuple[NewTestResult, ...] = ()
    seed: Optional[int] = None  # of the re-run order: replayable
    reruns: int = 0  # the re-runs done
    not_rerun: int = 0  # planned re-runs left out for lack of time
    fails_job: bool = False  # a flaky new test fails the job (the action's fail-on-new-flaky)
    unchecked_fails_job: bool = False  # an unchecked new test fails the job (fail-on-new-unchecked)

    @property
    def flaky(self) -> tuple[str, ...]:
        return tuple(t.nodeid for t in self.tests if t.label == NEW_FLAKY)

    @property
    def unchecked(self) -> tuple[str, ...]:
        return tuple(t.nodeid for t in self.tests if t.label == NEW_UNCHECKED)

    @property
    def fails(self) -> bool:
        return bool((self.flaky and self.fails_job) or (self.unchecked and self.unchecked_fails_job))


@dataclass(frozen=True)
class CiVerdict:
    """What one ``selfheal ci`` run concluded and where it ran: the verdict, the pull
    request, the checked head commit and the workflow run's URL (checked values only; None
    until :func:`github.ci_verdict.located` sets them)."""

    final_status: str
    stop_reason: str
    iterations: int
    incident_id: Optional[str]
    pytest_exit_code: Optional[int]
    pull_request: Optional[int] = None
    head_sha: Optional[str] = None
    run_url: Optional[str] = None
    new_tests: Optional[NewTestsCheck] = None  # the check of new tests for flakiness (pull requests)
    # Without an incident: the tests the run passed only on a re-run (a re-run plugin), recorded as flaky.
    passed_on_rerun: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The ``ci`` block as stored in the report JSON: every field, ``new_tests`` and
        ``passed_on_rerun`` only when there are any (string-valued enums as strings)."""
        block = {key: value for key, value in dataclass_json(self).items()
                 if value or key not in ("new_tests", "passed_on_rerun")}
        return {**block, "final_status": str(self.final_status), "stop_reason": str(self.stop_reason)}


@dataclass(frozen=True)
class IssueComment:
    """A comment of an issue or PR as the API returns it (each field None, or ``""`` for the
    author, when the payload lacks it or has another type)."""

    id: Optional[int]
    body: Optional[str]
    author: str
    html_url: Optional[str]

    @classmethod
    def from_json(cls, data: object) -> IssueComment:
        fields = data if isinstance(data, dict) else {}
        cid, user = fields.get("id"), fields.get("user")
        return cls(cid if isinstance(cid, int) and not isinstance(cid, bool) else None, opt_str(fields.get("body")),
                   as_str(user.get("login")) if isinstance(user, dict) else "", opt_str(fields.get("html_url")))
