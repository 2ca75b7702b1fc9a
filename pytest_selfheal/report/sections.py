"""The report's markdown with the sections of ``pytest_selfheal_report_sections`` hooks (edge):
every surface renders through :func:`report_markdown`, so they appear wherever the report does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import pluggy

from pytest_selfheal import hooks
from pytest_selfheal.errors import ConfigError, one_line
from pytest_selfheal.records.report import ReportInput, as_report
from pytest_selfheal.report.render import render_markdown

HOOK_NAME = "pytest_selfheal_report_sections"


def hook_sections(pm: Optional[pluggy.PluginManager], report: Mapping[str, Any]) -> list[dict[str, str]]:
    """The sections the hooks of ``pm`` add to ``report``; a bad hook is a one-line ConfigError."""
    try:
        sections = hooks.report_sections(pm, report)
    except Exception as exc:  # a third-party hook: report it in one line, never a traceback
        plugin = hooks.crashed_plugin(pm, HOOK_NAME, exc.__traceback__)
        who = f" of plugin {plugin!r}" if plugin else ""
        raise ConfigError(one_line(f"the {HOOK_NAME} hook{who} failed: {type(exc).__name__}: {exc}")) from None
    for section in sections:
        if not (isinstance(section, Mapping) and isinstance(section.get("title"), str)
                and isinstance(section.get("markdown", ""), str)):
            raise ConfigError(one_line(f"a {HOOK_NAME} hook returned {section!r}: expected a list of "
                                       '{"title": str, "markdown": str} objects'))
    return sections


def report_markdown(report: ReportInput, pm: Optional[pluggy.PluginManager], *, headline: bool = False) -> str:
    """``render_markdown(report)`` plus the hooks' sections (a hook is given the report JSON)."""
    payload = report if isinstance(report, Mapping) else report.to_json()
    return render_markdown(as_report(report), headline=headline, extra_sections=hook_sections(pm, payload))


# The report's sections by what a reader with little room needs first; below ESSENTIAL_VALUE
# never left out; a hook's section ranks last.
SECTION_VALUE: Mapping[str, int] = {
    "### Recommended Next Action": 0,
    "### Decision Point": 0,
    "### Stop Reason and Final Status": 1,
    "### Failures": 2,
    "### Quarantined Failures": 2,
    "### Tasks": 3,
    "### Flaky Tests": 3,
    "### Tests Fixed Along the Way": 3,
    "### New Failures": 4,
    "### Task Attempts": 4,
    "## RALF Lite Loop Report": 4,
    "### Fingerprint per Iteration": 5,
    "### Iterations × Tests": 6,
    "### Loop Timeline": 7,
    "### Shards": 7,
    "### Effective Config": 8,
}
ESSENTIAL_VALUE = 2
_HOOK_VALUE = 9


def report_section_value(block: str) -> int:
    """The :data:`SECTION_VALUE` of one block of the markdown report; the headline's is 0."""
    heading = block.split("\n", 1)[0].strip()
    if not heading.startswith("#"):
        return 0
    return SECTION_VALUE.get(heading, _HOOK_VALUE)
