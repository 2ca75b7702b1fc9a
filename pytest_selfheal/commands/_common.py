"""Helpers shared by subcommands: printing data as JSON or text."""

from __future__ import annotations

import json
import sys
from typing import Any


def print_json(data: Any) -> None:
    """Print ``data`` as indented, key-sorted JSON on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
