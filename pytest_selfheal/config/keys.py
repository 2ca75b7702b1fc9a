"""The configuration keys, declared once as the fields of the typed :class:`Settings`
(pure): ``SCHEMA`` lists every leaf under ``ralf_lite``; defaults, validation, error
messages and the reference tables in docs/configuration.md derive from them."""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Optional

from pytest_selfheal.errors import describe_value
from pytest_selfheal.names import DEFAULT_REPORTS_DIR, INI_KEYS

if TYPE_CHECKING:
    from pytest_selfheal.analysis.rules import Rule

ROOT_KEY = "ralf_lite"
DEFAULT_ORIGIN = "default"

# Value kinds of the schema. Integers are always >= 1 and numbers always > 0 (every integer
# key is a count, every number a duration or a share), each at most its key's ``most``.
BOOL = "bool"
INT = "int"
NUMBER = "number"
STRING = "string"
STRINGS = "strings"
REGEXES = "regexes"
ARGV = "argv"
RULES = "rules"

# Shapes a value must also have, beyond its kind (``shape_problem`` below judges them).
PATH = "path"  # a path inside the project: never climbing out; absolute only inside it (but from a flag)
COMMANDS = "commands"  # program names none of which runs code or a program given in its arguments
PYTEST_ARGS = "pytest_args"  # pytest arguments that neither move the rootdir or config nor read @FILE

# Every list holds at most this many items, every string at most so many characters.
MAX_ITEMS = 1000
MAX_TEXT = 4096
DAY_SECONDS = 86_400

# Per kind: what an error message says was expected, and the reference table's type column.
_KIND_TEXT = {
    BOOL: ("a boolean (true or false)", "bool"),
    INT: ("an integer >= 1", "int ≥ 1"),
    NUMBER: ("a number > 0", "number > 0"),
    STRING: ("a non-empty string", "string"),
    STRINGS: ("a list of strings", "list of strings"),
    REGEXES: ("a list of regular expressions", "list of regexes"),
    ARGV: ("a non-empty list of strings", "list of strings (argv)"),
    RULES: ("a list of rule objects {name, pattern, failure_type, code_fixable, transient, failure_class}",
            "list of rules"),
}


@dataclass(frozen=True)
class KeySpec:
    """One leaf key under ``ralf_lite``: its dotted name, kind, default and meaning."""

    key: str
    kind: str
    default: Any
    meaning: str
    nullable: bool = False
    # A judging key: the value in force when an incident is captured judges it until
    # `selfheal reopen` (config/seal.py); a later edit is reported, not obeyed.
    judging: bool = False
    most: Optional[float] = None  # the largest INT or NUMBER value
    shape: str = ""  # PATH, COMMANDS or PYTEST_ARGS: what else a valid value must be
    choices: tuple[str, ...] = ()  # a string key's only allowed values (empty: any)

    @property
    def expected(self) -> str:  # what a valid value looks like, for error messages
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.most is not None and self.kind == INT:
            text = f"an integer from 1 to {_number(self.most)}"
        else:
            text = _KIND_TEXT[self.kind][0] + (f" and <= {_number(self.most)}" if self.most is not None else "")
        return text + (" or null" if self.nullable else "")

    @property
    def type_name(self) -> str:  # as the reference table writes it
        if self.choices:
            return ", ".join(f"`{c}`" for c in self.choices[:-1]) + f" or `{self.choices[-1]}`"
        if self.most is not None:
            text = f"int 1–{_number(self.most)}" if self.kind == INT else f"number > 0, ≤ {_number(self.most)}"
        else:
            text = _KIND_TEXT[self.kind][1]
        return text + (" or null" if self.nullable else "")


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)


def setting(kind: str, default: Any, meaning: str, *, key: str = "", **options: Any) -> Any:
    """A field of :class:`Settings` declaring its key: the typed default, the :class:`KeySpec` in its metadata."""
    typed = tuple(default) if isinstance(default, list) else default
    return field(default=typed, metadata={"spec": KeySpec(key, kind, default, meaning, **options)})


