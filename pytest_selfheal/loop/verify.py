"""Running the plan's verification selections (edge: subprocesses; docs/loop.md "What a verification run executes").

One verification run = one argv list from ``plan.json``'s ``verification_commands``:

1. :func:`check_allowed` — only allowlisted runners (``verification.allowlist``, default
   ``["pytest"]``) run; anything else, or anything that looks like shell code, is refused
   (``RefusedError``, exit 5) and never executed.
2. :func:`run_selection` — the argv through :func:`pytest_selfheal.process.run` (no
   shell, its own process group, output to a file, a timeout that kills the whole group,
   the child dies with selfheal), ``--junitxml`` pointing at a file of ours and ``SELFHEAL_VERIFYING=1`` in
   the environment so the plugin inside the child stays passive; a long selection reaches
   the child through a selection file under the reports root (:func:`through_selection_file`).
3. :func:`observe` — the junit read back into per-node-id outcomes and fingerprinted,
   classified failures (secrets redacted before fingerprinting, as at capture).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pytest_selfheal import process
from pytest_selfheal.analysis.analyse import analyse_case, failures_from_cases
from pytest_selfheal.analysis.classify import Rule
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import InputError, RefusedError
from pytest_selfheal.junit.nodeids import mangle_nodeid, nodeid_by_identity
from pytest_selfheal.junit.reader import dedupe, iter_testcases
from pytest_selfheal.loop.argcheck import PYTEST_RUNNERS, SAFE_FLAGS, check_arguments, inside_root, option_groups
from pytest_selfheal.loop.invocation import from_invocation_dir
from pytest_selfheal.names import (
    SELECTION_FORMAT,
    SELECTION_OPTION,
    SELECTION_PLUGIN,
    VERIFYING_ENV,
)
from pytest_selfheal.process import KILL_GRACE_SECONDS, fresh_bytecode, read_tail
from pytest_selfheal.records import models
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.redact import Redactor, redact_cases
from pytest_selfheal.store import fsio

# The environment variable the child pytest sees: the plugin does nothing when it is set,
# so a verification run never captures an incident of its own.

DEFAULT_ALLOWLIST: tuple[str, ...] = ("pytest",)

# The test identity of the synthetic failure written when a run produced no junit.
SYNTHETIC_TEST = "verification"
# The outcome key of a ``pytest --collect-only`` verification (a plan without node ids).
COLLECTION_KEY = "collection"
_COLLECT_ONLY = ("--collect-only", "--co")

# Shell operators as whole words: a hand-edited plan.json holding them was meant for a
# shell, and no shell will ever run it — refuse rather than pass them to pytest as paths.
SHELL_OPERATORS = frozenset(
    {";", ";;", "&", "&&", "|", "||", "|&", ">", ">>", "<", "<<", "<<<", "2>", "2>>", "2>&1", "&>", ">&", "1>"}
)
# Characters that never belong in the executable position, and substrings refused anywhere.
_EXECUTABLE_BAD = set(";&|<>$`()")
_ANYWHERE_BAD = ("$(", "`")

_PYTHON_NAMES = ("python", "python3", "pythonw", "py")

# A selection longer than this (node ids or characters) travels in a selection file, never on
# the command line: an argument list has a limit (Windows: 32,767 characters), a short
# selection stays on it as the plan wrote it.
MAX_ARGV_SELECTION = 20
MAX_ARGV_SELECTION_CHARS = 2000


@dataclass(frozen=True)
class VerificationRun:
    """What one verification subprocess did."""

    argv: list[str]  # as executed (interpreter resolved, --junitxml added)
    exit_code: Optional[int]  # None when it could not start or was killed by the timeout
    timed_out: bool
    duration_seconds: float
    output_tail: str  # bounded tail of stdout+stderr, NOT redacted (the caller redacts)
    junit_path: Path


def trusted_options(incident: Incident, effective: EffectiveConfig) -> list[str]:
    """The capture's own pytest options and ``verification.args``, appended to every command
    (like with like: docs/loop.md "Verification fidelity"). They come from the user's own
    invocation and config, so the argument allowlist trusts them (:func:`check_command`)."""
    return list(incident.pytest_options) + list(effective.settings.verification.args)


# --------------------------------------------------------------------------- allowlist


def _basename(executable: str) -> str:
    name = executable.replace("\\", "/").rsplit("/", 1)[-1]
    return name[:-4] if name.lower().endswith(".exe") else name


def _is_python(name: str) -> bool:
    # python, python3, python3.11, pythonw, py (Windows launcher)
    base = name.lower()
    return base in _PYTHON_NAMES or (base.startswith("python") and base[6:].replace(".", "").isdigit())


def runner_name(argv: Sequence[str]) -> str:
    """The name the allowlist is checked against: ``python -m <module>`` → the module,
    anything else → the executable's basename (``/usr/bin/pytest`` → ``pytest``)."""
    if not argv:
        return ""
    head = _basename(argv[0])
    if _is_python(head) and len(argv) >= 3 and argv[1] == "-m":
        return argv[2]
    if _is_python(head) and len(argv) >= 2 and argv[1].startswith("-m") and len(argv[1]) > 2:
        return argv[1][2:]  # python -mpytest
    return head


