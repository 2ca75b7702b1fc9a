"""Plain data passed between the stages of the flow (docs/architecture.md).

junit XML -> TestCaseResult -> Failure (fingerprint + classification) -> incident -> plan
-> loop observations -> attempts and run result -> report.

Everything here is plain data: no I/O, no pytest objects (a ``Failure`` becomes a ``FailureEntry`` record).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Optional

from pytest_selfheal.records.incident import FailureEntry, RootCause
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


@dataclass(frozen=True)
class Fingerprint:
    """A failure's stable identity across reruns and machines."""

    signature: str  # "<failure_type> | <test> | <normalised message>"
    fingerprint: str  # short stable hash of the signature
    scheme: int  # version of the normalisation scheme that produced it


@dataclass(frozen=True)
class Failure:
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

    def _keys(self) -> tuple[str, ...]:
        # Every field, in order; root_cause absent, not null, when unknown (verification
        # failures never have one).
        return tuple(f.name for f in fields(self) if f.name != "root_cause" or self.root_cause is not None)

    @classmethod
    def from_entry(cls, entry: FailureEntry) -> Failure:
        """The failure a recorded entry (an incident's or an attempt's) describes; a key the
        file lacks takes the default a capture would have written."""
        return cls(
            test=entry.test or entry.nodeid or "", fingerprint=entry.fingerprint, signature=entry.signature,
            scheme=entry.scheme or 1, failure_type=entry.failure_type or "UNKNOWN", code_fixable=bool(entry.code_fixable),
            transient=bool(entry.transient), failure_class=entry.failure_class or "deterministic", message=entry.message,
            outcome=entry.outcome or OUTCOME_FAILED, nodeid=entry.nodeid, target_paths=list(entry.target_paths),
        )

    def to_entry(self) -> FailureEntry:
        """The failure as an incident's ``failures`` entry, written with the same keys
        (``keys``: a null node id or empty target paths are written, as read)."""
        return FailureEntry(
            nodeid=self.nodeid, test=self.test, outcome=self.outcome, fingerprint=self.fingerprint,
            signature=self.signature, scheme=self.scheme, failure_type=self.failure_type,
            code_fixable=self.code_fixable, transient=self.transient, failure_class=self.failure_class,
            message=self.message, target_paths=tuple(self.target_paths), root_cause=self.root_cause,
            keys=self._keys(),
        )
