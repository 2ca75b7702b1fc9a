"""The seal's change check against true fixes: ``python benchmarks/localisation/seal_fixes.py``.

For every real regression of regressions.py, the fixing release's non-test modules that
differ from the buggy release's are judged as a repair would be (config/seal.py: the lines
of the new module that read the process context or patch another module and whose text the
old module's record does not hold). Every true fix must stay a success: each module flagged is printed, and the
exit code is 1 when any is. The sdists come from pypi.py's cache (downloaded on first use).
"""

from __future__ import annotations

import sys

import pypi
import regressions

from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.config.seal import added_reads, code_record, context_reads


def main() -> int:
    """Print each release pair's changed modules and any flagged line; 1 when one is."""
    pairs = dict.fromkeys((r.project, r.old, r.new) for r in regressions.RELEASES)
    bugs = sum(len(r.bugs) for r in regressions.RELEASES)
    changed = flagged = 0
    for project, old_version, new_version in pairs:
        old, new = pypi.unpacked_sdist(project, old_version), pypi.unpacked_sdist(project, new_version)
        for path in sorted(new.rglob("*.py")):
            rel = path.relative_to(new).as_posix()
            if is_test_file(rel) or rel.startswith("docs/") or rel == "setup.py":
                continue
            before = (old / rel).read_bytes() if (old / rel).exists() else b""
            after = path.read_bytes()
            if before == after:
                continue
            changed += 1
            for number, text, what in added_reads(code_record(before), context_reads(after)):
                flagged += 1
                print(f"flagged: {project} {new_version} {rel}:{number} {what}: {text}")
    print(f"{len(pairs)} release pairs ({bugs} fixed bugs): {changed} changed non-test modules, {flagged} flagged")
    return 1 if flagged else 0


if __name__ == "__main__":
    sys.exit(main())
