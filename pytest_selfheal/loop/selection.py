"""The ``-p`` plugin a verification's child loads to read its selection (the exact node ids)
from a file selfheal wrote: a long list does not fit a command line, and pytest's ``@file``
arguments (pytest >= 8.2) would read a file of anyone's.

It is never the entry-point plugin (so never registered twice). Its hook puts the file's node
ids where the option was, so pytest parses them like node ids typed on the command line (the
initial conftests of their folders included). The option is deliberately not registered: a
child where this hook did not run stops on "unrecognized arguments" instead of running the
whole suite, and so does a missing or garbled file (one ``ERROR:`` line, exit 4).
"""

from __future__ import annotations

import json

import pytest

from pytest_selfheal.names import SELECTION_FORMAT, SELECTION_OPTION

_PREFIX = SELECTION_OPTION + "="
_BAD = "selfheal: the verification's selection file: "


def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Replace ``--selfheal-selection-file=PATH`` in ``args`` by the node ids PATH holds."""
    where = [i for i, word in enumerate(args) if word.startswith(_PREFIX)]
    if not where:
        return
    if len(where) > 1:
        raise pytest.UsageError(f"selfheal: {SELECTION_OPTION} given {len(where)} times")
    path = args[where[0]][len(_PREFIX):]
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise pytest.UsageError(f"{_BAD}cannot read {path}: {exc}") from None
    nodeids = doc.get("nodeids") if isinstance(doc, dict) and doc.get(SELECTION_FORMAT) == 1 else None
    if not isinstance(nodeids, list) or not nodeids or not all(isinstance(n, str) and n for n in nodeids):
        raise pytest.UsageError(f"{_BAD}{path} is not a selection file (a non-empty list of node ids)")
    args[where[0]:where[0] + 1] = nodeids
    # pytest's own hook (trylast, after this one) finds the initial conftests from the
    # arguments it parsed before: the node ids' folders join them, as on a command line.
    namespace = early_config.known_args_namespace
    namespace.file_or_dir = [*(namespace.file_or_dir or ()), *nodeids]
