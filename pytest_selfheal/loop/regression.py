"""The regression check before every ``success`` (edge: files, git, subprocesses; docs/loop.md
"The regression check" has the rules).

A failing test is the change's fault only when it is not the incident's, fails again on a
re-run and passes on the captured code; one that passes its re-runs is flaky only when it is
intermittent on the captured code too, else the change made it intermittent: broken.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from pytest_selfheal.analysis.analyse import failures_from_cases
from pytest_selfheal.analysis.classify import Rule
from pytest_selfheal.config.seal import called_name, may_patch, patches
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gitrepo import GitFailed, repo_top, run_git
from pytest_selfheal.junit.nodeids import mangle_nodeid
from pytest_selfheal.loop.verify import FORGED, Verifier, forged, read_cases, start_dir, trusted_options
from pytest_selfheal.plan.suspects import PASSING_SPECTRUM_FILE, FunctionKey, read_passing_spectrum
from pytest_selfheal.records import models
from pytest_selfheal.records.context import RunContext
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.vocab import first_few
from pytest_selfheal.redact import Redactor
from pytest_selfheal.store.root import Store

AFFECTED = "affected"
OFF = "off"

# Directories never searched for project modules: tools', environments', build output.
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "build", "dist", "venv", "env"})
# Changed files that cannot change what a test does.
_DOCUMENTATION = (".md", ".rst")
# Changed files that change what runs or how it is judged for every test: the whole command.
_WHOLE_COMMAND_NAMES = frozenset({"conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml"})
_DYNAMIC_CALLS = frozenset({"import_module", "__import__"})
# A dotted word inside a string, and how much of one string is read for them.
_DOTTED_WORD = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_STRING_SCAN = 4096

BASE_ARGV: tuple[str, ...] = ("python", "-m", "pytest", "-q")
# The index of the check's selection file (store.selection_file), after any plan command's.
REGRESSION_SELECTION = 99
# What a run narrower than the capture says of a passing selection (it runs no check).
NOT_YET_CHECKED = "passes; not yet checked for regressions"

# Runs on the captured code of a test that failed under the change and passed its re-runs:
# one failure there makes it flaky; passing them all, the change made it intermittent.
CAPTURED_RERUNS = 3


@dataclass(frozen=True)
class RegressionCheck:
    """What one regression check ran and found."""

    ran: int  # tests the check ran (its re-runs not counted)
    broken: tuple[str, ...] = ()  # tests the change broke: fail twice, pass on the captured code
    failures: tuple[models.Failure, ...] = ()  # their failures (redacted)
    flaky: tuple[str, ...] = ()  # failed, then passed on a re-run, intermittent on the captured code too
    preexisting: tuple[str, ...] = ()  # fail on the captured code too: not the change's fault
    scope: str = ""  # what ran: "3 test modules that import the change", "the capture's whole command"
    timed_out: bool = False  # the check hit verification.regression_budget_seconds: nothing is known
    unknown: str = ""  # why nothing is known otherwise (timed_out is set too)
    intermittent: tuple[str, ...] = ()  # of ``broken``: how each one the change made intermittent ran
    from_run: int = 0  # of ``ran``, the tests judged by the outcome the run asking for the check gave them

    def ran_text(self) -> str:
        """What the check ran, and what it did not blame on the change."""
        scope = f"{self.scope}; {self.from_run} of them by this run itself" if self.from_run else self.scope
        notes = [f"{len(self.preexisting)} failing on the captured code too"] if self.preexisting else []
        notes += [f"{len(self.flaky)} flaky (passed on a re-run)"] if self.flaky else []
        notes += list(self.intermittent[:3])
        return f"the regression check ran {self.ran} test(s) ({scope})" + "".join(f"; {n}" for n in notes)

def _broke(fixed: Sequence[str], broken: Sequence[str]) -> str:
    # Bounded for one line (the attempt and the report keep them all).
    fixed_text = f"fixed {first_few([f'`{short_name(n)}`' for n in fixed])}; " if fixed else "the selection passes; "
    return fixed_text + f"broke {first_few([f'`{short_name(n)}`' for n in broken])}"


def regression_words(fixed: Sequence[str], broken: Sequence[str], tests_run: Optional[int]) -> str:
    """An attempt's regression check in words for the MCP verdict and the gate; "" when none ran."""
    if tests_run is None:
        return ""
    if not broken:
        return f"the regression check ran {tests_run} test(s): nothing broken"
    return f"{_broke(fixed, broken)} (the regression check ran {tests_run} test(s))"


