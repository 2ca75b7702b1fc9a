"""The effective configuration (SPEC §4): key schema, defaults, validation, deep merge.

Pure: no file I/O here (``config_files.py`` finds and reads the files). Layers, later wins:

1. built-in defaults (origin ``"default"``),
2. the global file, 3. the project file(s) (origin: the file path),
4. pytest ini options ``selfheal_*`` (origin ``"pytest ini (<path>)"``),
5. command-line overrides ``dotted.key=value`` (origin: the flag, e.g. ``"--set"``).

Objects (``apply_to``, ``repair``…) merge key by key; every other value, lists included,
is a leaf that a later layer replaces whole. The origin of every leaf is kept.

Values from files are checked strictly (``"4"`` is not an integer, ``true`` is not an
integer). Values that arrive as *text* (ini options, ``--set``) are first coerced to the
key's type: ``int("4")``, ``true/false/yes/no/on/off/1/0`` for booleans, YAML flow syntax
for lists and objects, ``shlex.split`` for ``repair.command``.

``SCHEMA`` is the single table of keys: ``DEFAULTS``, validation, the error messages and
the reference table in docs/configuration.md (:func:`reference_table`) all derive from it.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
import shlex
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from pytest_selfheal.analysis.rules import RULE_KEYS, regex_problem, rule_from_mapping
from pytest_selfheal.config.ini import INI_KEYS, INI_OVERRIDES
from pytest_selfheal.errors import ConfigError, describe_value

ROOT_KEY = "ralf_lite"
DEFAULT_ORIGIN = "default"

# Value kinds of the schema. Integers are always >= 1 and numbers always > 0: every
# integer key is a count and every number a duration, so one bound per kind is enough.
BOOL = "bool"
INT = "int"
NUMBER = "number"
STRING = "string"
STRINGS = "strings"
REGEXES = "regexes"
ARGV = "argv"
RULES = "rules"

# What an error message says was expected, per kind.
_EXPECTED = {
    BOOL: "a boolean (true or false)",
    INT: "an integer >= 1",
    NUMBER: "a number > 0",
    STRING: "a non-empty string",
    STRINGS: "a list of strings",
    REGEXES: "a list of regular expressions",
    ARGV: "a non-empty list of strings",
    RULES: "a list of rule objects {name, pattern, failure_type, code_fixable, transient, "
           "failure_class}",
}

# The type column of the reference table, per kind.
_TYPE_NAMES = {
    BOOL: "bool",
    INT: "int ≥ 1",
    NUMBER: "number > 0",
    STRING: "string",
    STRINGS: "list of strings",
    REGEXES: "list of regexes",
    ARGV: "list of strings (argv)",
    RULES: "list of rules",
}


@dataclass(frozen=True)
class KeySpec:
    """One leaf key under ``ralf_lite``: its dotted name, kind, default and meaning."""

    key: str
    kind: str
    default: Any
    meaning: str
    nullable: bool = False

    @property
    def expected(self) -> str:
        """What a valid value looks like, for error messages."""
        return _EXPECTED[self.kind] + (" or null" if self.nullable else "")

    @property
    def type_name(self) -> str:
        """The type as written in the reference table."""
        return _TYPE_NAMES[self.kind] + (" or null" if self.nullable else "")


# Objects under ralf_lite (merged key by key) and what each groups.
GROUPS: Dict[str, str] = {
    "apply_to": "which failures the loop applies to",
    "verification": "how the loop re-runs the failing tests",
    "repair": "the repair provider called between iterations",
    "redaction": "what is removed from everything written to disk or posted",
    "classification": "extra rules for classifying failures",
}

SCHEMA: Tuple[KeySpec, ...] = (
    KeySpec("enabled", BOOL, True,
            "Master switch of the loop. `false`: failing runs are still captured as incidents, "
            "but the loop stops at once with stop reason `disabled`."),
    KeySpec("max_iterations", INT, 3,
            "Most iterations (verification runs, the capture not counted) of one loop run; "
            "reaching it stops with `max_iterations`."),
    KeySpec("error_fingerprint_repeats", INT, 2,
            "Stop with `repeated_fingerprint` when the same fingerprint is seen this many "
            "consecutive iterations."),
    KeySpec("no_progress_repeats", INT, 2,
            "Stop with `no_progress` (or `replan_requested`, see `auto_replan_on_no_progress`) "
            "after this many consecutive iterations without progress."),
    KeySpec("apply_to.auto_tasks", BOOL, True,
            "The loop runs for ordinary failing tests captured by `pytest --selfheal`."),
    KeySpec("apply_to.autonomous_plans", BOOL, True,
            "`selfheal loop` / `selfheal ci` may run the loop without a human at the terminal."),
    KeySpec("apply_to.tdd_tasks", BOOL, False,
            "Tests marked `@pytest.mark.tdd` (red-first tests) are kept out of the loop "
            "unless `true`."),
    KeySpec("max_runtime_minutes", NUMBER, None,
            "Wall-clock budget of one loop, in minutes; exceeding it stops with "
            "`runtime_budget`. `null`: no time-based stop.", nullable=True),
    KeySpec("auto_replan_on_no_progress", BOOL, False,
            "On `no_progress`, set the status `plan_proposed`, regenerate the plan and stop "
            "with `replan_requested` instead of escalating."),
    KeySpec("reports_dir", STRING, ".selfheal",
            "Reports root (incidents, plans, runs, archive); a relative path is relative to "
            "the project root (pytest's rootdir)."),
    KeySpec("report_path", STRING, None,
            "Where to write the loop report markdown (`## RALF Lite Loop Report`); a relative "
            "path is relative to the project root. `null`: no report file.", nullable=True),
    KeySpec("log_tail_lines", INT, 200,
            "Lines of failing output kept in an incident's `log_tail.txt` (after redaction)."),
    KeySpec("verification.allowlist", STRINGS, ["pytest"],
            "Executable names (basename, or `python -m <module>`) verification commands may "
            "run; any other command is refused and logged."),
    KeySpec("verification.timeout_seconds", NUMBER, 900,
            "Timeout of one verification run, in seconds; a run that exceeds it is stopped "
            "and counts as a `timeout`."),
    KeySpec("repair.command", ARGV, None,
            "Repair provider command as an argv list, never run through a shell; placeholders "
            "`{prompt_file}` `{incident_id}` `{worktree}` `{iteration}`. `null`: no command "
            "provider (verify-only, unless a plugin hook provides one).", nullable=True),
    KeySpec("repair.timeout_seconds", NUMBER, 600,
            "Timeout of one repair provider call, in seconds; a repair that exceeds it is "
            "killed and recorded as a `timeout`."),
    KeySpec("repair.allowed_paths", STRINGS, [],
            "Extra glob patterns (relative to the project root) a repair may touch without "
            "asking, beside the plan's `target_paths`."),
    KeySpec("repair.approve", BOOL, False,
            "Approve up front applying a repair provider's diff to the working tree "
            "(as `--selfheal-approve` does)."),
    KeySpec("redaction.patterns", REGEXES, [],
            "Extra regular expressions (Python `re` syntax) whose matches are redacted."),
    KeySpec("redaction.env_names", STRINGS, ["*TOKEN*", "*SECRET*", "*PASSWORD*", "*KEY*"],
            "Glob patterns of environment variable names whose values are redacted. The "
            "four defaults always apply: a list here only adds to them."),
    KeySpec("classification.rules", RULES, [],
            "Extra classification rules `{name, pattern, failure_type, code_fixable, "
            "transient, failure_class, keywords}` (the last four optional), matched against a "
            "failure's message and text before the built-in rules."),
)

SPECS: Dict[str, KeySpec] = {spec.key: spec for spec in SCHEMA}


_BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True,
               "false": False, "no": False, "off": False, "0": False}
_NULL_WORDS = ("", "null", "~", "none")
_INT_TEXT = re.compile(r"[+-]?[0-9]{1,30}")
_KEY_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")

# A value as it arrives from an ini file: text, the lines of a linelist, or unset.
IniValue = Union[str, Sequence[str], None]
Layer = Tuple[str, Mapping[str, Any]]


def _nest(flat: Mapping[str, Any]) -> Dict[str, Any]:
    nested: Dict[str, Any] = {}
    for dotted, value in flat.items():
        node = nested
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


DEFAULTS: Dict[str, Any] = _nest({spec.key: spec.default for spec in SCHEMA})
"""The built-in ``ralf_lite`` mapping. Shared: ``copy.deepcopy`` it before changing anything."""


@dataclass(frozen=True)
class Override:
    """One ``dotted.key=value`` override (layer 5, or a line of ``selfheal_config``).

    ``value`` is text to coerce to the key's type (what :func:`parse_override` gives) or an
    already typed value (what the plugin passes for ``--selfheal-approve``), checked strictly.
    """

    key: str
    value: Any
    origin: str


@dataclass
class EffectiveConfig:
    """The merged ``ralf_lite`` mapping (every key present) and the origin of every leaf."""

    values: Dict[str, Any]
    origins: Dict[str, str]

    def get(self, dotted: str) -> Any:
        """The value at ``dotted`` (``"max_iterations"``, ``"apply_to.tdd_tasks"``, ``"repair"``).

        A leading ``ralf_lite.`` is allowed. Containers are returned as copies. Raises
        ``KeyError`` for a key that is not in the schema.
        """
        node: Any = self.values
        for part in _strip_root(dotted).split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(dotted)
            node = node[part]
        return copy.deepcopy(node)

    def to_json(self) -> Dict[str, Any]:
        """``{"ralf_lite": values}``, as the config files spell it."""
        return {ROOT_KEY: copy.deepcopy(self.values)}

    def leaves(self) -> List[Tuple[str, Any, str]]:
        """``(dotted key, value, origin)`` for every leaf key, sorted by key."""
        return [(key, self.get(key), self.origins[key]) for key in sorted(self.origins)]

    def with_origins(self) -> Dict[str, Dict[str, Any]]:
        """``{"ralf_lite.<key>": {"value": ..., "origin": ...}}`` for every leaf key."""
        return {f"{ROOT_KEY}.{key}": {"value": value, "origin": origin}
                for key, value, origin in self.leaves()}


# --- errors -------------------------------------------------------------------------


def config_error(message: str) -> ConfigError:
    """A ConfigError whose message is guaranteed to be one line."""
    return ConfigError(" ".join(message.splitlines()))


def _type_error(origin: str, where: str, expected: str, value: Any) -> ConfigError:
    return config_error(f"{origin}: {where}: expected {expected}, got {describe_value(value)}")


def _unknown_key(origin: str, where: str, key: str, known: Sequence[str]) -> ConfigError:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f'did you mean "{close[0]}"?' if close else f"known keys: {', '.join(known)}"
    return config_error(f"{origin}: {where}: unknown key; {hint}")


# --- strict validation (values as the files give them) ------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is not an integer


def _check_strings(origin: str, where: str, spec: KeySpec, value: Any) -> List[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise _type_error(origin, where, spec.expected, value)
    if spec.kind == REGEXES:
        for index, pattern in enumerate(value):
            problem = regex_problem(pattern)
            if problem is not None:
                raise config_error(f"{origin}: {where}[{index}]: expected a valid regular "
                                   f"expression, got {describe_value(pattern)}: {problem}")
    return list(value)


def _check_rules(origin: str, where: str, spec: KeySpec, value: Any) -> List[Dict[str, Any]]:
    # The one rule validator is classify's (hook rules go through it too); this adds the origin.
    if not isinstance(value, (list, tuple)):
        raise _type_error(origin, where, spec.expected, value)
    rules = []
    for index, rule in enumerate(value):
        try:
            rule_from_mapping(rule, f"{where}[{index}]")
        except ConfigError as exc:
            raise config_error(f"{origin}: {exc}") from None
        rules.append({field: rule[field] for field in RULE_KEYS if field in rule})
    return rules


def _check_leaf(origin: str, where: str, spec: KeySpec, value: Any) -> Any:
    """``value`` if valid for ``spec`` (lists copied), else ConfigError naming ``where``."""
    if value is None and spec.nullable:
        return None
    kind = spec.kind
    if kind in (STRINGS, REGEXES) or (kind == ARGV and value):
        return _check_strings(origin, where, spec, value)
    if kind == RULES:
        return _check_rules(origin, where, spec, value)
    if kind == BOOL:
        ok = isinstance(value, bool)
    elif kind == INT:
        ok = _is_int(value) and value >= 1
    elif kind == NUMBER:
        # No float() on ints: a huge int would overflow instead of being a plain "no".
        ok = (_is_int(value) and value > 0) or (
            isinstance(value, float) and math.isfinite(value) and value > 0)
    else:  # STRING, or an empty ARGV list
        ok = kind == STRING and isinstance(value, str) and value != ""
    if not ok:
        raise _type_error(origin, where, spec.expected, value)
    return value


def _known_names(prefix: str) -> List[str]:
    """The key names allowed directly under ``ralf_lite`` (prefix "") or one of its objects."""
    if not prefix:
        return list(dict.fromkeys(key.split(".")[0] for key in SPECS))
    return [key.split(".", 1)[1] for key in SPECS if key.startswith(prefix + ".")]


def _flatten(origin: str, data: Any, prefix: str = "") -> Dict[str, Any]:
    """Check one layer's ``ralf_lite`` mapping; return ``{dotted leaf: value}``."""
    where = f"{ROOT_KEY}.{prefix}" if prefix else ROOT_KEY
    if not isinstance(data, Mapping):
        raise _type_error(origin, where, "an object", data)
    flat: Dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        # Files nest objects; a literal "apply_to.tdd_tasks" key is not another spelling.
        if not isinstance(key, str) or "." in key or (dotted not in SPECS and dotted not in GROUPS):
            raise _unknown_key(origin, f"{where}.{key}", str(key), _known_names(prefix))
        if dotted in GROUPS:
            flat.update(_flatten(origin, value, dotted))  # groups are one level deep
        else:
            flat[dotted] = _check_leaf(origin, f"{ROOT_KEY}.{dotted}", SPECS[dotted], value)
    return flat


