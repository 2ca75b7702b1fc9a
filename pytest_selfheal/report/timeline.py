"""The report's Loop Timeline: one incident's loop as a small mermaid flowchart (pure)."""

from __future__ import annotations

import re

from pytest_selfheal.records.report import ReportIncident
from pytest_selfheal.records.vocab import StopReason

MERMAID_MAX_ITERATIONS = 10
_MERMAID_UNSAFE = re.compile(r"[^A-Za-z0-9 _.,:()/+-]")


def _mermaid_label(value: str) -> str:
    return _MERMAID_UNSAFE.sub("", value)[:80]


def mermaid_timeline(entry: ReportIncident) -> list[str]:
    """One incident's loop as a mermaid flowchart: the capture, each iteration, the stop."""
    capture_count = len(entry.capture_tests) or len(entry.capture_fingerprints)
    nodes = [f'  c0["capture: {capture_count} failing"]']
    edges: list[str] = []
    passes: list[str] = []
    fails = ["c0"]
    previous = "c0"
    iterations = entry.iterations
    hidden = max(0, len(iterations) - MERMAID_MAX_ITERATIONS)
    if hidden:
        nodes.append(f'  skip["{hidden} earlier iterations"]')
        edges.append(f"  {previous} --> skip")
        previous = "skip"
    for it in iterations[hidden:]:
        number = it.iteration or 0
        node = f"i{number}"
        mode = _mermaid_label(it.mode or "verify")
        failing = sum(1 for o in it.outcomes.values() if o in ("failed", "error"))
        failing = failing or len(it.fingerprints)
        state = "passed" if it.verification_passed else f"{failing} failing"
        nodes.append(f'  {node}["iteration {number} ({mode}): {state}"]')
        changed = it.fingerprint_changed
        arrow = " -->" if changed is None or it.verification_passed else (
            " -->|new fingerprint|" if changed else " -->|same fingerprint|")
        edges.append(f"  {previous}{arrow} {node}")
        (passes if it.verification_passed else fails).append(node)
        previous = node
    reason = entry.stop_reason
    if reason:
        status = str(entry.final_status)
        end = _mermaid_label(reason if status == reason else f"{reason}: {status}")
    elif not iterations:
        end = "loop not run yet"
    else:
        end = "loop not finished"
    nodes.append(f'  stop(["{end}"])')
    edges.append(f"  {previous} --> stop")
    (passes if reason == StopReason.SUCCESS else fails).append("stop")
    return (["```mermaid", "flowchart LR"] + nodes + edges + [
        "  classDef pass fill:#dafbe1,stroke:#1a7f37",
        "  classDef fail fill:#ffebe9,stroke:#cf222e",
    ] + ([f"  class {','.join(passes)} pass"] if passes else []) + [f"  class {','.join(fails)} fail", "```"])
