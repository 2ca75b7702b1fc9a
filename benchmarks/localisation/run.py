"""Localisation benchmark: injected faults, where does each surface point? (issue 25)

For each mutant of the corpus (corpus.py) that fails at least one test: copy its project
to a temporary directory, inject the mutant, run the project's tests once plainly and once
per mode under ``pytest --selfheal`` (``evidence``: the capture as it is by default;
``spectrum``: with ``--selfheal-spectrum``), and read the plan: **actions** (how many
actions the one fault became), **top-1** (the first action's first suspect is the broken
function), **top-3** (it is among the first action's first three suspects), **time** (the
run's wall time over the plain run's). ``previous`` is the grouping before suspects
(``plan/groups.py`` alone, in the order of the first failure) on the same incident:
top-1 = the first group's function, top-3 = among the first three groups'.

    python benchmarks/localisation/run.py [--limit N] [--modes evidence,spectrum]

FauxPy (``pip install fauxpy``, the benchmark environment only) is run with
``--fauxpy PYTHON`` (an interpreter whose environment has it): its SBFL (Ochiai) top
function per fault. Without it its columns say "not run".
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import MUTANTS, PROJECTS, Mutant

from pytest_selfheal.plan.groups import group_by_root_cause

MODES = {"evidence": ["--selfheal"], "spectrum": ["--selfheal", "--selfheal-spectrum"]}


def make_project(root: Path, mutant: Mutant) -> None:
    for rel, text in PROJECTS[mutant.project].items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.lstrip("\n"))
    target = root / mutant.path
    source = target.read_text()
    if source.count(mutant.old) != 1:
        raise SystemExit(f"mutant {mutant.old!r} is not exactly once in {mutant.path}")
    target.write_text(source.replace(mutant.old, mutant.new))


def pytest_run(root: Path, args: list[str], python: str = sys.executable) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=root,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    return time.perf_counter() - start, done.returncode


def read_json(folder: Path, name: str) -> Optional[dict[str, Any]]:
    found = sorted(folder.glob(f"*/{name}"))
    return json.loads(found[0].read_text()) if found else None


def score(mutant: Mutant, names: list[list[str]]) -> tuple[bool, bool]:
    """(top-1, top-3) of ranked suspect names per action (first action first)."""
    first = names[0] if names else []
    return bool(first) and first[0] == mutant.function, mutant.function in first[:3]


def fauxpy_top(root: Path, python: str, src: str) -> tuple[Optional[list[str]], float]:
    """FauxPy's SBFL function ranking (its printed Ochiai table, best first), and its time.

    FauxPy names functions without their class; they are compared by bare name, which can
    only favour it. Its report folders (written beside the project) are removed."""
    start = time.perf_counter()
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", "--src", src,
                           "--family", "sbfl", "--granularity", "function"], cwd=root, capture_output=True,
                          text=True, timeout=1800, stdin=subprocess.DEVNULL)
    spent = time.perf_counter() - start
    for leftover in root.parent.glob(f"FauxPyReport_{root.name}_*"):
        shutil.rmtree(leftover, ignore_errors=True)
    lines = done.stdout.splitlines()
    try:
        start_at = next(i for i, line in enumerate(lines) if "Scores for Ochiai" in line) + 4
    except StopIteration:
        return None, spent
    names: list[str] = []
    for line in lines[start_at:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4:
            break
        names.append(cells[1])
    return names, spent


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=len(MUTANTS))
    parser.add_argument("--modes", default="evidence,spectrum")
    parser.add_argument("--fauxpy", metavar="PYTHON", default=None)
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    rows: dict[str, list[tuple[int, bool, bool, float]]] = {m: [] for m in ["previous", *modes, "fauxpy"]}
    kept = 0
    for mutant in MUTANTS[: args.limit]:
        with tempfile.TemporaryDirectory(prefix="selfheal-loc-") as tmp:
            root = Path(tmp)
            make_project(root, mutant)
            plain, code = pytest_run(root, [])
            if code != 1:
                print(f"skip {mutant.project}:{mutant.function} ({mutant.new!r}): no test fails (exit {code})")
                continue
            kept += 1
            for mode in modes:
                shutil.rmtree(root / ".selfheal", ignore_errors=True)
                spent, _ = pytest_run(root, MODES[mode])
                plan = read_json(root / ".selfheal" / "error_plans", "plan.json") or {"actions": []}
                names = [[s["name"] for s in a.get("suspects", [])] for a in plan["actions"]]
                top1, top3 = score(mutant, names)
                rows[mode].append((len(plan["actions"]), top1, top3, spent / plain))
                print(f"{mode:9} {mutant.project}:{mutant.function} ({mutant.new.strip()!r}): "
                      f"{len(plan['actions'])} action(s), suspects {names[0][:3] if names else []}")
                if mode == modes[0]:
                    incident = read_json(root / ".selfheal" / "error_inbox", "incident.json") or {"failures": []}
                    groups = group_by_root_cause(incident["failures"], lambda f: f.get("signature"))
                    old = [[g.name or ""] for g in groups]
                    first3 = [n[0] for n in old[:3]]
                    rows["previous"].append((len(groups), bool(old) and old[0][0] == mutant.function,
                                             mutant.function in first3, spent / plain))
            if args.fauxpy:
                src = "src" if (root / "src").is_dir() else "."
                ranked, spent = fauxpy_top(root, args.fauxpy, src)
                if ranked is not None:
                    rows["fauxpy"].append((0, bool(ranked) and ranked[0].split(".")[-1] == mutant.function.split(".")[-1],
                                           mutant.function.split(".")[-1] in [r.split(".")[-1] for r in ranked[:3]],
                                           spent / plain))
    print(f"\n{kept} faults kept of {min(args.limit, len(MUTANTS))} mutants\n")
    print("| mode | faults | top-1 | top-3 | actions median | actions p90 | time / plain run (median) |")
    print("|---|---|---|---|---|---|---|")
    for mode, data in rows.items():
        if not data:
            print(f"| {mode} | not run | | | | | |")
            continue
        n = len(data)
        actions = sorted(d[0] for d in data)
        p90 = actions[min(n - 1, int(round(0.9 * (n - 1))))]
        shown = "—" if mode == "fauxpy" else f"{statistics.median(actions):g} | {p90}"
        print(f"| {mode} | {n} | {sum(d[1] for d in data) / n:.0%} | {sum(d[2] for d in data) / n:.0%} | "
              + (shown if mode != "fauxpy" else "— | —") + f" | {statistics.median(d[3] for d in data):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
