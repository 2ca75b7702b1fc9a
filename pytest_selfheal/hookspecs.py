"""Extension points of pytest-selfheal, registered with ``pytest_addhooks``.

This module *is* the plugin API. Implement these hooks in a ``conftest.py`` or a pytest
plugin; for the ``selfheal`` command (outside pytest) register a module exposing them
under the entry-point group ``pytest_selfheal`` (docs/hooks.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import pluggy

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_selfheal_classification_rules() -> Optional[Sequence[Mapping[str, Any]]]:
    """Return extra classification rules, tried before the configured and built-in ones.

    Each rule is a mapping like the ``classification.rules`` config entries:
    ``{"name": ..., "pattern": <regex>, "failure_type": <TYPE>}`` with optional
    ``code_fixable``, ``transient``, ``failure_class`` and ``keywords``. Results of all
    implementations are concatenated in hook-call order, and tried before the configured
    rules. ``selfheal fingerprint`` does not call this hook (docs/hooks.md).
    """


@hookspec(firstresult=True)
def pytest_selfheal_repair(request: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    """Repair provider: change code in ``request["worktree"]`` between two iterations.

    ``request`` carries ``incident_id``, ``iteration``, ``worktree`` (a path: an isolated
    git worktree, never the user's tree), ``prompt`` (the repair prompt text),
    ``prompt_file``, ``plan`` and ``failures``. Return ``None`` to decline (the next
    provider, or the configured command, is asked), or a mapping with ``"result"``:
    ``"done"`` (edits were made — the loop computes the diff itself) or ``"gave_up"``,
    plus an optional ``"message"`` and an optional ``"provider"`` (the name recorded in
    the attempt; default: the first repair hook in call order). The first non-None result
    wins.
    """


@hookspec
def pytest_selfheal_report_sections(report: Mapping[str, Any]) -> Optional[list[dict[str, str]]]:
    """Return extra report sections: a list of ``{"title": ..., "markdown": ...}``.

    ``report`` is the report's JSON data (docs/report.md). Sections are appended after the
    built-in ones, in hook-call order.
    """
