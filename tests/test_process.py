"""process.py, the one process runner: real children, bounded waits, no wall-clock thresholds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Optional

import pytest

from pytest_selfheal.process import MAX_LINE_BYTES, TAIL_BYTES, read_tail, run, tail_bytes

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="process groups and signals")
REPO = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (not yet reaped by init) is dead for our purpose
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def gone_within(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def wait_for_file(path: Path, seconds: float = 30.0) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path} never written")


def write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


@posix_only
def test_timeout_kills_the_grandchildren_too(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    script = write(tmp_path, "hang.py", f"""
        import subprocess, sys, time
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
        child = subprocess.Popen([sys.executable, "-c", code])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(120)
    """)
    result = run([sys.executable, str(script)], cwd=tmp_path, output_path=tmp_path / "out",
                 timeout_seconds=1.0, kill_grace=0.5)
    assert result.started and result.timed_out and result.exit_code is None
    assert "started" in (tmp_path / "out").read_text()
    assert gone_within(int(pidfile.read_text()))


def test_exit_code_and_output_file(tmp_path: Path) -> None:
    result = run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(4)"],
                 cwd=tmp_path, output_path=tmp_path / "sub" / "out")
    assert result.started and result.exit_code == 4 and not result.timed_out
    assert sorted((tmp_path / "sub" / "out").read_text().split()) == ["err", "out"]


def test_a_child_runs_to_its_end_and_to_its_timeout_where_there_is_no_sigkill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Windows: no process groups, no SIGKILL; Popen.kill is Popen.terminate (TerminateProcess).
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setattr(subprocess.Popen, "kill", subprocess.Popen.terminate)
    monkeypatch.delattr(signal, "SIGKILL")
    outcomes: list[tuple[Optional[int], bool]] = []

    def both() -> None:
        for code in ("print('out')", "import time; time.sleep(60)"):
            result = run([sys.executable, "-c", code], cwd=tmp_path, timeout_seconds=2)
            outcomes.append((result.exit_code, result.timed_out))

    worker = threading.Thread(target=both, daemon=True)
    worker.start()
    worker.join(120)  # a guard against a hang, no measure of speed
    assert outcomes == [(0, False), (None, True)]


def test_an_executable_that_cannot_start_is_reported_not_raised(tmp_path: Path) -> None:
    result = run([str(tmp_path / "no-such-program")], cwd=tmp_path, output_path=tmp_path / "out")
    assert not result.started and result.exit_code is None and result.error.startswith("command not found")
    assert (tmp_path / "out").read_text() == f"{tmp_path / 'no-such-program'}: cannot start: {result.error}\n"
    elsewhere = run([sys.executable, "-V"], cwd=tmp_path / "no-such-dir")
    assert not elsewhere.started and "command not found" not in elsewhere.error  # the directory is missing
    empty = run([], cwd=tmp_path)
    assert not empty.started and empty.error == "empty command"


def test_output_larger_than_the_tail_bound(tmp_path: Path) -> None:
    lines = 3 * TAIL_BYTES // 10  # ~3 tail bounds of ~10-byte lines
    script = write(tmp_path, "loud.py", f"""
        import sys
        for i in range({lines}):
            sys.stdout.write(f"line {{i}}\\n")
    """)
    result = run([sys.executable, str(script)], cwd=tmp_path, output_path=tmp_path / "out")
    assert result.exit_code == 0
    assert (tmp_path / "out").stat().st_size > 2 * TAIL_BYTES  # everything is in the file
    text, cut = tail_bytes(tmp_path / "out", TAIL_BYTES)
    assert cut and len(text.encode()) == TAIL_BYTES
    tail = read_tail(tmp_path / "out", max_bytes=TAIL_BYTES, max_lines=10_000)
    shown = tail.splitlines()
    assert shown[-1] == f"line {lines - 1}" and len(tail.encode()) <= TAIL_BYTES
    assert all(line.startswith("line ") for line in shown)  # the cut first line was dropped
    assert read_tail(tmp_path / "out", max_lines=3).splitlines() == [f"line {lines - 3 + i}" for i in range(3)]


def test_a_long_line_without_newline_stays_bounded(tmp_path: Path) -> None:
    total = 64 * 1024 * 1024  # 64 MB, no newline, written in 1 MB pieces
    script = write(tmp_path, "line.py", f"""
        import sys
        piece = b"x" * (1024 * 1024)
        for _ in range({total} // len(piece)):
            sys.stdout.buffer.write(piece)
        sys.stdout.buffer.write(b"\\nend\\n")
    """)
    sizes: list[int] = []
    last: list[bytes] = []

    def on_line(line: bytes) -> None:
        sizes.append(len(line))
        last[:] = [line]

    tracemalloc.start()
    try:
        result = run([sys.executable, str(script)], cwd=tmp_path, output_path=tmp_path / "out", on_line=on_line)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0
    assert max(sizes) <= MAX_LINE_BYTES and sum(sizes) == total + len(b"\nend\n")
    assert last == [b"end\n"]
    assert (tmp_path / "out").stat().st_size == total + len(b"\nend\n")
    assert peak < total // 8  # nothing near the line's size was ever held


def test_tee_hands_over_every_byte_line_by_line(tmp_path: Path) -> None:
    script = write(tmp_path, "mixed.py", """
        import sys, time
        sys.stdout.buffer.write(b"one\\ntw")
        sys.stdout.flush()
        time.sleep(0.2)
        sys.stdout.buffer.write(b"o\\n\\xff\\xfe bytes\\nno newline at the end")
    """)
    pieces: list[bytes] = []
    result = run([sys.executable, str(script)], cwd=tmp_path, output_path=tmp_path / "out",
                 on_line=pieces.append, max_line_bytes=8)
    assert result.exit_code == 0
    assert b"".join(pieces) == (tmp_path / "out").read_bytes() == b"one\ntwo\n\xff\xfe bytes\nno newline at the end"
    assert pieces[:3] == [b"one\n", b"two\n", b"\xff\xfe bytes"]  # 9 bytes with the newline: two pieces
    assert all(len(piece) <= 8 for piece in pieces)


def test_a_failing_line_callback_is_raised_after_the_child_is_gone(tmp_path: Path) -> None:
    def on_line(line: bytes) -> None:
        raise BrokenPipeError("stdout closed")

    with pytest.raises(BrokenPipeError):
        run([sys.executable, "-c", "print('a'); print('b')"], cwd=tmp_path, output_path=tmp_path / "out",
            on_line=on_line)
    assert (tmp_path / "out").read_text().split() == ["a", "b"]  # drained to the end all the same


@posix_only
def test_a_group_left_behind_by_an_exited_leader_is_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "bg.pid"
    result = run([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
    """)], cwd=tmp_path, on_line=lambda line: None)
    assert result.exit_code == 0  # returns although the background child held the pipe
    assert gone_within(int(pidfile.read_text()))


