"""The shapes a config value must have beyond its type (docs/configuration.md "Paths,
commands, arguments and patterns"). Pure: judged by the text alone.

The key table (``config/keys.py``) names each key's shape; ``config/settings.py`` checks
every value of every layer against it. A pattern's cost is judged by the one regular
expression validator, ``analysis/rules.regex_problem``.
"""

from __future__ import annotations

import posixpath
import re
from typing import Optional

from pytest_selfheal.config.keys import COMMANDS, MAX_TEXT, PATH, PYTEST_ARGS, REGEXES, KeySpec
from pytest_selfheal.errors import describe_value

# The programs an allowlist may not name: a shell, an interpreter, or a launcher of another
# program or code given in its arguments. An entry is judged by its basename, lower-cased,
# without a Windows suffix and without a trailing version (``/bin/bash5`` → ``bash``,
# ``python3.12`` → ``python``, ``node18.exe`` → ``node``).
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


def program_stem(entry: str) -> str:
    """What an allowlist entry names: its first word's basename, lower-cased, without a Windows
    suffix or a trailing version (``/usr/bin/Python3.12.exe`` → ``python``)."""
    words = entry.split()
    name = (words[0] if words else "").replace("\\", "/").rsplit("/", 1)[-1].lower()
    for suffix in (".exe", ".cmd", ".bat", ".com", ".ps1"):
        name = name.removesuffix(suffix)
    return re.sub(r"[-_.]?[0-9][0-9._-]*$", "", name)


def _short_c(word: str) -> bool:
    # -c glued to its value (-cFILE), or after value-less short flags (-qc FILE).
    letters = word[1:].lstrip("qvxsl")
    return word.startswith("-") and not word.startswith("--") and letters.startswith("c")


def text_problem(spec: KeySpec, item: str) -> Optional[str]:
    """Why one string value (or one item of a list) of ``spec`` is refused, or None: a NUL, a
    length over :data:`MAX_TEXT`, a regular expression that does not compile or costs too much
    (``analysis/rules.regex_problem``), or the key's shape (:func:`shape_problem`)."""
    if "\x00" in item:  # no path, argv word or name can hold NUL: refused here, not as an internal error later
        return "contains a NUL character"
    if len(item) > MAX_TEXT:
        return f"longer than {MAX_TEXT} characters"
    if spec.kind == REGEXES:
        # Imported here: the rules' module loads the failure records, which a run that only
        # reads the config (a green one) must not parse and compile.
        from pytest_selfheal.analysis.rules import regex_problem

        problem = regex_problem(item)
        return f"expected a valid regular expression, got {describe_value(item)}: {problem}" if problem else None
    problem = shape_problem(spec, item)
    return f"refusing {describe_value(item)}: {problem}" if problem is not None else None


def shape_problem(spec: KeySpec, item: str) -> Optional[str]:
    """Why one value (one item of a list) of ``spec`` lacks the key's shape, or None: a path
    that climbs out of the project, an allowlisted program that runs anything its arguments
    say, a pytest argument that moves the rootdir or the config or reads ``@FILE``."""
    if spec.shape == PATH:
        path = item.replace("\\", "/")
        if not posixpath.isabs(path) and posixpath.normpath(path).split("/")[0] == "..":
            return "it leads out of the project; configure a path inside it"
    elif spec.shape == COMMANDS:
        if program_stem(item) in RUNS_ANYTHING:
            return ("a shell, an interpreter or a launcher runs whatever its arguments say; allowlist the "
                    "test runner itself (a module run as `python -m NAME` is allowlisted as NAME)")
    elif spec.shape == PYTEST_ARGS:
        if item.startswith("@"):
            return "pytest would read more arguments from that file"
        if item.split("=", 1)[0] in ROOT_MOVING_OPTIONS or _short_c(item):
            return "it moves pytest's rootdir or config file (and with them conftest.py and the ini options)"
    return None


def outside_project(value: str, project_root: str) -> bool:
    """Whether the path ``value`` (relative to ``project_root``) lies outside it, by its text
    alone (the store follows its symbolic links: ``fsio.project_path``)."""
    root = posixpath.normpath(project_root.replace("\\", "/"))
    target = posixpath.normpath(posixpath.join(root, value.replace("\\", "/")))
    return target != root and not target.startswith(root.rstrip("/") + "/")


__all__ = ["ROOT_MOVING_OPTIONS", "RUNS_ANYTHING", "outside_project", "program_stem", "shape_problem", "text_problem"]