# --- text coercion (ini options and command-line overrides) -------------------------


def _strip_root(key: str) -> str:
    return key[len(ROOT_KEY) + 1:] if key.startswith(ROOT_KEY + ".") else key


def _known_key(origin: str, key: str) -> str:
    """``key`` without a leading ``ralf_lite.``, if it names a leaf or an object; else ConfigError."""
    dotted = _strip_root(key.strip())
    if dotted not in SPECS and dotted not in GROUPS:
        group = dotted.split(".")[0]
        # Inside a known object, suggest its own keys rather than the object itself.
        known = [k for k in SPECS if k.startswith(group + ".")] if group in GROUPS else \
            list(SPECS) + list(GROUPS)
        raise _unknown_key(origin, f"{ROOT_KEY}.{dotted}", dotted, known)
    return dotted


def _yaml_text(text: str) -> Any:
    """YAML (flow) syntax to a value; ValueError when it does not parse."""
    import yaml  # type: ignore[import-untyped,unused-ignore]  # lazy: pytest startup pays nothing

    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ValueError(str(exc)) from None


def _coerce_text(spec: KeySpec, text: str) -> Any:
    """Text to the kind of ``spec``; ValueError when it cannot be. Range checks come after."""
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


def _override_flat(origin: str, key: str, value: Any, label: Optional[str] = None) -> Dict[str, Any]:
    """One override as ``{dotted leaf: value}``: coerced from text if text, then checked.

    ``label`` names the key in errors when the user wrote something else (an ini name).
    """
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
    return {dotted: _check_leaf(origin, where, spec, value)}


