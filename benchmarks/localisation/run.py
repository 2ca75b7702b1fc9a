"""Localisation benchmark: a fault in a real project, where does each surface point?

Two kinds of fault. **Mutants** (pypi.py: real projects from pinned sdists; ``--corpus
written``: corpus.py's two small projects): one injected token, kept when it fails at least
one test. **Real regressions** (regressions.py): release N's code with release N+1's test
that fails on it, the function the fix changed as the answer. For each fault: build its
project in a temporary directory, run its tests once plainly and once per mode under
``pytest --selfheal`` (``evidence``: the capture as it is by default; ``spectrum``: with
``--selfheal-spectrum``; ``localised``: the default capture, then its localisation run
for a reader — ``selfheal plan ID --localise`` — and the loop's first iteration, one
verification — ``selfheal loop``), and read the
plan: **actions** (how many actions the one fault became), **top-1** (the first action's
first suspect is the broken function), **top-3** (it is among the first action's first
three suspects), **time** (the run's wall time over the plain run's, the first iteration's
over a plain run of the failing tests alone, and over FauxPy's; the first iteration runs
twice from the same state, with and without its localisation run, to tell what localising
adds). ``previous`` is the
grouping before suspects (``plan/groups.py`` alone, in the order of the first failure) on
the same incident: top-1 = the first group's function, top-3 = among the first three groups'.
Each kind has its own table, and with both (``--corpus all``) a table of all.

    python benchmarks/localisation/run.py [--corpus pypi|regressions|all|written] [--limit N per project]
        [--jobs N] [--modes previous,evidence,spectrum,localised,fauxpy] [--projects NAME,...]
        [--fauxpy PYTHON] [--json FILE [--keep-evidence]]
    python benchmarks/localisation/run.py --table FILE   # the tables of a --json FILE
    python benchmarks/localisation/run.py --faults FILE  # per fault, ranked again with this code

``--keep-evidence`` keeps each mode's incident failures and, for ``localised``, the
spectrum of its failing tests' files (what the localisation run records, recorded again):
``--faults`` then ranks each fault again with the code as it is (the first action's leaders,
their scores and how many failing / passing tests ran each), so a change to the ranking is
measured on a kept round without running it again.

FauxPy (``pip install fauxpy``, the benchmark environment only) is run with
``--fauxpy PYTHON`` (an interpreter whose environment has it and pytest): its SBFL
(Ochiai, function granularity) ranking per fault, a function matched by file, name and
line range. Without it its row says "not run".
"""

from __future__ import annotations

import argparse
import csv
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Optional

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
import pypi
import regressions
from corpus import Mutant

from pytest_selfheal.capture.spectrum import SpectrumHook
from pytest_selfheal.loop.localise import with_spectra
from pytest_selfheal.plan.build import rank_failures
from pytest_selfheal.plan.groups import group_by_root_cause, selection_file
from pytest_selfheal.plan.suspects import FunctionKey, Suspect, spectrum_evidence
from pytest_selfheal.records.incident import Failure

MODES = {"evidence": ["--selfheal"], "spectrum": ["--selfheal", "--selfheal-spectrum"],
         "localised": ["--selfheal", "--selfheal-set", "max_iterations=1"]}
# Modes whose plan is read after the loop's first iteration (its localisation run first).
AFTER_FIRST_ITERATION = {"localised"}
PLAIN_TIMEOUT = 120
# run.py's own first argument for recording a spectrum in a child (``record_spectrum``).
SPECTRUM_OF = "--spectrum-of"


class Case(NamedTuple):
    """One fault (a mutant, or a real regression) and how to run its project."""

    project: str
    kind: str  # "mutants" or "regressions"
    answers: tuple[tuple[str, str], ...]  # (path, qualified name): the function(s) to name
    key: str  # the fault's key in the cache
    stem: Optional[str]  # the name of its sdist's cache files (None: nothing cached)
    label: str  # how the log names it
    tests: tuple[str, ...]
    options: tuple[str, ...]
    src: str
    exclude: str
    mutant: Optional[Mutant] = None
    source: Optional[Path] = None  # the unpacked sdist a mutant's project copies (None: corpus.py's files)
    regression: Optional[regressions.Case] = None


