"""The effective configuration (docs/configuration.md): validation, merge, typed settings.

Pure. Layers, later wins: defaults, the global file, the project files, pytest ini
options, command-line overrides; groups merge key by key, the origin of every leaf is kept.
Values from files are checked strictly (``"4"`` is not an integer); text (ini options,
``--set``) is first coerced to the key's type. Code reads the typed :class:`Settings`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Optional, Union, cast

from pytest_selfheal.config.keys import (
    ARGV,
    BOOL,
    DEFAULT_ORIGIN,
    GROUPS,
    INT,
    JUDGING_KEYS,
    MAX_ITEMS,
    NUMBER,
    PATH,
    REGEXES,
    ROOT_KEY,
    RULES,
    SCHEMA,
    SPECS,
    STRING,
    STRINGS,
    KeySpec,
    Settings,
    nest,
    outside_project,
    rule_checks,
    strip_root,
    text_problem,
)
from pytest_selfheal.errors import ConfigError, describe_value
from pytest_selfheal.names import INI_KEYS, INI_OVERRIDES

if TYPE_CHECKING:
    from pytest_selfheal.hookspecs import ClassificationRule
    from pytest_selfheal.redact import Redactor

_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True,
               "false": False, "no": False, "off": False, "0": False}
_NULL_WORDS = ("", "null", "~", "none")
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,30}")
_KEY_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")

# A value as it arrives from an ini file: text, the lines of a linelist, or unset.
IniValue = Union[str, Sequence[str], None]


@dataclass(frozen=True)
class Override:
    """One ``dotted.key=value`` override (layer 5, or a line of ``selfheal_config``): ``value``
    is text to coerce to the key's type, or a typed value (``--selfheal-approve``)."""

    key: str
    value: Any
    origin: str
    project: bool = False  # a flag the project's files gave (the pytest ini's addopts): paths stay inside it


@dataclass(frozen=True)
class ConfigLayer:
    """One checked layer of the merge: its origin (a file path, ``pytest ini (<path>)``, a
    flag) and ``{dotted leaf key: value}``."""

    origin: str
    values: Mapping[str, Any]  # each value valid for its key (config/keys.py)

    @classmethod
    def of(cls, origin: str, section: object) -> ConfigLayer:
        """The layer of a ``ralf_lite`` value as a file gives it, checked strictly."""
        return cls(origin, dict(_flatten(origin, section)))


def _typed(values: Mapping[str, Any], cls: type = Settings, prefix: str = "") -> Any:
    """The typed view of a merge's values (every key present, each already checked)."""
    typed: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if "spec" not in f.metadata:  # a group: its keys are its fields
            typed[f.name] = _typed(values, type(f.default), f"{prefix}{f.name}.")
            continue
        key = f.metadata["spec"].key or prefix + f.name
        value = values[key]
        if f.metadata["spec"].kind == RULES:
            value = rule_checks()[1](list(value), key) if value else ()
        typed[f.name] = tuple(value) if isinstance(value, list) else value
    return cls(**typed)


@dataclass(frozen=True)
class EffectiveConfig:
    """The merged ``ralf_lite`` mapping (every key present), each leaf's origin, the typed
    :class:`Settings`."""

    values: dict[str, Any]
    origins: dict[str, str]
    settings: Settings
    # The environment the files were read with (None: ``os.environ``); the redactor hides its secrets.
    environ: Optional[Mapping[str, str]] = dataclasses.field(default=None, compare=False, repr=False)

    @cached_property
    def redactor(self) -> Redactor:
        # Imported here: a green run never imports the redact module, and the merge does no I/O.
        from pytest_selfheal.redact import default_redactor

        redaction = self.settings.redaction
        return default_redactor(redaction.patterns, redaction.env_names, env=self.environ)

    def get(self, dotted: str) -> Any:
        """A copy of the value at ``dotted`` (a leaf or a group); KeyError for a key not in the schema."""
        node: Any = self.values
        for part in strip_root(dotted).split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(dotted)
            node = node[part]
        return copy.deepcopy(node)

    def to_json(self) -> dict[str, Any]:
        return {ROOT_KEY: copy.deepcopy(self.values)}

    def with_origins(self) -> dict[str, dict[str, Any]]:
        return {f"{ROOT_KEY}.{key}": {"value": self.get(key), "origin": self.origins[key]}
                for key in sorted(self.origins)}


