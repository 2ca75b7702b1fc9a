"""Helpers shared by subcommands: printing JSON, the project root, the reports root, incident ids."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.config.files import find_project_root, load_config
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import SelfhealError, UsageError
from pytest_selfheal.redact import Redactor, default_redactor
from pytest_selfheal.store.root import Store, project_store


def print_json(data: Any, redactor: Optional[Redactor] = None) -> None:
    """Print ``data`` as indented, key-sorted JSON, redacted by ``redactor``, else the project's."""
    redactor = redactor or project_redactor()
    text = json.dumps(redactor.redact_obj(data), indent=2, sort_keys=True, ensure_ascii=False)
    sys.stdout.write(text + "\n")


def warn(lines: Iterable[str]) -> None:
    sys.stderr.write("".join(f"selfheal: warning: {line}\n" for line in lines))


def answer(args: argparse.Namespace, data: Any, text: str) -> int:
    """Print ``data`` as JSON with ``--json``, else ``text``."""
    if args.json:
        print_json(data)
    else:
        print(text)
    return 0


def project_redactor() -> Redactor:
    """The project's redactor; the built-in one when its config cannot be read."""
    try:
        return load_config(project_root()).redactor
    except SelfhealError:
        return default_redactor()


def project_root() -> Path:
    """The project root seen from the current directory, by pytest's rootdir rules."""
    return find_project_root(Path.cwd())


def store_from_args(args: argparse.Namespace, effective: Optional[EffectiveConfig] = None) -> Store:
    """The ``Store`` for ``--dir``, else the configured ``reports_dir`` (the config is loaded
    unless given); nothing is created until a write."""
    root = getattr(args, "dir", None)
    if root:
        return Store(Path(root))
    project = project_root()
    if effective is None:
        effective = load_config(project)
    return project_store(project, effective.settings.reports_dir, effective.redactor)


def parse_days(text: str, flag: str, *, zero_ok: bool) -> float:
    """A number of days (finite, >= 0 or > 0); else a UsageError."""
    try:
        days = float(text)
    except ValueError:
        days = math.nan
    if not math.isfinite(days) or days < 0 or (days == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise UsageError(f"{flag}: expected a number of days {bound}, got {text!r}")
    return days


def incident_from_args(args: argparse.Namespace, effective: Optional[EffectiveConfig] = None) -> tuple[Store, str]:
    """The store and the incident ``ID`` names: a full id, ``latest`` or a unique prefix."""
    store = store_from_args(args, effective)
    return store, store.resolve_id(str(args.incident_id))
