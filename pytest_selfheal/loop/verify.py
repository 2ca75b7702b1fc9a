"""Running the plan's verification selections (edge: subprocesses; docs/loop.md "What a
verification run executes"): :func:`check_command` refuses what is not allowlisted,
:func:`run_selection` runs one command, :func:`observe` reads its junit back."""

from __future__ import annotations

import dataclasses
import hmac
import json
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol

from pytest_selfheal import process
from pytest_selfheal.analysis.analyse import analyse_case, failures_from_cases
from pytest_selfheal.analysis.classify import Rule
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import InputError, RefusedError
from pytest_selfheal.junit.nodeids import mangle_nodeid, nodeid_by_identity
from pytest_selfheal.junit.reader import dedupe, iter_testcases
from pytest_selfheal.junit.signed import SIGNED_SUFFIX, signature
from pytest_selfheal.loop.argcheck import PYTEST_RUNNERS, SAFE_FLAGS, check_arguments, inside_root
from pytest_selfheal.names import (
    COMPARISONS_PLUGIN,
    OUTCOMES_PLUGIN,
    PASS_HOOK_OPTION,
    REPORT_KEY_ENV,
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
    report_key: str = ""  # the key its signed failures were written with ("": none asked for)


def trusted_options(incident: Incident, effective: EffectiveConfig) -> list[str]:
    """The capture's own pytest options and ``verification.args``, appended to every command
    (like with like); they are the user's own, so the argument allowlist trusts them."""
    return list(incident.pytest_options) + list(effective.settings.verification.args)


# Where a verification starts: the directory the capture ran pytest from (tests reading relative paths
# pass or fail depending on it).
def start_dir(root: Path, recorded: Optional[str]) -> Optional[Path]:
    """``root / recorded`` when it is a directory inside ``root`` (a hand-edited value cannot
    move the run elsewhere), else None: the run starts at ``root``."""
    if not recorded or not inside_root(recorded, root):
        return None
    where = (Path(root).resolve() / recorded).resolve()
    return where if where != Path(root).resolve() and where.is_dir() else None


def from_invocation_dir(argv: Sequence[str], rootdir: Path, start: Path, *, skip: int = 1) -> list[str]:
    """``argv`` with every word after the first ``skip`` naming a path under ``rootdir`` relative to ``start``."""
    out = list(argv)
    for index in range(skip, len(out)):
        word = out[index]
        path = word.split("::", 1)[0]
        if word.startswith("-") or not path or Path(path).is_absolute() or not (rootdir / path).exists():
            continue
        out[index] = Path(os.path.relpath(rootdir / path, start)).as_posix() + word[len(path):]
    return out


def _basename(executable: str) -> str:
    name = executable.replace("\\", "/").rsplit("/", 1)[-1]
    return name[:-4] if name.lower().endswith(".exe") else name


def _is_python(name: str) -> bool:
    # python, python3, python3.11, pythonw, py (Windows launcher)
    base = name.lower()
    return base in _PYTHON_NAMES or (base.startswith("python") and base[6:].replace(".", "").isdigit())


def runner(argv: Sequence[str]) -> tuple[str, int]:
    """The name the allowlist checks (``python -m <module>`` → the module, else the
    executable's basename) and how many words name it (3, 2 for ``python -mpytest``, or 1)."""
    head = _basename(argv[0]) if argv else ""
    if _is_python(head) and len(argv) >= 3 and argv[1] == "-m":
        return argv[2], 3
    if _is_python(head) and len(argv) >= 2 and argv[1].startswith("-m") and len(argv[1]) > 2:
        return argv[1][2:], 2
    return head, 1


def check_allowed(argv: Sequence[str], allowlist: Sequence[str] = DEFAULT_ALLOWLIST) -> None:
    """Refuse (``RefusedError``) a command that is not an allowlisted runner. Nothing runs
    through a shell, but a command written for one (a hand-edited ``plan.json``) is refused too."""
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
    name = runner(argv)[0]
    if name not in allowlist:
        allowed = ", ".join(allowlist) or "nothing"
        raise RefusedError(
            f"refusing verification command {shown!r}: {name!r} is not in ralf_lite.verification.allowlist "
            f"(allowed: {allowed})"
        )


def _shown(argv: Sequence[str]) -> str:
    shown = " ".join(argv)
    return shown if len(shown) <= 200 else shown[:197] + "..."


def check_command(argv: Sequence[str], *, allowlist: Sequence[str] = DEFAULT_ALLOWLIST, root: Path,
                  trusted: Sequence[str] = ()) -> None:
    """THE check of a command, for every surface: allowlisted runner and arguments, else ``RefusedError`` (exit 5)."""
    check_allowed(argv, allowlist)
    name, length = runner(argv)
    check_arguments(argv[length:], root=root, trusted=trusted, pytest_runner=name in PYTEST_RUNNERS, shown=_shown(argv))


def resolve_argv(argv: Sequence[str]) -> list[str]:
    """A bare ``python`` → ``sys.executable``, which has the project's pytest and this plugin installed."""
    out = list(argv)
    if out and "/" not in out[0] and "\\" not in out[0] and _is_python(_basename(out[0])):
        out[0] = sys.executable
    return out


def selection_words(argv: Sequence[str]) -> tuple[int, int]:
    """The ``[start, end)`` range of a pytest command's selection words: after the runner and
    its value-less flags, up to the first option (no option can read them as its value)."""
    name, start = runner(argv)
    if name not in PYTEST_RUNNERS:
        return start, start
    while start < len(argv) and argv[start] in SAFE_FLAGS:
        start += 1
    end = start
    while end < len(argv) and argv[end] and not argv[end].startswith(("-", "@")):
        end += 1
    return start, end


def through_selection_file(argv: Sequence[str], path: Path) -> list[str]:
    """``argv`` with a long selection moved into the selection file ``path`` (loop/selection.py puts it back)."""
    start, end = selection_words(argv)
    words = list(argv[start:end])
    if len(words) <= MAX_ARGV_SELECTION and sum(len(w) + 1 for w in words) <= MAX_ARGV_SELECTION_CHARS:
        return list(argv)
    fsio.atomic_write_json(path, {SELECTION_FORMAT: 1, "nodeids": words})
    return [*argv[:start], "-p", SELECTION_PLUGIN, f"{SELECTION_OPTION}={Path(path).resolve()}", *argv[end:]]


class Verifier(Protocol):
    """Runs one verification command, its junit at ``junit_path`` (:func:`run_selection`; what a test fakes)."""

    def __call__(self, argv: Sequence[str], *, cwd: Path, junit_path: Path, timeout_seconds: Optional[float],
                 env: Optional[Mapping[str, str]] = None, invocation_dir: Optional[Path] = None,
                 selection_file: Optional[Path] = None, judged: bool = False) -> VerificationRun: ...


def run_selection(argv: Sequence[str], *, cwd: Path, junit_path: Path, timeout_seconds: Optional[float],
                  env: Optional[Mapping[str, str]] = None, kill_grace: float = KILL_GRACE_SECONDS,
                  invocation_dir: Optional[Path] = None, selection_file: Optional[Path] = None,
                  judged: bool = False) -> VerificationRun:
    """Run one verification command (never through a shell) and wait for it.

    ``cwd`` is the rootdir; ``invocation_dir``, a folder inside it the capture ran pytest
    from, is where the command starts (tests reading relative paths see the same folder).
    ``VERIFYING_ENV`` keeps the child's plugin passive; every module is compiled afresh, and
    the output goes to ``<junit_path>.out``. The allowlist is the caller's job."""
    # --rootdir pins node ids to the directory they were captured in: without it, an ini file
    # below the capture's rootdir (pkg/pytest.ini) would move the rootdir and the ids with it.
    start = cwd
    if invocation_dir is not None and Path(invocation_dir).resolve() != Path(cwd).resolve():
        start = Path(invocation_dir)
        argv = from_invocation_dir(argv, Path(cwd), start, skip=runner(argv)[1])
    if selection_file is not None:
        argv = through_selection_file(argv, selection_file)
    # ``judged``: a candidate success's run, its passing comparisons judged (which slows every
    # passing assert, so only that run pays for it).
    judging = ["-p", COMPARISONS_PLUGIN, "-o", PASS_HOOK_OPTION] if judged else []
    full = resolve_argv(argv) + [*judging, "-p", OUTCOMES_PLUGIN, f"--rootdir={cwd}", f"--junitxml={junit_path}"]
    child_env = dict(os.environ if env is None else env)
    child_env[VERIFYING_ENV] = "1"
    child_env[REPORT_KEY_ENV] = key = secrets.token_hex(16)
    output_path = junit_path.with_name(junit_path.name + ".out")
    junit_path.parent.mkdir(parents=True, exist_ok=True)
    with fresh_bytecode(child_env, junit_path.parent) as clean:
        result = process.run(
            full, cwd=start, output_path=output_path, timeout_seconds=timeout_seconds, env=clean, kill_grace=kill_grace
        )
    # A runner that cannot start left its one line in the output: a tooling problem, reported like one.
    return VerificationRun(
        full, result.exit_code, result.timed_out, result.duration_seconds, read_tail(output_path), junit_path, key
    )


FORGED = "its junit report was changed after pytest wrote it: it says a test passed that pytest saw fail"


def forged(run: VerificationRun, cases: Sequence[models.TestCaseResult]) -> bool:
    """Whether ``run``'s junit ``cases`` say a test passed that the run's signed record of
    failures (capture/outcomes.py) names, or that record is missing or not signed with its key."""
    if not run.report_key or not cases:
        return False
    try:
        doc = json.loads(Path(str(run.junit_path) + SIGNED_SUFFIX).read_text(encoding="utf-8"))
        failed = [str(name) for name in doc["failed"]]
        signed = hmac.compare_digest(str(doc["signature"]), signature(run.report_key, failed))
    except (OSError, ValueError, KeyError, TypeError):
        return True
    return not signed or any(c.outcome == models.OUTCOME_PASSED and c.name in failed for c in cases)


# A verification's junit and raw (unredacted) output live in a temp folder named after the
# loop's pid, so that the next loop can tell one a SIGKILL left behind from a live one.
VERIFY_DIR_PREFIX = "selfheal-verify-"


def verify_dir_prefix() -> str:
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
    """Remove the verification temp folders a killed loop left (a real folder, our user's, its pid dead)."""
    removed: list[Path] = []
    uid = getattr(os, "getuid", lambda: None)()
    for path in Path(tempfile.gettempdir() if tmp is None else tmp).glob(f"{VERIFY_DIR_PREFIX}*"):
        pid = path.name[len(VERIFY_DIR_PREFIX):].split("-", 1)[0]
        try:
            info = path.lstat()
        except OSError:
            continue
        if pid.isdigit() and int(pid) != os.getpid() and stat.S_ISDIR(info.st_mode) \
                and (uid is None or info.st_uid == uid) and not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def read_cases(junit: Path, redactor: Optional[Redactor]) -> list[models.TestCaseResult]:
    """The redacted testcases of a verification's junit; none when it is missing or unusable."""
    try:
        return dedupe(redact_cases(iter_testcases(junit), redactor)) if junit.is_file() else []
    except InputError:
        return []


def nodeid_for(test: str, by_identity: Mapping[str, str]) -> Optional[str]:
    """The node id of a junit identity ``classname::name``, a ``junit_prefix`` tolerated."""
    classname, _, name = test.rpartition("::")
    parts = classname.split(".")
    candidates = [test, *(".".join(parts[i:]) + "::" + name for i in range(1, len(parts)))]
    return next((by_identity[c] for c in candidates if c in by_identity), None)


def _collector_outcome(nodeid: str, cases: Sequence[models.TestCaseResult]) -> str:
    """The outcome of a selection naming a collector (a file, a class): the worst of the
    testcases inside it (error > failed > passed > skipped), ``missing`` when none ran."""
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


def _telling_line(text: str) -> str:
    """pytest's first ``ERROR: …`` line (a usage error says more there than in its last
    line), else the last non-empty line, or ""."""
    lines = text.splitlines()
    return next((line.strip() for line in lines if line.startswith("ERROR: ")), None) \
        or next((line.strip() for line in reversed(lines) if line.strip()), "")


def synthetic_failure(message: str, text: str, rules: Sequence[Rule], *, exc_type: str = "") -> models.Failure:
    """The failure of a run without junit, classified like any other; its fixed identity repeats stably."""
    # A runner missing, a run that could not start, or a selection pytest refused: the
    # environment, never a failure that "repeats".
    runner_rules = (
        Rule("verification_runner_missing", r"No module named \S", models.TOOLING_ENV, keywords=("no module named",)),
        Rule("verification_cannot_start", r": cannot start: ", models.TOOLING_ENV, keywords=("cannot start",)),
        Rule("verification_not_found", r"^ERROR: not found: ", models.TOOLING_ENV, keywords=("error: not found",)),
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


def observe(run: VerificationRun, selection_nodeids: Sequence[str], *, rules: Sequence[Rule] = (),
            redactor: Optional[Redactor] = None) -> tuple[dict[str, str], list[models.Failure]]:
    """Outcomes per node id and the failures of one verification run. Without a usable
    junit, every selected node id is ``missing`` and ONE synthetic failure stands for the run."""
    outcomes: dict[str, str] = {}
    cases = [] if run.timed_out else read_cases(run.junit_path, redactor)
    tail = redactor.redact(run.output_tail) if redactor is not None else run.output_tail
    if forged(run, cases):
        return dict.fromkeys(selection_nodeids, models.OUTCOME_MISSING), [synthetic_failure(FORGED, tail, rules)]
    collect_only = any(word in _COLLECT_ONLY for word in run.argv)
    if collect_only and run.exit_code == 0 and not any(c.outcome in models.FAILING_OUTCOMES for c in cases):
        # A clean collection is the verification of a plan without node ids.
        return {COLLECTION_KEY: models.OUTCOME_PASSED}, []
    if not cases:
        if run.timed_out:
            failure = synthetic_failure("TimeoutExpired: the verification run exceeded its timeout", tail, rules,
                                        exc_type="TimeoutExpired")
        else:
            failure = synthetic_failure(_telling_line(tail), tail, rules)
        return dict.fromkeys(selection_nodeids, models.OUTCOME_MISSING), [failure]
    by_identity = nodeid_by_identity(list(selection_nodeids))
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
    """Where the verification commands run: the incident's recorded ``rootdir`` only when it
    is, or lies inside, ``project_root`` or the folder holding ``reports_root``; otherwise
    ``project_root``, so a hand-edited ``rootdir`` cannot move the run elsewhere."""
    base = Path(project_root).resolve()
    bases = [base] + ([Path(reports_root).resolve().parent] if reports_root is not None else [])
    rootdir = incident.rootdir
    if rootdir and any(inside_root(rootdir, b) for b in bases) and (base / rootdir).is_dir():
        return (base / rootdir).resolve()
    return base