def config_error(message: str) -> ConfigError:
    return ConfigError(" ".join(message.splitlines()))


def _type_error(origin: str, where: str, expected: str, value: Any) -> ConfigError:
    return config_error(f"{origin}: {where}: expected {expected}, got {describe_value(value)}")


def _unknown_key(origin: str, where: str, key: str, known: Sequence[str]) -> ConfigError:
    import difflib  # only on this error path: a green run never loads it
    close = difflib.get_close_matches(key, known, n=1)
    hint = f'did you mean "{close[0]}"?' if close else f"known keys: {', '.join(known)}"
    return config_error(f"{origin}: {where}: unknown key; {hint}")


# --- strict validation (values as the files give them) ------------------------------


def _check_strings(origin: str, where: str, spec: KeySpec, value: Any) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _type_error(origin, where, spec.expected, value)
    for index, item in enumerate(value):
        if (problem := text_problem(spec, item)) is not None:
            raise config_error(f"{origin}: {where}[{index}]: {problem}")
    return list(value)


def _check_rules(origin: str, where: str, spec: KeySpec, value: Any) -> list[ClassificationRule]:
    if not isinstance(value, (list, tuple)):
        raise _type_error(origin, where, spec.expected, value)
    if not value:
        return []
    try:  # the one rule validator (hook rules go through it too)
        rule_checks()[1](list(value), where)
    except ConfigError as exc:
        raise config_error(f"{origin}: {exc}") from None
    # A copy of each checked rule (the hook payload's shape: only known keys pass the check).
    return [cast("ClassificationRule", dict(rule)) for rule in value]


def _check_leaf(origin: str, where: str, spec: KeySpec, value: Any) -> Any:
    """``value`` (lists copied) if valid for ``spec``, else ConfigError naming ``where``."""
    if value is None and spec.nullable:
        return None
    if isinstance(value, (list, tuple)) and len(value) > MAX_ITEMS:
        raise config_error(f"{origin}: {where}: more than {MAX_ITEMS} items")
    kind = spec.kind
    if kind in (STRINGS, REGEXES) or (kind == ARGV and value):
        return _check_strings(origin, where, spec, value)
    if kind == RULES:
        return _check_rules(origin, where, spec, value)
    if kind == BOOL:
        ok = isinstance(value, bool)
    elif kind in (INT, NUMBER):  # a count is >= 1, a duration or share > 0; each at most its key's most
        # True is not an integer; no float() on ints: a huge int would overflow, not be a plain "no".
        number = (isinstance(value, int) and not isinstance(value, bool)) or (
            kind == NUMBER and isinstance(value, float) and math.isfinite(value))
        ok = number and value > 0 and (spec.most is None or value <= spec.most)
    else:  # STRING, or an empty ARGV list
        ok = kind == STRING and isinstance(value, str) and value != "" and (not spec.choices or value in spec.choices)
    if not ok:
        raise _type_error(origin, where, spec.expected, value)
    if isinstance(value, str) and (problem := text_problem(spec, value)) is not None:
        raise config_error(f"{origin}: {where}: {problem}")
    return value


def _known_names(prefix: str) -> list[str]:
    """The key names allowed directly under ``ralf_lite`` (prefix "") or one of its objects."""
    if not prefix:
        return list(dict.fromkeys(key.split(".")[0] for key in SPECS))
    return [key.split(".", 1)[1] for key in SPECS if key.startswith(prefix + ".")]


