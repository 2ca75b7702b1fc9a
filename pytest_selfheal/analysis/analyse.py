"""Glue: junit files -> fingerprinted, classified failures, each as soon as it is read
(streamed, reruns de-duplicated, bounded memory; docs/fingerprints.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Optional

from pytest_selfheal.analysis.classify import Rule, classify
from pytest_selfheal.analysis.doctests import is_doctest_line
from pytest_selfheal.analysis.fingerprint import SCHEME, first_stable_line, signature_and_hash
from pytest_selfheal.junit.reader import Source, latest_failing, map_failing
from pytest_selfheal.records import models
from pytest_selfheal.records.incident import CAPTURED_KEYS

MAX_MESSAGE = 500  # characters of the first stable line kept as Failure.message

Analysed = tuple[models.Failure, models.Classification]


def analyse_case(case: models.TestCaseResult, extra_rules: Sequence[Rule] = ()) -> Analysed:
    line = first_stable_line(case)
    classification = classify(case, extra_rules, headline=line)
    test = case.test
    signature, digest = signature_and_hash(classification.failure_type, test, line)
    failure = models.Failure(
        test=test,
        fingerprint=digest,
        signature=signature,
        scheme=SCHEME,
        failure_type=classification.failure_type,
        code_fixable=classification.code_fixable,
        transient=classification.transient,
        failure_class=classification.failure_class,
        message=line[:MAX_MESSAGE],
        outcome=case.outcome,
        nodeid=None,
        keys=CAPTURED_KEYS,
    )
    return failure, classification


def analyse_junit(
    source: Source, extra_rules: Sequence[Rule] = (), warnings: Optional[list[str]] = None
) -> list[Analysed]:
    """(Failure, Classification) of each failing testcase of a junit file; InputError when it is none."""
    return map_failing(source, lambda case: analyse_case(case, extra_rules), warnings=warnings)


def failures_from_cases(
    cases: Iterable[models.TestCaseResult],
    extra_rules: Sequence[Rule] = (),
    warnings: Optional[list[str]] = None,
) -> list[models.Failure]:
    """The failing testcases as Failures, reruns de-duplicated, failing doctests last (never the lead)."""
    failures = [analyse_case(case, extra_rules)[0] for case in latest_failing(cases, warnings=warnings)]
    return sorted(failures, key=lambda f: is_doctest_line(f.message))  # stable


