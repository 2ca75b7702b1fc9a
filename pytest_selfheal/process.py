"""The runner of every child but git (edge: subprocesses), and the clean room's bytecode cache.

Every child (a verification, a repair command, the pytest run of ``selfheal ci``) goes through
:func:`run`: an argv list, never a shell, stdin from /dev/null, a bare program name looked up
on absolute ``PATH`` entries only (a committed ``./pytest`` is never picked); its own process
group, stopped whole on timeout, Ctrl-C or an exception, and SIGKILLed when the leader exits
(a background child must not keep writing into a worktree or a store) or when selfheal dies
however it dies (the reaper; a grandchild that calls ``setsid`` escapes, docs/decisions.md);
output to a file or in bounded lines, never a pipe that fills up; no token in its environment.
Redaction is the callers' business: the output is the child's raw bytes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import py_compile
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Optional

from pytest_selfheal.errors import StoreIOError
from pytest_selfheal.filelock import FileLock
from pytest_selfheal.names import SPAWN_MARK_VARIABLE, state_dir

KILL_GRACE_SECONDS = 3.0  # between SIGTERM and SIGKILL of a process group
CANCEL_POLL_SECONDS = 0.2  # how soon a run sees its caller's cancel event
TAIL_BYTES = 64 * 1024  # read back from the end of an output file by default
TAIL_LINES = 200
MAX_LINE_BYTES = 64 * 1024  # the longest piece of a line handed to ``on_line``
#: The runner's command files: a line a test appends to one of them reaches the job's later
#: steps (``BASH_ENV=…`` in ``$GITHUB_ENV`` runs in the step that holds the token).
RUNNER_COMMAND_FILES: tuple[str, ...] = (
    "GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_STATE",
)


def token_named(name: str) -> bool:
    """``*TOKEN*`` in any case (``GH_TOKEN``, ``ACTIONS_RUNTIME_TOKEN``), selfheal's own
    ``SELFHEAL_*`` variables aside (docs/action.md "Security")."""
    upper = name.upper()
    return "TOKEN" in upper and not upper.startswith("SELFHEAL_")


def withheld(name: str) -> bool:
    """Whether the variable ``name`` is kept from every child: a token or a runner's command file."""
    return token_named(name) or name.upper() in RUNNER_COMMAND_FILES