class Row(NamedTuple):
    fault: int  # the fault's index
    actions: int
    top1: bool
    top3: bool
    seconds: float
    plain: float
    iteration: float  # the first iteration's time (localised), else 0
    failing: float  # a plain run of the failing tests alone, else 0
    localising: float = 0.0  # what the localisation run added to the first iteration (localised), else 0


def make_project(root: Path, case: Case) -> list[tuple[int, int]]:
    """Write ``case``'s project below ``root`` (with its mutant injected); the lines of each
    answer (a mutant's: its mutated line)."""
    if case.regression is not None:
        case.regression.build(root)
        return [regressions.span(root, path, function) for path, function in case.answers]
    mutant = case.mutant
    assert mutant is not None
    if case.source is not None:
        shutil.copytree(case.source, root, dirs_exist_ok=True)
    else:
        for rel, text in corpus.PROJECTS[mutant.project].items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text.lstrip("\n"))
    target = root / mutant.path
    source = target.read_text(encoding="utf-8")
    if mutant.line:
        lines = source.splitlines(keepends=True)
        if lines[mutant.line - 1] != mutant.old:
            raise SystemExit(f"{mutant.path}:{mutant.line} is not {mutant.old!r}")
        lines[mutant.line - 1] = mutant.new
        target.write_text("".join(lines), encoding="utf-8")
        return [(mutant.line, mutant.line)]
    if source.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.old!r} is not exactly once in {mutant.path}")
    target.write_text(source.replace(mutant.old, mutant.new), encoding="utf-8")
    line = source[: source.index(mutant.old)].count("\n") + 1
    return [(line, line)]


def pytest_run(root: Path, args: Sequence[str], python: str = sys.executable,
               timeout: float = PLAIN_TIMEOUT) -> tuple[float, int, str]:
    start = time.perf_counter()
    try:
        done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=root,
                              check=False, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, -1, ""
    return time.perf_counter() - start, done.returncode, done.stdout