def parse_override(text: str, origin: str) -> Override:
    """``"a.b=value"`` to an Override (value kept as text); ConfigError on a bad form or key.

    A leading ``ralf_lite.`` on the key is allowed and dropped.
    """
    key, sep, value = text.partition("=")
    if not sep or not _KEY_TEXT.fullmatch(key.strip()):
        raise config_error(f"{origin}: expected KEY=VALUE with a dotted ralf_lite key "
                           f"(e.g. max_iterations=5), got {describe_value(text)}")
    return Override(_known_key(origin, key), value.strip(), origin)


def override_layers(overrides: Sequence[Override]) -> List[Layer]:
    """Each override as one checked layer ``(origin, ralf_lite mapping)``, in order."""
    return [(o.origin, _nest(_override_flat(o.origin, o.key, o.value))) for o in overrides]


def ini_layers(ini: Mapping[str, IniValue], origin: str) -> List[Layer]:
    """The pytest ini options as checked layers: named options first, then ``selfheal_config``.

    Unset and empty values are skipped; names that are not config keys (``selfheal``,
    ``selfheal_loop``… which belong to the plugin) are ignored.
    """
    flat: Dict[str, Any] = {}
    for name, dotted in INI_KEYS.items():
        value = ini.get(name)
        if name == INI_OVERRIDES or value is None or len(value) == 0:
            continue
        text = value if isinstance(value, str) else "\n".join(value)
        flat.update(_override_flat(origin, dotted, text, label=name))
    layers: List[Layer] = [(origin, _nest(flat))] if flat else []
    lines = ini.get(INI_OVERRIDES) or []
    for line in lines.splitlines() if isinstance(lines, str) else lines:
        if line.strip():
            layers.extend(override_layers([parse_override(line, origin)]))
    return layers