def short_name(nodeid: str) -> str:
    """``test_add`` for ``tests/test_calc.py::test_add``: how a sentence names a test."""
    return nodeid.rsplit("::", 1)[-1]


def regression_line(incident_id: str, fixed: Sequence[str], check: RegressionCheck) -> str:
    """What the repair fixed and what it broke, in one line."""
    if check.broken:
        return f"selfheal: incident {incident_id}: {_broke(fixed, check.broken)} ({check.ran_text()})"
    found = (check.unknown or "it hit its time budget (verification.regression_budget_seconds)") if check.timed_out \
        else "nothing broken"
    return f"selfheal: incident {incident_id}: {check.ran_text()}: {found}"


def changed_files(tree: Path, commit: Optional[str]) -> Optional[list[str]]:
    """The files below ``tree`` that differ from ``commit``, untracked included; None when git cannot say."""
    if not commit:
        return None
    try:
        tracked = run_git(tree, ["-c", "core.quotePath=false", "diff", "--name-only", "--relative", "--no-renames",
                                 "-z", commit, "--"])
        untracked = run_git(tree, ["-c", "core.quotePath=false", "ls-files", "-z", "--others", "--exclude-standard"])
    except GitFailed:
        return None
    names = (tracked + b"\0" + untracked).decode("utf-8", "surrogateescape").split("\0")
    # Caches and tools' folders (bytecode, .pytest_cache, the reports root) are no change of the code.
    return sorted({n for n in names if n and not n.endswith(".pyc")
                   and not any(part.startswith(".") or part == "__pycache__" for part in n.split("/")[:-1])})


def _module_parts(rel: str) -> list[str]:
    parts = rel[:-3].split("/")
    return parts[:-1] if parts[-1] == "__init__" else parts


@dataclass(frozen=True)
class _Refs:
    """What a module refers to (each dotted prefix too: ``a.b.c`` runs ``a`` and ``a.b``)."""

    names: set[str]
    words: set[str]  # dotted words of its strings
    unknown: bool  # does not parse, or imports by a computed name: may reach anything
    acts_on_tests: bool = False  # defines fixtures or ``pytest_*`` hooks: acts on tests that do not import it
    patches: bool = False  # assigns to another module's attribute: acts on code that never imports it


