"""The verdict of the MCP ``run_tests`` tool (and of the stop gate, which runs it): its
structured content (docs/mcp.md "The verdict"), keys in the order the tool has always sent. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from pytest_selfheal.records.vocab import TextEnum

DIGEST = "digest"  # the structured key of the open incident's root-cause groups (mcp_server/digest.py)
DIGEST_DOC = ("the open incident's root-cause groups, largest first, as the show tool writes them: where to fix "
              "(target paths), the failing tests, the first line of each failure; a last entry says what was left out")


class RunDecision(TextEnum):
    """What the agent does next: fix and run again, or stop trying."""

    CONTINUE = "CONTINUE"
    STOP = "STOP"


@dataclass(frozen=True)
class ClosedRun:
    """The incident a run stopped while it captured a new one (the verdict's ``closed``)."""

    incident_id: str
    iteration: int
    stop_reason: Optional[str]
    status: str


@dataclass(frozen=True)
class RunVerdict:
    """What one test run means for the agent: the decision, why, the incident it is about (None:
    the run does not say; ``plugin_lines`` go in the text only; a field's ``doc``: its description
    in the tool's output schema)."""

    decision: RunDecision = field(metadata={"doc": "CONTINUE: fix and run again; STOP: stop trying"})
    stop_reason: Optional[str] = field(metadata={"doc": "with STOP: the loop's stop reason, `none` for a green run"})
    status: str = field(metadata={"doc": "captured, running, resolved, escalated, passed, not_counted, ..."})
    summary: str
    next: str = field(metadata={"doc": "what to do next"})
    pytest_exit_code: Optional[int]
    # pytest's summary line, e.g. (("failed", 3), ("passed", 1)); an object in the JSON
    counts: tuple[tuple[str, int], ...] = field(metadata={"doc": "pytest's summary, e.g. {\"failed\": 3, \"passed\": 1}"})
    max_iterations: int
    incident_id: Optional[str] = field(default=None, metadata={"doc": "the incident the verdict is about"})
    iteration: Optional[int] = field(default=None, metadata={"doc": "iteration k (of max_iterations) this run recorded"})
    captured: Optional[str] = field(default=None, metadata={"doc": "the incident this run captured, if any"})
    fingerprint_changed: Optional[bool] = None
    progress: Optional[bool] = None
    tests_fixed: Optional[tuple[str, ...]] = None
    flaky: Optional[bool] = None
    bucket: Optional[str] = None
    closed: Optional[ClosedRun] = field(default=None, metadata={"doc": "an incident the same run stopped"})
    stopped_because: Optional[str] = None
    plugin_lines: tuple[str, ...] = ()

    def redacted(self, redact_obj: Callable[[Any], Any]) -> RunVerdict:
        """The verdict with every string passed through ``redact_obj`` (a redactor's), the
        decision word aside; the counts as an object (their keys are redacted as keys)."""
        changes = {f.name: redact_obj(getattr(self, f.name)) for f in dataclasses.fields(self)
                   if f.name not in ("decision", "counts", "closed")}
        closed = self.closed
        if closed is not None:
            closed = ClosedRun(redact_obj(closed.incident_id), closed.iteration, redact_obj(closed.stop_reason),
                               redact_obj(closed.status))
        return dataclasses.replace(self, counts=tuple(redact_obj(dict(self.counts)).items()), closed=closed,
                                   **changes)

    def to_json(self) -> dict[str, Any]:
        """The structured content of ``run_tests``: every field but ``plugin_lines``; an
        iteration's ``tests_fixed`` and ``flaky`` before the decision, a capture's after it."""
        doc: dict[str, Any] = {
            "pytest_exit_code": self.pytest_exit_code, "counts": dict(self.counts),
            "max_iterations": self.max_iterations, "incident_id": self.incident_id, "iteration": self.iteration,
            "captured": self.captured, "fingerprint_changed": self.fingerprint_changed, "progress": self.progress,
        }
        fixed = None if self.tests_fixed is None else list(self.tests_fixed)
        if self.flaky is not None:
            doc.update(tests_fixed=fixed, flaky=self.flaky)
        doc.update(decision=self.decision.value, stop_reason=self.stop_reason, status=self.status)
        if self.flaky is None and fixed is not None:
            doc["tests_fixed"] = fixed
        if self.bucket is not None:
            doc["bucket"] = self.bucket
        closed = self.closed
        if closed is not None:
            doc["closed"] = dataclasses.asdict(closed)
        if self.stopped_because is not None:
            doc["stopped_because"] = self.stopped_because
        doc.update(summary=self.summary, next=self.next)
        return doc