@dataclass(frozen=True)
class ApplyToSettings:
    auto_tasks: bool = setting(BOOL, True,
            "The loop runs for failing tests captured by `pytest --selfheal`.")
    autonomous_plans: bool = setting(BOOL, True,
            "`selfheal loop` / `selfheal ci` may run the loop with no human at the terminal.")
    tdd_tasks: bool = setting(BOOL, False,
            "The loop also takes tests marked `@pytest.mark.tdd` (red-first tests).")


@dataclass(frozen=True)
class VerificationSettings:
    allowlist: tuple[str, ...] = setting(STRINGS, ["pytest"],
            "Programs (basename, or `python -m <module>`) a verification command may run; anything else is "
            "refused and logged ([commands](#paths-commands-arguments-and-patterns)).", judging=True, shape=COMMANDS)
    args: tuple[str, ...] = setting(STRINGS, [],
            "Extra pytest arguments of every verification run, after the capture's replayed options and judged "
            "like them ([arguments](#paths-commands-arguments-and-patterns)).", judging=True, shape=PYTEST_ARGS)
    timeout_seconds: float = setting(NUMBER, 900,
            "Timeout of one verification run; a run past it is stopped and counts as a `timeout`.", judging=True, most=DAY_SECONDS)
    localise: bool = setting(BOOL, True,
            "When a plan's ranking will be read, re-run the failing tests' files once to rank its suspects by "
            "what each test runs ([loop.md](loop.md#the-plan)). `false`: the capture's plan stands.")
    regression: str = setting(STRING, "affected",
            "Before a `success`, re-run the tests that can reach the changed code by their imports or recorded spectrum (`affected`), the capture's "
            "whole command (`full`) or none (`off`) ([loop.md](loop.md#the-regression-check)).", judging=True, choices=("affected", "full", "off"))
    regression_budget_seconds: float = setting(NUMBER, 600,
            "Timeout of one regression check; past it the iteration counts as a `timeout`, never a `success`.", judging=True, most=DAY_SECONDS)


@dataclass(frozen=True)
class RepairSettings:
    command: Optional[tuple[str, ...]] = setting(ARGV, None,
            "Repair provider argv, never run through a shell; placeholders `{prompt_file}` `{incident_id}` "
            "`{worktree}` `{iteration}`. `null`: verify-only, unless a plugin hook provides one.", nullable=True)
    timeout_seconds: float = setting(NUMBER, 600,
            "Timeout of one repair provider call; a call past it is killed and recorded as a `timeout`.", most=DAY_SECONDS)
    allowed_paths: tuple[str, ...] = setting(STRINGS, [],
            "Extra globs (from the project root) a repair may touch without asking, beside the plan's "
            "`target_paths`.")
    allow_test_edits: bool = setting(BOOL, False,
            "A repair may edit tests, conftest.py and files below test directories without asking; `false`: "
            "such a diff needs scope approval or is rolled back.")
    allow_binary: bool = setting(BOOL, False,
            "A repair's patch may change binary files; `false`: such a patch is refused before the approval "
            "question.")
    approve: bool = setting(BOOL, False,
            "Approve applying a repair provider's diff up front (as `--selfheal-approve`).")


@dataclass(frozen=True)
class RedactionSettings:
    patterns: tuple[str, ...] = setting(REGEXES, [],
            "Extra regular expressions whose matches are redacted.")
    env_names: tuple[str, ...] = setting(STRINGS, ["*TOKEN*", "*SECRET*", "*PASSWORD*", "*KEY*"],
            "Globs of environment variable names whose values are redacted; added to the four defaults, which "
            "always apply.")


@dataclass(frozen=True)
class HistorySettings:
    enabled: bool = setting(BOOL, True,
            "Record every capture and iteration in `history.sqlite3` under the reports root and triage each "
            "failure as new, known, flaky or quarantined.")
    base_branch: str = setting(STRING, "main",
            "The branch whose failures count as `known` (in Actions, the pull request's or merge queue's base "
            "branch wins).")
    flaky_rate: float = setting(NUMBER, 0.1,
            "A test whose recorded re-run passes exceed this share of its recorded failures is `flaky`.", most=1)
    window_days: float = setting(NUMBER, 30,
            "How many days back flake rates look (`selfheal flaky`, triage).", most=3650)
    quarantine_file: str = setting(STRING, ".selfheal-quarantine.yml",
            "The committed quarantine list, a path inside the project (no symbolic link); read from the base "
            "revision for an event testing unmerged code.", shape=PATH)


