#!/usr/bin/env python3
"""The counts the codebase holds itself to, printed: loose dict annotations at the
package's seams, top-level modules, and the words of the docs.

    python scripts/house_counts.py           # print the counts and their targets
    python scripts/house_counts.py --check   # exit 1 when a count is over its target
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pytest_selfheal"
LOOSE = re.compile(r"\b(?:Dict|dict|Mapping)\[str,\s*Any\]")
WORD = re.compile(r"[A-Za-z0-9_`'-]+")
# (what, target): the targets the codebase holds itself to.
TARGETS = {"loose annotations": 60, "top-level modules": 8, "user docs words": 25_000, "all docs words": 30_000}


def loose_annotations() -> int:
    """``Dict[str, Any]``, ``dict[str, Any]`` and ``Mapping[str, Any]`` in the package."""
    return sum(len(LOOSE.findall(p.read_text(encoding="utf-8"))) for p in PACKAGE.rglob("*.py")
               if "demo" not in p.relative_to(PACKAGE).parts)


def top_level_modules() -> list[str]:
    """The package's top-level modules, ``__init__``/``__main__`` and ``py.typed`` aside."""
    return sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))


def words(paths: list[Path]) -> int:
    return sum(len(WORD.findall(p.read_text(encoding="utf-8"))) for p in paths)


def counts() -> list[tuple[str, int]]:
    """``[(what, count)]`` in the order of :data:`TARGETS`."""
    user = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    every = user + sorted((ROOT / "docs").rglob("*/*.md"))
    return [("loose annotations", loose_annotations()), ("top-level modules", len(top_level_modules())),
            ("user docs words", words(user)), ("all docs words", words(every))]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a count is over its target")
    args = parser.parse_args(argv)
    over = 0
    for what, count in counts():
        target = TARGETS[what]
        over += count > target
        print(f"{what}: {count:,} (target <= {target:,}){'  OVER' if count > target else ''}")
    return 1 if args.check and over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