def check_allowed(argv: Sequence[str], allowlist: Sequence[str] = DEFAULT_ALLOWLIST) -> None:
    """Refuse (``RefusedError``, one line) a command that is not an allowlisted runner.

    Only the runner: :func:`check_command` (the one check every surface goes through) also
    checks the arguments. Nothing is ever run through a shell, so shell metacharacters
    inside arguments are harmless; still, a command holding shell operators as separate
    words (``;``, ``&&``, ``|``, ``>``…), ``$(`` or backticks anywhere, or any
    metacharacter in the executable position was written for a shell (a hand-edited
    ``plan.json``) and is refused too — defence in depth.
    """
    shown = _shown(argv)
    if not argv:
        raise RefusedError("refusing an empty verification command")
    if any(ch in _EXECUTABLE_BAD for ch in argv[0]):
        raise RefusedError(f"refusing verification command {shown!r}: shell syntax in the executable")
    for token in argv:
        # A node id is data, not shell: `test_x[$(id)]` or a backtick in a parametrize id is a
        # test name selfheal itself wrote into the plan (nothing ever runs through a shell).
        node_id = "::" in token and not token.startswith("-")
        if token in SHELL_OPERATORS or (not node_id and any(bad in token for bad in _ANYWHERE_BAD)):
            raise RefusedError(
                f"refusing verification command {shown!r}: it contains shell syntax ({token!r}); "
                "commands run without a shell"
            )
    if "/" in argv[0] or "\\" in argv[0]:
        # The allowlist names programs found on PATH (or this interpreter for `python`): a path
        # to any file called `pytest` or `python` (a script committed as bin/pytest) is not one.
        raise RefusedError(
            f"refusing verification command {shown!r}: the executable must be a bare allowlisted name, not a path"
        )
    name = runner_name(argv)
    if name not in allowlist:
        allowed = ", ".join(allowlist) or "nothing"
        raise RefusedError(
            f"refusing verification command {shown!r}: {name!r} is not in ralf_lite.verification.allowlist "
            f"(allowed: {allowed})"
        )


def _shown(argv: Sequence[str]) -> str:
    shown = " ".join(argv)
    return shown if len(shown) <= 200 else shown[:197] + "..."


def runner_length(argv: Sequence[str]) -> int:
    """How many words name the runner: 3 for ``python -m pytest``, 2 for ``python -mpytest``, else 1."""
    if len(argv) >= 2 and _is_python(_basename(argv[0])):
        if argv[1] == "-m" and len(argv) >= 3:
            return 3
        if argv[1].startswith("-m") and len(argv[1]) > 2:
            return 2
    return 1


