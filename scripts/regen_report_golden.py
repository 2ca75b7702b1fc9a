#!/usr/bin/env python3
"""Regenerate the golden files of the loop report: tests/golden_reports/<case>.expected.{md,json}.

Each ``<case>.input.json`` is either

- ``{"incidents": [IncidentRun as dict...], "effective_config": {...}, "origins": {...}}``
  (optional ``"enabled"``, ``"extra_sections"``), or
- ``{"merge": [{"name": ..., "incidents": [...], "effective_config": ..., "origins": ...}, ...]}``
  (each shard built as above, then ``merge_reports``),

plus an optional ``"render": {"headline": true}``. Run after an intended change of the
report, review the diff, commit::

    python scripts/regen_report_golden.py          # rewrite the expected files
    python scripts/regen_report_golden.py --check  # exit 1 when any expected file is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "golden_reports"
sys.path.insert(0, str(ROOT))

from pytest_selfheal.records.attempt import Attempt  # noqa: E402
from pytest_selfheal.records.incident import Incident  # noqa: E402
from pytest_selfheal.records.plan import Plan  # noqa: E402
from pytest_selfheal.records.report import Report  # noqa: E402
from pytest_selfheal.records.run_result import RunResult  # noqa: E402
from pytest_selfheal.report.data import IncidentRun, build_report  # noqa: E402
from pytest_selfheal.report.merge import merge_reports  # noqa: E402
from pytest_selfheal.report.render import render_markdown  # noqa: E402


def incident_run(data: Mapping[str, Any], source: str = "incident run") -> IncidentRun:
    """The input records of one incident's documents, parsed as the store parses them."""
    plan, result = data.get("plan"), data.get("run_result")
    return IncidentRun(Incident.from_json(data["incident"], f"{source}: incident"),
                       None if plan is None else Plan.from_json(plan, f"{source}: plan"),
                       tuple(Attempt.from_json(a, f"{source}: attempt") for a in data.get("attempts", [])),
                       None if result is None else RunResult.from_json(result, f"{source}: run_result"),
                       data.get("bucket", "inbox"))


def _build(doc: Mapping[str, Any], source: str) -> Report:
    runs = [incident_run(d, f"{source}: incidents[{i}]") for i, d in enumerate(doc.get("incidents", []))]
    return build_report(
        incidents=runs,
        effective_config=doc.get("effective_config"),
        origins=doc.get("origins"),
        enabled=bool(doc.get("enabled", True)),
    )


def render_case(doc: Mapping[str, Any], source: str = "case") -> tuple[str, str]:
    """``(expected JSON text, expected markdown)`` for one case's input document."""
    if "merge" in doc:
        shards = list(doc["merge"])
        report = merge_reports([_build(s, f"{source}: {s['name']}") for s in shards],
                               names=[str(s["name"]) for s in shards])
    else:
        report = _build(doc, source)
    render = doc.get("render", {})
    markdown = render_markdown(report, headline=bool(render.get("headline", False)),
                               extra_sections=doc.get("extra_sections", ()))
    return json.dumps(report.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n", markdown


def cases() -> list[Path]:
    """Every case input, sorted by name."""
    return sorted(GOLDEN_DIR.glob("*.input.json"))


def expected_paths(case: Path) -> tuple[Path, Path]:
    """``(<case>.expected.json, <case>.expected.md)`` beside the input."""
    stem = case.name[: -len(".input.json")]
    return case.with_name(f"{stem}.expected.json"), case.with_name(f"{stem}.expected.md")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1), write nothing")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for case in cases():
        doc = json.loads(case.read_text(encoding="utf-8"))
        outputs = zip(expected_paths(case), render_case(doc, case.name))
        for path, content in outputs:
            current = path.read_text(encoding="utf-8") if path.exists() else None
            if current == content:
                continue
            stale.append(path.relative_to(ROOT).as_posix())
            if not args.check:
                path.write_text(content, encoding="utf-8")
    verb = "stale" if args.check else "rewritten"
    for name in stale:
        print(f"{verb}: {name}")
    print(f"{len(cases())} cases, {len(stale)} files {verb}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
