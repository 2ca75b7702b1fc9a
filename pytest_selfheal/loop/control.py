"""Loop control: the per-incident loop lock, Ctrl-C/SIGTERM handling and the test-only kill points."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Optional

from pytest_selfheal.errors import RefusedError, StoreIOError
from pytest_selfheal.store import fsio
from pytest_selfheal.store.root import Store

LOOP_LOCK_FILE = ".loop.lock"

# Test-only crash hook (tests/test_crash_safety.py): when this environment variable names
# a step, the process SIGKILLs itself there. Never set it outside tests.
KILL_ENV = "SELFHEAL_TEST_KILL_AT"
KILL_STEPS: tuple[str, ...] = (
    "loop:after_running",
    "iteration:before_verify",
    "iteration:after_verify",
    "record:after_attempt",
    "record:after_verification_event",
    "finalize:after_run_result",
    "finalize:after_decision_point",
    "finalize:after_loop_stopped",
    "finalize:after_plan_proposed",
    "finalize:after_replan_written",
    "finalize:before_archive",
)


def kill_point(step: str) -> None:
    """Test-only: SIGKILL this process at ``step`` when ``SELFHEAL_TEST_KILL_AT`` names it."""
    if os.environ.get(KILL_ENV) == step:  # pragma: no cover - the process dies here
        os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


@contextmanager
def loop_lock(store: Store, incident_id: str) -> Iterator[None]:
    """The per-incident loop lock, taken without waiting (held: ``RefusedError``, exit 5).
    The OS drops it when the process dies, so a killed loop never blocks the next one."""
    folder = fsio.ensure_dir(store.confined(store.runs_dir(incident_id)))
    lock = fsio.FileLock(store.confined(folder / LOOP_LOCK_FILE), timeout=0.0)
    try:
        lock.acquire()
    except StoreIOError as exc:
        if "timed out" in exc.message:
            raise RefusedError(f"a loop is already running for {incident_id}") from None
        raise
    try:
        yield
    finally:
        lock.release()


class Interrupted(BaseException):
    """Raised by the signal handler out of an interruptible section (never reaches users)."""


class CancelState:
    """Ctrl-C / SIGTERM bookkeeping: signals are *deferred* (recording an attempt is never cut
    in half) except inside :meth:`interruptible` (a verification run, a repair call)."""

    def __init__(self) -> None:
        self.requested = False
        self.signum: Optional[int] = None
        self._open = 0

    def handler(self, signum: int, frame: Optional[FrameType]) -> None:
        first = not self.requested
        self.requested = True
        self.signum = signum
        # Raise once: a second Ctrl-C must not cut short the cleanup of the first.
        if self._open > 0 and first:
            raise Interrupted()

    def check(self) -> None:
        if self.requested:
            raise Interrupted()

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        self.check()
        self._open += 1
        try:
            yield
        finally:
            self._open -= 1

    @property
    def name(self) -> str:
        if self.signum is None:
            return "interrupt"
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return str(self.signum)


@contextmanager
def signal_handlers(state: CancelState) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    wanted = [signal.SIGINT] + ([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])
    old = {sig: signal.signal(sig, state.handler) for sig in wanted}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
