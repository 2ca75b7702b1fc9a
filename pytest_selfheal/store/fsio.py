"""Crash-safe file primitives for the reports root (docs/store.md).

A reader sees a file's old content or its new one, never a partial one (temp file, fsync,
rename, directory fsync); a write never leaves the reports root through a symbolic link
(``confine``, ``O_NOFOLLOW``); the store's lock is re-entrant within a process, so nested
store operations never deadlock. Every ``OSError`` met while writing becomes a one-line
``StoreIOError`` naming the path and the operating system's reason.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from functools import cache, partial
from pathlib import Path
from typing import Any, Optional, Union

from pytest_selfheal.errors import InputError, RefusedError, one_line
from pytest_selfheal.filelock import O_NOFOLLOW, PathLike
from pytest_selfheal.filelock import FileLock as FileLock  # the store's lock
from pytest_selfheal.filelock import io_error as io_error


def confine(root: PathLike, path: PathLike) -> Path:
    """``path``, once checked (``lstat`` of each existing entry down to it) to lie under ``root``
    with no symbolic link on the way, which would take the write outside: else ``RefusedError``.
    The root itself may link to a folder beside it or below its parent, never out of the folder it
    sits in: a ``.selfheal`` link committed to a repository would send every write elsewhere."""
    base = Path(os.path.abspath(os.fspath(root)))
    target = Path(os.path.abspath(os.fspath(path)))
    if os.path.islink(base):
        real, home = os.path.realpath(base), os.path.realpath(base.parent)
        if not within(real, home) or real == home:
            raise RefusedError(one_line(
                f"refusing to write under {base}: the reports root is a symbolic link leading out of {base.parent} "
                f"(to {real}); set reports_dir to the real folder instead"))
    try:
        parts = target.relative_to(base).parts
    except ValueError:
        raise RefusedError(one_line(f"refusing to write {target}: it is outside the reports root {base}")) from None
    current = base
    for part in parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            break  # missing from here on: whatever is created next is a real folder or file
        if stat.S_ISLNK(mode):
            # Relative names first: the one line must keep its point within its length limit.
            raise RefusedError(one_line(
                f"refusing to write {'/'.join(parts)}: {current.relative_to(base).as_posix()} is a symbolic "
                f"link (replace it with a real folder or file: every write stays inside the reports root {base})"
            ))
    return target


def within(real: str, folder: str) -> bool:
    """Whether the resolved path ``real`` is ``folder`` (resolved too) or lies below it."""
    return real == folder or real.startswith(folder.rstrip(os.sep) + os.sep)


def project_path(project_root: PathLike, value: str, what: str) -> Path:
    """The configured path ``value`` (key ``what``) under ``project_root``, once its links resolved
    lead inside the project (a ``history`` link to ``~`` would write the user's files), else
    ``RefusedError``. An absolute value is a place its writer chose and is taken as given."""
    target = Path(value)
    if target.is_absolute():
        return target
    base = Path(os.path.abspath(os.fspath(project_root)))
    home = os.path.realpath(base)
    joined = base / target
    real = os.path.realpath(joined)
    if within(real, home):
        return joined
    current = base
    for part in target.parts:
        current = current / part
        if os.path.islink(current) and not within(os.path.realpath(current), home):
            raise RefusedError(one_line(
                f"refusing {what} {value}: {current.relative_to(base).as_posix()} is a symbolic link leading out of "
                f"the project {base} (to {os.path.realpath(current)}); configure a place inside it"))
    raise RefusedError(one_line(f"refusing {what} {value}: it leads out of the project {base} (to {real})"))


def list_names(folder: PathLike) -> list[str]:
    """The names in ``folder``; none when it is missing or no folder."""
    try:
        return os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise io_error("list", folder, exc) from None


def ensure_dir(path: PathLike) -> Path:
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise io_error("create directory", target, exc) from None
    return target


def fsync_dir(path: PathLike) -> None:
    """Flush a rename to disk, where the platform can."""
    if sys.platform == "win32":  # directories cannot be opened for fsync on Windows
        return
    with suppress(OSError):  # some file systems refuse fsync on a directory; the rename itself is done
        fd = os.open(os.fspath(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def move(source: Path, destination: Path) -> None:
    """Rename ``source`` to ``destination`` (one ``rename``: never two copies) and flush both
    directory entries. No copy fallback: across file systems (EXDEV) it is a ``StoreIOError``."""
    try:
        os.rename(source, destination)
    except OSError as exc:
        raise io_error("move incident to", destination, exc) from None
    fsync_dir(source.parent)
    fsync_dir(destination.parent)


def _create_synced(path: Path, data: bytes) -> None:
    """Create ``path`` (``O_EXCL``), write ``data``, fsync, close; OSError propagates."""
    # 0o666 & ~umask, like a plain open(): a temp from mkstemp would be 0600.
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new_bytes(path: PathLike, data: bytes) -> None:
    """Create ``path`` with ``data``, fsynced, without temp file or folder fsync: only in a
    build folder that its writer fsyncs once and renames into place."""
    target = Path(path)
    try:
        _create_synced(target, data)
    except OSError as exc:
        raise io_error("write", target, exc) from None


def publish_folder(build: Path, target: Path, files: Mapping[str, str], what: str) -> bool:
    """Build the folder ``target`` under the name ``build`` with ``files`` (name: text) and rename
    it into place; False when ``target`` exists already. Nobody reads a build folder: each file is
    fsynced in place, the folder once, before the rename. Whatever fails removes the build."""
    try:
        build.mkdir()
        for name, text in files.items():
            write_new_bytes(build / name, text.encode("utf-8"))
        fsync_dir(build)
        if target.exists():  # on POSIX rename() replaces an *empty* directory: never let it
            shutil.rmtree(build, ignore_errors=True)
            return False
        os.rename(build, target)
    except BaseException as exc:
        shutil.rmtree(build, ignore_errors=True)
        if isinstance(exc, OSError) and exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
            return False
        if isinstance(exc, OSError):
            raise io_error(what, target, exc) from None
        raise
    fsync_dir(target.parent)
    return True


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically (temp file + fsync + rename + dir fsync)."""
    target = Path(path)
    # A dot name ending in .tmp: no reader takes it for a record.
    tmp = target.with_name(f".{target.name}.{os.urandom(4).hex()}.tmp")
    try:
        _create_synced(tmp, data)
        os.replace(tmp, target)
    except BaseException as exc:  # KeyboardInterrupt too: no stray temp file, old content intact
        with suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise io_error("write", target, exc) from None
        raise
    fsync_dir(target.parent)


def atomic_write_text(path: PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def dumps_json(data: Any) -> str:
    """The canonical JSON text of every file we write (NaN and Infinity refused: not JSON)."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"


def atomic_write_json(path: PathLike, data: Any) -> None:
    atomic_write_text(path, dumps_json(data))


def append_lines(path: PathLike, lines: Sequence[str]) -> None:
    """Append ``lines`` with a single ``O_APPEND`` write, then one fsync; after a writer killed
    mid-append a newline comes first, so the torn fragment stays on its own line."""
    if any("\n" in line or "\r" in line for line in lines):
        raise ValueError("append_line: the line must not contain a newline")
    if not lines:
        return
    target = Path(path)
    try:
        fd = os.open(os.fspath(target), os.O_RDWR | os.O_APPEND | os.O_CREAT | O_NOFOLLOW | getattr(os, "O_BINARY", 0),
                     0o666)
    except OSError as exc:
        raise io_error("append to", target, exc) from None
    try:
        size = os.fstat(fd).st_size
        prefix = b""
        if size > 0:
            os.lseek(fd, size - 1, os.SEEK_SET)
            if os.read(fd, 1) != b"\n":
                prefix = b"\n"
        payload = prefix + "".join(line + "\n" for line in lines).encode("utf-8")
        # One write call: with O_APPEND the kernel places it at the end as a unit.
        written = os.write(fd, payload)
        while written < len(payload):  # pragma: no cover - only on short writes (disk full)
            written += os.write(fd, payload[written:])
        os.fsync(fd)
    except OSError as exc:
        raise io_error("append to", target, exc) from None
    finally:
        os.close(fd)


def read_text(path: PathLike) -> str:
    """A UTF-8 text file: missing or undecodable → ``InputError``, other OSError → ``StoreIOError``."""
    target = Path(path)
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        raise InputError(one_line(f"{target}: file missing")) from None
    except IsADirectoryError:
        raise InputError(one_line(f"{target}: is a directory, expected a file")) from None
    except OSError as exc:
        raise io_error("read", target, exc) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(one_line(f"{target}: not UTF-8 text ({exc.reason} at byte {exc.start})")) from None


def read_json(path: PathLike) -> Any:
    return parse_json(read_text(path), path)


def parse_json(text: str, path: PathLike) -> Any:
    """The JSON text read from ``path``, parsed; empty, truncated or invalid → one-line ``InputError``."""
    target = Path(path)
    if not text.strip():
        raise InputError(one_line(f"{target}: corrupted JSON (empty file)"))
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(one_line(f"{target}: corrupted JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")) from None
    except RecursionError:
        raise InputError(one_line(f"{target}: corrupted JSON (nested too deeply)")) from None


# What plan/suspects.py calls a ``Source``: path → the file's lines, or None.
Source = Callable[[str], Optional[Sequence[str]]]

# A larger file is generated or data, not code a suspect lives in.
MAX_SOURCE_BYTES = 2_000_000


def project_source(rootdir: Union[str, Path, None]) -> Optional[Source]:
    """A reader of the project's source lines for the code excerpt of a plan's top suspects (the
    plan is pure: plan/build.py takes a reader): only regular files below ``rootdir`` (a symlink
    or ``..`` leading out of it reads nothing), each once; None when there is no such directory."""
    if not rootdir:
        return None
    root = os.path.realpath(str(rootdir))
    return cache(partial(_read_source, root)) if os.path.isdir(root) else None


def _read_source(root: str, path: str) -> Optional[list[str]]:
    if not path or os.path.isabs(path) or "\0" in path:
        return None  # suspects name project-relative paths
    full = os.path.realpath(os.path.join(root, path))
    if not within(full, root) or not os.path.isfile(full):
        return None  # `..` or a symlink out of the project
    try:
        if os.path.getsize(full) > MAX_SOURCE_BYTES:
            return None
        with open(full, "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace").splitlines()