PARENT = """
import sys, threading, time
from pathlib import Path
from pytest_selfheal.process import run

where, mode, argv = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
if mode == "thread":  # the interpreter exits while run() still waits in a daemon thread
    threading.Thread(target=run, args=(argv,), kwargs={"cwd": where}, daemon=True).start()
    deadline = time.monotonic() + 30
    while not (where / "grandchild.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
elif mode == "killed-after-spawn":  # SIGKILLed the moment its child has exec'd, before run() goes on
    import os, signal, subprocess
    started = subprocess.Popen

    class Popen(started):  # type: ignore[misc]
        def __init__(self, args, *rest, **options):
            super().__init__(args, *rest, **options)
            if args[0] != sys.executable:  # the child, not the reaper
                (where / "child.pid").write_text(str(self.pid))
                os.kill(os.getpid(), signal.SIGKILL)

    subprocess.Popen = Popen
    run(argv, cwd=where)
else:
    run(argv, cwd=where)
"""


def start_parent(tmp_path: Path, mode: str, argv: list[str]) -> subprocess.Popen[bytes]:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, str(script), str(tmp_path), mode, *argv], cwd=str(tmp_path),
                            env=env, stdin=subprocess.DEVNULL)


def stop_all(parent: subprocess.Popen[bytes], *pids: Optional[int]) -> None:
    """A test's clean-up: the parent, then whatever it left that is still alive."""
    if parent.poll() is None:
        parent.kill()
        parent.wait()
    for pid in pids:
        if pid is not None and alive(pid):
            os.kill(pid, signal.SIGKILL)


