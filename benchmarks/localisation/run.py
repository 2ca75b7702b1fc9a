"""Localisation benchmark: injected faults, where does each surface point?

For each mutant of the corpus (pypi.py: real projects from pinned sdists; ``--corpus
written``: corpus.py's two small projects) that fails at least one test: copy its project
to a temporary directory, inject the mutant, run the project's tests once plainly and once
per mode under ``pytest --selfheal`` (``evidence``: the capture as it is by default;
``spectrum``: with ``--selfheal-spectrum``; ``localised``: the default capture, then the
loop's first iteration — its localisation run and one verification — ``selfheal loop``),
and read the plan: **actions** (how many
actions the one fault became), **top-1** (the first action's first suspect is the broken
function), **top-3** (it is among the first action's first three suspects), **time** (the
run's wall time over the plain run's, and over FauxPy's). ``previous`` is the grouping
before suspects (``plan/groups.py`` alone, in the order of the first failure) on the same
incident: top-1 = the first group's function, top-3 = among the first three groups'.

    python benchmarks/localisation/run.py [--corpus pypi|written] [--limit N per project] [--jobs N]
        [--modes evidence,spectrum,localised] [--projects NAME,...] [--fauxpy PYTHON] [--json FILE]
    python benchmarks/localisation/run.py --table FILE   # the table of a --json FILE

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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
import pypi
from corpus import Mutant

from pytest_selfheal.plan.groups import group_by_root_cause
from pytest_selfheal.records.incident import FailureEntry

MODES = {"evidence": ["--selfheal"], "spectrum": ["--selfheal", "--selfheal-spectrum"],
         "localised": ["--selfheal", "--selfheal-set", "max_iterations=1"]}
# Modes whose plan is read after the loop's first iteration (its localisation run first).
AFTER_FIRST_ITERATION = {"localised"}
PLAIN_TIMEOUT = 120


class Case(NamedTuple):
    """One mutant and how to run its project."""

    mutant: Mutant
    source: Optional[Path]  # the unpacked sdist to copy (None: corpus.py's written files)
    tests: tuple[str, ...]
    options: tuple[str, ...]
    src: str
    exclude: str


class Row(NamedTuple):
    fault: int  # the fault's index
    actions: int
    top1: bool
    top3: bool
    seconds: float
    plain: float


def make_project(root: Path, case: Case) -> int:
    """Write ``case``'s project below ``root`` with its mutant injected; the mutated line."""
    mutant = case.mutant
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
        return mutant.line
    if source.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.old!r} is not exactly once in {mutant.path}")
    target.write_text(source.replace(mutant.old, mutant.new), encoding="utf-8")
    return source[: source.index(mutant.old)].count("\n") + 1


def pytest_run(root: Path, args: Sequence[str], python: str = sys.executable,
               timeout: float = PLAIN_TIMEOUT) -> tuple[float, int, str]:
    start = time.perf_counter()
    try:
        done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=root,
                              check=False, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, -1, ""
    return time.perf_counter() - start, done.returncode, done.stdout


def first_iteration(root: Path) -> float:
    """Run the loop's first iteration on the one incident below ``root`` (``selfheal loop``:
    its localisation run, then one verification); its wall time."""
    found = sorted((root / ".selfheal" / "error_inbox").glob("*/incident.json"))
    if not found:
        return 0.0
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest_selfheal", "loop", found[0].parent.name], cwd=root, check=False,
                   capture_output=True, text=True, timeout=PLAIN_TIMEOUT * 4, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def read_json(folder: Path, name: str) -> Optional[dict[str, Any]]:
    found = sorted(folder.glob(f"*/{name}"))
    return json.loads(found[0].read_text()) if found else None


def same(mutant: Mutant, path: Optional[str], name: Optional[str]) -> bool:
    """Whether a suspect names the mutant's function (a comprehension's or generator
    expression's code, ``f.<locals>.<genexpr>``, counts as ``f``)."""
    return path == mutant.path and (name or "").split(".<locals>")[0] == mutant.function


def score(mutant: Mutant, ranked: list[tuple[Optional[str], Optional[str]]]) -> tuple[bool, bool]:
    """(top-1, top-3) of a ranking of (path, name), best first."""
    hits = [same(mutant, p, n) for p, n in ranked[:3]]
    return bool(hits) and hits[0], any(hits)