def _imports(rel: str, root: Path) -> _Refs:
    """The names a module refers to. A dotted word of a string counts too
    (``importorskip("calc")``, ``mock.patch("calc.mul")``): code is reached by name in more
    ways than ``import``."""
    try:
        source = (root / rel).read_bytes()
        tree = ast.parse(source, rel)
    except (OSError, SyntaxError, ValueError):
        return _Refs(set(), set(), True)
    names: set[str] = set()
    words: set[str] = set()
    dynamic = acts = False
    package = rel[:-3].split("/")[:-1]

    def add(name: str, into: set[str] = names) -> None:
        parts = name.split(".")
        into.update(".".join(parts[: i + 1]) for i in range(len(parts)))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1] if node.level <= len(package) + 1 else []
                base = ".".join([*anchor, *([base] if base else [])])
            if base:
                add(base)
            for alias in node.names:
                add(f"{base}.{alias.name}" if base else alias.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for word in _DOTTED_WORD.findall(node.value[:_STRING_SCAN]):
                add(word, words)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            acts = acts or node.name.startswith("pytest_") or any(
                called_name(d.func if isinstance(d, ast.Call) else d) == "fixture" for d in node.decorator_list)
        elif isinstance(node, ast.Call) and called_name(node.func) in _DYNAMIC_CALLS:
            first = node.args[0] if node.args else None
            dynamic = dynamic or not (isinstance(first, ast.Constant) and isinstance(first.value, str))
    return _Refs(names, words, dynamic, acts, may_patch(source) and bool(patches(tree)))


def _whole_name(root: Path, rel: str) -> str:
    """``rel``'s dotted name from its top package (the first folder up that is no package):
    ``src/shop/cart.py`` → ``shop.cart``, ``calc.py`` → ``calc``."""
    parts = _module_parts(rel)
    top = len(parts) - 1
    while top > 0 and (root.joinpath(*parts[:top]) / "__init__.py").is_file():
        top -= 1
    return ".".join(parts[top:])


def project_files(root: Path, skip: Collection[Path], ignored: Collection[str] = _SKIPPED_DIRS) -> Iterator[str]:
    """The files below ``root`` (relative POSIX paths), outside hidden, ``ignored``, ``skip`` and venv folders."""
    skipped = {p.resolve() for p in skip}
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ignored
                         and (here / d).resolve() not in skipped and not (here / d / "pyvenv.cfg").exists())
        for name in sorted(files):
            yield (here / name).relative_to(root).as_posix()


def is_test_file(rel: str) -> bool:
    """pytest's default ``python_files``: ``test_*.py`` and ``*_test.py``."""
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def affected_test_files(root: Path, changed: Sequence[str], *, skip: Collection[Path] = ()) -> Optional[list[str]]:
    """The test files below ``root`` that can reach a changed file through the imports, or
    None when that cannot be known (the capture's whole command runs then). A test file
    that does not parse, or reaches a module importing by a computed name, can reach anything."""
    code: list[str] = []
    for rel in changed:
        name = rel.rsplit("/", 1)[-1]
        if name in _WHOLE_COMMAND_NAMES or not rel.endswith((".py", *_DOCUMENTATION)):
            return None
        if rel.endswith(".py"):
            code.append(rel)
    if not code:
        return []
    # Every dotted name a module may be imported as (``src/pkg/mod.py``: ``src.pkg.mod``, ``pkg.mod``,
    # ``mod``), and its name from its top package: what a string names.
    by_name: dict[str, set[str]] = {}
    by_whole_name: dict[str, set[str]] = {}
    graph: dict[str, _Refs] = {}
    for rel in (f for f in project_files(root, skip) if f.endswith(".py")):
        parts = _module_parts(rel)
        for i in range(len(parts)):
            by_name.setdefault(".".join(parts[i:]), set()).add(rel)
        by_whole_name.setdefault(_whole_name(root, rel), set()).add(rel)
        graph[rel] = _imports(rel, root)
    edges = {rel: ({f for name in refs.names for f in by_name.get(name, ())}
                   | {f for word in refs.words for f in by_whole_name.get(word, ())}) - {rel}
             for rel, refs in graph.items()}
    imported = {f for targets in edges.values() for f in targets}
    if any(rel not in imported and not is_test_file(rel) for rel in code):
        return None  # nothing imports it by name: a plugin, a script, an import at run time
    if any(rel in graph and graph[rel].patches for rel in code):
        return None  # it changes other modules (``json.loads = …``): any test in the process
    # Reverse reachability: who imports (transitively) a changed module, or a module of unknown imports.
    importers: dict[str, set[str]] = {}
    for rel, targets in edges.items():
        for target in targets:
            importers.setdefault(target, set()).add(rel)
    reached: set[str] = set()
    todo = [*code, *(rel for rel, refs in graph.items() if refs.unknown)]
    while todo:
        rel = todo.pop()
        if rel in reached:
            continue
        reached.add(rel)
        todo.extend(importers.get(rel, ()))
    # A reached module nothing imports by name reaches tests without being imported: a conftest
    # or a package's __init__ acts on every test below its folder; a plugin (fixtures, hooks)
    # loaded by configuration on tests nobody can name.
    below: list[str] = []
    for rel in reached - set(importers):
        if is_test_file(rel):
            continue
        folder, _, name = rel.rpartition("/")
        if name in ("conftest.py", "__init__.py"):
            below.append(f"{folder}/" if folder else "")
        elif rel in graph and graph[rel].acts_on_tests:
            return None
    return sorted(rel for rel in graph if (rel in reached or any(rel.startswith(b) for b in below))
                  and is_test_file(rel) and (root / rel).is_file())


_HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? ", re.M)


def _touched_functions(tree: Path, commit: str, rel: str) -> Optional[set[int]]:
    """The ``def`` lines of the captured ``rel``'s functions the change touched; None when any
    function of it may behave otherwise (a change outside functions) or that cannot be known."""
    try:
        module = ast.parse(run_git(tree, ["show", f"{commit}:./{rel}"]), rel)
        diff = run_git(tree, ["diff", "-U0", "--no-renames", "--no-ext-diff", commit, "--", rel])
    except (GitFailed, SyntaxError, ValueError):
        return None
    spans = [(min([node.lineno, *(d.lineno for d in node.decorator_list)]), node.end_lineno or node.lineno, node.lineno)
             for node in ast.walk(module) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    lines: set[int] = set()
    for hunk in _HUNK.finditer(diff):
        start, count = int(hunk[1]), int(hunk[2] or 1)
        low, high = (start, start + count - 1) if count else (start, start + 1)  # lines added after ``start``
        if not any(first <= low and high <= last for first, last, _ in spans):
            return None
        lines.update(line for first, last, line in spans if first <= high and low <= last)
    return lines


def spectrum_reach(tree: Path, commit: Optional[str], changed: Sequence[str],
                   spectrum: Mapping[str, Collection[FunctionKey]], *, by_function: bool = True) -> set[str]:
    """The test files of the tests whose recorded spectrum entered a function the change
    touched: what reaches it at run time only. ``by_function`` False: any function of a
    changed file (the capture saw other code than its commit)."""
    paths = {key[0] for keys in spectrum.values() for key in keys} & {c for c in changed if c.endswith(".py")}
    if not commit or not paths:
        return set()
    touched = {rel: _touched_functions(tree, commit, rel) if by_function else None for rel in paths}
    return {nodeid.split("::", 1)[0] for nodeid, keys in spectrum.items()
            if any(path in touched and (touched[path] is None or line in (touched[path] or ()))
                   for path, _name, line in keys)
            and (tree / nodeid.split("::", 1)[0]).is_file()}


def nodeid_of(case: models.TestCaseResult, root: Path) -> str:
    """The node id of a junit testcase: the longest prefix of its classname that is a file."""
    parts = case.classname.split(".") if case.classname else []
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (root / path).is_file():
            return "::".join([path, *parts[cut:], case.name])
    return case.test


@dataclass(frozen=True)
class RunOutcomes:
    """The run asking for the check, when it is the iteration's verification and nothing cut
    it short: the outcome of every test it ran, and its selection words (none: pytest's default)."""

    outcomes: Mapping[str, str]
    words: Sequence[str]

    def split(self, words: Sequence[str], whole: bool) -> tuple[Optional[list[str]], dict[str, str]]:
        """The check's selection ``words`` (``whole``: the capture's whole command) split into the
        words this run did not run (None: nothing left) and this run's outcomes under the rest."""
        if whole:
            return (None, self._under(words)) if covers(self.words, words) else (list(words), {})
        done = [w for w in words if covers(self.words, [w])]
        return [w for w in words if w not in done] or None, self._under(done) if done else {}

    def _under(self, words: Sequence[str]) -> dict[str, str]:
        return {n: o for n, o in self.outcomes.items() if not words or covers(words, [n])}


@contextmanager
def captured_code(tree: Path, commit: Optional[str], scratch: Path,
                  captured_tree: Optional[Path] = None) -> Iterator[Optional[Path]]:
    """The capture's commit checked out in a detached worktree (no hook runs), at the place
    of ``tree`` in it; None when it cannot be. Removed after. ``captured_tree``: where the
    captured code already is, when it is not ``tree``."""
    if captured_tree is not None and Path(captured_tree).resolve() != Path(tree).resolve():
        yield captured_tree
        return
    if not commit:
        yield None
        return
    hooks = scratch / "hooks"
    hooks.mkdir(exist_ok=True)
    path = scratch / "captured"
    try:
        top = repo_top(tree)
        run_git(top, ["worktree", "add", "--detach", str(path), commit], hooks_dir=hooks)
    except (GitFailed, SelfhealError):  # no repository, no such commit: nothing to compare with
        yield None
        return
    try:
        yield path / Path(tree).resolve().relative_to(top) if Path(tree).resolve() != top else path
    finally:
        try:
            run_git(top, ["worktree", "remove", "--force", "--force", str(path)], hooks_dir=hooks)
        except GitFailed:
            shutil.rmtree(path, ignore_errors=True)
            with suppress(GitFailed):
                run_git(top, ["worktree", "prune"], hooks_dir=hooks)


def check_regressions(*, mode: str, incident: Incident, tree: Path, runner: Verifier, trusted: Sequence[str],
                      whole_command: Sequence[str], selection: Collection[str], base_argv: Sequence[str] = BASE_ARGV,
                      budget_seconds: float, commit: Optional[str], captured_tree: Optional[Path] = None,
                      clean_capture: bool = True, env: Optional[Mapping[str, str]] = None,
                      invocation_dir: Optional[Path] = None, selection_file: Optional[Path] = None,
                      rules: Sequence[Rule] = (), redactor: Optional[Redactor] = None, skip: Collection[Path] = (),
                      spectrum: Mapping[str, Collection[FunctionKey]] = {},
                      this_run: Optional[RunOutcomes] = None) -> RegressionCheck:
    """Run the regression check (``mode``: affected or full) of the code in ``tree``.

    ``trusted``: appended like to every verification command; ``whole_command``: the
    capture's selection words; ``selection``: judged by the iteration itself.
    ``captured_tree``: where the captured code already is (the user's tree while a repair
    works in a worktree), else ``commit`` is checked out when ``clean_capture`` (a dirty
    capture saw other code than its commit). ``this_run``: the run asking for the check,
    whose outcomes stand for the tests it ran.
    """
    started = time.monotonic()
    known = set(selection) | set(incident.nodeids) | {f.nodeid or f.test for f in incident.failures}
    known_identities = {"::".join(p for p in mangle_nodeid(n) if p) for n in known}

    def theirs(nodeid: str) -> bool:
        return nodeid in known or "::".join(p for p in mangle_nodeid(nodeid) if p) in known_identities

    files: Optional[list[str]] = None
    ran_it: set[str] = set()  # test modules only a recorded spectrum shows reaching the change
    if mode == AFFECTED:
        changed = changed_files(tree, commit)
        if changed is not None:
            files = affected_test_files(tree, changed, skip=skip)
        if files is not None and changed is not None:
            ran_it = spectrum_reach(tree, commit, changed, spectrum, by_function=clean_capture) - set(files)
    if files is None:
        scope, words = "the capture's whole command", list(whole_command)
    else:
        scope, words = f"{len(files)} test module(s) that import the change", sorted({*files, *ran_it})
        scope += f", {len(ran_it)} whose recorded spectrum ran it" if ran_it else ""
    child, outcomes = (words if files is None or words else None, {}) if this_run is None \
        else this_run.split(words, whole=files is None)
    from_run = len(outcomes)
    failures: dict[str, models.Failure] = {}

    def run(argv_words: Sequence[str], cwd: Path, name: str, scratch: Path) -> dict[str, str]:
        """The outcome of each test it ran (their failures kept); ``_OutOfTime`` on the budget's end."""
        start = invocation_dir
        if invocation_dir is not None and cwd != tree:
            start = cwd / Path(invocation_dir).resolve().relative_to(Path(tree).resolve())
        junit = scratch / f"{name}.xml"
        ran = runner([*base_argv, *argv_words, *trusted], cwd=cwd, junit_path=junit,
                     timeout_seconds=max(1.0, budget_seconds - (time.monotonic() - started)), env=env,
                     invocation_dir=start, selection_file=selection_file)
        if ran.timed_out:
            raise _OutOfTime
        cases = read_cases(junit, redactor)
        if forged(ran, cases):
            raise _OutOfTime(FORGED)  # nothing is known of a check whose report was rewritten
        by_test = {case.test: nodeid_of(case, cwd) for case in cases}
        for failure in failures_from_cases(cases, extra_rules=rules):
            nodeid = by_test.get(failure.test, failure.test)
            failures[nodeid] = replace(failure, nodeid=nodeid)
        return {by_test[case.test]: case.outcome for case in cases}

    try:
        with tempfile.TemporaryDirectory(prefix="selfheal-regression-") as tmp:
            scratch = Path(tmp)
            if child is not None:
                outcomes.update(run(child, tree, "check", scratch))
            candidates = sorted(n for n, o in outcomes.items() if o in models.FAILING_OUTCOMES and not theirs(n))
            if not candidates:
                return RegressionCheck(len(outcomes), scope=scope, from_run=from_run)
            # Fails again? A pass on the re-run is a flaky test's, never the change's fault. A test
            # that passes alone runs again as the check ran it: beside the modules a change patches
            # (``json.loads = …``) it can fail every time.
            flaky: tuple[str, ...] = tuple(candidates)
            runs = 1
            for selection in (candidates, words):
                again = run(selection, tree, "rerun", scratch)
                flaky = tuple(n for n in flaky if again.get(n) == models.OUTCOME_PASSED)
                runs += 1
                if not flaky:
                    break
            failing = [n for n in candidates if n not in flaky]
            preexisting: tuple[str, ...] = ()
            with captured_code(tree, commit if clean_capture else None, scratch, captured_tree) as base:
                if base is not None and failing:
                    before = run(failing, base, "captured", scratch)
                    preexisting = tuple(n for n in failing if before.get(n) in models.FAILING_OUTCOMES)
                # A pass on a re-run makes a test flaky only if the captured code fails it too, now
                # and then: a change can make a stable neighbour fail one run in three.
                steady = list(flaky)
                for index in range(CAPTURED_RERUNS):
                    if base is None or not steady:
                        break
                    before = run(steady, base, f"captured_{index}", scratch)
                    steady = [n for n in steady if before.get(n) not in models.FAILING_OUTCOMES]
                on_captured = (f"passed {CAPTURED_RERUNS} of {CAPTURED_RERUNS} on the captured code"
                               if base is not None else "the captured code could not be run")
    except _OutOfTime as stop:
        return RegressionCheck(len(outcomes), scope=scope, timed_out=True, from_run=from_run, unknown=str(stop))
    # Flaky under the change only: passed every run on the captured code.
    intermittent = tuple(f"`{short_name(n)}` became intermittent under the change: failed 1 of {runs}, {on_captured}"
                         for n in steady)
    broken = tuple(n for n in [*failing, *steady] if n not in preexisting)
    return RegressionCheck(len(outcomes), broken, tuple(failures[n] for n in broken if n in failures),
                           tuple(n for n in flaky if n not in steady), preexisting, scope, intermittent=intermittent,
                           from_run=from_run)


class _OutOfTime(Exception):
    """The check hit its time budget (verification.regression_budget_seconds), or (its
    argument) cannot know for another reason."""


def capture_words(invocation_args: Sequence[str], cwd: Optional[str], rootdir: Path) -> list[str]:
    """The capture's existing paths and node ids, rootdir-relative: its whole command."""
    start = Path(cwd) if cwd else rootdir
    words = []
    for word in invocation_args:
        if word.startswith("-"):
            continue
        path, sep, rest = word.partition("::")
        try:
            where = (start / path).resolve()
            rel = where.relative_to(rootdir.resolve()).as_posix()
        except (OSError, ValueError, RuntimeError):
            continue
        if where.exists():
            words.append(rel + sep + rest)
    return words


def check_incident(store: Store, incident: Incident, *, effective: EffectiveConfig, tree: Path, runner: Verifier,
                   outcomes: Mapping[str, str], failed: bool = False, captured_tree: Optional[Path] = None,
                   env: Optional[Mapping[str, str]] = None, rules: Sequence[Rule] = (),
                   this_run: Optional[RunOutcomes] = None, context: Optional[RunContext]) -> Optional[RegressionCheck]:
    """:func:`check_regressions` of ``incident`` with its recorded capture (``context``) and the keys
    that judge it, when the iteration's selection passes (``failed``: a failure or a timeout besides)."""
    settings = effective.settings.verification
    if settings.regression == OFF or not passes(outcomes, failed):
        return None
    commit = context.git.commit if context is not None and context.git is not None else None
    clean = context is not None and context.git is not None and context.git.dirty is False
    whole = capture_words(context.invocation_args, context.cwd, tree) if context is not None else []
    try:  # what the passing tests ran, when a spectrum was recorded
        spectrum = read_passing_spectrum(json.loads(
            (store.runs_dir(incident.incident_id) / PASSING_SPECTRUM_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        spectrum = {}
    return check_regressions(
        mode=settings.regression, incident=incident, tree=tree, runner=runner, trusted=trusted_options(incident, effective),
        whole_command=whole, selection=list(outcomes), budget_seconds=float(settings.regression_budget_seconds),
        commit=commit, captured_tree=captured_tree, clean_capture=clean, env=env,
        invocation_dir=start_dir(tree, incident.invocation_dir),
        selection_file=store.selection_file(incident.incident_id, REGRESSION_SELECTION), rules=rules,
        redactor=effective.redactor, skip=[store.root], this_run=this_run,
        spectrum=spectrum)


def still_success(outcomes: Mapping[str, str], failed: bool, regression: Optional[RegressionCheck]) -> bool:
    """The selection passes and the regression check (if any ran) found nothing broken: what
    only the judged run of the selection can still take away (capture/comparisons.py)."""
    return passes(outcomes, failed) and (regression is None or not (regression.broken or regression.timed_out))


def passes(outcomes: Mapping[str, str], failed: bool = False) -> bool:
    """Every test of a selection passed: a candidate ``success``, for the regression check to decide."""
    return bool(outcomes) and not failed and all(o == models.OUTCOME_PASSED for o in outcomes.values())


def covers(run_words: Sequence[str], capture: Sequence[str]) -> bool:
    """Whether a run of ``run_words`` runs every test ``capture`` selects (no words: pytest's default, the widest)."""
    if not run_words or any(w in ("", ".") for w in run_words):
        return True
    return bool(capture) and all(
        any(c == w or c.startswith((w.rstrip("/") + "/", w + "::", w + "[")) for w in run_words) for c in capture)


def narrower_than_capture(context: Optional[RunContext], tree: Path, run_args: Sequence[str],
                          run_dir: Path) -> Optional[list[str]]:
    """The selection words of the capture (``context``) when a run of ``run_args`` from ``run_dir``
    does not run them all (its passing selection is not yet checked for regressions), else None."""
    if context is None:
        return None
    capture = capture_words(context.invocation_args, context.cwd, tree)
    return None if covers(capture_words(run_args, str(run_dir), tree), capture) else capture
