"""The capture's pytest options that change behaviour, replayed in every verification run
(docs/loop.md "Verification fidelity"), and its selection filters, honoured by the
localisation run; output, parallelism, debugging and the plugin's own options are dropped."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, Optional, cast

import pytest

from pytest_selfheal.names import OPTIONS_PLUGIN

# argparse destinations of options that only select, print, parallelise or debug.
DROPPED_DESTS = frozenset({
    # selection
    "lf", "last_failed_no_failures", "failedfirst", "newfirst", "stepwise",
    "stepwise_skip", "maxfail", "collectonly", "pyargs",
    "continue_on_collection_errors",
    # output and reports
    "verbose", "reportchars", "tbstyle", "color", "code_highlight", "xmlpath", "junitprefix", "durations",
    "durations_min", "no_header", "no_summary", "showcapture", "showlocals", "fulltrace", "capture",
    "resultlog", "report_log", "showfixtures", "show_fixtures_per_test", "markers", "version", "help",
    "setuponly", "setupshow", "setupplan", "traceconfig", "debug", "override_ini_show",
    # debugging, caching, places the loop sets itself
    "usepdb", "usepdb_cls", "trace", "cacheclear", "cacheshow", "basetemp", "rootdir", "confcutdir",
    # pytest-xdist and friends: the loop runs a handful of tests in one process
    "numprocesses", "maxprocesses", "dist", "tx", "looponfail", "rsyncdir",
})

# argparse destinations of the options that narrow the user's suite (-k, -m, --deselect,
# --ignore): a verification names its tests; the localisation run, which judges nothing,
# runs only what the capture ran. The regression check ignores them: the invoker's choice
# never narrows the judge.
FILTER_DESTS = frozenset({"keyword", "markexpr", "deselect", "ignore", "ignore_glob"})

# (takes ``value``, the token after it or attached to it, as its value?, argparse dest) of an
# option string, or None when pytest does not know it or it needs a value it is not given.
OptionLookup = Callable[[str, Optional[str]], Optional[tuple[bool, str]]]


def replayable_options(args: Sequence[str], lookup: OptionLookup) -> tuple[list[str], list[str]]:
    """The options of ``args`` to replay and its selection filters, each in order with their
    values; unknown ones and positionals dropped."""
    kept: list[str] = []
    filters: list[str] = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if token == "--":
            break
        if not token.startswith("-") or token == "-":
            continue  # a path or node id: the loop selects
        name, eq, attached = token.partition("=") if token.startswith("--") else (token, "", "")
        if not eq and not token.startswith("--") and len(token) > 2:
            found = lookup(token[:2], token[2:])
            if found is not None and found[0]:
                name, attached, eq = token[:2], token[2:], "="  # "-pno:randomly"
        found = lookup(name, attached if eq else args[index] if index < len(args) else None)
        if found is None:
            continue
        takes_value, dest = found
        value: Optional[str] = attached if eq else None
        if takes_value and not eq:
            value = args[index]
            index += 1
        # The plugin itself too: the verification child loads it (or not) as the user's pytest
        # does; its modules by name (a plugin whose name only starts like it is another plugin).
        own = dest.startswith("selfheal") or dest == "plugins" and (value or "").split(".")[0] == "pytest_selfheal"
        if dest in DROPPED_DESTS or own:
            continue
        into = filters if dest in FILTER_DESTS else kept
        if value is None:
            into.append(name)
        elif eq and name.startswith("--"):
            into.append(f"{name}={value}")
        else:
            into.extend([name, value])
    return kept, filters


class _Written(argparse.Namespace):
    """A namespace holding every option's default already, so argparse writes only what it
    parses: those destinations, in order."""

    def __init__(self, defaults: argparse.Namespace) -> None:
        self.__dict__.update(vars(defaults), written=[])

    def __setattr__(self, name: str, value: Any) -> None:
        self.written.append(name)
        super().__setattr__(name, value)


def option_lookup(parser: pytest.Parser) -> OptionLookup:
    """The lookup that asks pytest's own ``parser`` (public API only) to parse the option."""

    def lookup(option: str, value: Optional[str]) -> Optional[tuple[bool, str]]:
        # A next token that looks like an option, or names a file of arguments, is no value
        # (argparse reads it so) unless this option needs one.
        if value is None:
            attempts = [[option]]
        elif value.startswith(("-", "@")):
            attempts = [[option], [f"{option}={value}"]]
        else:
            attempts = [[option, value]]
        for tokens in attempts:
            try:
                namespace, unknown = parser.parse_known_and_unknown_args(tokens, _Written(parser.parse_known_args([])))
            except pytest.UsageError:
                continue
            if unknown:
                return None
            # What it parsed comes first; argparse then rewrites the string defaults of the rest.
            return tokens != [option] and value not in namespace.file_or_dir, namespace.written[0]
        return None

    return lookup


def capture_options(config: pytest.Config) -> tuple[list[str], list[str]]:
    """The options a run of ``config`` replays, and its selection filters."""
    parser = cast(pytest.Parser, config.pluginmanager.get_plugin(OPTIONS_PLUGIN))  # plugin.py registered it
    return replayable_options(list(config.invocation_params.args), option_lookup(parser))


__all__ = ["DROPPED_DESTS", "FILTER_DESTS", "capture_options", "option_lookup", "replayable_options"]
