#!/usr/bin/env python3
"""Print the two figures of docs/redaction.md: the words of ordinary error lines that
redaction keeps, and the secrets it catches.

    python scripts/redaction_figures.py            # both figures, and what is missed
    python scripts/redaction_figures.py --quiet    # the figures only

The corpora are in tests/redaction_corpus/: ``ordinary.txt``, one ordinary line of test output
a line (assertion diffs, tracebacks, paths, versions, commit hashes, uuids in test ids,
identifiers that look like base64); ``secrets.txt``, one case a line, each secret between
``⟦`` and ``⟧``, ``⏎`` a line break inside the case, ``#`` a comment. tests/test_redact_place.py
holds both at 100 %.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pytest_selfheal.redact import Redactor

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "redaction_corpus"
_SECRET = re.compile("⟦(.*?)⟧")
_WORD = re.compile(r"[A-Za-z0-9_]{2,}")


def ordinary_lines(path: Path = CORPUS / "ordinary.txt") -> list[str]:
    """The ordinary lines (no secret in any of them)."""
    return path.read_text(encoding="utf-8").splitlines()


def secret_cases(path: Path = CORPUS / "secrets.txt") -> list[tuple[str, list[str], str]]:
    """Each case: its text, the secrets in it, and the text without them (what must stay)."""
    cases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        line = line.replace("⏎", "\n")
        cases.append((_SECRET.sub(r"\1", line), _SECRET.findall(line), _SECRET.sub(" ", line)))
    return cases


def words(text: str) -> list[str]:
    """The words of ``text`` that redaction must keep."""
    return _WORD.findall(text)


def kept_words(before: str, after: str) -> tuple[int, int]:
    """How many of the words of ``before`` are still in ``after``, in order, and how many there were."""
    expected = words(before)
    remaining = words(after)
    kept, at = 0, 0
    for word in expected:
        if word in remaining[at:]:
            at = remaining.index(word, at) + 1
            kept += 1
    return kept, len(expected)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet", action="store_true", help="the figures only, not the lines that miss")
    args = parser.parse_args()
    redactor = Redactor({})
    kept = total = 0
    for line in ordinary_lines():
        k, n = kept_words(line, redactor.redact(line))
        kept, total = kept + k, total + n
        if k < n and not args.quiet:
            print(f"lost words: {line!r} -> {redactor.redact(line)!r}")
    caught = secrets = context_kept = context_total = 0
    for text, hidden, rest in secret_cases():
        out = redactor.redact(text)
        missed = [secret for secret in hidden if secret in out]
        caught, secrets = caught + len(hidden) - len(missed), secrets + len(hidden)
        k, n = kept_words(rest, out)
        context_kept, context_total = context_kept + k, context_total + n
        if missed and not args.quiet:
            print(f"kept secrets {missed!r}: {out!r}")
    lines = len(ordinary_lines())
    print(f"ordinary lines: {lines}, words kept {kept}/{total} = {100 * kept / total:.1f} %")
    print(f"secret cases: {len(secret_cases())}, secrets caught {caught}/{secrets} = {100 * caught / secrets:.1f} %,"
          f" other words of their lines kept {context_kept}/{context_total} = {100 * context_kept / context_total:.1f} %")
    return 0 if kept == total and caught == secrets else 1


if __name__ == "__main__":
    raise SystemExit(main())
