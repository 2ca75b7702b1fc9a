"""The names pytest-selfheal shares with the world outside the package: its pytest ini options
and environment variables, where its config files are, the layout of the reports root.

Every pytest run imports this module, and a green ``pytest --selfheal`` run finds here what it
must know without loading the config or the store: it imports nothing of the package and does
no I/O (the pure core imports it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

# pytest ini option -> dotted config key (layer 4). The plugin registers these names with
# ``parser.addini``; ``selfheal_config`` is not one key but a linelist of KEY=VALUE overrides.
INI_OVERRIDES = "selfheal_config"
INI_KEYS: dict[str, str] = {
    "selfheal_dir": "reports_dir",
    "selfheal_report": "report_path",
    "selfheal_max_iterations": "max_iterations",
    "selfheal_error_fingerprint_repeats": "error_fingerprint_repeats",
    "selfheal_no_progress_repeats": "no_progress_repeats",
    "selfheal_max_runtime_minutes": "max_runtime_minutes",
    "selfheal_approve": "repair.approve",
    "selfheal_repair_command": "repair.command",
    INI_OVERRIDES: "",
}

# The plugin's flags (their dest) that set a config key, and the key each one sets.
FLAG_KEYS: dict[str, str] = {
    name: INI_KEYS[name] for name in ("selfheal_dir", "selfheal_report", "selfheal_max_iterations", "selfheal_approve")}

# Set by the loop in the verification runs it starts: the child run stays passive, so a
# verification run never captures an incident or records an attempt of its own.
VERIFYING_ENV = "SELFHEAL_VERIFYING"
# Given to every verification run: pytest then shows this plugin each passing comparison.
COMPARISONS_PLUGIN = "pytest_selfheal.capture.comparisons"
PASS_HOOK_OPTION = "enable_assertion_pass_hook=true"
# Given to every verification run: the plugin that signs what pytest saw fail, with the key
# the loop passes here (gone from os.environ before any project code runs).
OUTCOMES_PLUGIN = "pytest_selfheal.capture.outcomes"
REPORT_KEY_ENV = "SELFHEAL_REPORT_KEY"
# Set by the loop on its localisation run: the file the run's coverage spectrum is written to.
LOCALISE_ENV = "SELFHEAL_LOCALISE"
# `selfheal ci` gives its pytest child a fresh random token here: the capture records it as
# incident.json `ci_run`, and ci loops only the incident holding its own token (docs/github.md).
CI_RUN_ENV = "SELFHEAL_CI_RUN"
# Set in each child's environment to the mark of its spawn (pytest_selfheal/process.py).
SPAWN_MARK_VARIABLE = "SELFHEAL_SPAWN"
# Taken out of a pytest run's environment before its first conftest (plugin.py): the tests
# cannot tell a verification, or a run selfheal started, from an ordinary one. The
# localisation run's variable stays: its xdist workers read it, and it judges nothing.
TAKEN_SIGNALS: tuple[str, ...] = (VERIFYING_ENV, CI_RUN_ENV, SPAWN_MARK_VARIABLE)

# The recorder's name in pytest's plugin manager (``-p no:selfheal-recorder`` turns it off).
RECORDER_PLUGIN = "selfheal-recorder"
# pytest's option parser, registered by plugin.py: the capture asks it which options it replays.
OPTIONS_PLUGIN = "selfheal-options"

# A verification's long selection travels in a file selfheal writes under the reports root
# (``error_runs/<id>/selection.json``), read by the plugin module the child loads with
# ``-p`` (pytest_selfheal/loop/selection.py); the option naming the file is refused from every
# other source (loop/argcheck.py).
SELECTION_PLUGIN = "pytest_selfheal.loop.selection"
SELECTION_OPTION = "--selfheal-selection-file"
SELECTION_FILE = "selection.json"
SELECTION_FORMAT = "selfheal_selection"  # the key holding the format's version (1)

PROJECT_DIR = ".planning"
PROJECT_FILES = ("config.yml", "config.yaml", "config.json")  # merge order: later wins


def global_config_path(env: Mapping[str, str]) -> Optional[Path]:
    """``${OPENCODE_CONFIG_DIR:-~/.config/opencode}/get-shit-done/config.json`` as the shell
    reads it (empty is unset, ``~`` is HOME from ``env``); None without a home directory."""
    base = env.get("OPENCODE_CONFIG_DIR") or ""
    if base and base != "~" and not base.startswith("~/"):
        return Path(base) / "get-shit-done" / "config.json"
    home = _home(env)
    if home is None:
        return None
    directory = home / base[2:] if base else home / ".config" / "opencode"
    return directory / "get-shit-done" / "config.json"


def _home(env: Mapping[str, str]) -> Optional[Path]:
    """HOME from ``env``, else the user's home directory, else None."""
    home = env.get("HOME")
    if home:
        return Path(home)
    try:
        return Path.home()
    except (RuntimeError, KeyError):
        return None


def state_dir(env: Mapping[str, str]) -> Optional[Path]:
    """``${XDG_STATE_HOME:-~/.local/state}/pytest-selfheal``, what selfheal keeps out of the
    project tree (record digests, installed code's bytecode); None without a home directory."""
    base = env.get("XDG_STATE_HOME") or ""
    if base.startswith("/"):
        return Path(base) / "pytest-selfheal"
    home = _home(env)
    return home / ".local" / "state" / "pytest-selfheal" if home is not None else None


def remembered_stops(env: Mapping[str, str], project_root: str) -> Optional[Path]:
    """Where the stops of a project's incidents that passed without a fix are kept, keyed by the
    project root's real path: a new or deleted reports root does not hide them."""
    state = state_dir(env)
    key = hashlib.sha256(project_root.encode("utf-8", "surrogateescape")).hexdigest()[:24]
    return state / "stops" / f"{key}.json" if state is not None else None


def project_config_paths(project_root: Path) -> list[Path]:
    """The project config files, existing or not, in merge order (later wins)."""
    return [Path(project_root, PROJECT_DIR, name) for name in PROJECT_FILES]


DEFAULT_REPORTS_DIR = ".selfheal"  # under the project root (config key reports_dir)
INBOX_DIR = "error_inbox"  # the open incidents, one folder each
PLANS_DIR = "error_plans"
RUNS_DIR = "error_runs"
ARCHIVE_DIR = "error_archive"  # closed incidents, one folder per final status (resolved, escalated)
INCIDENT_PREFIX = "incident_"
# An incident id, ``incident_YYYYMMDD_HHMMSS_<run token>`` (UTC), as the JSON Schemas state it.
INCIDENT_ID_PATTERN = "^incident_[0-9]{8}_[0-9]{6}_[A-Za-z0-9_-]{1,40}$"


def archive_dir(bucket: str) -> str:
    """The folder, relative to the reports root, of the closed incidents of ``bucket``."""
    return f"{ARCHIVE_DIR}/{bucket}"


def archived_path(bucket: str, incident_id: str) -> str:
    """Where a closed incident's folder is, relative to the reports root (``archived_to``)."""
    return f"{archive_dir(bucket)}/{incident_id}"
