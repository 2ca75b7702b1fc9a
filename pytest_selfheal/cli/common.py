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
from pytest_selfheal.store import fsio
from pytest_selfheal.store.root import Store


def print_json(data: Any, redactor: Optional[Redactor] = None) -> None:
    """Print ``data`` as indented, key-sorted JSON on stdout, keys and values redacted by
    ``redactor``, else the project's."""
    redactor = redactor or project_redactor()
    text = json.dumps(redactor.redact_obj(data), indent=2, sort_keys=True, ensure_ascii=False)
    sys.stdout.write(text + "\n")


def warn(lines: Iterable[str]) -> None:
    """Each line on stderr as a ``selfheal: warning:``."""
    sys.stderr.write("".join(f"selfheal: warning: {line}\n" for line in lines))


def answer(args: argparse.Namespace, data: Any, text: str) -> int:
    """Print ``data`` as JSON with ``--json``, else ``text``; 0."""
    if args.json:
        print_json(data)
    else:
        print(text)
    return 0


def project_redactor() -> Redactor:
    """The redactor of the project seen from here; the built-in defaults when its config cannot be read."""
    try:
        return load_config(project_root()).redactor
    except SelfhealError:
        return default_redactor()


def project_root() -> Path:
    """The project root seen from the current directory, by pytest's rootdir rules."""
    return find_project_root(Path.cwd())


def store_from_args(args: argparse.Namespace, effective: Optional[EffectiveConfig] = None) -> Store:
    """The ``Store`` for ``--dir``, else the configured ``reports_dir`` under the project root.

    Nothing is created until a write. The config is loaded only when ``--dir`` is absent
    and no ``effective`` config is given (a bad config is then a one-line error, exit 2).
    """
    root = getattr(args, "dir", None)
    if root:
        return Store(Path(root))
    project = project_root()
    if effective is None:
        effective = load_config(project)
    return Store(fsio.project_path(project, effective.settings.reports_dir, "reports_dir"), redactor=effective.redactor)


def parse_days(text: str, flag: str, *, zero_ok: bool) -> float:
    """A number of days given on the command line (finite, >= 0 or > 0); else a one-line UsageError."""
    try:
        days = float(text)
    except ValueError:
        days = math.nan
    if not math.isfinite(days) or days < 0 or (days == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise UsageError(f"{flag}: expected a number of days {bound}, got {text!r}")
    return days


def incident_from_args(args: argparse.Namespace, effective: Optional[EffectiveConfig] = None) -> tuple[Store, str]:
    """The store and the incident the ``ID`` argument names: a full id, ``latest`` or a unique prefix."""
    store = store_from_args(args, effective)
    return store, store.resolve_id(str(args.incident_id))
