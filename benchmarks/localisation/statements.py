"""What a statement-level spectrum would rank: ``python benchmarks/localisation/statements.py ROUND.jsonl``.

For each real regression of a kept round (``run.py --corpus regressions --json ROUND.jsonl
--keep-evidence``; its localised failures name the failing tests), rebuild the project, run the failing tests' files under
pytest-cov with a coverage context per test, and rank every function the run entered three
ways: (a) function-level Ochiai (a function ran = a line of it ran), (b) the best statement-level
Ochiai over its lines, (c) (a) with exact ties broken by (b). A tie counts against the answer
(its worst rank), so the figures are those of the spectrum alone, without the evidence's votes.
Needs pytest-cov in the benchmark environment; measures, changes nothing.
"""

from __future__ import annotations

import ast
import json
import math
import multiprocessing
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional

import coverage
import run

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.plan.groups import selection_file

Key = tuple[str, str]  # (path, qualified name)


def ochiai(failed: int, total_failed: int, passed: int) -> float:
    return failed / math.sqrt(total_failed * (failed + passed)) if failed and total_failed else 0.0


def functions_of(path: Path) -> list[tuple[str, int, int]]:
    """(qualified name, first line, last line) of each function of a module."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return []
    out: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + child.name, child.lineno, child.end_lineno or child.lineno))
                visit(child, f"{prefix}{child.name}.<locals>.")
            else:
                visit(child, f"{prefix}{child.name}." if isinstance(child, ast.ClassDef) else prefix)

    visit(tree, "")
    return out


def innermost(functions: list[tuple[str, int, int]], line: int) -> Optional[str]:
    found = [f for f in functions if f[1] <= line <= f[2]]
    return max(found, key=lambda f: f[1])[0] if found else None


def outcomes_of(junit: Path) -> dict[str, str]:
    """``path::Class::name`` (as coverage's test context names it) → "f" or "p"."""
    out: dict[str, str] = {}
    if not junit.exists():
        return out
    for case in ET.parse(junit).getroot().iter("testcase"):
        if any(child.tag == "skipped" for child in case):
            continue
        classname, name = case.get("classname") or "", case.get("name") or ""
        out[f"{classname}::{name}"] = "f" if any(child.tag in ("failure", "error") for child in case) else "p"
    return out


def measure(job: tuple[dict[str, Any], run.Case]) -> dict[str, Any]:
    detail, case = job
    failing = {f["nodeid"] for f in detail["localised"].get("failures", []) if f.get("nodeid")}
    files = sorted({f for f in map(selection_file, failing) if f})
    with tempfile.TemporaryDirectory(prefix="selfheal-statements-") as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        run.make_project(root, case)
        junit = Path(tmp) / "junit.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_cov", "--cov=.",
                        "--cov-context=test", "--cov-report=", f"--junitxml={junit}", *files, *case.options],
                       cwd=root, capture_output=True, timeout=900, stdin=subprocess.DEVNULL, check=False)
        outcomes = outcomes_of(junit)
        data = coverage.CoverageData(basename=str(root / ".coverage"))
        data.read()
        lines: dict[tuple[str, int], dict[str, str]] = {}
        functions: dict[Key, dict[str, str]] = {}
        where: dict[tuple[str, int], Key] = {}
        for filename in data.measured_files():
            path = Path(filename).resolve()
            if not path.is_relative_to(root.resolve()):
                continue
            rel = path.relative_to(root.resolve()).as_posix()
            if is_test_file(rel):
                continue
            defs = functions_of(path)
            for line, contexts in (data.contexts_by_lineno(filename) or {}).items():
                name = innermost(defs, line)
                if name is None:
                    continue
                for context in filter(None, contexts):
                    test = context.split("|")[0]
                    module, _, rest = test.partition("::")
                    owner = module[:-3].replace("/", ".") + ("." + rest.rsplit("::", 1)[0].replace("::", ".")
                                                             if "::" in rest else "")
                    outcome = outcomes.get(f"{owner}::{rest.rsplit('::', 1)[-1]}")
                    if outcome is not None:
                        lines.setdefault((rel, line), {})[test] = outcome
                        functions.setdefault((rel, name), {})[test] = outcome
                        where[(rel, line)] = (rel, name)
    total_failed = len({t for ran in functions.values() for t, o in ran.items() if o == "f"})

    def score(ran: dict[str, str]) -> float:
        return ochiai(sum(o == "f" for o in ran.values()), total_failed, sum(o == "p" for o in ran.values()))

    by_function = {key: score(ran) for key, ran in functions.items()}
    by_statement: dict[Key, float] = {}
    for at, ran in lines.items():
        by_statement[where[at]] = max(by_statement.get(where[at], 0.0), score(ran))
    answers = {tuple(a) for a in detail["answers"]}

    def worst_rank(*scores: dict[Key, float]) -> Optional[int]:
        def of(key: Key) -> tuple[float, ...]:
            return tuple(round(s.get(key, 0.0), 6) for s in scores)
        found = [k for k in by_function if (k[0], k[1].split(".<locals>")[0]) in answers]
        return min(sum(1 for j in by_function if j != k and of(j) >= of(k)) + 1 for k in found) if found else None

    return {"fault": f"{detail['project']} {detail['function']}", "function": worst_rank(by_function),
            "statement": worst_rank(by_statement), "function, then statement": worst_rank(by_function, by_statement)}


def main(argv: list[str]) -> int:
    kept = [json.loads(line) for line in Path(argv[0]).read_text().splitlines() if line.strip()]
    cases = {(c.project, ", ".join(f for _, f in c.answers)): c for _, todo in run.regression_cases() for c in todo}
    jobs = [(d, cases[(d["project"], d["function"])]) for d in kept
            if d.get("localised", {}).get("failures") and (d["project"], d["function"]) in cases]
    with multiprocessing.Pool(2) as pool:
        results = pool.map(measure, jobs, chunksize=1)
    print("| fault | function | statement | function, then statement |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['fault']} | {r['function']} | {r['statement']} | {r['function, then statement']} |")
    for mode in ("function", "statement", "function, then statement"):
        ranks = [r[mode] for r in results]
        print(f"{mode}: top-1 {sum(r == 1 for r in ranks)}, top-3 {sum(r is not None and r <= 3 for r in ranks)}"
              f" of {len(ranks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