def check_command(
    argv: Sequence[str],
    *,
    allowlist: Sequence[str] = DEFAULT_ALLOWLIST,
    root: Path,
    trusted: Sequence[str] = (),
) -> None:
    """THE check of a verification command, for every surface (docs/loop.md "What a
    verification run executes"): an allowlisted runner (:func:`check_allowed`) **and**
    allowlisted arguments. ``RefusedError`` (one line, exit 5) otherwise; nothing runs.

    The arguments (every word after the runner) through
    :func:`~pytest_selfheal.loop.argcheck.check_arguments`: selections inside ``root``, no
    ``@file``, ``-p``/``-o``/``-c`` judged by their value, other options safe ones or recorded
    in ``trusted`` (the capture's options and ``verification.args``) with a value naming no
    path outside the root.
    """
    check_allowed(argv, allowlist)
    check_arguments(argv[runner_length(argv):], root=root, trusted=trusted,
                    pytest_runner=runner_name(argv) in PYTEST_RUNNERS, shown=_shown(argv))


def resolve_argv(argv: Sequence[str]) -> list[str]:
    """``python`` (a bare interpreter name) → ``sys.executable``: the interpreter running
    selfheal, which has the project's pytest and this plugin installed. Other bare names
    are resolved by :func:`pytest_selfheal.process.run` (absolute PATH entries only)."""
    out = list(argv)
    if out and "/" not in out[0] and "\\" not in out[0] and _is_python(_basename(out[0])):
        out[0] = sys.executable
    return out


# --------------------------------------------------------------------------- running


def selection_words(argv: Sequence[str]) -> tuple[int, int]:
    """The ``[start, end)`` range of the selection words of a pytest command: the words that
    follow the runner and its value-less flags (``-q``), up to the first option. Nothing can
    read them as an option's value, so they may move anywhere pytest takes positional words.
    An empty range for another runner, or when an option that may take a value comes first."""
    start = runner_length(argv)
    if runner_name(argv) not in PYTEST_RUNNERS:
        return start, start
    while start < len(argv) and argv[start] in SAFE_FLAGS:
        start += 1
    end = start
    while end < len(argv) and argv[end] and not argv[end].startswith(("-", "@")):
        end += 1
    return start, end


def through_selection_file(argv: Sequence[str], path: Path) -> list[str]:
    """``argv`` with a long selection (:data:`MAX_ARGV_SELECTION`) moved into the selection
    file ``path`` (atomic, through store/fsio.py; under the reports root, where the caller
    chose it): in its place, the plugin that puts it back in the child and the file's name
    (pytest_selfheal/selection.py). A short selection, or none, leaves ``argv`` as it is."""
    start, end = selection_words(argv)
    words = list(argv[start:end])
    if len(words) <= MAX_ARGV_SELECTION and sum(len(w) + 1 for w in words) <= MAX_ARGV_SELECTION_CHARS:
        return list(argv)
    fsio.atomic_write_json(path, {SELECTION_FORMAT: 1, "nodeids": words})
    return [*argv[:start], "-p", SELECTION_PLUGIN, f"{SELECTION_OPTION}={Path(path).resolve()}", *argv[end:]]