def first_iteration(root: Path, *, localise: bool, loop: bool = True) -> float:
    """Run the loop's first iteration on the one incident below ``root`` (``selfheal loop``,
    one verification; not without ``loop``), after ``selfheal plan ID --localise`` (its
    localisation run, what a reader of the plan runs) when ``localise``; their wall time."""
    found = sorted((root / ".selfheal" / "error_inbox").glob("*/incident.json"))
    if not found:
        return 0.0
    incident_id = found[0].parent.name
    start = time.perf_counter()
    for command in (["plan", incident_id, "--localise"], ["loop", incident_id])[0 if localise else 1:1 + loop]:
        subprocess.run([sys.executable, "-m", "pytest_selfheal", *command], cwd=root, check=False,
                       capture_output=True, text=True, timeout=PLAIN_TIMEOUT * 4, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def localisation_cost(root: Path) -> tuple[float, float]:
    """The first iteration's wall time with its localisation run and without it (the same
    incident, its reports root restored in between): their difference is what localising costs."""
    state, saved = root / ".selfheal", root.parent / "selfheal-before-iteration"
    shutil.copytree(state, saved)
    bare = first_iteration(root, localise=False)
    shutil.rmtree(state)
    saved.rename(state)
    return first_iteration(root, localise=True), bare


def read_json(folder: Path, name: str) -> Optional[dict[str, Any]]:
    found = sorted(folder.glob(f"*/{name}"))
    return json.loads(found[0].read_text()) if found else None


def same(case: Case, path: Optional[str], name: Optional[str]) -> bool:
    """Whether a suspect names one of the fault's functions (code nested in one, such as a
    comprehension's or a generator expression's, ``f.<locals>.<genexpr>``, counts as ``f``)."""
    return (path, (name or "").split(".<locals>")[0]) in case.answers


def score(case: Case, ranked: list[tuple[Optional[str], Optional[str]]]) -> tuple[bool, bool]:
    """(top-1, top-3) of a ranking of (path, name), best first."""
    hits = [same(case, p, n) for p, n in ranked[:3]]
    return bool(hits) and hits[0], any(hits)


def fauxpy_hit(case: Case, spans: list[tuple[int, int]], path: str, name: str, first: int, last: int) -> bool:
    """Whether a FauxPy entity (a function by file, name and lines) is the fault's: a
    mutant's function holds its line; a regression's entity is a fixed function or nested in one."""
    for (want, function), (start, end) in zip(case.answers, spans):
        if path != want:
            continue
        if case.mutant is not None and first <= start <= last and name == function.rsplit(".", 1)[-1]:
            return True
        if case.mutant is None and start <= first and last <= end:
            return True
    return False


def fauxpy_ranking(root: Path, case: Case, spans: list[tuple[int, int]], python: str
                   ) -> tuple[Optional[list[bool]], float]:
    """FauxPy's SBFL function ranking as hits (``fauxpy_hit``), best first, and its wall
    time. Its report folders (written beside the project) are removed."""
    args = [*case.tests, *case.options, "--src", case.src, "--family", "sbfl", "--granularity", "function"]
    if case.exclude:
        args += ["--exclude", case.exclude]
    spent, _, _ = pytest_run(root, args, python, timeout=1800)
    reports = sorted(root.parent.glob(f"FauxPyReport_{root.name}_*"))
    table = [r / "Scores_Ochiai.csv" for r in reports if (r / "Scores_Ochiai.csv").is_file()]
    hits: Optional[list[bool]] = None
    if table:
        hits = []
        with table[0].open(newline="") as handle:
            for entity, _score in list(csv.reader(handle))[1:]:
                path, name, first, last = entity.rsplit("::", 3)
                rel = Path(path).resolve().relative_to(root.resolve()).as_posix() if Path(path).is_absolute() \
                    else path
                hits.append(fauxpy_hit(case, spans, rel, name, int(first), int(last)))
    for leftover in reports:
        shutil.rmtree(leftover, ignore_errors=True)
    return hits, spent


def mutant_cases(name: str, only: Sequence[str] = ()) -> list[tuple[str, list[Case]]]:
    """The mutants by project: (project name, its cases in order); ``only``: these PyPI
    projects alone."""
    if name == "written":
        out: dict[str, list[Case]] = {}
        for mutant in corpus.MUTANTS:
            src = "src" if any(k.startswith("src/") for k in corpus.PROJECTS[mutant.project]) else "."
            out.setdefault(mutant.project, []).append(_mutant_case(mutant, None, (), (), src, "", None))
        return list(out.items())
    found: list[tuple[str, list[Case]]] = []
    for project in pypi.PROJECTS:
        if only and project.name not in only:
            continue
        folder = pypi.unpacked(project)
        found.append((project.name, [_mutant_case(m, folder, project.tests, project.options, project.src,
                                                  project.exclude, pypi.stem_of(project))
                                     for m in pypi.candidates(project, folder)]))
    return found


def _mutant_case(mutant: Mutant, source: Optional[Path], tests: tuple[str, ...], options: tuple[str, ...],
                 src: str, exclude: str, stem: Optional[str]) -> Case:
    return Case(mutant.project, "mutants", ((mutant.path, mutant.function),), pypi.key_of(mutant), stem,
                f"{mutant.function}:{mutant.line} ({mutant.new.strip()[:60]!r})", tests, options, src, exclude,
                mutant=mutant, source=source)


def regression_cases(only: Sequence[str] = ()) -> list[tuple[str, list[Case]]]:
    """The real regressions by release (each its own job), in declaration order."""
    out: dict[str, list[Case]] = {}
    for found in regressions.cases():
        release = found.release
        if only and release.project not in only:
            continue
        deselect = [arg for node in found.deselected() for arg in ("--deselect", node)]
        label = f"{release.old}->{release.new} {', '.join(f for _, f in found.bug.functions)} ({found.bug.note})"
        out.setdefault(f"{release.project} {release.old}->{release.new}", []).append(Case(
            release.project, "regressions", found.bug.functions, found.key, found.stem, label, release.tests,
            (*release.options, *deselect), release.src, release.exclude, regression=found))
    return [(f"{name} (regressions)", todo) for name, todo in out.items()]


class Options(NamedTuple):
    limit: int
    modes: tuple[str, ...]
    fauxpy: Optional[str]
    log: Optional[str]  # a file each fault's result is appended to (one JSON object a line)
    keep: bool = False  # each mode's incident failures kept in its result (--keep-evidence)
    cost: bool = True  # the first iteration timed with and without its localisation run (else --no-cost)


def run_project(job: tuple[str, list[Case], Options]) -> tuple[list[dict[str, Any]], int]:
    """Measure the first ``limit`` faults of one project: each fault's result and the
    faults tried. FauxPy's result of a fault is kept in the cache (it does not
    depend on this code): ``--fauxpy`` runs it where the cache has none."""
    name, todo, options = job
    details: list[dict[str, Any]] = []
    stem = todo[0].stem if todo else None
    known = pypi.verdicts(stem) if stem else {}
    fauxpy_known = pypi.cached(stem, "fauxpy") if stem else {}
    tried = 0
    for case in todo:
        if case.kind == "mutants" and len(details) >= options.limit:
            break  # every regression is measured
        if case.stem != stem:  # a project's regressions of several releases
            stem = case.stem
            known = pypi.verdicts(stem) if stem else {}
            fauxpy_known = pypi.cached(stem, "fauxpy") if stem else {}
        if known.get(case.key, 1) != 1:
            continue
        tried += 1
        with tempfile.TemporaryDirectory(prefix="selfheal-loc-") as tmp:
            root = Path(tmp) / "project"
            root.mkdir()
            spans = make_project(root, case)
            plain, code, _ = pytest_run(root, [*case.tests, *case.options])
            if stem:
                known[case.key] = code
                pypi.remember(stem, "verdicts", known)
            if code != 1:
                print(f"skip {name}:{case.label}: no test fails (exit {code})", flush=True)
                continue
            detail: dict[str, Any] = {"project": case.project, "kind": case.kind, "path": case.answers[0][0],
                                      "line": spans[0][0], "function": ", ".join(f for _, f in case.answers),
                                      "new": case.mutant.new.strip() if case.mutant else "", "plain": plain,
                                      "answers": [list(a) for a in case.answers]}
            said = [f"{name}:{case.label}"]
            for mode in options.modes:
                shutil.rmtree(root / ".selfheal", ignore_errors=True)
                spent, _, _ = pytest_run(root, [*case.tests, *case.options, *MODES[mode]])
                iteration, bare = (0.0, 0.0) if mode not in AFTER_FIRST_ITERATION else \
                    localisation_cost(root) if options.cost else (first_iteration(root, localise=True, loop=False), 0.0)
                spent += iteration
                plan = read_json(root / ".selfheal" / "error_plans", "plan.json") or {"actions": []}
                first = plan["actions"][0].get("suspects", []) if plan["actions"] else []
                top1, top3 = score(case, [(s.get("path"), s.get("name")) for s in first])
                detail[mode] = {"actions": len(plan["actions"]), "top1": top1, "top3": top3, "seconds": spent,
                                "iteration": iteration, "suspects": [s.get("name") for s in first[:3]]}
                if bare:
                    detail[mode]["unlocalised_iteration"] = bare
                incidents = sorted((root / ".selfheal").glob("**/incident.json"))
                if options.keep and incidents:
                    # The evidence the plan was built from, to study a ranking without re-running.
                    incident = json.loads(incidents[0].read_text())
                    detail[mode]["failures"] = incident["failures"]
                    if mode in AFTER_FIRST_ITERATION:  # with the options the localisation run has
                        detail[mode]["spectrum"] = spectrum_of(root, incident["failures"], [
                            *incident.get("pytest_options", ()), *incident.get("pytest_filters", ())])
                said.append(f"  {mode:9} {len(plan['actions'])} action(s), top-1 {top1}, top-3 {top3}, "
                            f"{spent / plain:.2f}x, suspects {[s.get('name') for s in first[:3]]}")
                if mode == options.modes[0]:
                    incident = json.loads(incidents[0].read_text()) if incidents else {"failures": []}
                    failures = [Failure.from_json(f, "failure") for f in incident["failures"]]
                    groups = group_by_root_cause(failures, lambda f: f.signature)
                    old = score(case, [(g.path, g.name) for g in groups])
                    detail["previous"] = {"actions": len(groups), "top1": old[0], "top3": old[1],
                                          "suspects": [g.name for g in groups[:3]]}
                    said.append(f"  previous  {len(groups)} action(s), top-1 {old[0]}, top-3 {old[1]}")
                    # What the first iteration is compared with: the failing tests run plainly.
                    nodeids = sorted({f.nodeid for f in failures if f.nodeid})
                    if nodeids:
                        detail["failing"] = pytest_run(root, [*nodeids, *case.options])[0]
            faux = fauxpy_known.get(case.key)
            if faux is None and options.fauxpy:
                hits, spent = fauxpy_ranking(root, case, spans, options.fauxpy)
                if hits is not None:
                    faux = {"top1": bool(hits) and hits[0], "top3": any(hits[:3]), "seconds": spent, "plain": plain}
                    if stem:
                        fauxpy_known[case.key] = faux
                        pypi.remember(stem, "fauxpy", fauxpy_known)
            if faux is not None:
                detail["fauxpy"] = faux
                said.append(f"  fauxpy    top-1 {faux['top1']}, top-3 {faux['top3']}, "
                            f"{faux['seconds'] / faux['plain']:.2f}x")
            print("\n".join(said), flush=True)
            details.append(detail)
            if options.log:
                with open(options.log, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(detail) + "\n")
    return details, tried


def spectrum_of(root: Path, failures: list[dict[str, Any]], options: Sequence[str]) -> dict[str, Any]:
    """The spectrum of the failing tests' files below ``root`` (``record_spectrum``, in a child)
    run with ``options``: those the capture recorded and its selection filters, as the localisation run."""
    files = sorted({f for f in (selection_file(str(x.get("nodeid") or "")) for x in failures) if f})
    out = root.parent / "spectrum.json"
    subprocess.run([sys.executable, __file__, SPECTRUM_OF, str(out), *files, *options], cwd=root, check=False,
                   capture_output=True, timeout=PLAIN_TIMEOUT * 4, stdin=subprocess.DEVNULL)
    return json.loads(out.read_text()) if out.is_file() else {}


def record_spectrum(out: Path, args: Sequence[str]) -> int:
    """Run pytest on ``args`` here recording what each test ran, as the localisation run does,
    and write to ``out`` the functions the failing tests ran and, per test, those of them it ran."""
    hook = SpectrumHook(os.getcwd())
    sys.path.insert(0, os.getcwd())  # as ``python -m pytest`` has it: a project's top-level modules import
    # This process imported the plugin's package already: pytest cannot rewrite it, and says so.
    pytest.main(["-q", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestAssertRewriteWarning", *args],
                plugins=[hook])
    functions = sorted({k for n in hook.failed for k in hook.covered.get(n, ())})
    index = {k: i for i, k in enumerate(functions)}

    def ran(nodeids: set[str]) -> dict[str, list[int]]:
        return {n: sorted(index[k] for k in hook.covered.get(n, ()) if k in index) for n in sorted(nodeids)}

    out.write_text(json.dumps({"functions": functions, "failed": ran(hook.failed), "passed": ran(hook.passed)}))
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [SPECTRUM_OF]:
        return record_spectrum(Path(argv[1]), argv[2:])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--corpus", choices=["pypi", "written", "regressions", "all"], default="pypi",
                        help="pypi: the real projects' mutants; regressions: the real regressions; all: both")
    parser.add_argument("--limit", type=int, default=pypi.PER_PROJECT, help="mutants per project")
    parser.add_argument("--modes", default="evidence,spectrum,localised",
                        help=f"of {', '.join(MODES)}; 'previous' is always measured, 'fauxpy' needs --fauxpy")
    parser.add_argument("--fauxpy", metavar="PYTHON", default=None)
    parser.add_argument("--jobs", type=int, default=1, help="projects measured at once")
    parser.add_argument("--projects", default="", help="only these PyPI projects (comma-separated names)")
    parser.add_argument("--json", metavar="FILE", default=None,
                        help="also append every fault's result to FILE as it is measured (one JSON object a line)")
    parser.add_argument("--keep-evidence", action="store_true",
                        help="with --json: each mode's incident failures (root-cause evidence, spectrum) kept too")
    parser.add_argument("--no-cost", action="store_true",
                        help="rank only: no first iteration, so no time of what localising adds")
    parser.add_argument("--table", metavar="FILE", default=None, help="print the tables of a --json FILE and stop")
    parser.add_argument("--faults", metavar="FILE", default=None,
                        help="print per fault of a --json FILE its localised ranking with this code, and stop")
    args = parser.parse_args(argv)
    if args.table or args.faults:
        found = [json.loads(line) for line in Path(args.table or args.faults).read_text().splitlines() if line.strip()]
        print(tables(found, [m for m in MODES if any(m in d for d in found)]) if args.table else faults_table(found))
        return 0
    asked = [m for m in args.modes.split(",") if m]
    unknown = [m for m in asked if m not in (*MODES, "previous", "fauxpy")]
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(unknown)}")
    if "fauxpy" in asked and not args.fauxpy:
        parser.error("the 'fauxpy' mode needs --fauxpy PYTHON (an interpreter with fauxpy and pytest)")
    options = Options(args.limit, tuple(m for m in asked if m in MODES), args.fauxpy, args.json, args.keep_evidence,
                      not args.no_cost)
    if args.json:
        Path(args.json).write_text("")
    only = [p for p in args.projects.split(",") if p]
    # The regressions first: a round cut short still has all of them.
    todo = regression_cases(only) if args.corpus in ("regressions", "all") else []
    if args.corpus != "regressions":
        todo += mutant_cases(args.corpus, only)
    # The regressions first, then within each kind the longest job first (none starts last).
    jobs = sorted([(name, cases, options) for name, cases in todo],
                  key=lambda job: (any(c.kind == "mutants" for c in job[1]), -len(job[1])))
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            results = pool.map(run_project, jobs, chunksize=1)
    else:
        results = [run_project(job) for job in jobs]
    details = [d for found, _ in results for d in found]
    kept = ", ".join(f"{job[0]} {len(r[0])}" for job, r in zip(jobs, results))
    print(f"\n{len(details)} faults kept of {sum(r[1] for r in results)} tried ({kept})\n")
    print(tables(details, options.modes))
    return 0