@dataclass(frozen=True)
class NewTestsSettings:
    enabled: bool = setting(BOOL, True,
            "On a pull request, `selfheal ci` re-runs the tests it adds or changes to catch a flaky one "
            "([action.md](action.md#new-tests-are-checked-for-flakiness)).")
    reruns: int = setting(INT, 5,
            "Extra runs of each new or changed test, in an order shuffled by a recorded seed.", most=100)
    max_seconds: float = setting(NUMBER, 120,
            "Time cap of the new tests' re-runs; re-runs that do not fit are left out and named.", most=DAY_SECONDS)
    max_share: float = setting(NUMBER, 0.2,
            "Time cap of those re-runs as a share of the job's own test run, at least 30 s and at most "
            "`new_tests.max_seconds`.", most=10)
    seed: Optional[int] = setting(INT, None,
            "Seed of the re-runs' order; `null`: a fresh one each run, printed and kept in the report for "
            "replay.", nullable=True, most=2**31 - 1)


@dataclass(frozen=True)
class McpSettings:
    max_chars: int = setting(INT, 8000,
            "Longest result a `selfheal mcp` tool returns; a longer one is cut with a note naming the tool "
            "that gives more.", most=1_000_000)


@dataclass(frozen=True)
class GateSettings:
    pytest_args: tuple[str, ...] = setting(STRINGS, [],
            "Arguments of a stop gate's `pytest --selfheal` run when no incident is open; with one open, its "
            "capture's options are used.", judging=True, shape=PYTEST_ARGS)
    timeout_seconds: float = setting(NUMBER, 300,
            "Longest a stop gate's test run may take; past it the agent is let stop (fails open). `selfheal "
            "stop-gate install` sets the hook's timeout 30 s higher.", judging=True, most=DAY_SECONDS)
    max_chars: int = setting(INT, 4000,
            "Longest message a stop gate hands the agent; a longer one is cut with a note naming `selfheal "
            "show`.", most=1_000_000)


@dataclass(frozen=True)
class Settings:
    """The effective ``ralf_lite`` config as typed values, and the declaration of its keys."""

    enabled: bool = setting(BOOL, True,
            "Master switch of the loop; `false` still captures incidents but stops the loop at once with "
            "`disabled`.", judging=True)
    max_iterations: int = setting(INT, 3,
            "Most verification runs (the capture not counted) in one loop run; then it stops with "
            "`max_iterations`.", judging=True, most=1000)
    error_fingerprint_repeats: int = setting(INT, 2,
            "Stop with `repeated_fingerprint` after the same fingerprint this many consecutive iterations.", judging=True, most=1000)
    no_progress_repeats: int = setting(INT, 2,
            "Stop with `no_progress` (or `replan_requested`) after this many consecutive iterations without "
            "progress.", judging=True, most=1000)
    apply_to: ApplyToSettings = ApplyToSettings()
    max_runtime_minutes: Optional[float] = setting(NUMBER, None,
            "Wall-clock budget of one loop; past it, it stops with `runtime_budget`. `null`: none.", nullable=True, judging=True, most=10_080)
    auto_replan_on_no_progress: bool = setting(BOOL, False,
            "On `no_progress`, set the status `plan_proposed`, regenerate the plan and stop with "
            "`replan_requested` instead of escalating.")
    reports_dir: str = setting(STRING, DEFAULT_REPORTS_DIR,
            "Reports root (incidents, plans, runs, archive), inside the project root unless its invoker's flag gives it, every symbolic link on its way followed "
            "([paths](#paths-commands-arguments-and-patterns)).", shape=PATH)
    report_path: Optional[str] = setting(STRING, None,
            "Where to write the loop report markdown, a path like `reports_dir`. `null`: no report file.", nullable=True, shape=PATH)
    log_tail_lines: int = setting(INT, 200,
            "Lines of failing output kept in an incident's `log_tail.txt` (after redaction).", most=100_000)
    verification: VerificationSettings = VerificationSettings()
    repair: RepairSettings = RepairSettings()
    redaction: RedactionSettings = RedactionSettings()
    classification_rules: tuple[Rule, ...] = setting(RULES, [],
            "Extra classification rules, tried on a failure's message and text before the built-in ones.",
            key="classification.rules")
    history: HistorySettings = HistorySettings()
    new_tests: NewTestsSettings = NewTestsSettings()
    mcp: McpSettings = McpSettings()
    gate: GateSettings = GateSettings()


