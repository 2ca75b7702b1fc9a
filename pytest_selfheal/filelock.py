"""An exclusive lock on a file shared by processes (edge: file locks): the store's lock and
the shared bytecode cache's (``process.py``) are this one."""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from pytest_selfheal.errors import StoreIOError, one_line

if sys.platform == "win32":
    import msvcrt
else:
    import fcntl

PathLike = Union[str, "os.PathLike[str]"]

# Opening a file that may exist: never through a symbolic link (0 where the OS has no such flag).
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def io_error(action: str, path: PathLike, exc: OSError) -> StoreIOError:
    reason = exc.strerror or (errno.errorcode.get(exc.errno or 0, "") if exc.errno else "") or str(exc)
    return StoreIOError(one_line(f"cannot {action} {os.fspath(path)}: {reason}"))


@dataclass
class _Holder:
    """This process's hold on one lock file: shared by every FileLock on that path."""

    rlock: threading.RLock = field(default_factory=threading.RLock)
    count: int = 0
    fd: Optional[int] = None


_REGISTRY: dict[tuple[int, str], _Holder] = {}
_REGISTRY_GUARD = threading.Lock()


def _holder_for(path: Path) -> _Holder:
    # Keyed by pid too: a forked child must not believe it holds its parent's lock.
    with _REGISTRY_GUARD:
        return _REGISTRY.setdefault((os.getpid(), os.path.abspath(os.fspath(path))), _Holder())


if sys.platform == "win32":

    def _try_lock(fd: int) -> bool:
        """One non-blocking attempt at the OS lock; False when another process holds it."""
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        with suppress(OSError):
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return False
            raise
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


class FileLock:
    """Exclusive inter-process lock on ``path``, re-entrant within a process (its threads are
    serialised too); waiting longer than ``timeout`` seconds raises ``StoreIOError``."""

    def __init__(self, path: PathLike, timeout: float = 30.0, poll_interval: float = 0.01) -> None:
        self.path = Path(path)
        self.timeout = max(float(timeout), 0.0)
        self.poll_interval = poll_interval

    def _timed_out(self) -> StoreIOError:
        return StoreIOError(one_line(f"timed out after {self.timeout:g}s waiting for the lock {self.path} "
                                     "(another selfheal process is using this reports root)"))

    def acquire(self) -> None:
        deadline = time.monotonic() + self.timeout
        holder = _holder_for(self.path)
        if not holder.rlock.acquire(timeout=self.timeout):
            raise self._timed_out()
        try:
            if holder.count == 0:
                holder.fd = self._lock_file(deadline)
            holder.count += 1
        except BaseException:
            holder.rlock.release()
            raise

    def _lock_file(self, deadline: float) -> int:
        try:
            fd = os.open(os.fspath(self.path), os.O_RDWR | os.O_CREAT | O_NOFOLLOW, 0o666)
        except OSError as exc:
            raise io_error("lock", self.path, exc) from None
        try:
            while True:
                try:
                    if _try_lock(fd):
                        return fd
                except OSError as exc:
                    raise io_error("lock", self.path, exc) from None
                if time.monotonic() >= deadline:
                    raise self._timed_out()
                time.sleep(self.poll_interval)
        except BaseException:
            os.close(fd)
            raise

    def release(self) -> None:
        """Release one level of the lock; the OS lock goes with the outermost level."""
        holder = _holder_for(self.path)
        if holder.count == 0:
            raise RuntimeError(f"FileLock {self.path} released without being held")
        holder.count -= 1
        try:
            if holder.count == 0 and holder.fd is not None:
                fd, holder.fd = holder.fd, None
                try:
                    _unlock(fd)
                finally:
                    os.close(fd)
        finally:
            holder.rlock.release()

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
