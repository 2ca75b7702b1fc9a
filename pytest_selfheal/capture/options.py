"""The capture's pytest options that change behaviour, replayed in every verification run
(docs/loop.md "Verification fidelity"); selection, output, parallelism, debugging and the
plugin's own options are dropped."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

# argparse destinations of options that only select, print, parallelise or debug.
DROPPED_DESTS = frozenset({
    # selection
    "keyword", "markexpr", "lf", "last_failed_no_failures", "failedfirst", "newfirst", "stepwise",
    "stepwise_skip", "maxfail", "deselect", "ignore", "ignore_glob", "collectonly", "pyargs",
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

# (takes a value?, argparse dest) of an option string, or None when pytest does not know it.
OptionLookup = Callable[[str], Optional[tuple[bool, str]]]


def _is_selfheal_option(dest: str, value: Optional[str]) -> bool:
    if dest.startswith("selfheal"):
        return True
    # The plugin itself: the verification child loads it (or not) as the user's pytest does.
    # Its modules by name: a plugin whose name only starts like it is another plugin.
    return dest == "plugins" and value is not None and value.split(".")[0] == "pytest_selfheal"


def replayable_options(args: Sequence[str], lookup: OptionLookup) -> list[str]:
    """The options of ``args`` to replay, in order, with their values; unknown ones and positionals dropped."""
    kept: list[str] = []
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
            found = lookup(token[:2])
            if found is not None and found[0]:
                name, attached, eq = token[:2], token[2:], "="  # "-pno:randomly"
        found = lookup(name)
        if found is None:
            continue
        takes_value, dest = found
        value: Optional[str] = attached if eq else None
        if takes_value and not eq:
            if index >= len(args):
                continue
            value = args[index]
            index += 1
        if dest in DROPPED_DESTS or _is_selfheal_option(dest, value):
            continue
        if value is None:
            kept.append(name)
        elif eq and name.startswith("--"):
            kept.append(f"{name}={value}")
        else:
            kept.extend([name, value])
    return kept


def option_lookup(config: Any) -> Optional[OptionLookup]:
    """The lookup over ``config``'s option parser, or None when this pytest does not expose it."""
    parser = getattr(getattr(config, "_parser", None), "optparser", None)
    actions = getattr(parser, "_option_string_actions", None)
    if not isinstance(actions, dict):
        return None

    def lookup(option: str) -> Optional[tuple[bool, str]]:
        action = actions.get(option)
        if action is None:
            return None
        return action.nargs != 0, str(action.dest)

    return lookup


def capture_options(config: Any) -> tuple[list[str], Optional[str]]:
    lookup = option_lookup(config)
    if lookup is None:
        return [], "this pytest does not expose its option parser: the run's options are not replayed"
    return replayable_options(list(config.invocation_params.args), lookup), None


__all__ = ["DROPPED_DESTS", "capture_options", "option_lookup", "replayable_options"]