def child_named(parent: int, name: str, seconds: float = 30.0) -> int:
    """The pid of ``parent``'s child called ``name``, read from /proc (bounded wait)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1: stat.rindex(")")]
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == parent and comm == name:
                return int(entry.name)
        time.sleep(0.05)
    raise AssertionError(f"no child {name!r} of {parent}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children found through /proc")
def test_the_child_dies_when_the_parent_is_sigkilled(tmp_path: Path) -> None:
    parent = start_parent(tmp_path, "main", ["sleep", "120"])
    try:
        child = child_named(parent.pid, "sleep")
        os.kill(parent.pid, signal.SIGKILL)  # no finally, no atexit: only the reaper can help
        parent.wait()
        assert gone_within(child)
    finally:
        stop_all(parent)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="found by its mark through /proc")
def test_a_child_is_announced_before_it_runs(tmp_path: Path) -> None:
    # Its group is known once the spawn returned: a SIGKILL right then left it running, before
    # its start was announced with the mark the reaper finds it by.
    parent = start_parent(tmp_path, "killed-after-spawn", ["sleep", "120"])
    child: Optional[int] = None
    try:
        assert parent.wait(timeout=60) == -signal.SIGKILL
        child = int(wait_for_file(tmp_path / "child.pid"))
        assert gone_within(child)
    finally:
        stop_all(parent, child)


def _with_a_grandchild(pidfile: Path) -> str:
    """A child's code: start a sleeping grandchild in its group, write its pid, then sleep."""
    return ("import subprocess, time; "
            "p = subprocess.Popen(['sleep', '120']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(120)")


@posix_only
def test_grandchildren_die_when_the_parent_is_sigkilled(tmp_path: Path) -> None:
    # The reaper takes the child's whole group, so a grandchild goes with it.
    pidfile = tmp_path / "grandchild.pid"
    parent = start_parent(tmp_path, "main", [sys.executable, "-c", _with_a_grandchild(pidfile)])
    grandchild: Optional[int] = None
    try:
        grandchild = int(wait_for_file(pidfile))
        os.kill(parent.pid, signal.SIGKILL)  # no finally, no atexit in the parent
        parent.wait()
        assert gone_within(grandchild)
    finally:
        stop_all(parent, grandchild)


@posix_only
def test_live_groups_are_killed_when_the_interpreter_exits(tmp_path: Path) -> None:
    # A normal exit closes the reaper's pipe as a SIGKILL does: the group goes down.
    pidfile = tmp_path / "grandchild.pid"
    parent = start_parent(tmp_path, "thread", [sys.executable, "-c", _with_a_grandchild(pidfile)])
    try:
        grandchild: Optional[int] = int(wait_for_file(pidfile))
        assert parent.wait(timeout=60) == 0
        assert grandchild is not None and gone_within(grandchild)
    finally:
        stop_all(parent)


REAPER_KILLED_PARENT = """
import sys, threading, time
from pathlib import Path
from pytest_selfheal.process import run

where, code_a, code_b = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
threading.Thread(target=run, args=([sys.executable, "-c", code_a],), kwargs={"cwd": where}, daemon=True).start()
while not (where / "go").exists():
    time.sleep(0.05)
run([sys.executable, "-c", code_b], cwd=where)
"""