def fauxpy_ranking(root: Path, case: Case, line: int, python: str) -> tuple[Optional[list[bool]], float]:
    """FauxPy's SBFL function ranking as hits (does the entity hold the mutant's line in
    its function?), best first, and its wall time. Its report folders (written beside the
    project) are removed."""
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
                hits.append(rel == case.mutant.path and int(first) <= line <= int(last)
                            and name == case.mutant.function.rsplit(".", 1)[-1])
    for leftover in reports:
        shutil.rmtree(leftover, ignore_errors=True)
    return hits, spent


def cases(name: str, only: Sequence[str] = ()) -> list[tuple[str, Optional[pypi.Project], list[Case]]]:
    """The corpus by project: (project name, its PyPI pin or None, its cases in order); ``only``:
    these PyPI projects alone."""
    if name == "written":
        out: dict[str, list[Case]] = {}
        for mutant in corpus.MUTANTS:
            src = "src" if any(k.startswith("src/") for k in corpus.PROJECTS[mutant.project]) else "."
            out.setdefault(mutant.project, []).append(Case(mutant, None, (), (), src, ""))
        return [(k, None, v) for k, v in out.items()]
    found: list[tuple[str, Optional[pypi.Project], list[Case]]] = []
    for project in pypi.PROJECTS:
        if only and project.name not in only:
            continue
        folder = pypi.unpacked(project)
        found.append((project.name, project, [Case(m, folder, project.tests, project.options, project.src,
                                                   project.exclude) for m in pypi.candidates(project, folder)]))
    return found


class Options(NamedTuple):
    limit: int
    modes: tuple[str, ...]
    fauxpy: Optional[str]
    log: Optional[str]  # a file each fault's result is appended to (one JSON object a line)


def run_project(job: tuple[str, Optional[pypi.Project], list[Case], Options]) -> tuple[list[dict[str, Any]], int]:
    """Measure the first ``limit`` faults of one project: each fault's result and the
    mutants tried. FauxPy's result of a fault is kept in the cache (it does not
    depend on this code): ``--fauxpy`` runs it where the cache has none."""
    name, project, todo, options = job
    details: list[dict[str, Any]] = []
    known = pypi.verdicts(project) if project is not None else {}
    fauxpy_known = pypi.cached(project, "fauxpy") if project is not None else {}
    tried = 0
    for case in todo:
        mutant = case.mutant
        if len(details) >= options.limit:
            break
        key = pypi.key_of(mutant)
        if known.get(key, 1) != 1:
            continue
        tried += 1
        with tempfile.TemporaryDirectory(prefix="selfheal-loc-") as tmp:
            root = Path(tmp) / "project"
            root.mkdir()
            line = make_project(root, case)
            plain, code, _ = pytest_run(root, [*case.tests, *case.options])
            if project is not None:
                known[key] = code
                pypi.remember(project, "verdicts", known)
            if code != 1:
                print(f"skip {name}:{mutant.function} ({mutant.new.strip()[:50]!r}): no test fails (exit {code})",
                      flush=True)
                continue
            detail: dict[str, Any] = {"project": name, "path": mutant.path, "line": line,
                                      "function": mutant.function, "new": mutant.new.strip(), "plain": plain}
            said = [f"{name}:{mutant.function}:{line} ({mutant.new.strip()[:60]!r})"]
            for mode in options.modes:
                shutil.rmtree(root / ".selfheal", ignore_errors=True)
                spent, _, _ = pytest_run(root, [*case.tests, *case.options, *MODES[mode]])
                if mode in AFTER_FIRST_ITERATION:
                    spent += first_iteration(root)
                plan = read_json(root / ".selfheal" / "error_plans", "plan.json") or {"actions": []}
                first = plan["actions"][0].get("suspects", []) if plan["actions"] else []
                top1, top3 = score(mutant, [(s.get("path"), s.get("name")) for s in first])
                detail[mode] = {"actions": len(plan["actions"]), "top1": top1, "top3": top3, "seconds": spent,
                                "suspects": [s.get("name") for s in first[:3]]}
                said.append(f"  {mode:9} {len(plan['actions'])} action(s), top-1 {top1}, top-3 {top3}, "
                            f"{spent / plain:.2f}x, suspects {[s.get('name') for s in first[:3]]}")
                if mode == options.modes[0]:
                    incident = read_json(root / ".selfheal" / "error_inbox", "incident.json") or {"failures": []}
                    failures = [FailureEntry.from_json(f, "failure") for f in incident["failures"]]
                    groups = group_by_root_cause(failures, lambda f: f.signature)
                    old = score(mutant, [(g.path, g.name) for g in groups])
                    detail["previous"] = {"actions": len(groups), "top1": old[0], "top3": old[1],
                                          "suspects": [g.name for g in groups[:3]]}
                    said.append(f"  previous  {len(groups)} action(s), top-1 {old[0]}, top-3 {old[1]}")
            faux = fauxpy_known.get(key)
            if faux is None and options.fauxpy:
                hits, spent = fauxpy_ranking(root, case, line, options.fauxpy)
                if hits is not None:
                    faux = {"top1": bool(hits) and hits[0], "top3": any(hits[:3]), "seconds": spent, "plain": plain}
                    if project is not None:
                        fauxpy_known[key] = faux
                        pypi.remember(project, "fauxpy", fauxpy_known)
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


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--corpus", choices=["pypi", "written"], default="pypi")
    parser.add_argument("--limit", type=int, default=pypi.PER_PROJECT, help="faults per project")
    parser.add_argument("--modes", default="evidence,spectrum,localised")
    parser.add_argument("--fauxpy", metavar="PYTHON", default=None)
    parser.add_argument("--jobs", type=int, default=1, help="projects measured at once")
    parser.add_argument("--projects", default="", help="only these PyPI projects (comma-separated names)")
    parser.add_argument("--json", metavar="FILE", default=None,
                        help="also append every fault's result to FILE as it is measured (one JSON object a line)")
    parser.add_argument("--table", metavar="FILE", default=None, help="print the table of a --json FILE and stop")
    args = parser.parse_args(argv)
    if args.table:
        found = [json.loads(line) for line in Path(args.table).read_text().splitlines() if line.strip()]
        print(f"{len(found)} faults ({', '.join(f'{p} {n}' for p, n in _count(found).items())})\n")
        print(table(rows_of(found)))
        return 0
    options = Options(args.limit, tuple(m for m in args.modes.split(",") if m), args.fauxpy, args.json)
    if args.json:
        Path(args.json).write_text("")
    jobs = [(name, project, todo, options) for name, project, todo in cases(args.corpus, [p for p in args.projects.split(",") if p])]
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            results = pool.map(run_project, jobs, chunksize=1)
    else:
        results = [run_project(job) for job in jobs]
    details = [d for found, _ in results for d in found]
    rows = rows_of(details, options.modes)
    kept = ", ".join(f"{job[0]} {len(r[0])}" for job, r in zip(jobs, results))
    print(f"\n{len(details)} faults kept of {sum(r[1] for r in results)} mutants tried ({kept})\n")
    print(table(rows))
    return 0


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
            found.append(Row(fault, int(got.get("actions", 0)), bool(got["top1"]), bool(got["top3"]),
                                  float(seconds), float(plain)))
    return rows