def child_environment(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """``env`` (default: ours) without what :func:`withheld` keeps from a child."""
    source = os.environ if env is None else env
    return {k: v for k, v in source.items() if not withheld(k)}


LineSink = Callable[[bytes], None]


@dataclass(frozen=True)
class ProcessResult:
    """What one child process did."""

    argv: list[str]
    started: bool  # False: the executable could not be started (see ``error``)
    exit_code: Optional[int]  # None when it did not start or was stopped by the timeout
    timed_out: bool
    duration_seconds: float
    output_path: Optional[Path]  # the child's raw stdout+stderr (None: not kept)
    error: str = ""  # why it could not start


def kill_group(proc: subprocess.Popen[bytes], sig: Optional[int] = None) -> None:
    """Signal the child's group with ``sig``, by default kill it; Windows has neither groups
    nor SIGKILL: the child itself is killed."""
    with contextlib.suppress(OSError):  # gone already
        if sys.platform == "win32":  # no process groups to signal
            proc.kill()
        else:
            os.killpg(proc.pid, signal.SIGKILL if sig is None else sig)


def terminate_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE_SECONDS) -> None:
    """SIGTERM the child's group, then SIGKILL it after ``grace`` seconds even when the leader
    exited: a grandchild that ignored SIGTERM (a hung fixture's helper) must not linger."""
    kill_group(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    kill_group(proc)
    with contextlib.suppress(subprocess.TimeoutExpired):  # pragma: no cover - SIGKILL does not fail
        proc.wait(timeout=grace + 5)


# The reaper's program. Lines on stdin: "+PGID" / "-PGID" announce and forget a group, "?NAME=MARK"
# / "=NAME=MARK" a child's start (that entry in its environment) and its end. At end-of-file (we
# are gone, however we died) it SIGKILLs every group announced and every process whose
# environment holds the mark of a start that never ended.
_REAPER_CODE = """
import os, signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
groups, starting, pending = set(), set(), b""
while True:
    try:
        data = os.read(0, 4096)
    except InterruptedError:
        continue
    except OSError:
        break
    if not data:
        break
    *lines, pending = (pending + data).split(b"\\n")
    for line in lines:
        kind, value = line[:1], line[1:]
        if kind == b"+":
            groups.add(int(value))
        elif kind == b"-":
            groups.discard(int(value))
        elif kind == b"?":
            starting.add(value)
        elif kind == b"=":
            starting.discard(value)
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
# A child's environment shows in /proc a moment after its exec closed our pipe: look again,
# briefly, until each unended start was seen (a start whose exec failed is never seen).
seen, deadline = set(), time.monotonic() + 2
while starting - seen and os.path.isdir("/proc") and time.monotonic() < deadline:
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/" + entry + "/environ", "rb") as handle:
                marked = starting.intersection(handle.read().split(b"\\0"))
        except OSError:
            continue
        if marked:
            seen |= marked
            for kill in (os.killpg, os.kill):
                try:
                    kill(int(entry), signal.SIGKILL)
                except OSError:
                    pass
    time.sleep(0.02)
"""


class _Reaper:
    """The helper that outlives a SIGKILLed selfheal just long enough to SIGKILL its children's
    groups, told of each through a pipe the kernel closes when selfheal is gone. One per process
    (a forked child starts its own); no reaper, no child; one that died is replaced at the next
    spawn and told the live groups again. A group is known only once its child has exec'd, so a
    start is announced first as a mark in the child's environment, which the reaper finds in
    ``/proc`` on Linux (elsewhere such a child is left)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner = -1  # the pid whose reaper ``_pid`` is
        self._fd: Optional[int] = None  # the pipe's write end
        self._pid: Optional[int] = None  # a child never waited for, so not a Popen (it warns)
        self._groups: set[int] = set()  # announced, not forgotten: told again to a new reaper
        self._spawns = 0  # how many children were started: the next spawn's mark

    def _running(self) -> bool:
        if self._pid is None:
            return False
        try:
            if os.waitpid(self._pid, os.WNOHANG) == (0, 0):
                return True
        except ChildProcessError:  # reaped by someone else
            pass
        self._pid = None
        return False

    def _ready(self) -> None:
        """Start a reaper of this process if none runs (under the lock); OSError when none can."""
        if self._owner != os.getpid():  # forked: the reaper and the pipe are the parent's
            if self._fd is not None:
                os.close(self._fd)
            self._owner, self._fd, self._pid, self._groups = os.getpid(), None, None, set()
        if self._fd is not None and self._running():
            return
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        read_end, write_end = os.pipe()  # close-on-exec: a child of ours holds it until its exec
        if read_end < 3:  # our stdin was closed: a dup2 onto itself keeps close-on-exec on older libcs
            import fcntl  # POSIX only, as this branch is

            low, read_end = read_end, fcntl.fcntl(read_end, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(low)
        try:
            # Not through run(): the reaper must outlive us, in a session of its own.
            argv = [sys.executable, "-S", "-I", "-c", _REAPER_CODE]
            self._pid = os.posix_spawn(sys.executable, argv, os.environ, setsid=True, file_actions=[
                (os.POSIX_SPAWN_DUP2, read_end, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ])
        except (OSError, NotImplementedError):  # the latter: no POSIX_SPAWN_SETSID in this libc
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._fd = write_end
        self._send("".join(f"+{group}\n" for group in self._groups))

    def _send(self, lines: str) -> None:
        # A reaper that is gone: the next spawn starts another and tells it.
        with contextlib.suppress(OSError):
            if self._fd is not None and lines:
                os.write(self._fd, lines.encode("ascii"))

    def spawn(self, start: Callable[[dict[str, str]], subprocess.Popen[bytes]], env: dict[str, str]) -> subprocess.Popen[bytes]:
        """``start(env)`` with a spawn mark in ``env``, its group announced to the reaper; OSError
        when no reaper runs."""
        with self._lock:  # one reaper, the same one, from the mark to the group
            try:
                self._ready()
            except (OSError, NotImplementedError):
                raise OSError("cannot start the reaper that stops children when selfheal dies") from None
            self._spawns += 1
            mark = f"{os.getpid()}.{self._spawns}"
            entry = f"{SPAWN_MARK_VARIABLE}={mark}"  # as the reaper reads it in /proc/<pid>/environ
            self._send(f"?{entry}\n")
            try:
                proc = start({**env, SPAWN_MARK_VARIABLE: mark})
            except BaseException:
                self._send(f"={entry}\n")
                raise
            self._groups.add(proc.pid)
            self._send(f"+{proc.pid}\n={entry}\n")
            return proc

    def forget(self, pgid: int) -> None:
        with self._lock:
            self._groups.discard(pgid)
            self._send(f"-{pgid}\n")


_REAPER = _Reaper()


def _spawn(
    argv: list[str], cwd: Path, env: Optional[Mapping[str, str]], stdout: int | IO[bytes]
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session and group, known to the reaper."""
    child_env = child_environment(env)  # never a token, whoever called
    if sys.platform == "win32":  # pragma: no cover - no process groups to signal, no reaper
        return subprocess.Popen(
            argv, cwd=str(cwd), env=child_env, stdin=subprocess.DEVNULL,
            stdout=stdout, stderr=subprocess.STDOUT, shell=False,
            creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
        )
    return _REAPER.spawn(lambda marked: subprocess.Popen(
        argv, cwd=str(cwd), env=marked, stdin=subprocess.DEVNULL,
        stdout=stdout, stderr=subprocess.STDOUT, shell=False, start_new_session=True,
    ), child_env)


class _Pump(threading.Thread):
    """Drains a child's pipe into the output file and the line callback, a line longer than
    ``limit`` bytes in pieces. A callback that raises is not called again (the pipe is still
    drained so the child never blocks); :func:`run` raises its exception once the child is gone."""

    def __init__(self, pipe: IO[bytes], sink: Optional[IO[bytes]], on_line: LineSink, limit: int) -> None:
        super().__init__(name="selfheal-output", daemon=True)
        self.pipe, self.sink, self.on_line, self.limit = pipe, sink, on_line, max(1, limit)
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):  # the pipe closed under us
            for piece in iter(lambda: self.pipe.readline(self.limit), b""):
                if self.sink is not None:
                    try:
                        self.sink.write(piece)
                    except (OSError, ValueError):  # disk full, or closed after an abandoned wait
                        self.sink = None
                if self.error is None:
                    try:
                        self.on_line(piece)
                    except Exception as exc:
                        self.error = exc


