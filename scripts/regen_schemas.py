"""Write pytest_selfheal/schemas/*.schema.json from the record declarations; ``--check`` only compares."""

from __future__ import annotations

import sys
from pathlib import Path

from pytest_selfheal.records.schema_gen import DOCUMENTS, schema_text

SCHEMAS = Path(__file__).resolve().parent.parent / "pytest_selfheal" / "schemas"


def main(argv: list[str]) -> int:
    """Regenerate (or with ``--check`` compare) every shipped schema; 1 when one differs."""
    stale = []
    for kind in DOCUMENTS:
        path = SCHEMAS / f"{kind}.schema.json"
        text = schema_text(kind)
        if path.read_text(encoding="utf-8") != text:
            stale.append(path.name)
            if "--check" not in argv:
                path.write_text(text, encoding="utf-8")
    if stale:
        print(("stale: " if "--check" in argv else "rewrote: ") + ", ".join(stale))
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