def table(rows: dict[str, list[Row]]) -> str:
    """The benchmark's Markdown table: one row per mode. The time columns compare each
    run with the same fault's plain run, and with FauxPy's (its time over the plain run,
    and the time each adds to the plain run)."""
    faux = {r.fault: r.seconds / r.plain for r in rows.get("fauxpy", [])}
    out = [("| mode | faults | top-1 | top-3 | actions median | actions p90 | time / plain run | time / FauxPy's "
            "| added time / FauxPy's |"), "|---|---|---|---|---|---|---|---|---|"]
    for mode, data in rows.items():
        if not data:
            out.append(f"| {mode} | not run | | | | | | | |")
            continue
        n = len(data)
        actions = sorted(d.actions for d in data)
        p90 = actions[min(n - 1, round(0.9 * (n - 1)))]
        counts = "— | —" if mode == "fauxpy" else f"{statistics.median(actions):g} | {p90}"
        ours = [d for d in data if d.fault in faux] if mode not in ("fauxpy", "previous") else []
        versus = "— | —"
        if ours:
            ratio = statistics.median((d.seconds / d.plain) / faux[d.fault] for d in ours)
            added = statistics.median(max(d.seconds / d.plain - 1, 0) / max(faux[d.fault] - 1, 1e-3) for d in ours)
            versus = f"{ratio:.2f} | {added:.2f}"
        out.append(f"| {mode} | {n} | {sum(d.top1 for d in data) / n:.0%} | {sum(d.top3 for d in data) / n:.0%} | "
                   f"{counts} | {statistics.median(d.seconds / d.plain for d in data):.2f} | {versus} |")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
