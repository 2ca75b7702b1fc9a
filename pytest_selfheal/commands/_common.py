"""Helpers shared by subcommands: printing data as JSON or text."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..store import Store


def print_json(data: Any) -> None:
    """Print ``data`` as indented, key-sorted JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


# --- reports root (--dir) -------------------------------------------------------------

DEFAULT_REPORTS_DIR = ".selfheal"


def add_dir_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--dir DIR``: the reports root (default ``.selfheal`` in the current directory)."""
    parser.add_argument(
        "--dir",
        metavar="DIR",
        default=None,
        help=f"reports root (default: {DEFAULT_REPORTS_DIR} in the current directory)",
    )


def store_from_args(args: argparse.Namespace) -> "Store":
    """The ``Store`` for ``args.dir`` (or ``./.selfheal``); nothing is created until a write."""
    from pathlib import Path

    from ..store import Store

    root = getattr(args, "dir", None)
    return Store(Path(root) if root else Path.cwd() / DEFAULT_REPORTS_DIR)