def _specs(cls: type, prefix: str = "") -> Iterator[KeySpec]:
    for f in fields(cls):
        if "spec" in f.metadata:
            spec: KeySpec = f.metadata["spec"]
            yield replace(spec, key=spec.key or prefix + f.name)
        else:  # a group: its keys are its fields
            yield from _specs(type(f.default), f"{prefix}{f.name}.")


SCHEMA: tuple[KeySpec, ...] = tuple(_specs(Settings))
SPECS: dict[str, KeySpec] = {spec.key: spec for spec in SCHEMA}
# Objects under ralf_lite, merged key by key.
GROUPS = frozenset(key.split(".")[0] for key in SPECS if "." in key)
JUDGING_KEYS: tuple[str, ...] = tuple(spec.key for spec in SCHEMA if spec.judging)


def nest(flat: Mapping[str, object]) -> dict[str, Any]:
    """The nested ``ralf_lite`` JSON object of ``{dotted leaf key: value}``."""
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = nested
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def strip_root(key: str) -> str:
    return key[len(ROOT_KEY) + 1:] if key.startswith(ROOT_KEY + ".") else key


# --- shapes: what a value must be beyond its kind, judged by its text alone ---------------

# The programs an allowlist may not name (judged by :func:`program_stem`): a shell, an
# interpreter, or a launcher of another program or code given in its arguments.
RUNS_ANYTHING = frozenset({
    # shells
    "sh", "bash", "zsh", "dash", "ksh", "mksh", "pdksh", "oksh", "yash", "ash", "csh", "tcsh", "fish", "rc", "es",
    "nu", "elvish", "xonsh", "busybox", "toybox", "cmd", "command", "powershell", "pwsh",
    # interpreters
    "python", "pythonw", "py", "pypy", "ipython", "jython", "ironpython", "graalpy", "micropython", "node",
    "nodejs", "deno", "bun", "perl", "ruby", "irb", "jruby", "php", "lua", "luajit", "tclsh", "wish", "expect",
    "awk", "gawk", "mawk", "nawk", "sed", "osascript", "cscript", "wscript", "java", "jshell", "groovy", "scala",
    "julia", "r", "rscript", "guile", "racket", "sbcl", "clisp", "ghci", "runghc", "runhaskell", "erl",
    "escript", "elixir", "iex", "swift", "dotnet", "make", "gmake",
    # launchers of what their arguments name
    "env", "sudo", "doas", "su", "runuser", "pkexec", "nohup", "nice", "ionice", "timeout", "time", "chrt",
    "taskset", "setsid", "stdbuf", "unbuffer", "script", "xargs", "parallel", "watch", "exec", "eval", "strace",
    "ltrace", "gdb", "lldb", "valgrind", "chroot", "nsenter", "unshare", "firejail", "systemd-run", "flock",
    "ssh", "docker", "podman", "kubectl", "npx", "pnpx", "uvx", "pipx", "uv", "poetry", "pdm", "hatch", "rye",
    "conda", "mamba", "micromamba", "npm", "pnpm", "yarn", "find",
})
# pytest options that move its rootdir or its config file (and with them conftest.py and
# every ini option): refused in verification.args and gate.pytest_args, in every spelling.
ROOT_MOVING_OPTIONS = ("--rootdir", "--confcutdir", "-c", "--config-file", "--inifile")
# selfheal's flags that set a config key: in a config value they would be the project's words
# passed on as an invoker's (whose paths may lie anywhere); the key itself is the way.
SELFHEAL_KEY_FLAGS = ("--selfheal-dir", "--selfheal-report", "--selfheal-set")


def program_stem(entry: str) -> str:
    """What an allowlist entry names: its first word's basename, lower-cased, without a Windows
    suffix or a trailing version (``/usr/bin/Python3.12.exe`` → ``python``)."""
    words = entry.split()
    name = (words[0] if words else "").replace("\\", "/").rsplit("/", 1)[-1].lower()
    for suffix in (".exe", ".cmd", ".bat", ".com", ".ps1"):
        name = name.removesuffix(suffix)
    return re.sub(r"[-_.]?[0-9][0-9._-]*$", "", name)


