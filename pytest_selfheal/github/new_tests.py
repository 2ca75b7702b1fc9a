"""New tests are checked for flakiness before they merge (edge: git, the verification runner).

On a pull request, ``selfheal ci`` finds the tests it adds or changes (collected on it and not
on its base revision, or whose lines, decorators included, changed) and re-runs just those
``new_tests.reruns`` times, each in another order from one recorded seed, within a time
budget. One that passed and failed on the same code is ``flaky (new)``; one not re-run its
count is ``unchecked``, not a pass. The runs go through the loop's verification checks
(allowlisted argv, no shell, no token, redacted output); they are never an incident's attempts.
"""

from __future__ import annotations

import ast
import dataclasses
import random
import secrets
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from pytest_selfheal import process
from pytest_selfheal.analysis.analyse import failures_from_cases
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import InputError, RefusedError
from pytest_selfheal.gitrepo import GitFailed, base_checkout, changed_lines, has_commit
from pytest_selfheal.history.sources import PULL_REQUEST_EVENTS, RunBase
from pytest_selfheal.junit.nodeids import mangle_nodeid
from pytest_selfheal.junit.reader import dedupe, iter_testcases
from pytest_selfheal.loop.argcheck import SAFE_VALUED
from pytest_selfheal.loop.regression import is_test_file
from pytest_selfheal.loop.verify import check_command, resolve_argv, run_selection
from pytest_selfheal.records import models
from pytest_selfheal.records.ci import NewTestResult, NewTestsCheck
from pytest_selfheal.records.vocab import first_few
from pytest_selfheal.redact import redact_cases

# A test module larger than this is not parsed for its tests (nothing generated is a test).
MAX_MODULE_BYTES = 2_000_000
# The least time the re-runs get, whatever the share: a suite that runs in a second still
# has its new tests re-run their count.
BUDGET_FLOOR_SECONDS = 30.0
# Lines of a collection's output read; a larger suite is compared by changed lines only.
MAX_COLLECTED = 200_000
# pytest options whose value is the next word: kept with it when the job's own arguments are
# replayed (every other bare word is a selection, replaced by the new tests).
_VALUED = frozenset({*SAFE_VALUED, "-p", "-o", "--override-ini", "-c", "--config-file", "-W",
                     "--pythonwarnings", "--import-mode", "-n", "--numprocesses", "--dist", "--ignore",
                     "--ignore-glob", "--log-level", "--timeout"})

Say = Callable[[str], None]
Span = tuple[int, int]


def _span(node: Union[ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef]) -> Span:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return first, node.end_lineno or node.lineno


def _overlaps(span: Span, ranges: Sequence[Span]) -> bool:
    return any(first <= span[1] and last >= span[0] for first, last in ranges)


