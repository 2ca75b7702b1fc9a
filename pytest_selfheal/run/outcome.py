"""The exit code a run's final status means: one map for ``selfheal loop`` and ``selfheal ci``."""

from __future__ import annotations

from typing import Optional

from pytest_selfheal.errors import EXIT_OK, EXIT_PYTEST, EXIT_UNRESOLVED, EXIT_USAGE
from pytest_selfheal.records.vocab import FinalStatus

#: pytest's own exit code for a usage error (bad pytest arguments).
PYTEST_USAGE_ERROR = 4


def exit_code_for(final_status: str, *, fail_on_unresolved: bool = True,
                  pytest_exit_code: Optional[int] = None, pass_on_proposed_fix: bool = False) -> int:
    """The exit code of a run that ended with ``final_status`` (docs/exit-codes.md). ``error``
    (pytest could not run the tests) fails whatever ``fail_on_unresolved`` says: a broken
    setup fails the job."""
    if final_status in (FinalStatus.RESOLVED, FinalStatus.PASSED):
        return EXIT_OK
    if final_status == FinalStatus.FIX_PROPOSED:
        return EXIT_OK if pass_on_proposed_fix or not fail_on_unresolved else EXIT_UNRESOLVED
    if final_status == FinalStatus.ERROR:
        return EXIT_USAGE if pytest_exit_code == PYTEST_USAGE_ERROR else EXIT_PYTEST
    return EXIT_UNRESOLVED if fail_on_unresolved else EXIT_OK
