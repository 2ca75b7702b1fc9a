"""A function-level coverage spectrum of the run, for ``pytest --selfheal --selfheal-spectrum`` (edge).

Spectrum-based fault localisation (Ochiai, DStar) asks which code the failing tests ran
that the passing ones did not. This records, per test (setup, call and teardown), the set
of project functions it entered — not lines: the suspects are functions, and a function
entry is one event where line coverage is one event per line. It is off by default: a
capture without the flag pays nothing (docs/loop.md "Suspects").

It records beside coverage.py (pytest-cov) and debuggers, which hold :func:`sys.settrace`:
on Python 3.12+ through :mod:`sys.monitoring` under a tool id of its own (``PY_START``
only; each function reports once per test, then its event is disabled until the next
test's :func:`sys.monitoring.restart_events`), before 3.12 through :func:`sys.setprofile`.
A run whose profiler slot (or every free tool id) is already held records nothing and says
why (:attr:`SpectrumHook.unrecorded`).

Calls made only to explain a failure are not evidence: once assertion rewriting starts
formatting a failed ``assert`` (its ``repr`` of each operand, its comparison explanation),
or unittest's ``assertEqual`` its message, nothing is recorded until that code returns, so
``Version.__repr__`` never outranks the helper that computed the wrong value; nor are those
made only while handling an exception the project let out to a test (the failure, or one a
test caught) or one it was raised from: they deliver the error (jinja2 rewriting its
traceback). A function is keyed by the line of its ``def`` (not its first decorator's), and
a generator expression or comprehension by the function it is written in. A class body is never a key, also a class made inside a function (it runs
each time the function does): the suspect is the function or a method. Neither is a method
of an exception class: it builds or words the failure (``LexerError.__str__`` run by every
failing test that prints the error), the suspect is the code that raised it.

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
# A code not looked at yet.
_UNSEEN = ("", "", -1)
# The sys.monitoring tool ids no predefined tool claims (coverage.py's is COVERAGE_ID).
_TOOL_IDS = (3, 4)
_TOOL_NAME = "pytest-selfheal spectrum"
_MONITORING = sys.version_info >= (3, 12)
# The local events of an assertion-explaining code: its frame leaves, or comes back.
_LEAVE_EVENTS: tuple[int, ...] = ()
_BACK_EVENTS: tuple[int, ...] = ()
if sys.version_info >= (3, 12):
    monitoring = sys.monitoring
    _LEAVE_EVENTS = (monitoring.events.PY_RETURN, monitoring.events.PY_YIELD)
    _BACK_EVENTS = (monitoring.events.PY_RESUME,)
else:
    monitoring: Any = None


def _describes_failure(code: types.CodeType, frame: Optional[types.FrameType]) -> bool:
    """A method of an exception class (its first argument one, or the class): it builds or
    words a failure, it is not where one comes from."""
    if frame is None or not code.co_argcount:
        return False
    first = frame.f_locals.get(code.co_varnames[0])
    return isinstance(first, BaseException) or (isinstance(first, type) and issubclass(first, BaseException))


class SpectrumHook:
    """Records the project functions each test enters and each test's outcome."""

    def __init__(self, rootdir: str, *, worker: bool = False) -> None:
        self.resolver = Resolver(rootdir)
        self.worker = worker
        self.covered: dict[str, set[FunctionKey]] = {}
        self.failed: set[str] = set()
        self.passed: set[str] = set()
        self.unrecorded: Optional[str] = None  # why some test's phase was not recorded
        self._keys: dict[types.CodeType, Optional[FunctionKey]] = {}
        self._current: Optional[set[FunctionKey]] = None
        # Functions of the phase entered only while an exception was being handled, with it.
        self._handling: dict[FunctionKey, BaseException] = {}
        self._reporting = 0  # assertion-explaining frames open: their calls are not evidence
        self._tool: Optional[int] = None  # the sys.monitoring tool id held (Python 3.12+)

    # ------------------------------------------------------------------ keys

    def _key(self, code: types.CodeType, frame: Optional[types.FrameType]) -> Optional[FunctionKey]:
        if os.path.dirname(code.co_filename) == _ASSERTION_DIR or os.path.realpath(code.co_filename) in _REPORTING_FILES:
            return _REPORTING
        rel = self.resolver.relative(code.co_filename)
        # A module's or a class's body (a class made inside a function, each time it is
        # called) is not a function: no new locals.
        if rel is None or is_test_file(rel) or not code.co_flags & inspect.CO_NEWLOCALS or _describes_failure(code, frame):
            return None
        name = qualname(code, frame)
        if name != getattr(code, "co_qualname", code.co_name):  # a genexpr, comprehension or lambda
            outer = frame.f_back if frame is not None else None
            for _ in range(_MAX_ENCLOSING):
                if outer is None:
                    break
                if outer.f_code.co_filename == code.co_filename and qualname(outer.f_code, outer) == name:
                    return rel, name, def_line(outer.f_code)
                outer = outer.f_back
        return rel, name, def_line(code)

    def _entered(self, code: types.CodeType, frame: Optional[types.FrameType]) -> Optional[FunctionKey]:
        """Record the entry of ``code`` (``frame`` its frame) in the current test; its key."""
        key = self._keys.get(code, _UNSEEN)
        if key is _UNSEEN:
            key = self._keys[code] = self._key(code, frame)
            if key is _REPORTING and self._tool is not None:
                monitoring.set_local_events(self._tool, code, sum(_LEAVE_EVENTS + _BACK_EVENTS))
        if key is _REPORTING:
            self._reporting += 1
        elif key is not None and self._current is not None and not self._reporting and key not in self._current:
            handled = sys.exc_info()[1]
            if handled is None:
                self._current.add(key)
                self._handling.pop(key, None)
            else:
                self._handling.setdefault(key, handled)
        return key

    def _settle(self, failure: Optional[BaseException]) -> None:
        """Add the functions entered while handling an exception to the phase's, but those
        handling one the project let out (the phase's failure, one a test caught: its
        traceback reaches a test file) or one such an exception was raised from: they ran
        after the fault showed, to word or deliver the error (jinja2 rewriting its
        traceback), not to cause it. The function that raised it (its innermost frame) stays."""
        assert self._current is not None
        delivered: list[BaseException] = []
        raisers: set[Optional[FunctionKey]] = set()
        for exc in (failure, *self._handling.values()):
            if exc is None or any(exc is e for e in delivered) or (exc is not failure and not self._reached_tests(exc)):
                continue
            tb = exc.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            raisers.add(self._keys.get(tb.tb_frame.f_code) if tb is not None else None)
            while exc is not None and all(exc is not e for e in delivered):
                delivered.append(exc)
                exc = exc.__cause__ or exc.__context__
        self._current.update(k for k, handled in self._handling.items()
                             if k in raisers or all(handled is not e for e in delivered))
        self._handling.clear()

    def _reached_tests(self, exc: BaseException) -> bool:
        """Whether ``exc`` was let out to a test's (or a fixture's) code."""
        tb = exc.__traceback__
        while tb is not None:
            rel = self.resolver.relative(tb.tb_frame.f_code.co_filename)
            if rel is not None and is_test_file(rel):
                return True
            tb = tb.tb_next
        return False

    # ------------------------------------------------------------------ before Python 3.12

    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        # sys.setprofile: "call" and "return" on each Python frame's entry and exit (a
        # generator's each resumption and yield), "c_*" on builtins.
        if event == "call":
            self._entered(frame.f_code, frame)
        elif event == "return" and self._reporting and self._keys.get(frame.f_code) is _REPORTING:
            self._reporting -= 1

    # ------------------------------------------------------------------ Python 3.12+

    def _start(self, code: types.CodeType, offset: int) -> Any:
        # PY_START: a function's first event of this test is its last (DISABLE), except an
        # explaining one's and those it calls, counted each time.
        if self._current is None:
            return monitoring.DISABLE  # between phases: pytest's machinery, re-enabled per test
        here = inspect.currentframe()
        key = self._entered(code, here.f_back if here is not None else None)
        # Entered while handling an exception: reported again until entered otherwise.
        return None if key is _REPORTING or self._reporting or key in self._handling else monitoring.DISABLE

    def _back(self, code: types.CodeType, offset: int, *rest: Any) -> None:
        # PY_RESUME of an assertion-explaining frame (a generator's).
        self._reporting += 1

    def _leave(self, code: types.CodeType, offset: int, *rest: Any) -> None:
        # PY_RETURN and PY_YIELD of an assertion-explaining frame.
        self._reporting = max(0, self._reporting - 1)

    def _claim_tool(self) -> Optional[str]:
        """Hold a free sys.monitoring tool id with this hook's callbacks; why not, when not."""
        free = next((i for i in _TOOL_IDS if monitoring.get_tool(i) is None), None)
        if free is None:
            held = ", ".join(f"{i} by {monitoring.get_tool(i)}" for i in _TOOL_IDS)
            return f"no free sys.monitoring tool id ({held})"
        monitoring.use_tool_id(free, _TOOL_NAME)
        monitoring.register_callback(free, monitoring.events.PY_START, self._start)
        for event in _BACK_EVENTS:
            monitoring.register_callback(free, event, self._back)
        for event in _LEAVE_EVENTS:
            monitoring.register_callback(free, event, self._leave)
        monitoring.set_events(free, monitoring.events.PY_START)
        self._tool = free
        return None

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        if self._tool is not None:
            monitoring.set_events(self._tool, 0)
            for event in (monitoring.events.PY_START, *_BACK_EVENTS, *_LEAVE_EVENTS):
                monitoring.register_callback(self._tool, event, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None

    # ------------------------------------------------------------------ phases

    def _phase(self, item: pytest.Item, first: bool = False) -> Generator[None, Any, Any]:
        why = self._begin(first)
        if why is not None:
            self.unrecorded = why
            return (yield)
        self._current = self.covered.setdefault(item.nodeid, set())
        self._reporting = 0
        self._handling.clear()
        if not _MONITORING:
            sys.setprofile(self._profile)
        failure: Optional[BaseException] = None
        try:
            return (yield)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if not _MONITORING:
                sys.setprofile(None)
            self._settle(failure)
            self._current = None

    def _begin(self, first: bool) -> Optional[str]:
        """Get ready to record a phase (``first``: a test's first); why not, when it cannot."""
        if not _MONITORING:
            return "another profiler (sys.setprofile) is active" if sys.getprofile() is not None else None
        if self._tool is None:
            why = self._claim_tool()
            if why is not None:
                return why
        if first:
            monitoring.restart_events()  # what the last test disabled reports again, once
        return None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._phase(item, first=True))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._phase(item))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, Any, Any]:
        return (yield from self._phase(item))

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

    def why_empty(self) -> str:
        """Why :meth:`evidence` ranks no failing test."""
        if self.unrecorded is not None:
            return self.unrecorded
        return "no test failed in it" if not self.failed else "its failing tests ran no function of the project"


def _parse_key(text: str) -> Optional[FunctionKey]:
    parts = text.rsplit("::", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        return None
    return parts[0], parts[1], int(parts[2])


__all__ = ["SPECTRUM_ATTR", "SpectrumHook"]
