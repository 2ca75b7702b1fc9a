"""MCP start: ``selfheal mcp`` from spawn to its answers to ``initialize`` and ``tools/list``.

A coding agent starts the server and calls a tool at once; until ``initialize`` is answered
the client says "still connecting". Measured with the SDK's own client over stdio, against
the floor: a fresh interpreter that imports the SDK's server (``import mcp.server``). Wall:
medians of interleaved runs. ``--instructions``: one run of each under valgrind's callgrind
(the server's count runs to its exit when the client closes stdin).

    python benchmarks/bench_mcp_start.py [--repeat 11] [--instructions]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
from bench_cli_start import selfheal_argv  # this folder is first on sys.path
from bench_plugin_overhead import instructions, timed
from mcp import Client, StdioServerParameters

FLOOR = [sys.executable, "-c", "import mcp.server"]


async def _session(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> float:
    """Seconds from spawn to the answers to ``initialize`` and ``tools/list``."""
    began = time.perf_counter()
    params = StdioServerParameters(command=argv[0], args=list(argv[1:]), cwd=str(cwd), env=env)
    async with Client(params, read_timeout_seconds=900) as client:
        assert len((await client.list_tools()).tools) == 6
        return time.perf_counter() - began


def served(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> float:
    return anyio.run(_session, argv, cwd, env)


def counted(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> int:
    """The server's instructions (callgrind) from spawn through ``initialize`` and ``tools/list`` to its exit."""
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-mcp-") as logs:
        served(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", f"--log-file={logs}/%p.log",
                *argv], cwd, env)
        for _ in range(600):  # the client does not wait for valgrind's last line
            found = [line for log in Path(logs).glob("*.log")
                     for line in log.read_text(errors="replace").splitlines() if "Collected :" in line]
            if found:
                return sum(int(line.rsplit(":", 1)[1]) for line in found)
            time.sleep(0.5)
    raise SystemExit("valgrind counted nothing: is valgrind installed?")


def main(argv: Sequence[str] = ()) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--instructions", action="store_true")
    args = parser.parse_args(list(argv) or None)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    server = [*selfheal_argv(sys.executable), "mcp"]
    with tempfile.TemporaryDirectory(prefix="selfheal-bench-mcp-") as tmp:
        cwd = Path(tmp)
        (cwd / "pytest.ini").write_text("[pytest]\n")
        served(server, cwd, env)  # warm the file cache and the .pyc files
        walls: dict[str, list[float]] = {"selfheal mcp": [], "import mcp.server": []}
        for n in range(args.repeat):
            for name in (list(walls) if n % 2 == 0 else list(reversed(walls))):
                walls[name].append(served(server, cwd, env) if name == "selfheal mcp" else timed(FLOOR, cwd, env)[0])
        mcp, floor = (statistics.median(walls[name]) for name in walls)
        print(f"MCP start ({args.repeat} interleaved pairs, wall medians): selfheal mcp to its tool list "
              f"{mcp:.3f}s, import mcp.server {floor:.3f}s; ratio {mcp / floor:.3f}")
        if args.instructions:
            server_count, floor_count = counted(server, cwd, env), instructions(FLOOR, cwd, env)
            print(f"instructions: selfheal mcp to its tool list and exit {server_count / 1e6:,.0f} M, "
                  f"import mcp.server {floor_count / 1e6:,.0f} M; ratio {server_count / floor_count:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