# --- merge --------------------------------------------------------------------------


def merge_layers(layers: Sequence[Layer]) -> EffectiveConfig:
    """Defaults, then each ``(origin, ralf_lite mapping)`` in order, later wins, deep merge.

    Every layer is checked first; a bad one raises ConfigError naming its origin, the key
    and the expected type, and nothing is returned.
    """
    flats = [(origin, _flatten(origin, mapping)) for origin, mapping in layers]
    values = {spec.key: copy.deepcopy(spec.default) for spec in SCHEMA}
    origins = {spec.key: DEFAULT_ORIGIN for spec in SCHEMA}
    for origin, flat in flats:
        for dotted, value in flat.items():
            values[dotted] = value
            origins[dotted] = origin
    return EffectiveConfig(values=_nest(values), origins=origins)


def build_effective_config(
    file_layers: Sequence[Layer],
    *,
    ini: Mapping[str, IniValue],
    ini_origin: str,
    overrides: Sequence[Override] = (),
) -> EffectiveConfig:
    """Files, then ini options, then overrides; errors reported in that order."""
    merge_layers(file_layers)  # report a bad file before a bad ini option or flag
    return merge_layers([*file_layers, *ini_layers(ini, ini_origin), *override_layers(overrides)])


def default_config() -> EffectiveConfig:
    """The built-in defaults alone."""
    return merge_layers([])


# --- documentation ------------------------------------------------------------------


def reference_table() -> str:
    """The markdown reference table of every key, as docs/configuration.md carries it."""
    rows = ["| Key | Type | Default | Meaning |", "|-----|------|---------|---------|"]
    for spec in SCHEMA:
        default = json.dumps(spec.default, ensure_ascii=False)
        rows.append(f"| `{spec.key}` | {spec.type_name} | `{default}` | {spec.meaning} |")
    return "\n".join(rows)


def ini_table() -> str:
    """The markdown table of pytest ini options, as docs/configuration.md carries it."""
    rows = ["| ini option | Config key |", "|------------|------------|"]
    for name, dotted in INI_KEYS.items():
        target = f"`{dotted}`" if dotted else "any: one `KEY=VALUE` override per line"
        rows.append(f"| `{name}` | {target} |")
    return "\n".join(rows)
