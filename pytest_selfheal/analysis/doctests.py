"""Doctest failures as first-class failures (pure; docs/fingerprints.md "Doctests"): the one line
that names a doctest's failure, and a failure's text without xdist's worker line."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional

DOCTEST_MARK = "DocTestFailure"
_END = re.compile(r"^\S.*:\d+: (DocTestFailure|UnexpectedException)\s*$", re.MULTILINE)
_EXAMPLE = re.compile(r"^\d+\s+(>>>.*)$")
_EXC_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failed|Warning)\b.*)$")
# pytest-xdist's worker line: "[gw1] linux -- Python 3.11.4 /usr/bin/python3".
_WORKER = re.compile(r"^\s*\[gw\d+\] \S+ -- Python \S+.*(?:\n|$)")
_MAX_BLOCK = 200  # characters of an expected / got block kept in the line


def is_doctest_line(line: str) -> bool:
    return line.startswith(DOCTEST_MARK + ": >>>") or (line.endswith(")") and " (doctest >>>" in line)


def strip_worker_header(text: str) -> str:
    while (match := _WORKER.match(text)) is not None:
        text = text[match.end():]
    return text


def _block(lines: Sequence[str]) -> str:
    kept = [line[4:] if line.startswith("    ") else line.strip() for line in lines]
    while kept and not kept[-1].strip():
        kept.pop()
    joined = " \\n ".join(kept)
    return joined if len(joined) <= _MAX_BLOCK else joined[:_MAX_BLOCK] + "…"


def _example(lines: Sequence[str]) -> str:
    for line in reversed(lines):
        match = _EXAMPLE.match(line)
        if match:
            return match.group(1).strip()
    return ">>> ?"


def doctest_line(text: str) -> Optional[str]:
    """The failure line of a pytest doctest report, or None when ``text`` is not one."""
    if "DocTestFailure" not in text and "UnexpectedException" not in text:
        return None
    end = None
    for match in _END.finditer(text):
        end = match  # the last report line wins
    if end is None:
        return None
    lines = strip_worker_header(text[: end.start()]).splitlines()
    if end.group(1) == "UnexpectedException":
        start = next((i for i, line in enumerate(lines) if line.startswith("UNEXPECTED EXCEPTION:")), len(lines))
        example = _example(lines[:start])
        raised = [m.group(1).strip() for m in (_EXC_LINE.match(line) for line in lines[start + 1:]) if m]
        if raised:
            return f"{raised[-1]} (doctest {example})"
        return f"{lines[start].strip() if start < len(lines) else 'UnexpectedException'} (doctest {example})"
    try:
        expected_at = max(i for i, line in enumerate(lines) if line.rstrip() == "Expected:")
    except ValueError:
        return None
    example = _example(lines[:expected_at])
    got_at = next((i for i in range(expected_at + 1, len(lines)) if lines[i].startswith("Got")), len(lines))
    expected = _block(lines[expected_at + 1: got_at])
    got_lines = lines[got_at + 1:] if got_at < len(lines) and lines[got_at].rstrip() == "Got:" else []
    got = _block(got_lines) if got_lines else "nothing"
    return f"{DOCTEST_MARK}: {example} expected: {expected} got: {got}"


__all__ = ["DOCTEST_MARK", "doctest_line", "is_doctest_line", "strip_worker_header"]
