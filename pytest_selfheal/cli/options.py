"""A ``selfheal`` command as data (name, help, arguments, ``run``) and the arguments several share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple, Union

# An argument: argparse's (flags, keywords), or a function adding a group of them.
Spec = Union[tuple[tuple[str, ...], dict[str, Any]], Callable[[argparse.ArgumentParser], None]]
Run = Callable[[argparse.Namespace], int]


class Command(NamedTuple):
    name: str
    help: str
    specs: tuple[Spec, ...]
    run: Run

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        for spec in self.specs:
            if callable(spec):
                spec(parser)
            else:
                parser.add_argument(*spec[0], **spec[1])


def command(name: str, help: str, *specs: Spec) -> Callable[[Run], Command]:
    return lambda run: Command(name, help, specs, run)


def commands_of(*modules: ModuleType) -> dict[str, Command]:
    return {c.name: c for module in modules for c in vars(module).values() if isinstance(c, Command)}


def arg(*flags: str, **keywords: Any) -> Spec:
    return flags, keywords


def exclusive(*specs: Spec) -> Spec:
    """Arguments of which at most one is given."""
    def add(parser: argparse.ArgumentParser) -> None:
        group = parser.add_mutually_exclusive_group()
        for flags, keywords in specs:  # type: ignore[misc]
            group.add_argument(*flags, **keywords)
    return add


def flag(name: str, help: str) -> Spec:
    return arg(name, action="store_true", help=help)


def json_flag(help: str = "print the result as JSON") -> Spec:
    return flag("--json", help)


def set_flag(help: str) -> Spec:
    return arg("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[], help=help)


ID_HELP = "incident id (incident_YYYYMMDD_HHMMSS_<run>), a unique prefix of one, or `latest`"
INCIDENT_ID = arg("incident_id", metavar="ID", help=ID_HELP)
DIR = arg("--dir", metavar="DIR", default=None,
          help="reports root (default: the configured ralf_lite.reports_dir, .selfheal, in the project "
               "root: the directory pytest takes as rootdir from here)")


def on_incident(json_help: str = "print the result as JSON") -> tuple[Spec, ...]:
    """``ID``, ``--json`` and ``--dir``: what every command on one incident takes."""
    return INCIDENT_ID, json_flag(json_help), DIR


def latest_id(default: str) -> Spec:
    return arg("incident_id", metavar="ID", nargs="?", help=f"incident id, a unique prefix of one, or `latest` "
                                                             f"(default: {default})")