def reaper_of(parent: int, seconds: float = 30.0) -> int:
    """The pid of ``parent``'s reaper, known by its program text in /proc (bounded wait)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"os.killpg(group" in cmdline:
                return int(entry.name)
        time.sleep(0.05)
    raise AssertionError(f"no reaper of {parent}")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="children found through /proc")
def test_a_reaper_that_died_is_replaced_and_told_every_live_group(tmp_path: Path) -> None:
    # The first group was announced to a reaper that is gone: only its replacement, told
    # every live group when the next child starts, can take it down with selfheal.
    script = tmp_path / "parent.py"
    script.write_text(REAPER_KILLED_PARENT)
    first, second = tmp_path / "first.pid", tmp_path / "second.pid"
    parent = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), _with_a_grandchild(first), _with_a_grandchild(second)],
        cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=str(REPO)), stdin=subprocess.DEVNULL)
    grandchildren: list[int] = []
    try:
        grandchildren.append(int(wait_for_file(first)))
        reaper = reaper_of(parent.pid)
        os.kill(reaper, signal.SIGKILL)
        assert gone_within(reaper)
        (tmp_path / "go").write_text("1")
        grandchildren.append(int(wait_for_file(second)))
        assert alive(grandchildren[0])
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert all(gone_within(pid) for pid in grandchildren)
    finally:
        stop_all(parent, *grandchildren)


def run_python(tmp_path: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that warns of unclosed resources, in ``tmp_path``."""
    return subprocess.run([sys.executable, "-W", "default", "-c", textwrap.dedent(code)], cwd=str(tmp_path),
                          env=dict(os.environ, PYTHONPATH=str(REPO)), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60)


@posix_only
@pytest.mark.parametrize("breakage", [
    "sys.executable = '/nonexistent/python'",
    # a libc without POSIX_SPAWN_SETSID
    "import os\ndef no_setsid(*args, **kwargs): raise NotImplementedError('setsid')\nos.posix_spawn = no_setsid",
])
def test_no_child_starts_when_the_reaper_cannot(tmp_path: Path, breakage: str) -> None:
    code = ("import sys; from pathlib import Path; from pytest_selfheal.process import run\n"
            f"{breakage}\n"
            "result = run(['sleep', '120'], cwd=Path.cwd(), output_path=Path('out'))\n"
            "print(result.started, result.error)")
    done = run_python(tmp_path, code)
    assert done.stdout == "False cannot start the reaper that stops children when selfheal dies\n", done.stderr
    assert (tmp_path / "out").read_text() == "sleep: cannot start: cannot start the reaper that stops children" \
        " when selfheal dies\n"


@posix_only
def test_the_reaper_outlives_us_without_a_warning(tmp_path: Path) -> None:
    # A child we never wait for: held as a Popen it said "subprocess N is still running" at exit.
    done = run_python(tmp_path, """
        import sys
        from pathlib import Path
        from pytest_selfheal.process import run
        print(run([sys.executable, "-c", "pass"], cwd=Path.cwd()).exit_code)
    """)
    assert (done.returncode, done.stdout, done.stderr) == (0, "0\n", "")


@posix_only
def test_with_our_stdin_closed_the_reaper_still_reads_its_pipe(tmp_path: Path) -> None:
    # The pipe's read end is then fd 0, which must not stay close-on-exec in the reaper.
    done = run_python(tmp_path, """
        import os, sys, threading, time
        from pathlib import Path
        from pytest_selfheal.process import run
        os.close(0)
        child = [sys.executable, "-c", "import os, time; open('child.pid', 'w').write(str(os.getpid())); time.sleep(120)"]
        threading.Thread(target=run, args=(child,), kwargs={"cwd": Path.cwd()}, daemon=True).start()
        while not Path("child.pid").exists():
            time.sleep(0.05)
    """)
    child = int(wait_for_file(tmp_path / "child.pid"))
    try:
        assert done.returncode == 0, done.stderr
        assert gone_within(child)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