def rule_checks() -> tuple[Callable[[str], Optional[str]], Callable[[Any, str], list[Rule]]]:
    """``analysis/rules``' one validator of a regular expression and of the configured rules."""
    # Imported here: the rules' module loads the failure records, which a green run must not.
    from pytest_selfheal.analysis.rules import regex_problem, rules_from_config

    return regex_problem, rules_from_config


def text_problem(spec: KeySpec, item: str) -> Optional[str]:
    """Why one string value (or list item) of ``spec`` is refused, or None."""
    if "\x00" in item:  # no path, argv word or name can hold NUL: refused here, not as an internal error later
        return "contains a NUL character"
    if len(item) > MAX_TEXT:
        return f"longer than {MAX_TEXT} characters"
    if spec.kind == REGEXES:
        problem = "it matches everywhere" if not item else rule_checks()[0](item)
        return f"expected a valid regular expression, got {describe_value(item)}: {problem}" if problem else None
    problem = shape_problem(spec, item)
    return f"refusing {describe_value(item)}: {problem}" if problem is not None else None


def shape_problem(spec: KeySpec, item: str) -> Optional[str]:
    """Why one value (or list item) of ``spec`` lacks the key's shape (:data:`PATH`...), or None."""
    if spec.shape == PATH:
        path = item.replace("\\", "/")
        if not posixpath.isabs(path) and posixpath.normpath(path).split("/")[0] == "..":
            return "it leads out of the project; configure a path inside it"
    elif spec.shape == COMMANDS:
        if program_stem(item) in RUNS_ANYTHING:
            return ("a shell, an interpreter or a launcher runs whatever its arguments say; allowlist the "
                    "test runner itself (a module run as `python -m NAME` is allowlisted as NAME)")
    elif spec.shape == PYTEST_ARGS:
        return _argument_problem(item)
    return None


def _argument_problem(word: str) -> Optional[str]:
    if word.startswith("@"):
        return "pytest would read more arguments from that file"
    # An ini override (``-o KEY=VALUE``, glued or the next word) may name the same options as ini keys.
    key, _, value = re.sub(r"^(?:-o|--override-ini=)", "", word).partition("=")
    flag = word.split("=", 1)[0]
    # -c glued to its value (-cFILE), or after value-less short flags (-qc FILE).
    short_c = word.startswith("-") and not word.startswith("--") and word[1:].lstrip("qvxsl").startswith("c")
    if flag in ROOT_MOVING_OPTIONS or short_c or key.strip() == "confcutdir":
        return "it moves pytest's rootdir or config file (and with them conftest.py and the ini options)"
    if flag in SELFHEAL_KEY_FLAGS:
        return "it sets a selfheal config key from a config value; set the key itself"
    if key.strip() == "addopts":
        return next(filter(None, map(_argument_problem, value.split())), None)
    return None


def outside_project(value: str, project_root: str) -> bool:
    """Whether the path ``value`` (relative to ``project_root``) lies outside it, by its text alone."""
    root = posixpath.normpath(project_root.replace("\\", "/"))
    target = posixpath.normpath(posixpath.join(root, value.replace("\\", "/")))
    return target != root and not target.startswith(root.rstrip("/") + "/")


def reference_table() -> str:
    """The reference table of every key in docs/configuration.md."""
    rows = ["| Key | Type | Default | Meaning |", "|-----|------|---------|---------|"]
    for spec in SCHEMA:
        default = json.dumps(spec.default, ensure_ascii=False)
        rows.append(f"| `{spec.key}` | {spec.type_name} | `{default}` | {spec.meaning} |")
    return "\n".join(rows)


def ini_table() -> str:
    """The table of pytest ini options in docs/configuration.md."""
    rows = ["| ini option | Config key |", "|------------|------------|"]
    for name, dotted in INI_KEYS.items():
        target = f"`{dotted}`" if dotted else "any: one `KEY=VALUE` override per line"
        rows.append(f"| `{name}` | {target} |")
    return "\n".join(rows)
