"""Hook dispatch: every call of a ``pytest_selfheal_*`` hook goes through pluggy (edge).

Inside pytest the plugin manager is pytest's own. The ``selfheal`` command builds one from our
own entry-point group, ``pytest_selfheal``: it never imports the other pytest plugins installed
(their cost, and a broken one, are pytest's business) (docs/hooks.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from types import TracebackType
from typing import Any, Optional, cast

import pluggy

from pytest_selfheal import hookspecs
from pytest_selfheal.errors import ConfigError, one_line
from pytest_selfheal.hookspecs import ClassificationRule, RepairAnswer, RepairRequest, ReportData

ENTRY_POINT_GROUP = "pytest_selfheal"
HOOK_NAMES = tuple(name for name in dir(hookspecs) if name.startswith("pytest_selfheal_"))


def cli_plugin_manager() -> pluggy.PluginManager:
    """The ``selfheal`` command's plugin manager: our hookspecs and the ``pytest_selfheal``
    entry points implementing one; one that fails to load is a one-line ``ConfigError``."""
    pm = pluggy.PluginManager("pytest")
    pm.add_hookspecs(hookspecs)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if pm.is_blocked(ep.name) or pm.get_plugin(ep.name) is not None:
            continue
        try:
            plugin = ep.load()
        except Exception as exc:  # a broken third-party plugin: report it, do not crash
            raise ConfigError(
                one_line(f"cannot load the '{ENTRY_POINT_GROUP}' entry point {ep.name!r}: {type(exc).__name__}: {exc}")
            ) from None
        if any(callable(getattr(plugin, name, None)) for name in HOOK_NAMES):
            pm.register(plugin, name=ep.name)
    return pm


def _caller(pm: Optional[pluggy.PluginManager], name: str) -> Optional[Any]:
    return getattr(pm.hook, name, None) if pm is not None else None


def _gathered(pm: Optional[pluggy.PluginManager], name: str, **kwargs: Any) -> list[Any]:
    """The lists every implementation of hook ``name`` returned, concatenated in hook-call order."""
    caller = _caller(pm, name)
    return [item for contributed in (caller(**kwargs) if caller is not None else ()) for item in contributed or ()]


def classification_rules(pm: Optional[pluggy.PluginManager]) -> list[ClassificationRule]:
    """Rules contributed by ``pytest_selfheal_classification_rules``, in hook-call order."""
    return _gathered(pm, "pytest_selfheal_classification_rules")


def repair_hook_names(pm: Optional[pluggy.PluginManager]) -> list[str]:
    """Names of the plugins implementing ``pytest_selfheal_repair``, in pluggy's call order."""
    caller = _caller(pm, "pytest_selfheal_repair")
    if caller is None:
        return []
    impls = [i for i in caller.get_hookimpls() if not (i.hookwrapper or i.wrapper)]
    return [i.plugin_name for i in reversed(impls)]  # pluggy calls the last registered (and tryfirst) first


def call_repair(pm: pluggy.PluginManager, request: RepairRequest) -> Optional[RepairAnswer]:
    """The first non-None answer of ``pytest_selfheal_repair``; one that is not a mapping is its
    ``result`` (checked by the caller)."""
    answer = pm.hook.pytest_selfheal_repair(request=request)
    if answer is None or isinstance(answer, Mapping):
        return cast(Optional[RepairAnswer], answer)
    return cast(RepairAnswer, {"result": answer})


def crashed_plugin(pm: Optional[pluggy.PluginManager], hook_name: str, tb: Optional[TracebackType]) -> Optional[str]:
    """The plugin whose ``hook_name`` implementation raised (found in the traceback), if any."""
    caller = _caller(pm, hook_name)
    if caller is None:
        return None
    codes = {getattr(i.function, "__code__", None): i.plugin_name for i in caller.get_hookimpls()}
    found = None
    while tb is not None:
        found = codes.get(tb.tb_frame.f_code, found)
        tb = tb.tb_next
    return found


def report_sections(pm: Optional[pluggy.PluginManager], report: ReportData) -> list[dict[str, str]]:
    """Sections from ``pytest_selfheal_report_sections``, in hook-call order (report/sections.py checks them)."""
    return _gathered(pm, "pytest_selfheal_report_sections", report=report)