def run_selection(
    argv: Sequence[str],
    *,
    cwd: Path,
    junit_path: Path,
    timeout_seconds: Optional[float],
    env: Optional[Mapping[str, str]] = None,
    kill_grace: float = KILL_GRACE_SECONDS,
    invocation_dir: Optional[Path] = None,
    selection_file: Optional[Path] = None,
) -> VerificationRun:
    """Run one verification command and wait for it (argv list, never a shell).

    ``cwd`` is the rootdir (node ids are relative to it); ``invocation_dir``, when given, a
    directory inside it that the capture ran pytest from: the command starts there (tests
    that read files relative to the working directory see the same one) and its
    rootdir-relative selections are rewritten relative to it (:mod:`.invocation`).

    ``--junitxml=<junit_path>`` is appended (a later option wins over the user's
    ``addopts``), ``SELFHEAL_VERIFYING=1`` is set (the plugin takes it out of the tests'
    sight), the child compiles every module afresh (:func:`~pytest_selfheal.process.fresh_bytecode`), gets its own process group
    and stdin from /dev/null, and its output goes to ``<junit_path>.out``. On timeout the
    whole group is stopped (SIGTERM, SIGKILL after ``kill_grace``) and ``timed_out`` is
    True. An exception while waiting (Ctrl-C, SIGTERM turned into an exception by the
    loop) also stops the group before it propagates, so no child outlives the loop; what
    the leader leaves behind in its group is killed when it exits.
    The allowlist is the caller's job (:func:`check_allowed`).
    """
    # --rootdir pins node ids to the directory they were captured in: without it, an ini file
    # below the capture's rootdir (pkg/pytest.ini) would move the rootdir and the ids with it.
    start = cwd
    if invocation_dir is not None and Path(invocation_dir).resolve() != Path(cwd).resolve():
        start = Path(invocation_dir)
        argv = from_invocation_dir(argv, Path(cwd), start, skip=runner_length(argv))
    if selection_file is not None:
        argv = through_selection_file(argv, selection_file)
    full = resolve_argv(argv) + [f"--rootdir={cwd}", f"--junitxml={junit_path}"]
    child_env = dict(os.environ if env is None else env)
    child_env[VERIFYING_ENV] = "1"
    output_path = junit_path.with_name(junit_path.name + ".out")
    junit_path.parent.mkdir(parents=True, exist_ok=True)
    with fresh_bytecode(child_env, junit_path.parent) as clean:
        result = process.run(
            full, cwd=start, output_path=output_path, timeout_seconds=timeout_seconds, env=clean, kill_grace=kill_grace
        )
    # A runner that cannot start left its one line in the output: a tooling problem, reported like one.
    return VerificationRun(
        full, result.exit_code, result.timed_out, result.duration_seconds, read_tail(output_path), junit_path
    )


# --------------------------------------------------------------------------- scratch folders

# A verification's junit and raw (unredacted) output live in a temp folder named after the
# loop's pid, so that the next loop can tell one a SIGKILL left behind from a live one.
VERIFY_DIR_PREFIX = "selfheal-verify-"


def verify_dir_prefix() -> str:
    """``selfheal-verify-<pid>-``: the prefix of this process's verification temp folders."""
    return f"{VERIFY_DIR_PREFIX}{os.getpid()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: alive, someone else's
        return True
    return True


def remove_stale_verify_dirs(tmp: Optional[Path] = None) -> list[Path]:
    """Remove the verification temp folders a killed loop left (``selfheal-verify-<pid>-*``
    in the temp directory): only ours (a real folder, not a link, owned by our user) and
    only stale (their pid is dead). Returns what was removed; never raises."""
    base = Path(tempfile.gettempdir() if tmp is None else tmp)
    removed: list[Path] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    uid = getattr(os, "getuid", lambda: None)()
    for entry in entries:
        if not entry.name.startswith(VERIFY_DIR_PREFIX):
            continue
        pid_text = entry.name[len(VERIFY_DIR_PREFIX):].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid():
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or (uid is not None and info.st_uid != uid) or _pid_alive(int(pid_text)):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


# --------------------------------------------------------------------------- observing


def _identity_map(nodeids: Sequence[str]) -> dict[str, str]:
    return nodeid_by_identity(list(nodeids))


def nodeid_for(test: str, by_identity: Mapping[str, str]) -> Optional[str]:
    """The node id of a junit identity ``classname::name``; tolerates a ``junit_prefix``
    (``prefix.tests.test_a::t`` matches ``tests/test_a.py::t``) by dropping leading
    classname components until one matches."""
    if test in by_identity:
        return by_identity[test]
    classname, sep, name = test.rpartition("::")
    if not sep:
        return None
    parts = classname.split(".")
    for i in range(1, len(parts)):
        candidate = ".".join(parts[i:]) + "::" + name
        if candidate in by_identity:
            return by_identity[candidate]
    return None


