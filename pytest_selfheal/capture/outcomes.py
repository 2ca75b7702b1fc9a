"""What a verification run saw fail, signed (edge: a pytest plugin loaded with ``-p``).

A verification's verdict is read from its junit file, which the run's own process writes,
so code under repair could rewrite it before the process ends (an ``atexit`` handler that
deletes its ``<failure>``). This plugin takes the loop's one-off key from the environment
when it is imported (before any conftest or project module), records each test whose
report failed, and writes them with an HMAC beside the junit file once the session is
over: the loop trusts no junit that says one of them passed (loop/verify.py ``forged``).
"""

from __future__ import annotations

import json
import os
from typing import Optional

import pytest

from pytest_selfheal.junit.signed import SIGNED_SUFFIX, signature
from pytest_selfheal.names import REPORT_KEY_ENV

_KEY = os.environ.pop(REPORT_KEY_ENV, "")
_FAILED: set[str] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _FAILED.add(report.nodeid.rsplit("::", 1)[-1])  # as junit names its testcase


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    junit: Optional[str] = config.getoption("xmlpath", None)
    if not _KEY or not junit or hasattr(config, "workerinput"):
        return
    failed = sorted(_FAILED)
    with open(junit + SIGNED_SUFFIX, "w", encoding="utf-8") as handle:
        json.dump({"failed": failed, "signature": signature(_KEY, failed)}, handle)
