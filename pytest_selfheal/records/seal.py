"""The seal of an incident (``incident.json`` ``seal``). Every map is ``{name: digest}``: a file's
sha256 (``missing``), a setting's sha256 (``unset``), a distribution's version. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pytest_selfheal.records.jsondoc import (
    FrozenObject,
    JsonRecord,
    Parser,
    checked,
    empty_map,
    json_object,
    object_of,
    string,
    strings,
)

Digests = Mapping[str, str]


def _digests(description: str) -> Parser:
    return checked(object_of(string), description=description)


@dataclass(frozen=True)
class Seal(JsonRecord):
    """What decides what runs and how a result is judged, at capture (docs/loop.md "The seal")."""

    files: Annotated[Digests, _digests(
        "Rootdir-relative files that decide what runs: the collected test modules, the __init__.py and "
        "conftest.py of their packages, every conftest.py under the rootdir, the project's own plugins."
    )] = field(default_factory=empty_map)
    modules: Annotated[Digests, _digests(
        "Every other module file the capture's run imported that is not code under repair: the project's "
        "test code (rootdir-relative) and everything outside the project (absolute), by content."
    )] = field(default_factory=empty_map)
    pytest_config: Annotated[Digests, _digests(
        "`<config file>: <key>` of pytest's section in every file pytest may read it from, and `inifile` "
        "(the file the capture used)."
    )] = field(default_factory=empty_map)
    data: Annotated[Digests, _digests(
        "Rootdir-relative files the capture's run opened for reading and did not write (test data), by content."
    )] = field(default_factory=empty_map)
    environment: Annotated[Digests, _digests("PYTEST_ADDOPTS, PYTEST_PLUGINS, ...")] = field(default_factory=empty_map)
    startup: Annotated[Digests, _digests(
        "The interpreter's start-up customisation: sitecustomize, usercustomize and the .pth files of the "
        "site directories."
    )] = field(default_factory=empty_map)
    distributions: Annotated[Digests, _digests(
        "Installed distributions that can act on a run (pytest plugins by entry point): name -> version."
    )] = field(default_factory=empty_map)
    code: Annotated[tuple[str, ...], checked(strings, description=(
        "Rootdir-relative non-test modules the capture's run imported (the code under repair): their "
        "reads of the process context are compared."
    ))] = ()
    test_aware: Annotated[Digests, _digests(
        "Of those, each one's sha256, then the short sha256 of each line that could read the process "
        "context (parsed only when the module changed since)."
    )] = field(default_factory=empty_map)
    judging: Annotated[FrozenObject, checked(json_object, description=(
        "The judging ralf_lite keys in force at capture (thresholds, budget, gate and verification "
        "arguments, enabled): they judge the incident until a person takes a new seal (`selfheal reopen --new-seal`)."
    ))] = field(default_factory=empty_map)
