"""The seal of an incident (``incident.json`` ``seal``): what decides what runs and how a
result is judged, as it was at capture (analysis/seal.py takes and compares it). Pure.

Every map is ``{name: digest}``: a file's sha256 (``missing`` when it does not exist), a
setting's sha256 (``unset``), a distribution's version. ``judging`` holds the values of the
judging ``ralf_lite`` keys in force at capture: they judge the incident until a person
takes a new seal (``selfheal reopen --new-seal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Optional

from pytest_selfheal.records.jsondoc import (
    Extra,
    Field,
    FrozenObject,
    JsonRecord,
    checked,
    empty_map,
    json_object,
    object_of,
    string,
    strings,
)


@dataclass(frozen=True)
class Seal(JsonRecord):
    """What decides what runs and how a result is judged, at capture (docs/loop.md "The seal")."""

    KIND: ClassVar[str] = "seal"
    FIELDS: ClassVar[tuple[Field, ...]] = (
        Field("files", checked(object_of(string), description=(
            "Rootdir-relative files that decide what runs: the collected test modules, the __init__.py and "
            "conftest.py of their packages, every conftest.py under the rootdir, the project's own plugins."))),
        Field("modules", checked(object_of(string), description=(
            "Every other module file the capture's run imported that is not code under repair: the project's "
            "test code (rootdir-relative) and everything outside the project (absolute), by content."))),
        Field("pytest_config", checked(object_of(string), description=(
            "`<config file>: <key>` of pytest's section in every file pytest may read it from, and `inifile` "
            "(the file the capture used)."))),
        Field("environment", checked(object_of(string), description="PYTEST_ADDOPTS, PYTEST_PLUGINS, ...")),
        Field("startup", checked(object_of(string), description=(
            "The interpreter's start-up customisation: sitecustomize, usercustomize and the .pth files of the "
            "site directories."))),
        Field("distributions", checked(object_of(string), description=(
            "Installed distributions that can act on a run (pytest plugins by entry point): name -> version."))),
        Field("code", checked(strings, description=(
            "Rootdir-relative non-test modules the capture's run imported (the code under repair): their "
            "reads of the process context are compared."))),
        Field("test_aware", checked(object_of(string), description=(
            "Of those, each one's sha256, then the short sha256 of each line that could read the process "
            "context (parsed only when the module changed since)."))),
        Field("judging", checked(json_object, description=(
            "The judging ralf_lite keys in force at capture (thresholds, budget, gate and verification "
            "arguments, enabled): they judge the incident until a person takes a new seal (`selfheal reopen --new-seal`)."))),
    )

    files: Mapping[str, str] = field(default_factory=empty_map)
    modules: Mapping[str, str] = field(default_factory=empty_map)
    pytest_config: Mapping[str, str] = field(default_factory=empty_map)
    environment: Mapping[str, str] = field(default_factory=empty_map)
    startup: Mapping[str, str] = field(default_factory=empty_map)
    distributions: Mapping[str, str] = field(default_factory=empty_map)
    code: tuple[str, ...] = ()
    test_aware: Mapping[str, str] = field(default_factory=empty_map)
    judging: FrozenObject = field(default_factory=empty_map)
    keys: Optional[tuple[str, ...]] = field(default=None, repr=False, compare=False)
    extra: Extra = ()


__all__ = ["Seal"]
