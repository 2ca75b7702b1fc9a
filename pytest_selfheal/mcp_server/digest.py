"""What the MCP tools (and ``selfheal show``, of each root cause) say, as bounded text (pure;
docs/mcp.md "Bounded results"): blocks shortened or left out, the least valuable first, until
they fit in ``mcp.max_chars``, then a line saying how many and where to get more. No raw log:
a failure is its first line, cut to :data:`MESSAGE_CHARS`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from pytest_selfheal.errors import UsageError, printable
from pytest_selfheal.plan.build import readable_command
from pytest_selfheal.records.incident import Failure
from pytest_selfheal.records.incident_view import IncidentView
from pytest_selfheal.records.mcp import DIGEST, RunDecision, RunVerdict
from pytest_selfheal.records.plan import PlanAction
from pytest_selfheal.records.stops import progress_words
from pytest_selfheal.records.vocab import first_few

FOR_THE_USER = "; for the user: "  # in a STOP's next: what follows is the user's step (the stop gate shows only it)
MESSAGE_CHARS = 240  # one failure's first line, at most
DISTINCT_PER_GROUP = 5  # distinct failure messages shown per root-cause group
NODEIDS_PER_GROUP = 3  # failing test ids named per group (the count says how many in all)
FINGERPRINTS_PER_GROUP = 5
PATHS_PER_GROUP = 8
FULL_SCALE = 10  # ``show`` of one group lists ten times as much of it


def one_line(value: Any, limit: int = MESSAGE_CHARS) -> str:
    """``value`` on one line (whitespace collapsed), cut to ``limit`` characters with ``…``."""
    text = " ".join(str("-" if value is None else value).split())
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def fit(blocks: Sequence[str], max_chars: int, *, more: str, what: str = "section(s)",
        value: Optional[Callable[[str], int]] = None, essential: int = 1, reserved: int = 0,
        separator: str = "\n\n") -> str:
    """The blocks in their order within ``max_chars - reserved``, the least valuable (highest
    ``value``, by default the later; later first on a tie) shortened to their first lines or left
    out first; one valued below ``essential`` (by default the first) keeps at least its first
    line. A last line counts the cuts and points at ``more``."""
    max_chars = max(max_chars - reserved, 0)
    whole = separator.join(blocks)
    if len(whole) <= max_chars:
        return whole
    values = [value(block) for block in blocks] if value is not None else list(range(len(blocks)))
    kept: list[Optional[str]] = list(blocks)
    note = f"[cut: {{}} {what} shortened or left out; {more}]"
    if len(note) > max_chars // 3:  # a small bound: the facts before the pointer to more
        note = f"[cut: {{}} {what} shortened or left out]"
    over = len(whole) - (max_chars - len(note.format(len(blocks))) - len(separator))
    cut = 0
    for index in sorted(range(len(blocks)), key=lambda i: (-values[i], -i)):
        if over <= 0:
            break
        block = blocks[index]
        short = first_lines(block, len(block) - over - 2)
        needed = values[index] < essential
        if "\n" in short or (short and needed):
            kept[index] = short + "\n…"
        else:
            kept[index] = one_line(block.split("\n", 1)[0], 120) if needed else None
        over -= len(block) - len(kept[index] or "") + (len(separator) if kept[index] is None else 0)
        cut += 1
    text = separator.join([b for b in kept if b is not None] + [note.format(cut)])
    return text[:max_chars]


def first_lines(block: str, size: int) -> str:
    """The whole first lines of ``block`` within ``size`` characters ("" when not even one)."""
    lines: list[str] = []
    used = 0
    for line in block.split("\n"):
        if used + len(line) + 1 > size:
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def failures_by_id(failures: Sequence[Failure]) -> dict[str, Failure]:
    found: dict[str, Failure] = {}
    for entry in failures:
        found.setdefault(entry.nodeid or entry.test or "", entry)
    return found


def _triage_counts(entries: Sequence[Failure]) -> str:
    labels = Counter(str((entry.triage.label if entry.triage is not None else "") or "untriaged") for entry in entries)
    return ", ".join(f"{count} {label}" for label, count in sorted(labels.items(), key=lambda kv: (-kv[1], kv[0])))


def code_line(text: str, limit: int) -> str:
    """A line of code with its indentation kept (one_line would collapse it), escaped, cut at ``limit``."""
    shown = printable(text.rstrip())
    return shown if len(shown) <= limit else shown[: max(limit - 1, 0)] + "…"


def group_block(index: int, total: int, cause: PlanAction, failures: Mapping[str, Failure],
                full: bool = False) -> str:
    """One root-cause group: where it points, its tests, fingerprints, class, triage and the
    first line of each distinct failure (``full``: many more of each, for ``show`` of one group)."""
    scale = FULL_SCALE if full else 1
    nodeids = list(cause.nodeids)
    entries = [failures[n] for n in nodeids if n in failures]
    key = cause.key
    where = f"{key.path}::{key.name}" if key.path and key.name else (key.path or one_line(cause.signature, 120))
    head = f"{cause.id}: " if cause.id else ""
    tested = f"{len(nodeids)} failing test(s)" if nodeids else "no test to re-run"
    lines = [f"## Root cause {index} of {total}: {head}{where} (evidence: {key.evidence}), {tested}"]
    where_line = cause.where_line()
    if where_line:  # the top suspect (and its equal) and a few lines of their code (plan/suspects.py)
        lines.append(one_line(where_line, 400))
    if cause.others:
        lines.append(one_line(f"other suspects: {'; '.join(cause.others)}", 400))
    for code in (cause.excerpt, cause.also_excerpt):
        lines.extend(f"  {code_line(line, 200)}" for line in (code.numbered() if code else ())[:8])
    for label, paths in (("target paths (fix here)", cause.target_paths), ("test paths", cause.test_paths)):
        if paths:
            lines.append(f"{label}: {first_few(paths, PATHS_PER_GROUP * scale)}")
    if nodeids:
        lines.append(f"tests: {first_few(nodeids, NODEIDS_PER_GROUP * scale)}")
    if entries:
        prints = list(dict.fromkeys(e.fingerprint or "-" for e in entries))
        lines.append(f"fingerprints: {first_few(prints, FINGERPRINTS_PER_GROUP * scale)}")
        kinds = Counter(f"{e.failure_type or '-'} ({e.failure_class or '-'})" for e in entries)
        lines.append("class: " + ", ".join(kinds))
        if any(e.triage is not None for e in entries):  # an attempt's failures are not triaged
            lines.append(f"triage: {_triage_counts(entries)}")
        messages: dict[str, list[str]] = {}
        for entry in entries:
            messages.setdefault(one_line(entry.message), []).append(entry.nodeid or "-")
        shown = list(messages.items())[:DISTINCT_PER_GROUP * scale]
        lines.append(f"failures ({len(messages)} distinct first line(s)):")
        for message, ids in shown:
            lines.append(f"- {message}  [{first_few(ids, 1)}]")
        if len(messages) > len(shown):
            lines.append(f"- … {len(messages) - len(shown)} more distinct first line(s)")
    return "\n".join(lines)


def incident_head(view: IncidentView) -> str:
    """The first lines of an incident: id, status, class, signature, counts."""
    incident = view.incident
    failures = incident.failures
    lines = [
        f"# Incident {view.incident_id}",
        f"status: {view.status} ({view.bucket}: {view.path})",
        f"class: {incident.failure_class}, first failure: {one_line(incident.step, 200)}",
        f"signature: {one_line(incident.error_signature)}",
        f"failures: {len(failures)} in {len(view.root_causes)} root cause group(s)"
        + (f"; triage: {_triage_counts(failures)}" if any(f.triage is not None for f in failures) else ""),
    ]
    if view.now:
        lines.append(f"now: {view.now}")
    return "\n".join(lines)


def plan_block(view: IncidentView) -> str:
    plan = view.plan
    if plan is None:
        return "## Plan\nnone yet"
    lines = ["## Plan", one_line(plan.summary, 400)]
    lines += [f"- {action.id}: {one_line(action.title, 300)}" for action in plan.actions]
    commands = list(plan.verification_commands)
    lines += [f"verify: {one_line(readable_command(c), 300)}" for c in commands[:3]]
    if len(commands) > 3:
        lines.append(f"verify: … {len(commands) - 3} more command(s)")
    return "\n".join(lines)


def attempt_lines(view: IncidentView) -> list[str]:
    return [f"#{attempt.iteration}: {'passed' if attempt.verification_passed else 'failed'}, {attempt.result}"
            + (f", stop_reason {attempt.stop_reason}" if attempt.stop_reason else "") for attempt in view.attempts]


def attempts_block(view: IncidentView) -> str:
    lines = [f"## Attempts: {len(view.attempts)}", *attempt_lines(view)]
    result = view.run_result
    if result is not None:
        stop = f", stop_reason {result.stop_reason}" if result.stop_reason else ""
        lines.append(f"run result: {result.final_status} after {result.loops_used} loop(s){stop}")
    return "\n".join(lines)


def ranked_causes(view: IncidentView) -> list[PlanAction]:
    """The root-cause groups of a view, largest first (ties keep the plan's order): group N of
    the digest, of ``show`` and of its paging is the N-th of this list."""
    return sorted(view.root_causes, key=lambda cause: -len(cause.nodeids))


def incident_blocks(view: IncidentView) -> list[str]:
    """The digest of one incident as blocks, most useful first: the head, one block per
    root-cause group (largest first), the plan, the attempts."""
    failures = failures_by_id(view.incident.failures)
    causes = ranked_causes(view)
    blocks = [incident_head(view)]
    blocks += [group_block(i, len(causes), cause, failures) for i, cause in enumerate(causes, 1)]
    return blocks + [plan_block(view), attempts_block(view)]


def group_page(view: IncidentView, group: int, offset: int, max_chars: int) -> str:
    """One page of root-cause group ``group`` (1-based): its head line, at offset 0 its summary
    (at most half the page), then its tests from ``offset`` with their first lines, at least one
    (cut to fit), and the next page's offset; a UsageError for no such group or test."""
    if offset < 0:
        raise UsageError(f"offset {offset}: an offset counts tests from the first (0), never below 0")
    failures = failures_by_id(view.incident.failures)
    causes = ranked_causes(view)
    if not 1 <= group <= len(causes):
        raise UsageError(f"group {group}: incident {view.incident_id} has {len(causes)} root-cause group(s), "
                         "numbered from 1")
    cause = causes[group - 1]
    nodeids = list(cause.nodeids)
    if offset and offset >= len(nodeids):
        raise UsageError(f"offset {offset}: root-cause group {group} of incident {view.incident_id} has fewer tests")
    block = group_block(group, len(causes), cause, failures, full=True).split("\n")
    head = one_line(block[0], max(max_chars // 3, 1))  # short enough to leave room for tests
    # The summary once, on the first page, within half of it.
    summary = first_lines("\n".join(block[1:]), max_chars // 2 - len(head)) if offset == 0 else ""
    text = f"{head}\n{summary}" if summary else head

    def note(end: int) -> str:
        return f"\n[page: tests {offset + 1}-{end} of {len(nodeids)}; next: show group={group} offset={end}]"

    shown = 0
    for index, nodeid in enumerate(nodeids[offset:], offset):
        reserve = 0 if index + 1 == len(nodeids) else len(note(index + 1))
        found = failures.get(nodeid)
        line = f"\n- {nodeid}: {one_line(found.message if found is not None else None)}"
        room = max_chars - len(text) - reserve
        if len(line) > room:
            if shown:
                break
            line = line[:max(room, 2)]  # the page's one test, cut: paging always moves on
        text += line
        shown += 1
    end = offset + shown
    if end < len(nodeids):
        text += note(end)
    return text[:max_chars]


def verdict_lines(verdict: RunVerdict) -> list[str]:
    """The run_tests verdict as the first lines of its text: the decision first."""
    decision = verdict.decision.value
    head = decision + (f" {verdict.stop_reason}" if verdict.decision is RunDecision.STOP and verdict.stop_reason else "")
    lines = [f"{head}: {verdict.summary}"]
    if verdict.counts:
        lines.append("pytest: " + ", ".join(f"{n} {k}" for k, n in verdict.counts)
                     + f" (exit code {verdict.pytest_exit_code})")
    if verdict.iteration is not None:
        words = progress_words(verdict.fingerprint_changed, verdict.progress, ("flaky",) if verdict.flaky else ())
        lines.append(f"incident {verdict.incident_id}: iteration {verdict.iteration} of {verdict.max_iterations}, {words}")
    if verdict.captured:
        lines.append(f"captured incident {verdict.captured}")
    for line in verdict.plugin_lines:
        lines.append(f"> {one_line(line, 400)}")
    if verdict.next:
        lines.append(f"next: {verdict.next}")
    return lines


def structured_size(data: Optional[dict[str, Any]]) -> int:
    """How many characters ``data`` takes in a result (its compact JSON)."""
    return 0 if data is None else len(json.dumps(data, ensure_ascii=False, separators=(",", ":")))


ESSENTIAL = ("decision", "stop_reason", "status", "incident_id", "captured", "iteration", "max_iterations")


def bounded_verdict(verdict: RunVerdict, max_chars: int, groups: Sequence[str] = (), *, text_chars: int = 0,
                    more: str = "") -> dict[str, Any]:
    """The verdict's structured part (some clients give the model only it): the verdict whole
    within half of ``max_chars``, else its set :data:`ESSENTIAL` keys, else the decision and
    incident; then under :data:`DIGEST` the ``groups`` that fit beside ``text_chars``, a last
    entry naming ``more`` when some are left out."""
    data = verdict.to_json()
    if structured_size(data) > max_chars // 2:
        essential = {k: data[k] for k in ESSENTIAL if data.get(k) is not None}
        data = essential if structured_size(essential) <= max_chars // 2 else {
            k: essential[k] for k in ("decision", "incident_id") if k in essential}
    kept: list[str] = []
    for index, group in enumerate(groups):
        note = f"[cut: {len(groups) - index} root-cause group(s) left out; {more}]"
        last = index + 1 == len(groups)
        if structured_size({**data, DIGEST: [*kept, group] + ([] if last else [note])}) + text_chars > max_chars:
            if structured_size({**data, DIGEST: [*kept, note]}) + text_chars <= max_chars:
                kept.append(note)
            break
        kept.append(group)
    return {**data, DIGEST: kept} if kept else data
