"""Plain data passed between the stages of the flow (docs/architecture.md): junit XML ->
TestCaseResult -> Failure (records/incident.py) -> incident -> plan -> attempts -> report. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from pytest_selfheal.records.incident import Failure as Failure  # the stages' failure record
from pytest_selfheal.records.vocab import FAILURE_TYPES, OUTCOMES, FailureClass

# Outcomes of one testcase, as read from junit XML (declared in records/vocab.OUTCOMES):
# failed is a <failure> element, error an <error> element (setup/teardown/collection
# errors), missing a selected test that did not appear in the junit at all.
OUTCOME_PASSED, OUTCOME_FAILED, OUTCOME_ERROR, OUTCOME_SKIPPED, OUTCOME_MISSING = OUTCOMES

FAILING_OUTCOMES = (OUTCOME_FAILED, OUTCOME_ERROR)

# Failure types (declared in records/vocab.FAILURE_TYPES); DOCTEST_MISMATCH: a doctest
# example printed something else than its expected output.
TEST_ASSERTION, DOCTEST_MISMATCH, TYPECHECK, LINT, BUILD_COMPILE, TOOLING_ENV, TIMEOUT, UNKNOWN = FAILURE_TYPES

# The contract's failure_class values (records/vocab.FailureClass).
FAILURE_CLASS_DETERMINISTIC = FailureClass.DETERMINISTIC
FAILURE_CLASS_TRANSIENT = FailureClass.TRANSIENT
FAILURE_CLASS_ENVIRONMENT = FailureClass.ENVIRONMENT


@dataclass(frozen=True)
class TestCaseResult:
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


@dataclass(frozen=True)
class Classification:
    """What kind of failure this is and whether code changes can fix it."""

    failure_type: str  # one of FAILURE_TYPES
    code_fixable: bool
    transient: bool
    failure_class: FailureClass
    rule: str = ""  # name of the rule that matched, for explanations