def _flatten(origin: str, data: object, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """One layer's ``ralf_lite`` mapping, checked, as ``(dotted leaf, value)`` pairs."""
    where = f"{ROOT_KEY}.{prefix}" if prefix else ROOT_KEY
    if not isinstance(data, Mapping):
        raise _type_error(origin, where, "an object", data)
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        # Files nest objects; a literal "apply_to.tdd_tasks" key is not another spelling.
        if not isinstance(key, str) or "." in key or (dotted not in SPECS and dotted not in GROUPS):
            raise _unknown_key(origin, f"{where}.{key}", str(key), _known_names(prefix))
        if dotted in GROUPS:
            yield from _flatten(origin, value, dotted)  # groups are one level deep
        else:
            yield dotted, _check_leaf(origin, f"{ROOT_KEY}.{dotted}", SPECS[dotted], value)


# --- text coercion (ini options and command-line overrides) -------------------------


def _known_key(origin: str, key: str) -> str:
    """``key`` without ``ralf_lite.``, if it names a leaf or an object; else ConfigError."""
    dotted = strip_root(key.strip())
    if dotted not in SPECS and dotted not in GROUPS:
        group = dotted.split(".")[0]
        # Inside a known object, suggest its own keys rather than the object itself.
        known = [k for k in SPECS if k.startswith(group + ".")] if group in GROUPS else \
            list(SPECS) + list(GROUPS)
        raise _unknown_key(origin, f"{ROOT_KEY}.{dotted}", dotted, known)
    return dotted


def _yaml_text(text: str) -> Any:
    import yaml  # type: ignore[import-untyped,unused-ignore]  # lazy: pytest startup pays nothing

    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ValueError(str(exc)) from None


def _coerce_text(spec: KeySpec, text: str) -> Any:
    """Text to the kind of ``spec`` (range checks come after); ValueError when it cannot be."""
    stripped = text.strip()
    if spec.nullable and stripped.lower() in _NULL_WORDS:
        return None
    kind = spec.kind
    if kind == BOOL:
        if stripped.lower() not in _BOOL_WORDS:
            raise ValueError(stripped)
        return _BOOL_WORDS[stripped.lower()]
    if kind == INT:
        if not _INT_TEXT.fullmatch(stripped):
            raise ValueError(stripped)
        return int(stripped)
    if kind == NUMBER:
        return int(stripped) if _INT_TEXT.fullmatch(stripped) else float(stripped)
    if kind == STRING:
        return stripped
    if kind == RULES or stripped.startswith("["):
        return _yaml_text(stripped) if stripped else []
    if kind == ARGV:
        return shlex.split(stripped)  # never a shell: only split into argv words
    # A list of strings written without brackets: one item per non-empty line (ini linelist).
    return [line.strip() for line in stripped.splitlines() if line.strip()]


def _override_leaves(origin: str, key: str, value: Any, label: Optional[str] = None) -> Iterator[tuple[str, Any]]:
    """One override as checked ``(dotted leaf, value)`` pairs; ``label``: the key as the user
    wrote it (an ini name)."""
    dotted = _known_key(origin, key)
    where = label or f"{ROOT_KEY}.{dotted}"
    if dotted in GROUPS:
        if isinstance(value, str):
            try:
                value = _yaml_text(value)
            except ValueError:
                raise _type_error(origin, where, "an object in YAML flow syntax, e.g. {a: 1}",
                                  value) from None
        return _flatten(origin, value, dotted)
    spec = SPECS[dotted]
    if isinstance(value, str):
        try:
            value = _coerce_text(spec, value)
        except ValueError:
            raise _type_error(origin, where, spec.expected, value) from None
    return iter([(dotted, _check_leaf(origin, where, spec, value))])


def parse_override(text: str, origin: str) -> Override:
    """``"a.b=value"`` to an Override (value kept as text); ConfigError on a bad form or key."""
    key, sep, value = text.partition("=")
    if not sep or not _KEY_TEXT.fullmatch(key.strip()):
        raise config_error(f"{origin}: expected KEY=VALUE with a dotted ralf_lite key "
                           f"(e.g. max_iterations=5), got {describe_value(text)}")
    return Override(_known_key(origin, key), value.strip(), origin)


def override_layers(overrides: Sequence[Override]) -> list[ConfigLayer]:
    return [ConfigLayer(o.origin, dict(_override_leaves(o.origin, o.key, o.value))) for o in overrides]


def ini_layers(ini: Mapping[str, IniValue], origin: str) -> list[ConfigLayer]:
    """The pytest ini options as checked layers: named options first, then ``selfheal_config``;
    the plugin's own options (``selfheal``, ``selfheal_loop``…) are not config keys."""
    leaves: list[tuple[str, Any]] = []
    for name, dotted in INI_KEYS.items():
        value = ini.get(name)
        if name == INI_OVERRIDES or value is None or len(value) == 0:
            continue
        text = value if isinstance(value, str) else "\n".join(value)
        leaves.extend(_override_leaves(origin, dotted, text, label=name))
    layers = [ConfigLayer(origin, dict(leaves))] if leaves else []
    lines = ini.get(INI_OVERRIDES) or []
    for line in lines.splitlines() if isinstance(lines, str) else lines:
        if line.strip():
            layers.extend(override_layers([parse_override(line, origin)]))
    return layers


def merge_layers(layers: Sequence[ConfigLayer]) -> EffectiveConfig:
    """Defaults, then each (checked) layer in order, later wins, key by key."""
    values = {spec.key: copy.deepcopy(spec.default) for spec in SCHEMA}
    origins = {spec.key: DEFAULT_ORIGIN for spec in SCHEMA}
    for layer in layers:
        for dotted, value in layer.values.items():
            values[dotted] = copy.deepcopy(value)  # the result's lists are its own
            origins[dotted] = layer.origin
    return EffectiveConfig(values=nest(values), origins=origins, settings=_typed(values))


def build_effective_config(
    file_layers: Sequence[ConfigLayer],
    *,
    ini: Mapping[str, IniValue],
    ini_origin: str,
    overrides: Sequence[Override] = (),
    project_root: Optional[str] = None,
) -> EffectiveConfig:
    """Files, then ini options, then overrides; errors reported in that order (files are checked
    already). A path from a file, an ini option or a flag the project gave must lie inside
    ``project_root``; one its invoker gave is the invoker's choice."""
    project_layers = [*file_layers, *ini_layers(ini, ini_origin)]
    flag_layers = override_layers(overrides)
    projects = [*project_layers, *(layer for layer, o in zip(flag_layers, overrides) if o.project)]
    for layer in projects if project_root is not None else ():
        for key, value in layer.values.items():
            if SPECS[key].shape == PATH and isinstance(value, str) and outside_project(value, str(project_root)):
                raise config_error(f"{layer.origin}: {ROOT_KEY}.{key}: refusing {describe_value(value)}: "
                                   f"it leads out of the project {project_root}; configure a path inside it")
    return merge_layers([*project_layers, *flag_layers])


def judging_values(effective: EffectiveConfig) -> dict[str, Any]:
    """The judging keys and their values in ``effective``: what an incident's seal records."""
    return {key: effective.get(key) for key in JUDGING_KEYS}


def under_judging(effective: EffectiveConfig, recorded: Mapping[str, Any], origin: str) -> EffectiveConfig:
    """``effective`` with the judging keys set back to ``recorded`` (an incident's seal),
    their origin ``origin``; every other key as it is. A recorded value that is no longer
    valid (or missing) keeps today's."""
    values = {spec.key: effective.get(spec.key) for spec in SCHEMA}
    origins = dict(effective.origins)
    for key in JUDGING_KEYS:
        if key not in recorded:
            continue
        value = copy.deepcopy(recorded[key])
        value = list(value) if isinstance(value, tuple) else value  # a frozen copy read back
        try:
            values[key] = _check_leaf(origin, key, SPECS[key], value)
        except ConfigError:
            continue
        if values[key] != effective.get(key):
            origins[key] = origin
    return EffectiveConfig(values=nest(values), origins=origins, settings=_typed(values), environ=effective.environ)


