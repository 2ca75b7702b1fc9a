"""Plain data passed between the stages of the flow (docs/architecture.md).

junit XML -> TestCaseResult -> Failure (fingerprint + classification) -> incident -> plan
-> loop observations -> attempts and run result -> report.

Everything here is plain data: no I/O, no pytest objects (a ``Failure`` becomes a ``FailureEntry`` record).
"""

from __future__ import annotations

from dataclasses import field, fields
from typing import Any, Optional

from pytest_selfheal.records.frozen import Frozen, dataclass
from pytest_selfheal.records.incident import FailureEntry, RootCause
from pytest_selfheal.records.vocab import FailureClass

# Outcomes of one testcase, as read from junit XML.
OUTCOME_PASSED = "passed"
OUTCOME_FAILED = "failed"  # a <failure> element
OUTCOME_ERROR = "error"  # an <error> element (setup/teardown/collection errors)
OUTCOME_SKIPPED = "skipped"
OUTCOME_MISSING = "missing"  # a selected test that did not appear in the junit at all

FAILING_OUTCOMES = (OUTCOME_FAILED, OUTCOME_ERROR)

# Failure types.
TEST_ASSERTION = "TEST_ASSERTION"
TYPECHECK = "TYPECHECK"
LINT = "LINT"
BUILD_COMPILE = "BUILD_COMPILE"
TOOLING_ENV = "TOOLING_ENV"
TIMEOUT = "TIMEOUT"
UNKNOWN = "UNKNOWN"
DOCTEST_MISMATCH = "DOCTEST_MISMATCH"  # a doctest example printed something else than its expected output
FAILURE_TYPES = (TEST_ASSERTION, DOCTEST_MISMATCH, TYPECHECK, LINT, BUILD_COMPILE, TOOLING_ENV, TIMEOUT, UNKNOWN)

# The contract's failure_class values (records/vocab.FailureClass).
FAILURE_CLASS_DETERMINISTIC = FailureClass.DETERMINISTIC
FAILURE_CLASS_TRANSIENT = FailureClass.TRANSIENT
FAILURE_CLASS_ENVIRONMENT = FailureClass.ENVIRONMENT


@dataclass(frozen=True, eq=False, repr=False)
class TestCaseResult(Frozen):
    """One <testcase> as read from a junit file of any runner."""

    __test__ = False  # not a pytest test class

    classname: str
    name: str
    outcome: str  # one of the OUTCOME_* values
    message: str = ""  # the message attribute of <failure>/<error>, "" when absent
    exc_type: str = ""  # the type attribute of <failure>/<error>, "" when absent
    text: str = ""  # the element text (traceback or runner output), bounded
    file: Optional[str] = None
    line: Optional[int] = None
    time: float = 0.0

    @property
    def test(self) -> str:
        """Runner-independent test identity used in signatures: ``classname::name``."""
        return f"{self.classname}::{self.name}" if self.classname else self.name


@dataclass(frozen=True, eq=False, repr=False)
class Classification(Frozen):
    """What kind of failure this is and whether code changes can fix it."""

    failure_type: str  # one of FAILURE_TYPES
    code_fixable: bool
    transient: bool
    failure_class: FailureClass
    rule: str = ""  # name of the rule that matched, for explanations


@dataclass(frozen=True, eq=False, repr=False)
class Fingerprint(Frozen):
    """A failure's stable identity across reruns and machines."""

    signature: str  # "<failure_type> | <test> | <normalised message>"
    fingerprint: str  # short stable hash of the signature
    scheme: int  # version of the normalisation scheme that produced it


@dataclass(frozen=True, eq=False, repr=False)
class Failure(Frozen):
    """A failing testcase with its fingerprint and classification.

    ``nodeid`` is the pytest node id when known (captured by the plugin), else None.
    """

    test: str
    fingerprint: str
    signature: str
    scheme: int
    failure_type: str
    code_fixable: bool
    transient: bool
    failure_class: str
    message: str  # the first stable failure line, before normalisation (redacted)
    outcome: str = OUTCOME_FAILED
    nodeid: Optional[str] = None
    target_paths: list[str] = field(default_factory=list)
    # The root-cause evidence resolved at capture (capture/evidence.py); None when unknown.
    root_cause: Optional[RootCause] = None

    def to_dict(self) -> dict[str, Any]:
        """The failure as JSON (``root_cause`` absent, not null, when unknown)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["target_paths"] = list(self.target_paths)
        if self.root_cause is None:
            del data["root_cause"]  # verification failures never have one
        else:
            data["root_cause"] = self.root_cause.to_json()
        return data

    def to_entry(self) -> FailureEntry:
        """The failure as an incident's ``failures`` entry (the same keys as :meth:`to_dict`)."""
        return FailureEntry.from_json(self.to_dict(), "failure")
