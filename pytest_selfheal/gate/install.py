"""``selfheal stop-gate install claude|cursor``: merge the gate's stop hook into the agent's
settings file (edge; docs/agents.md). Never written through a symbolic link: a committed
``.claude`` link could reach the user's own settings. The hook runs this ``selfheal`` by its
absolute path: the agent's ``PATH`` need not hold the project's environment.
"""

from __future__ import annotations

import os
import shlex
import stat
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from pytest_selfheal.errors import InputError, RefusedError, SelfhealError, one_line
from pytest_selfheal.gate.agents import Agent, Change, dumps, loads, merged_settings
from pytest_selfheal.store import fsio

HOOK_MARGIN_SECONDS = 30  # the agent's hook timeout over gate.timeout_seconds: the gate answers first

SETTINGS_FILES = {Agent.CLAUDE: Path(".claude") / "settings.json", Agent.CURSOR: Path(".cursor") / "hooks.json"}
_SCRIPT_NAMES = ("selfheal", "selfheal.exe")


@dataclass(frozen=True)
class Installed:
    path: Path
    change: Change
    command: str


def selfheal_program() -> list[str]:
    """The ``selfheal`` running now as an absolute argv (else ``python -m pytest_selfheal``)."""
    started = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    candidates = [started] if started is not None and started.name in _SCRIPT_NAMES else []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates += [Path(scripts, name) for name in _SCRIPT_NAMES]
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [os.path.abspath(candidate)]
    return [os.path.abspath(sys.executable), "-m", "pytest_selfheal"]


def _check_no_link(base: Path, path: Path) -> bool:
    """Whether ``path`` exists as a regular file; RefusedError for a symbolic link from ``base`` down."""
    current = base
    for part in path.relative_to(base).parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise fsio.io_error("read", current, exc) from None
        if stat.S_ISLNK(mode):
            # Relative names first: the one line must keep its point within its length limit.
            raise RefusedError(one_line(
                f"{current.relative_to(base)} is a symbolic link (to {os.readlink(current)}): nothing written; "
                f"the stop hook goes only into a real file under {base}"))
    if not stat.S_ISREG(mode):
        raise InputError(f"{path}: not a regular file; left unchanged")
    return True


def install(agent: Agent, base: Path, timeout_seconds: float, command: str = "") -> Installed:
    """Add the stop hook running ``command`` (default: this ``selfheal``) to ``agent``'s settings file under ``base``."""
    path = base / SETTINGS_FILES[agent]
    text = ""
    if _check_no_link(base, path):
        try:
            text = fsio.read_text(path)
        except SelfhealError as exc:
            raise InputError(f"{path}: {exc}") from None
    command = command or shlex.join([*selfheal_program(), "stop-gate", agent.value])
    try:
        existing = loads(text.lstrip("\ufeff")) if text.strip() else None
        merged, change = merged_settings(agent, existing, command, int(timeout_seconds) + HOOK_MARGIN_SECONDS)
    except InputError as exc:
        raise InputError(f"{path}: {exc}; left unchanged") from None
    if change is not Change.NONE:
        fsio.ensure_dir(path.parent)
        _check_no_link(base, path)  # the folder just made, or one made meanwhile
        fsio.atomic_write_text(path, dumps(merged) + "\n")
    return Installed(path, change, command)
