"""Run a module as ``__main__`` with file-system faults injected under one directory.

Usage (a real subprocess)::

    python _faultshim.py MODULE [ARGS...]      # e.g. pytest --selfheal …, pytest_selfheal loop ID

Environment:

- ``RELIABILITY_FAULT_ROOT``: only operations on paths under this directory count;
- ``RELIABILITY_FAULT_MODE``: ``count`` (no fault: write the number of operations to
  ``RELIABILITY_FAULT_COUNT_FILE`` at exit), ``kill`` (SIGKILL this process just before
  operation number ``RELIABILITY_FAULT_AT``), ``enospc`` / ``erofs`` / ``eacces``
  (operation ``AT`` and every later one fail with that errno; removals never fail), ``short`` (the write at
  ``AT`` writes half its bytes, then every later operation fails with ENOSPC: a disk
  filling up in the middle of a write).

Counted operations (the ones that change the disk): ``os.open``/``open()`` for writing,
``os.write`` on such a file, ``os.replace``/``os.rename``, ``os.mkdir``, ``os.unlink``/
``os.remove``, ``os.rmdir``. Only this process is affected: children (pytest
verification runs, git) run normally. Test helper only; the product never imports it.
"""

from __future__ import annotations

import atexit
import builtins
import errno
import io
import os
import pathlib
import runpy
import signal
import sys
from collections.abc import Callable
from typing import Any

_ROOT = os.path.realpath(os.environ["RELIABILITY_FAULT_ROOT"])
_MODE = os.environ.get("RELIABILITY_FAULT_MODE", "count")
_AT = int(os.environ.get("RELIABILITY_FAULT_AT", "1"))
_COUNT_FILE = os.environ.get("RELIABILITY_FAULT_COUNT_FILE")
_ERRNO = {"enospc": errno.ENOSPC, "erofs": errno.EROFS, "eacces": errno.EACCES, "short": errno.ENOSPC}

_count = 0
_fds: set[int] = set()
_tripped = False  # fault modes: once tripped, every later operation fails too

_real_open = os.open
_real_write = os.write
_real_close = os.close
_real_replace = os.replace
_real_rename = os.rename
_real_mkdir = os.mkdir
_real_unlink = os.unlink
_real_remove = os.remove
_real_rmdir = os.rmdir
_real_builtin_open = builtins.open


def _under_root(path: Any) -> bool:
    try:
        text = os.fspath(path)
    except TypeError:
        return False
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    full = os.path.realpath(os.path.join(os.getcwd(), text)) if not os.path.isabs(text) else os.path.realpath(text)
    return full == _ROOT or full.startswith(_ROOT + os.sep)


def _step(path: Any, *, removal: bool = False) -> None:
    """Count one operation; kill or fail here when it is the chosen one.

    Removals (unlink, rmdir) are counted but never fail: a full disk still lets a program
    delete its temp file, and on a read-only file system the file could not be made first.
    """
    global _count, _tripped
    _count += 1
    if _MODE == "kill" and _count == _AT:
        os.kill(os.getpid(), signal.SIGKILL)
    if removal:
        return
    if _MODE in _ERRNO and (_tripped or _count >= _AT):
        _tripped = True
        code = _ERRNO[_MODE]
        raise OSError(code, os.strerror(code), os.fspath(path) if not isinstance(path, int) else None)


def _wrap_path(real: Callable[..., Any], *, two: bool = False, removal: bool = False) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        paths = args[:2] if two else args[:1]
        if kwargs.get("dir_fd") is None and any(_under_root(p) for p in paths):
            _step(paths[-1], removal=removal)
        return real(*args, **kwargs)

    return wrapper


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
    counted = bool(flags & _WRITE_FLAGS) and kwargs.get("dir_fd") is None and _under_root(path)
    if counted:
        _step(path)
    fd = _real_open(path, flags, *args, **kwargs)
    if counted:
        _fds.add(fd)
    return fd


def _write(fd: int, data: Any) -> int:
    global _tripped
    if fd in _fds:
        if _MODE == "short" and not _tripped and _count + 1 >= _AT and len(data) > 1:
            # Half the bytes reach the disk, then the disk is full.
            _step_count_only()
            _tripped = True
            return _real_write(fd, bytes(data)[: len(data) // 2])
        _step(fd)
    return _real_write(fd, data)


def _step_count_only() -> None:
    global _count
    _count += 1


def _close(fd: int) -> None:
    _fds.discard(fd)
    _real_close(fd)


def _builtin_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    if not isinstance(file, int) and any(c in mode for c in "wax+") and _under_root(file):
        _step(file)
    return _real_builtin_open(file, mode, *args, **kwargs)


def _report() -> None:
    if _COUNT_FILE:
        with _real_builtin_open(_COUNT_FILE, "w") as handle:
            handle.write(str(_count))


def install() -> None:
    shims: dict[Any, Any] = {
        _real_open: _open, _real_write: _write, _real_close: _close,
        _real_replace: _wrap_path(_real_replace, two=True), _real_rename: _wrap_path(_real_rename, two=True),
        _real_mkdir: _wrap_path(_real_mkdir), _real_unlink: _wrap_path(_real_unlink, removal=True),
        _real_remove: _wrap_path(_real_remove, removal=True), _real_rmdir: _wrap_path(_real_rmdir, removal=True),
        _real_builtin_open: _builtin_open,
    }
    for name in ("open", "write", "close", "replace", "rename", "mkdir", "unlink", "remove", "rmdir"):
        setattr(os, name, shims[getattr(os, name)])
    builtins.open = _builtin_open  # type: ignore[assignment]
    io.open = _builtin_open  # type: ignore[assignment]
    # Python <= 3.10: pathlib's accessor took os.mkdir, io.open… at import, before this shim.
    accessor = getattr(pathlib, "_NormalAccessor", None)
    for name, real in list(vars(accessor).items()) if accessor is not None else []:
        if not name.startswith("_") and real in shims:
            setattr(accessor, name, staticmethod(shims[real]))
    atexit.register(_report)


def main() -> None:
    # Not this helper's folder on sys.path: the child must import exactly what a user's would.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    module = sys.argv[1]
    sys.argv = [module] + sys.argv[2:]
    install()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