def changed_tests(source: str, ranges: Sequence[Span]) -> list[str]:
    """The tests of one module that ``ranges`` (changed lines, 1-based, inclusive) touch, as
    node-id suffixes: ``test_f``, ``TestC::test_m``, or ``TestC`` when a line of the class
    outside its test methods changed (every test of the class depends on it)."""
    names: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            if _overlaps(_span(node), ranges):
                names.append(node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test") and _overlaps(_span(node), ranges):
            tests = [n for n in node.body
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")]
            spans = [_span(n) for n in tests]
            first, last = _span(node)
            inside = [(max(a, first), min(b, last)) for a, b in ranges if a <= last and b >= first]
            outside = any(not any(s[0] <= a and b <= s[1] for s in spans) for a, b in inside)
            names += [node.name] if outside else [f"{node.name}::{t.name}" for t, s in zip(tests, spans)
                                                  if _overlaps(s, ranges)]
    return names


def rerun_options(pytest_args: Sequence[str]) -> list[str]:
    """The job's pytest arguments without their selections (replaced by the new tests)."""
    kept: list[str] = []
    expects_value = False
    for word in pytest_args:
        if expects_value or (word.startswith("-") and word != "-"):
            kept.append(word)
            expects_value = not expects_value and word in _VALUED
    return kept


def budget_seconds(run_seconds: float, max_seconds: float, max_share: float) -> float:
    return max(0.0, min(max_seconds, max(BUDGET_FLOOR_SECONDS, max_share * run_seconds)))


def _counted(test: NewTestResult, outcome: str, message: str = "", fingerprint: str = "", *,
             rerun: bool = False) -> NewTestResult:
    """``test`` with one more run; a skip is a re-run too: a test skipped every time is not unchecked."""
    if outcome not in models.FAILING_OUTCOMES or test.first_failure:
        first, fingerprint = test.first_failure, test.fingerprint
    else:
        first = next((line.strip() for line in message.splitlines() if line.strip()), "failed")[:300]
    return dataclasses.replace(test, passed=test.passed + (outcome == models.OUTCOME_PASSED),
                               failed=test.failed + (outcome in models.FAILING_OUTCOMES), first_failure=first,
                               fingerprint=fingerprint, reruns=test.reruns + rerun)


def _matches(prefix: str, case: models.TestCaseResult) -> Optional[str]:
    """The node id of ``case`` when it is a test of ``prefix`` (a function, method or class)."""
    classname, name = mangle_nodeid(prefix)
    if case.classname == classname and (case.name == name or case.name.startswith(name + "[")):
        return prefix + case.name[len(name):]  # the test itself, or one of its parametrisations
    if case.classname == (f"{classname}.{name}" if classname else name):
        return f"{prefix}::{case.name}"  # a method of the class
    return None


@dataclass
class NewTestsRun:
    """What the check needs from the ``selfheal ci`` run it belongs to."""

    project_root: Path  # pytest's rootdir: node ids are relative to it
    base: RunBase  # the judgement of the run's event: a pull request's base revision, or why there is none
    pytest_args: Sequence[str]  # the job's own pytest arguments
    run_seconds: float  # how long the job's own test run took
    main_failures: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # nodeid -> (message, fingerprint)
    env: Optional[Mapping[str, str]] = None  # the test processes' environment (no token)


def changed_in_place(project_root: Path, ranges: Mapping[str, Sequence[Span]], say: Say) -> list[str]:
    """The node-id prefixes of the tests whose lines changed."""
    prefixes: list[str] = []
    for path in filter(is_test_file, sorted(ranges)):
        file = project_root / path
        try:
            if file.is_file() and file.stat().st_size <= MAX_MODULE_BYTES:
                prefixes += [f"{path}::{name}" for name in changed_tests(file.read_text(encoding="utf-8"), ranges[path])]
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
            say(f"selfheal ci: warning: {path}: not read for new tests ({type(exc).__name__}): its collection error "
                "is the run's")
    return prefixes


def _covers(prefix: str, nodeid: str) -> bool:
    return nodeid == prefix or nodeid.startswith((prefix + "[", prefix + "::"))


def _unparametrised(nodeid: str) -> str:
    """``t.py::test_f[1-a]`` → ``t.py::test_f``: one selection runs every parametrisation."""
    last = nodeid.rfind("::")
    bracket = nodeid.find("[", last) if last >= 0 else -1
    return nodeid[:bracket] if bracket >= 0 and nodeid.endswith("]") else nodeid


def _checked_pytest(run: NewTestsRun, effective: EffectiveConfig, root: Path, lead: Sequence[str],
                    selections: Sequence[str]) -> list[str]:
    """``python -m pytest`` with the job's options, checked as a verification command (RefusedError)."""
    verification = effective.settings.verification
    argv = ["python", "-m", "pytest", *lead, "-p", "no:cacheprovider", *rerun_options(run.pytest_args),
            *verification.args, *selections]
    check_command(argv, allowlist=verification.allowlist, root=root, trusted=[*run.pytest_args, *verification.args])
    return argv


def collected(root: Path, effective: EffectiveConfig, run: NewTestsRun, timeout: float) -> tuple[Optional[list[str]], str]:
    """The node ids pytest collects in ``root`` with the job's options, or ``(None, why not)``."""
    try:
        argv = _checked_pytest(run, effective, root, ["--collect-only"], [])
    except RefusedError as exc:
        return None, str(exc)
    lines: list[str] = []

    def keep(line: bytes) -> None:
        if len(lines) <= MAX_COLLECTED:
            lines.append(line.decode("utf-8", "replace").rstrip("\r\n"))

    # Last, so they win over addopts: the rootdir the node ids are relative to, one id a line.
    result = process.run(resolve_argv([*argv, f"--rootdir={root}", "--verbosity=-1"]), cwd=root, env=run.env,
                         timeout_seconds=timeout, on_line=keep)
    if result.timed_out:
        return None, f"it took more than {timeout:.0f} s"
    if len(lines) > MAX_COLLECTED:
        return None, f"more than {MAX_COLLECTED} lines of output"
    if result.exit_code == 5:  # no tests collected
        return [], ""
    ids: list[str] = []
    for line in lines:  # one id a line, then a blank line (then the count, the warnings)
        if ids and not line.strip():
            break
        if "::" in line and not line.startswith((" ", "<", "=")):
            ids.append(line)
    if not result.started or result.exit_code is None:
        return None, f"pytest could not start: {result.error}"
    if result.exit_code != 0:
        last = next((line.strip() for line in reversed(lines) if line.strip()), "no output")
        return None, f"pytest exited with {result.exit_code}: {effective.redactor.redact(last)[:200]}"
    return ids, ""


def find_new_tests(run: NewTestsRun, effective: EffectiveConfig, base: str, *, say: Say) -> list[str]:
    """The tests the pull request adds or changes (module doc). When the base does not collect,
    every test of a changed test module counts; when the pull request does not, the tests
    whose lines changed; each fallback one line. :class:`GitFailed` for the diff."""
    ranges = changed_lines(run.project_root, base)
    prefixes = changed_in_place(run.project_root, ranges, say)
    if not ranges:
        return []  # no Python file changed: no test can be new
    timeout = effective.settings.verification.timeout_seconds  # a collection is not a re-run: not in the budget
    now, why = collected(run.project_root, effective, run, timeout)
    if now is None:
        say(f"selfheal ci: warning: the pull request's tests did not collect ({why}): "
            "only the tests whose lines changed are checked")
        return prefixes
    try:
        with base_checkout(run.project_root, base) as tree:
            before, why = collected(tree, effective, run, timeout)
    except GitFailed as exc:
        before, why = None, f"git worktree: {exc.first_line}"
    if before is None:
        say(f"selfheal ci: warning: the base revision {base[:12]} did not collect ({why}): "
            "every test of a changed test module counts as new")
        return [n for n in now if n.split("::", 1)[0] in ranges or any(_covers(p, n) for p in prefixes)]
    old = set(before)
    return [n for n in now if n not in old or any(_covers(p, n) for p in prefixes)]


def check_new_tests(run: NewTestsRun, effective: EffectiveConfig, *, say: Say) -> NewTestsCheck:
    """Find the tests a pull request adds or changes and re-run them; what it cannot do, its note says."""
    settings = effective.settings.new_tests
    if not settings.enabled:
        return NewTestsCheck("new tests not checked: new_tests.enabled is false")
    if run.base.event not in PULL_REQUEST_EVENTS:
        return NewTestsCheck("new tests not checked: not a pull request event")
    base = run.base.revision
    if base is None:
        return NewTestsCheck(f"new tests not checked: the {run.base.event} event names no base revision")
    if not has_commit(run.project_root, base):
        return NewTestsCheck(f"new tests not checked: the base revision {base[:12]} is not in this clone "
                             "(a shallow checkout: give actions/checkout fetch-depth: 2 or more)")
    try:
        targets = find_new_tests(run, effective, base, say=say)
    except GitFailed as exc:
        return NewTestsCheck(f"new tests not checked: git diff against {base[:12]} failed: {exc.first_line}")
    if not targets:
        return NewTestsCheck(f"no test added or changed since {base[:12]}: nothing to check")
    budget = budget_seconds(run.run_seconds, settings.max_seconds, settings.max_share)
    seed = settings.seed if settings.seed is not None else 1 + secrets.randbelow(2**31 - 1)
    say(f"selfheal ci: re-running {len(targets)} new or changed test(s) up to {settings.reruns} time(s) "
        f"(seed {seed}, budget {budget:.1f} s)")
    tallies, done, error = _rerun(run, effective, targets, seed, budget)
    tallies = {n: t for n, t in tallies.items() if any(_covers(target, n) for target in targets)}
    for nodeid, tally in tallies.items():  # the job's own run
        if nodeid in run.main_failures:
            tallies[nodeid] = _counted(tally, models.OUTCOME_FAILED, *run.main_failures[nodeid])
        elif tally.passed + tally.failed:
            tallies[nodeid] = _counted(tally, models.OUTCOME_PASSED)
    for target in targets:  # found, but no re-run got to it: named, never counted as checked
        if not any(_covers(target, n) for n in tallies):
            tallies[target] = NewTestResult(target, 0, 0)
    results = tuple(dataclasses.replace(t, planned=settings.reruns) for _, t in sorted(tallies.items()))
    not_rerun = settings.reruns - done
    note = f"{len(results)} new or changed test(s) re-run {done} of {settings.reruns} time(s) (seed {seed})"
    if not_rerun:
        note += f"; {not_rerun} re-run(s) left out: " + (error or f"the budget of {budget:.1f} s was spent")
    elif error:
        note += f"; {error}"
    return NewTestsCheck(note, results, seed, done, not_rerun)


def _rerun(run: NewTestsRun, effective: EffectiveConfig, targets: Sequence[str], seed: int,
           budget: float) -> tuple[dict[str, NewTestResult], int, Optional[str]]:
    """The re-runs: ``(tallies by node id, re-runs done, why they ended early or None)``."""
    settings = effective.settings
    selections = list(dict.fromkeys(_unparametrised(t) for t in targets))
    rng = random.Random(seed)
    tallies: dict[str, NewTestResult] = {}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="selfheal-new-tests-") as scratch:
        last = 0.0  # how long the last re-run took: one that would not fit is not started
        for index in range(settings.new_tests.reruns):
            left = budget - (time.monotonic() - started)
            if left <= 0 or left < last:
                return tallies, index, None
            order = list(selections)
            rng.shuffle(order)
            try:
                argv = _checked_pytest(run, effective, run.project_root, [], order)
            except RefusedError as exc:
                return tallies, index, f"not re-run: {exc}"
            junit = Path(scratch) / f"rerun-{index + 1}.xml"
            result = run_selection(argv, cwd=run.project_root, junit_path=junit, timeout_seconds=left, env=run.env)
            last = result.duration_seconds
            if result.timed_out:
                return tallies, index, None  # the budget ran out during this one: it does not count
            try:
                cases = dedupe(redact_cases(iter_testcases(junit), effective.redactor)) if junit.is_file() else []
            except InputError as exc:
                return tallies, index, f"re-run {index + 1} gave no readable junit ({exc})"
            if not cases:
                line = effective.redactor.redact((result.output_tail.strip().splitlines() or ["no output"])[-1])
                return tallies, index, f"re-run {index + 1} ran no test: {line}"
            fingerprints = {f.test: f.fingerprint for f in failures_from_cases(cases)}
            for case in cases:
                nodeid = next((n for n in (_matches(p, case) for p in selections) if n), None)
                if nodeid is not None:
                    tallies[nodeid] = _counted(tallies.get(nodeid) or NewTestResult(nodeid, 0, 0), case.outcome,
                                               case.message, fingerprints.get(case.test, ""), rerun=True)
    return tallies, settings.new_tests.reruns, None


def summary_line(check: NewTestsCheck) -> str:
    label, tests = ("flaky", check.flaky) if check.flaky else ("unchecked", check.unchecked)
    return f"selfheal ci: {label} (new): {first_few(tests, 3)} — {check.note}" if tests else f"selfheal ci: {check.note}"