def _collector_outcome(nodeid: str, cases: Sequence[models.TestCaseResult]) -> str:
    """The outcome of a selection that names a collector (a file, a class): the worst of the
    testcases inside it (error > failed > passed > skipped), ``missing`` when none ran.

    ``tests/test_a.py::TestX`` covers the cases whose classname is ``tests.test_a.TestX``
    or below it; a collection error of the file itself is the case ``tests.test_a``.
    """
    classname, name = mangle_nodeid(nodeid)
    dotted = f"{classname}.{name}" if classname else name
    inside = [
        c.outcome
        for c in cases
        if c.classname == dotted or c.classname.startswith(dotted + ".") or (not c.classname and c.name == dotted)
        or c.classname.endswith("." + dotted) or ("." + dotted + ".") in c.classname
    ]
    for outcome in (models.OUTCOME_ERROR, models.OUTCOME_FAILED, models.OUTCOME_PASSED, models.OUTCOME_SKIPPED):
        if outcome in inside:
            return outcome
    return models.OUTCOME_MISSING


def last_line(text: str) -> str:
    """The last non-empty line of ``text`` (stripped), or ""."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return ""


def usage_error_line(text: str) -> Optional[str]:
    """pytest's first ``ERROR: …`` line (a usage error: a node id not found, a bad option),
    which says more than the last line (``(no match in any of [<Module …>])``)."""
    return next((line.strip() for line in text.splitlines() if line.startswith("ERROR: ")), None)


def synthetic_failure(message: str, text: str, rules: Sequence[Rule], *, exc_type: str = "") -> models.Failure:
    """One failure standing for a run that produced no junit (crash, usage error, timeout,
    missing interpreter), classified like any other so ``No module named pytest`` is
    TOOLING_ENV. Its test identity is the fixed ``verification`` so it repeats stably."""
    # `python -m pytest` without pytest prints "No module named pytest" (no quotes, unlike
    # the ModuleNotFoundError of an import): the runner's environment is broken.
    # A run that could not start at all (process.run's "<argv0>: cannot start: <why>": a 200 KB
    # node id is over the kernel's limit for one argument) is the environment too, never a
    # failure that "repeats".
    runner_rules = (
        Rule("verification_runner_missing", r"No module named \S", models.TOOLING_ENV, keywords=("no module named",)),
        Rule("verification_cannot_start", r": cannot start: ", models.TOOLING_ENV, keywords=("cannot start",)),
        # pytest refuses the whole run when one selected node id names nothing: nothing was
        # verified, so the loop stops instead of reading a changed message as progress.
        Rule("verification_not_found", r"^ERROR: not found: ", models.TOOLING_ENV, keywords=("error: not found",)),
        # The selection file selfheal wrote could not be read in the child (pytest_selfheal/selection.py).
        Rule("verification_selection_file", r"^ERROR: selfheal: the verification's selection file",
             models.TOOLING_ENV, keywords=("selection file",)),
    )
    case = models.TestCaseResult(
        classname="",
        name=SYNTHETIC_TEST,
        outcome=models.OUTCOME_ERROR,
        message=message or "the verification run produced no junit and no output",
        exc_type=exc_type,
        text=text,
    )
    return analyse_case(case, (*rules, *runner_rules))[0]


def observe(
    run: VerificationRun,
    selection_nodeids: Sequence[str],
    *,
    rules: Sequence[Rule] = (),
    redactor: Optional[Redactor] = None,
    warnings: Optional[list[str]] = None,
) -> tuple[dict[str, str], list[models.Failure]]:
    """Outcomes per node id and the failures of one verification run.

    Testcases are mapped back to node ids through pytest's junit name mangling; a failing
    testcase outside the selection keeps its junit identity as key (a passing or skipped
    one is left out: it ran only because a command naming its file selected it). Selected node ids
    absent from the junit are ``missing``. When the run produced no usable junit
    (timeout, crash, usage error, interpreter or runner not found) every selected node id
    is ``missing`` and ONE synthetic failure is built from the output's last non-empty
    line (a timeout gives a TIMEOUT failure).
    """
    outcomes: dict[str, str] = {}
    cases: list[models.TestCaseResult] = []
    if not run.timed_out and run.junit_path.is_file():
        try:
            cases = dedupe(redact_cases(iter_testcases(run.junit_path, warnings=warnings), redactor))
        except InputError as exc:
            if warnings is not None:
                warnings.append(str(exc))
            cases = []
    tail = redactor.redact(run.output_tail) if redactor is not None else run.output_tail
    collect_only = any(word in _COLLECT_ONLY for word in run.argv)
    if collect_only and run.exit_code == 0 and not any(c.outcome in models.FAILING_OUTCOMES for c in cases):
        # A clean collection is the verification of a plan without node ids.
        return {COLLECTION_KEY: models.OUTCOME_PASSED}, []
    if not cases:
        for nodeid in selection_nodeids:
            outcomes[nodeid] = models.OUTCOME_MISSING
        if run.timed_out:
            failure = synthetic_failure(
                "TimeoutExpired: the verification run exceeded its timeout",
                tail,
                rules,
                exc_type="TimeoutExpired",
            )
        else:
            failure = synthetic_failure(usage_error_line(tail) or last_line(tail), tail, rules)
        return outcomes, [failure]
    by_identity = _identity_map(selection_nodeids)
    for case in cases:
        mapped = nodeid_for(case.test, by_identity)
        # A test outside the selection ran because its file was selected (a command naming
        # files): only its failure says something; a pass or a skip of it is not ours.
        if mapped is not None or case.outcome in models.FAILING_OUTCOMES:
            outcomes[mapped or case.test] = case.outcome
    for nodeid in selection_nodeids:
        if nodeid not in outcomes:
            outcomes[nodeid] = _collector_outcome(nodeid, cases)
    failures = [
        dataclasses.replace(failure, nodeid=nodeid_for(failure.test, by_identity))
        for failure in failures_from_cases(cases, extra_rules=rules)
    ]
    return outcomes, failures


def verification_root(incident: Incident, project_root: Path, reports_root: Optional[Path] = None) -> Path:
    """Where the verification commands run: a root computed here, never a place
    incident.json chooses. The incident's recorded ``rootdir`` (node ids are relative to
    it) is used only when, resolved, it is ``project_root`` (pytest's rootdir rules from
    here, or the plugin's own rootdir) or the folder holding ``reports_root``, or lies
    inside one of them; otherwise ``project_root``. A hand-edited ``rootdir`` cannot move
    the run elsewhere."""
    base = Path(project_root).resolve()
    rootdir = incident.rootdir
    if not rootdir:
        return base
    bases = [base] + ([Path(reports_root).resolve().parent] if reports_root is not None else [])
    try:
        recorded = Path(rootdir).resolve()
    except (OSError, RuntimeError, ValueError):
        return base
    if recorded.is_dir() and any(recorded == b or b in recorded.parents for b in bases):
        return recorded
    return base


__all__ = [
    "COLLECTION_KEY",
    "DEFAULT_ALLOWLIST",
    "VERIFYING_ENV",
    "VerificationRun",
    "check_allowed",
    "remove_stale_verify_dirs",
    "verify_dir_prefix",
    "check_command",
    "inside_root",
    "option_groups",
    "last_line",
    "nodeid_for",
    "observe",
    "redact_cases",
    "resolve_argv",
    "run_selection",
    "runner_name",
    "selection_words",
    "synthetic_failure",
    "through_selection_file",
    "verification_root",
]
