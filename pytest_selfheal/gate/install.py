"""``selfheal stop-gate install claude|cursor``: write the gate's stop hook into the agent's
settings file (edge; docs/agents.md). The file is merged, never replaced: the user's other
keys and hooks stay, a second install changes nothing, and a file that cannot be read as the
agent's settings is left untouched with one line saying why."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_selfheal.errors import InputError, SelfhealError
from pytest_selfheal.gate.agents import Agent, hook_command, merged_settings
from pytest_selfheal.records.frozen import Frozen, dataclass
from pytest_selfheal.store import fsio

HOOK_MARGIN_SECONDS = 30  # the agent's hook timeout over gate.timeout_seconds: the gate answers first

SETTINGS_FILES = {Agent.CLAUDE: Path(".claude") / "settings.json", Agent.CURSOR: Path(".cursor") / "hooks.json"}


@dataclass(frozen=True, eq=False, repr=False)
class Installed(Frozen):
    """What an install did: the settings file and whether it changed."""

    path: Path
    changed: bool


def settings_path(agent: Agent, base: Path) -> Path:
    """The agent's settings file under ``base`` (the project root, or the home directory)."""
    return base / SETTINGS_FILES[agent]


def install(agent: Agent, base: Path, timeout_seconds: float, command: str = "") -> Installed:
    """Add the stop hook to ``agent``'s settings file under ``base`` (created when missing)."""
    path = settings_path(agent, base)
    existing = None
    if path.exists():
        try:
            text = fsio.read_text(path)
        except SelfhealError as exc:
            raise InputError(f"{path}: {exc}") from None
        if text.strip():
            try:
                existing = json.loads(text.lstrip("\ufeff"))
            except ValueError as exc:
                raise InputError(f"{path}: not JSON ({exc}); left unchanged") from None
    try:
        merged, changed = merged_settings(agent, existing, command or hook_command(agent),
                                          int(timeout_seconds) + HOOK_MARGIN_SECONDS)
    except InputError as exc:
        raise InputError(f"{path}: {exc}; left unchanged") from None
    if changed:
        fsio.ensure_dir(path.parent)
        fsio.atomic_write_text(path, json.dumps(merged, indent=2, ensure_ascii=False) + "\n")
    return Installed(path, changed)


__all__ = ["Installed", "install", "settings_path"]