def tables(details: list[dict[str, Any]], modes: Sequence[str]) -> str:
    """A table per kind of fault (the mutants, the real regressions) and, with both, one of all."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for detail in details:
        kinds.setdefault(detail.get("kind", "mutants"), []).append(detail)
    if len(kinds) > 1:
        kinds["all"] = details
    out = []
    for kind, found in kinds.items():
        counts = ", ".join(f"{p} {n}" for p, n in _count(found).items())
        out.append(f"{kind}: {len(found)} faults ({counts})\n\n{table(rows_of(found, modes))}\n")
    return "\n".join(out)


def _count(details: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for detail in details:
        out[detail["project"]] = out.get(detail["project"], 0) + 1
    return out


def rows_of(details: list[dict[str, Any]], modes: Sequence[str] = ("evidence", "spectrum", "localised")
            ) -> dict[str, list[Row]]:
    """The table's rows from every fault's result."""
    rows: dict[str, list[Row]] = {m: [] for m in ["previous", *modes, "fauxpy"]}
    for fault, detail in enumerate(details):
        for mode, found in rows.items():
            got = detail.get(mode)
            if not isinstance(got, dict):
                continue
            seconds = got.get("seconds", detail.get(modes[0], {}).get("seconds", 0.0) if modes else 0.0)
            plain = got.get("plain", detail["plain"])
            bare = got.get("unlocalised_iteration")
            localising = max(float(got["iteration"]) - float(bare), 0.0) if bare else 0.0
            found.append(Row(fault, int(got.get("actions", 0)), bool(got["top1"]), bool(got["top3"]),
                             float(seconds), float(plain), float(got.get("iteration", 0.0)),
                             float(detail.get("failing", 0.0)), localising))
    return rows


def table(rows: dict[str, list[Row]]) -> str:
    """The benchmark's Markdown table: one row per mode. ``on FauxPy's faults``: top-1 and
    top-3 on the faults FauxPy ranked. The time columns compare each run with the same
    fault's plain run, the first iteration with a plain run of the failing tests alone, and
    each run with FauxPy's (its time over the plain run, and the time each adds to the plain run
    to write its ranking: for ``localised`` the capture's and the localisation run's, measured as
    the first iteration less the same iteration without localisation)."""
    faux = {r.fault: r for r in rows.get("fauxpy", [])}
    out = [("| mode | faults | top-1 | top-3 | on FauxPy's faults: top-1 / top-3 | actions median | actions p90 "
            "| time / plain run | first iteration / failing tests' run | time / FauxPy's | added time / FauxPy's |"),
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for mode, data in rows.items():
        if not data:
            out.append(f"| {mode} | not run | | | | | | | | | |")
            continue
        n = len(data)
        actions = sorted(d.actions for d in data)
        p90 = actions[min(n - 1, round(0.9 * (n - 1)))]
        counts = "— | —" if mode == "fauxpy" else f"{statistics.median(actions):g} | {p90}"
        shared = [d for d in data if d.fault in faux]
        same = f"{_share(d.top1 for d in shared)} / {_share(d.top3 for d in shared)} ({len(shared)})" \
            if shared else "—"
        ours = shared if mode not in ("fauxpy", "previous") else []
        versus = "— | —"
        if ours:
            ratio = statistics.median((d.seconds / d.plain) / (faux[d.fault].seconds / faux[d.fault].plain)
                                      for d in ours)
            added = statistics.median(max(_ranking_seconds(d) / d.plain - 1, 0)
                                      / max(faux[d.fault].seconds / faux[d.fault].plain - 1, 1e-3) for d in ours)
            versus = f"{ratio:.2f} | {added:.2f}"
        timed = [d for d in data if d.iteration and d.failing]
        iteration = f"{statistics.median(d.iteration / d.failing for d in timed):.2f}" if timed else "—"
        out.append(f"| {mode} | {n} | {_share(d.top1 for d in data)} | {_share(d.top3 for d in data)} | {same} | "
                   f"{counts} | {statistics.median(d.seconds / d.plain for d in data):.2f} | {iteration} | "
                   f"{versus} |")
    return "\n".join(out)


# A function of a kept spectrum: how many failing and passing tests ran it, its spectrum score.
Ran = tuple[int, int, float]


def ranked_again(got: dict[str, Any]) -> tuple[list[Suspect], dict[FunctionKey, Ran]]:
    """A kept mode's first action's suspects ranked with this code (over its kept spectrum,
    when it has one), and each function of that spectrum (:data:`Ran`)."""
    failures: Sequence[Failure] = [Failure.from_json(f, "failure") for f in got.get("failures", [])]
    kept = got.get("spectrum") or {}
    functions: list[FunctionKey] = [(str(p), str(n), int(line)) for p, n, line in kept.get("functions", [])]
    covered = {n: frozenset(functions[i] for i in ran) for kind in ("failed", "passed")
               for n, ran in kept.get(kind, {}).items()}
    failed, passed = set(kept.get("failed", {})), set(kept.get("passed", {}))
    spectrum = spectrum_evidence(covered, failed, passed)
    if failed:
        failures = with_spectra(failures, spectrum)
    counts = {k: (sum(k in covered[n] for n in failed), sum(k in covered[n] for n in passed),
                  spectrum.scores.get(k, 0.0)) for k in functions}
    ranked = rank_failures(failures)
    return (list(ranked[0].suspects) if ranked else []), counts


def faults_table(details: list[dict[str, Any]], mode: str = "localised") -> str:
    """Per fault of a ``--keep-evidence`` round: where its answer ranks in the first action
    when ranked with this code, and the leaders (score, failing / passing tests that ran each)."""
    out = ["| fault | rank | answer: score, failing / passing | 1st | 2nd | 3rd |", "|---|---|---|---|---|---|"]
    hits = [0, 0]
    for detail in details:
        got = detail.get(mode)
        if not isinstance(got, dict) or not got.get("failures"):
            continue
        suspects, counts = ranked_again(got)
        answers = {tuple(a) for a in detail["answers"]}
        found = [i for i, s in enumerate(suspects) if (s.path, s.name.split(".<locals>")[0]) in answers]
        rank = found[0] + 1 if found else None
        hits[0] += rank == 1
        hits[1] += rank is not None and rank <= 3
        path, name = detail["answers"][0]
        scored = _ran(counts, path, name, True)
        score = f"{suspects[found[0]].score:.3f}" if found else f"unlisted (spectrum {max((c[2] for c in scored), default=0):.3f})"
        leaders = [f"{s.name} {s.score:.3f} ({_counted(_ran(counts, s.path, s.name))})" for s in suspects[:3]]
        out.append(f"| {detail['project']} {name}{':' + str(detail['line']) if detail.get('new') else ''} | "
                   f"{rank or '—'} | {score}, {_counted(scored)} | " + " | ".join(leaders + [""] * (3 - len(leaders)))
                   + " |")
    n = len(out) - 2
    out.append(f"\n{n} faults: top-1 {hits[0]} ({_share([True] * hits[0] + [False] * (n - hits[0]))}), "
               f"top-3 {hits[1]} ({_share([True] * hits[1] + [False] * (n - hits[1]))})")
    return "\n".join(out)


def _ran(counts: dict[FunctionKey, Ran], path: str, name: str, nested: bool = False) -> list[Ran]:
    """What a kept spectrum says of the function (``nested``: and of code nested in it, as
    ``same`` counts an answer)."""
    return [c for k, c in counts.items()
            if k[0] == path and (k[1] == name or nested and k[1].startswith(name + ".<locals>."))]


def _counted(seen: list[Ran]) -> str:
    """``failing / passing``: how many tests ran the function (the most of its ``_ran``)."""
    return f"{max(c[0] for c in seen)} / {max(c[1] for c in seen)}" if seen else "? / ?"


def _ranking_seconds(row: Row) -> float:
    """The time a mode takes to write its ranked plan: the run, and for ``localised`` the
    localisation run (not the first iteration's verification, which a loop runs either way)."""
    if row.localising:
        return row.seconds - row.iteration + row.localising
    return row.seconds


def _share(hits: Iterable[bool]) -> str:
    found = list(hits)
    return f"{sum(found) / len(found):.0%}" if found else "—"


if __name__ == "__main__":
    sys.exit(main())
