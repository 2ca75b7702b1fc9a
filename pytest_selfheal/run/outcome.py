"""The exit code a run's final status means: one map for ``selfheal loop`` and ``selfheal ci``.

The codes themselves are defined in :mod:`pytest_selfheal.errors`; which one a finished run
returns is decided here only (docs/exit-codes.md).
"""

from __future__ import annotations

from typing import Optional

from pytest_selfheal.errors import EXIT_OK, EXIT_PYTEST, EXIT_UNRESOLVED, EXIT_USAGE
from pytest_selfheal.records.vocab import FinalStatus

#: pytest's own exit code for a usage error (bad pytest arguments).
PYTEST_USAGE_ERROR = 4


def exit_code_for(final_status: str, *, fail_on_unresolved: bool = True,
                  pytest_exit_code: Optional[int] = None, pass_on_proposed_fix: bool = False) -> int:
    """The exit code of a run that ended with ``final_status`` (docs/exit-codes.md).

    0 resolved or passed; 1 anything else the tests decided (escalated, replan_requested,
    disabled, failed without an incident) when ``fail_on_unresolved``, else 0; for
    ``error`` (pytest could not run the tests) 2 when pytest's ``pytest_exit_code`` was a
    usage error (bad ``pytest-args``), else 7 (EXIT_PYTEST) -- whatever
    ``fail_on_unresolved`` says: a broken setup fails the job. ``fix_proposed`` (the job's
    code still fails; a patch would fix it) is 1 unless ``pass_on_proposed_fix``.
    """
    if final_status in (FinalStatus.RESOLVED, FinalStatus.PASSED):
        return EXIT_OK
    if final_status == FinalStatus.FIX_PROPOSED:
        return EXIT_OK if pass_on_proposed_fix or not fail_on_unresolved else EXIT_UNRESOLVED
    if final_status == FinalStatus.ERROR:
        return EXIT_USAGE if pytest_exit_code == PYTEST_USAGE_ERROR else EXIT_PYTEST
    return EXIT_UNRESOLVED if fail_on_unresolved else EXIT_OK


__all__ = [
    "PYTEST_USAGE_ERROR",
    "exit_code_for",
]
