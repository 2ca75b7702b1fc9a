"""The plugin API of pytest-selfheal: implement these hooks in a ``conftest.py`` or a pytest
plugin; for the ``selfheal`` command, in a module of the entry-point group ``pytest_selfheal``
(docs/hooks.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypedDict

import pluggy

hookspec = pluggy.HookspecMarker("pytest")


# The payloads of the hooks: plain dicts at run time (a plugin returns a dict literal), their
# shapes written down here for type checkers. What a plugin returns is checked where it is used.

# The report's JSON data (docs/report.md), as ``pytest_selfheal_report_sections`` receives it.
ReportData = Mapping[str, Any]


class ClassificationRule(TypedDict, total=False):
    """A rule of ``pytest_selfheal_classification_rules`` (``name``, ``pattern`` and
    ``failure_type`` are required; the rules module checks every field)."""

    name: str
    pattern: str
    failure_type: str
    code_fixable: bool
    transient: bool
    failure_class: str
    keywords: list[str]


class RepairRequest(TypedDict):
    """What ``pytest_selfheal_repair`` is asked: ``plan`` is the plan's JSON (docs/hooks.md),
    ``failures`` the incident's failing tests as in ``incident.json``."""

    incident_id: str
    iteration: int
    worktree: str
    prompt: str
    prompt_file: str
    plan: dict[str, Any]
    failures: list[Any]


class RepairAnswer(TypedDict, total=False):
    """A repair provider's answer: ``result`` is ``"done"`` or ``"gave_up"``."""

    result: str
    message: str
    provider: str


class ReportSection(TypedDict):
    """An extra report section."""

    title: str
    markdown: str


@hookspec
def pytest_selfheal_classification_rules() -> Optional[Sequence[ClassificationRule]]:
    """Return extra classification rules (:class:`ClassificationRule`, like the
    ``classification.rules`` config entries): every implementation's, in hook-call order, tried
    before the configured and built-in ones. ``selfheal fingerprint`` does not call this hook.
    """


@hookspec(firstresult=True)
def pytest_selfheal_repair(request: RepairRequest) -> Optional[RepairAnswer]:
    """Repair provider: change code in ``request["worktree"]`` (an isolated git worktree, never
    the user's tree) between two iterations. Return None to decline (the next provider, or the
    configured command, is asked), or a :class:`RepairAnswer`: ``"done"`` (edits were made; the
    loop computes the diff itself) or ``"gave_up"``, ``provider`` the name recorded in the
    attempt (default: the first repair hook in call order). The first non-None result wins.
    """


@hookspec
def pytest_selfheal_report_sections(report: ReportData) -> Optional[list[ReportSection]]:
    """Return extra report sections, appended after the built-in ones in hook-call order;
    ``report`` is the report's JSON data (docs/report.md)."""
