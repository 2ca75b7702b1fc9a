"""A function-level coverage spectrum of the run, for ``pytest --selfheal --selfheal-spectrum`` (edge).

Spectrum-based fault localisation (Ochiai, DStar) asks which code the failing tests ran
that the passing ones did not. This records, per test (setup, call and teardown), the set
of project functions it entered — not lines: the suspects are functions, and a function
entry is one ``call`` event where line coverage is one event per line. It uses
:func:`sys.settrace` with no per-frame tracer (the interpreter then reports calls only) and
is off by default: a capture without the flag pays nothing (docs/loop.md "Suspects").

Calls made only to explain a failure are not evidence: once assertion rewriting starts
formatting a failed ``assert`` (its ``repr`` of each operand, its comparison explanation),
or unittest's ``assertEqual`` its message, nothing is recorded until that code returns, so ``Version.__repr__`` never outranks the
helper that computed the wrong value. A function is keyed by the line of its ``def`` (not
its first decorator's), and a generator expression or comprehension by the function it is
written in. A class body is never a key, also a class made inside a function (it runs
each time the function does): the suspect is the function or a method.

A run that already traces (coverage.py, a debugger) keeps its tracer and gets no spectrum.
Under xdist each worker records its tests and the function keys ride on the teardown
report (:data:`SPECTRUM_ATTR`) to the controller, like the root-cause evidence.
"""

from __future__ import annotations

import inspect
import os
import pprint
import sys
import types
import unittest.util
from collections.abc import Generator
from typing import Any, Optional

import pytest

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.capture.evidence import Resolver, def_line, qualname
from pytest_selfheal.plan.suspects import FunctionKey, Spectrum, spectrum_evidence

# The report attribute carrying a test's functions from an xdist worker ("path::name::line").
SPECTRUM_ATTR = "selfheal_spectrum"
# The folder of pytest's assertion rewriting, found through its public API: code there runs
# only to explain an assertion (and, with ``enable_assertion_pass_hook``, a passing one).
_ASSERTION_DIR = os.path.dirname(inspect.getfile(pytest.register_assert_rewrite))
# unittest's message helpers (``safe_repr`` of ``assertEqual``'s operands) and the pretty
# printer its long diffs use: they run a project's ``__repr__`` only to word a failure.
_REPORTING_FILES = frozenset(os.path.realpath(m.__file__) for m in (unittest.util, pprint) if m.__file__)
# Callers looked through for the function a generator expression or comprehension is written in.
_MAX_ENCLOSING = 3
# The memo of a code that starts the explanation of an assertion.
_REPORTING = ("", "", 0)


class SpectrumHook:
    """Records the project functions each test enters and each test's outcome."""

    def __init__(self, rootdir: str, *, worker: bool = False) -> None:
        self.resolver = Resolver(rootdir)
        self.worker = worker
        self.covered: dict[str, set[FunctionKey]] = {}
        self.failed: set[str] = set()
        self.passed: set[str] = set()
        self.skipped_reason: Optional[str] = None  # why no spectrum was recorded (another tracer)
        self._keys: dict[types.CodeType, Optional[FunctionKey]] = {}
        self._current: Optional[set[FunctionKey]] = None
        self._reporting = 0  # assertion-explaining frames open: their calls are not evidence

    # ------------------------------------------------------------------ tracing

    def _key(self, code: types.CodeType, frame: types.FrameType) -> Optional[FunctionKey]:
        if os.path.dirname(code.co_filename) == _ASSERTION_DIR or os.path.realpath(code.co_filename) in _REPORTING_FILES:
            return _REPORTING
        rel = self.resolver.relative(code.co_filename)
        # A module's or a class's body (a class made inside a function, each time it is
        # called) is not a function: no new locals.
        if rel is None or is_test_file(rel) or not code.co_flags & inspect.CO_NEWLOCALS:
            return None
        name = qualname(code, frame)
        if name != getattr(code, "co_qualname", code.co_name):  # a genexpr, comprehension or lambda
            outer = frame.f_back
            for _ in range(_MAX_ENCLOSING):
                if outer is None:
                    break
                if outer.f_code.co_filename == code.co_filename and qualname(outer.f_code, outer) == name:
                    return rel, name, def_line(outer.f_code)
                outer = outer.f_back
        return rel, name, def_line(code)

    def _trace(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        # Called on "call" events only: returning None asks for no line events in the frame.
        code = frame.f_code
        try:
            key = self._keys[code]
        except KeyError:
            key = self._keys[code] = self._key(code, frame)
        if key is _REPORTING:
            self._reporting += 1
            return self._until_return
        if key is not None and self._current is not None and not self._reporting:
            self._current.add(key)
        return None

    def _until_return(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        # The local tracer of an assertion-explaining frame: recording resumes when it returns.
        if event == "return":
            self._reporting -= 1
            return None
        return self._until_return

    def _phase(self, item: pytest.Item) -> Generator[None, None, None]:
        if sys.gettrace() is not None:
            self.skipped_reason = "another tracer (coverage, a debugger) is active"
            yield
            return
        self._current = self.covered.setdefault(item.nodeid, set())
        self._reporting = 0
        sys.settrace(self._trace)
        try:
            yield
        finally:
            sys.settrace(None)
            self._current = None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._phase(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._phase(item)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        yield from self._phase(item)

    # ------------------------------------------------------------------ outcomes

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Generator[None, Any, None]:
        outcome = yield
        if self.worker and call.when == "teardown":
            keys = self.covered.pop(item.nodeid, set())
            setattr(outcome.get_result(), SPECTRUM_ATTR, sorted(f"{p}::{n}::{line}" for p, n, line in keys))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A test failed when any phase failed; it passed when its call passed and nothing failed."""
        keys = getattr(report, SPECTRUM_ATTR, None)
        if isinstance(keys, list):  # from an xdist worker
            parsed = (_parse_key(k) for k in keys if isinstance(k, str))
            self.covered.setdefault(report.nodeid, set()).update(k for k in parsed if k is not None)
        if report.failed:
            self.failed.add(report.nodeid)
            self.passed.discard(report.nodeid)
        elif report.when == "call" and report.passed and report.nodeid not in self.failed:
            self.passed.add(report.nodeid)

    def evidence(self) -> Spectrum:
        """The run's spectrum: every function a failing test ran scored, and per failing test
        its most suspicious ones (plan/suspects.py)."""
        covered = {n: keys for n, keys in self.covered.items() if n in self.failed or n in self.passed}
        return spectrum_evidence(covered, self.failed, self.passed)


def _parse_key(text: str) -> Optional[FunctionKey]:
    parts = text.rsplit("::", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])


__all__ = ["SPECTRUM_ATTR", "SpectrumHook"]