def tail_bytes(path: Path, limit: int) -> tuple[str, bool]:
    """The last ``limit`` bytes of ``path`` decoded, and whether it was longer; ``("", False)`` unreadable."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            data = handle.read()
    except OSError:
        return "", False
    return data.decode("utf-8", errors="replace"), size > limit


def read_tail(path: Path, *, max_bytes: int = TAIL_BYTES, max_lines: int = TAIL_LINES) -> str:
    """The last ``max_lines`` whole lines within the last ``max_bytes`` bytes of ``path`` ("" if absent)."""
    text, cut = tail_bytes(path, max_bytes)
    lines = text.splitlines()
    if cut and lines:
        lines = lines[1:]  # the first line was cut in the middle
    return "\n".join(lines[-max_lines:])


def run(
    argv: Sequence[str],
    *,
    cwd: Path,
    output_path: Optional[Path] = None,
    timeout_seconds: Optional[float] = None,
    env: Optional[Mapping[str, str]] = None,
    kill_grace: float = KILL_GRACE_SECONDS,
    on_line: Optional[LineSink] = None,
    max_line_bytes: int = MAX_LINE_BYTES,
    cancel: Optional[threading.Event] = None,
) -> ProcessResult:
    """Run ``argv`` in its own process group and wait for it (module docstring).

    Output (raw stdout+stderr) goes to ``output_path`` (None: not kept) and, with ``on_line``,
    to the callback from a helper thread. On ``timeout_seconds`` the group is stopped (SIGKILL
    after ``kill_grace``) and ``timed_out`` is True; so is it on an exception while waiting, or
    ``cancel`` set from another thread. An executable that cannot start gives ``started=False``
    and ``error`` (also written to the output file), never raises.
    """
    full = [str(arg) for arg in argv]
    start = time.monotonic()
    pump: Optional[_Pump] = None
    if output_path is not None:
        output_path.parent.mkdir(parents=True, exist_ok=True)
    with open(output_path, "wb") if output_path is not None else contextlib.nullcontext() as sink:
        stdout: int | IO[bytes] = (
            subprocess.PIPE if on_line is not None else sink if sink is not None else subprocess.DEVNULL
        )
        try:
            if not full:
                raise OSError("empty command")
            # A bare name is looked up on the absolute PATH entries only: an empty or relative
            # entry would find a program committed to the project (``./pytest``).
            executable: Optional[str] = full[0]
            if "/" not in full[0] and (os.sep == "/" or os.sep not in full[0]):
                path = (os.environ if env is None else env).get("PATH", os.defpath).split(os.pathsep)
                entries = os.pathsep.join(entry for entry in path if os.path.isabs(entry))
                executable = shutil.which(full[0], path=entries) if entries else None
            if executable is None:
                raise FileNotFoundError(errno.ENOENT, "not found on an absolute PATH entry", full[0])
            proc = _spawn([executable, *full[1:]], cwd, env, stdout)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if isinstance(exc, FileNotFoundError) and exc.filename != str(cwd):  # not a missing cwd
                reason = f"command not found ({reason})"
            if sink is not None:
                sink.write(f"{full[0] if full else '?'}: cannot start: {reason}\n".encode())
            return ProcessResult(full, False, None, False, time.monotonic() - start, output_path, reason)
        try:
            if on_line is not None:
                assert proc.stdout is not None
                pump = _Pump(proc.stdout, sink, on_line, max_line_bytes)
                pump.start()
            timed_out = _wait(proc, timeout_seconds, kill_grace, pump, cancel)
        finally:
            _REAPER.forget(proc.pid)
    if pump is not None and pump.error is not None:
        raise pump.error
    code = None if timed_out else proc.returncode
    return ProcessResult(full, True, code, timed_out, time.monotonic() - start, output_path)


def _wait(
    proc: subprocess.Popen[bytes], timeout: Optional[float], grace: float, pump: Optional[_Pump],
    cancel: Optional[threading.Event] = None,
) -> bool:
    """Wait for the leader, stopping the group on timeout or exception; True when timed out."""
    expired = threading.Event()
    done = threading.Event()

    def watch() -> None:
        # The only blocking waiter: it returns the moment the leader exits (no polling).
        try:
            proc.wait()
        finally:
            if not expired.is_set():
                kill_group(proc)  # what the leader left behind in its group
            done.set()

    def expire() -> None:
        if not done.is_set():
            expired.set()
            terminate_group(proc, grace)

    threading.Thread(target=watch, name="selfheal-wait", daemon=True).start()
    timer: Optional[threading.Timer] = None
    if timeout is not None:
        timer = threading.Timer(max(0.0, timeout), expire)
        timer.daemon = True
        timer.start()
    try:
        if cancel is None:
            done.wait()  # interrupted by signals: a handler that raises ends the wait
        else:
            while not done.wait(CANCEL_POLL_SECONDS) and not cancel.is_set():
                pass  # a cancelled caller: the group is stopped below
    finally:
        if timer is not None:
            timer.cancel()
        if not done.is_set():
            terminate_group(proc, grace)
        if pump is not None:
            # EOF comes once the group is gone; a process that escaped the group with our
            # pipe is abandoned (the thread is a daemon) rather than waited for.
            pump.join(grace + 5)
            if not pump.is_alive() and proc.stdout is not None:
                proc.stdout.close()
    if expired.is_set() and timer is not None:
        timer.join(grace + 10)  # let the watchdog finish its SIGKILL of the group
    return expired.is_set()


# ---------------------------------------------------------------- the clean room
# A run that may be a verdict reads a fresh bytecode cache (docs/loop.md "The seal"): a .pyc
# left in a __pycache__ is never what runs. Installed code's bytecode is kept in the state
# directory, but only what selfheal compiled there itself from the source, each file with its
# signature; any other file is removed before a run reads the cache, and what a run wrote
# into its own cache goes with it.

# Runs on one machine that read and rewrite the manifest at once would drop each other's files.
_LOCK_SECONDS = 300.0
_MANIFEST = "trusted.json"  # {path inside the cache: signature}, what selfheal compiled itself
_TAG = f".{sys.implementation.cache_tag}.pyc"  # another interpreter's (or pytest's rewritten) bytecode is never kept


def _shared(env: Mapping[str, str]) -> Optional[Path]:
    state = state_dir(env)
    return state / "bytecode" if state is not None else None


def _signature(path: str) -> str:
    """Inode, size and mtime: a file written again has another inode (Python renames bytecode
    into place) or another time."""
    stat = os.stat(path)
    return f"{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"


def _bytecode_files(root: str, suffix: str = ".pyc") -> Iterator[str]:
    """The POSIX paths, inside ``root``, of its bytecode files."""
    for folder, _dirs, files in os.walk(root):
        inside = os.path.relpath(folder, root)
        prefix = "" if inside == "." else inside.replace(os.sep, "/") + "/"
        yield from (prefix + name for name in files if name.endswith(suffix))


@contextlib.contextmanager
def _manifest(shared: Path) -> Iterator[dict[str, str]]:
    """Under the shared cache's lock: the signatures recorded when selfheal compiled its files
    (unchecked), written back when the caller changed them."""
    with FileLock(shared / ".lock", _LOCK_SECONDS):
        try:
            recorded = json.loads((shared / _MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = {}
        recorded = recorded if isinstance(recorded, dict) else {}
        kept = dict(recorded)
        yield kept
        if kept != recorded:
            handle, temp = tempfile.mkstemp(dir=shared, prefix=".trusted-")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(kept, out)
            os.replace(temp, shared / _MANIFEST)


def fresh_pycache(inside: Optional[Path] = None, env: Mapping[str, str] = os.environ) -> str:
    """A new bytecode cache folder (the caller removes it) holding the shared cache's files still
    as selfheal compiled them; every other file of the shared cache is removed."""
    cache = tempfile.mkdtemp(prefix="pycache-", dir=inside)
    shared = _shared(env)
    if shared is None or not shared.is_dir():
        return cache
    # Whatever fails is compiled afresh: slower, never wrong.
    # What was removed is compiled again after the next run.
    with contextlib.suppress(OSError, StoreIOError), _manifest(shared) as kept:
        recorded = dict(kept)
        kept.clear()
        made: set[str] = set()
        for rel in _bytecode_files(str(shared)):
            source, target = os.path.join(shared, rel), os.path.join(cache, rel)
            with contextlib.suppress(OSError):
                if recorded.get(rel) != _signature(source):
                    os.unlink(source)
                    continue
                kept[rel] = recorded[rel]
                if os.path.dirname(target) not in made:
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    made.add(os.path.dirname(target))
                # A hard link: Python writes bytecode to a new file renamed into place, so a run's
                # writes replace its link and never reach the shared file; one altered in place
                # fails the next run's check.
                try:
                    os.link(source, target)
                except OSError:  # across file systems
                    shutil.copyfile(source, target)
    return cache


def keep_installed(cache: Path, env: Mapping[str, str] = os.environ) -> None:
    """After a run: compile into the shared cache, from their source, the installed modules the
    run compiled that it lacks (never the run's own files)."""
    shared = _shared(env)
    if shared is None:
        return
    folders = {sysconfig.get_path(n) for n in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots = tuple(sorted("/".join(Path(f).parts[1:]) + "/" for f in folders if f and os.path.isabs(f)))  # installed code
    try:
        shared.mkdir(parents=True, exist_ok=True)
        # The recorded signatures, unchecked: the run that reads the cache next checks each
        # file (the run before this one just did).
        with _manifest(shared) as kept:
            for rel in _bytecode_files(str(cache), _TAG):
                if rel in kept or not rel.startswith(roots):
                    continue
                target = os.path.join(shared, rel)
                with contextlib.suppress(OSError, py_compile.PyCompileError, ValueError):  # compiled afresh by each run
                    py_compile.compile("/" + rel[: -len(_TAG)] + ".py", cfile=target, doraise=True)
                    kept[rel] = _signature(target)
    except (OSError, StoreIOError):
        return  # the next run compiles afresh: slower, never wrong


@contextlib.contextmanager
def fresh_bytecode(env: Mapping[str, str], inside: Optional[Path] = None) -> Iterator[dict[str, str]]:
    """``env`` with a fresh bytecode cache (``PYTHONPYCACHEPREFIX``, which pytest's rewriting
    honours too), removed afterwards; ``inside``: the folder to make it in (a verification's
    own, which the next loop removes if a SIGKILL left it behind)."""
    cache = fresh_pycache(inside, env)
    try:
        # Written into the fresh cache alone, and needed there: what the run compiled of
        # installed code is what keep_installed compiles again for the next run.
        yield {**{k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}, "PYTHONPYCACHEPREFIX": cache}
    finally:
        keep_installed(Path(cache), env)
        shutil.rmtree(cache, ignore_errors=True)
