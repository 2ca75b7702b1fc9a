"""Helpers shared by subcommands: printing data as JSON or text."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.store.root import Store

if TYPE_CHECKING:
    from typing import Optional



def print_json(data: Any) -> None:
    """Print ``data`` as indented, key-sorted JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


# --- reports root (--dir) -------------------------------------------------------------


def add_dir_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--dir DIR``: the reports root (default ``.selfheal`` in the current directory)."""
    parser.add_argument(
        "--dir",
        metavar="DIR",
        default=None,
        help="reports root (default: the configured ralf_lite.reports_dir, .selfheal, in the current directory)",
    )


def store_from_args(args: argparse.Namespace, effective: "Optional[EffectiveConfig]" = None) -> "Store":
    """The ``Store`` for ``--dir``, else the configured ``reports_dir`` under the current directory.

    Nothing is created until a write. The config is loaded only when ``--dir`` is absent
    and no ``effective`` config is given (a bad config is then a one-line error, exit 2).
    """
    from pathlib import Path


    root = getattr(args, "dir", None)
    if root:
        return Store(Path(root))
    if effective is None:
        effective = load_config(Path.cwd())
    return Store(Path.cwd() / effective.settings.reports_dir)
