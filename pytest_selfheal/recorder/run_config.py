"""The effective config of a ``pytest --selfheal`` run (edge): files, then ini options, then flags."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import cast

import pytest

from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.settings import EffectiveConfig, Override, parse_override
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.names import FLAG_KEYS, INI_KEYS, OPTIONS_PLUGIN


def _ini_values(config: pytest.Config) -> dict[str, str]:
    values: dict[str, str] = {}
    for ini_name in INI_KEYS:
        value = config.getini(ini_name)
        if ini_name == "selfheal_config":
            if value:
                values[ini_name] = "\n".join(value)
        elif value not in (None, ""):
            values[ini_name] = str(value)
    return values


def load_effective_config(config: pytest.Config) -> EffectiveConfig:
    """The effective config for this pytest run (files ← ini ← flags); a bad one is a usage error."""
    overrides: list[Override] = []
    addopts = f"{{}} in the addopts of the pytest ini ({config.inipath})"
    invoker = _invoker_options(config)
    for dest, key in FLAG_KEYS.items():
        value = config.getoption(dest)
        if value is None:
            continue
        flag = "--" + dest.replace("_", "-")
        project = getattr(invoker, dest, None) != value  # the invoker's words come last: theirs wins
        if dest == "selfheal_dir":
            # A path given on the command line is relative to where pytest was invoked.
            value = str(Path(config.invocation_params.dir, value))
        overrides.append(Override(key, value, addopts.format(flag) if project else flag, project=project))
    given = getattr(invoker, "selfheal_set", None) or []
    for text in config.getoption("selfheal_set") or []:
        project = text not in given
        override = parse_override(text, addopts.format("--selfheal-set") if project else "--selfheal-set")
        overrides.append(Override(override.key, override.value, override.origin, project=project))
    ini_origin = f"pytest ini ({config.inipath})" if config.inipath else "pytest ini"
    try:
        return load_config(config.rootpath, ini=_ini_values(config), overrides=overrides, ini_origin=ini_origin)
    except SelfhealError as exc:
        raise pytest.UsageError(f"selfheal: {exc}") from None


def _invoker_options(config: pytest.Config) -> argparse.Namespace:
    """The options the invoker gave (command line, ``PYTEST_ADDOPTS``), read by pytest's own
    parser; the rest are the project's (its ini's ``addopts``)."""
    parser = cast(pytest.Parser, config.pluginmanager.get_plugin(OPTIONS_PLUGIN))  # plugin.py registered it
    try:
        words = [*shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *config.invocation_params.args]
        return parser.parse_known_and_unknown_args(words)[0]
    except (ValueError, pytest.UsageError):  # pytest read them already; what it could not is no value here
        return argparse.Namespace()
