"""The ``## RALF Lite Loop Report`` rendered: markdown, headline, terminal lines (pure; docs/report.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Optional

from pytest_selfheal.config.keys import DEFAULT_ORIGIN
from pytest_selfheal.loop.messages import plural, unverified_summary, unverified_tests
from pytest_selfheal.plan.build import shorten
from pytest_selfheal.records.jsondoc import plain_json
from pytest_selfheal.records.report import REPORT_TITLE, Report, ReportIncident, ReportInput, as_report
from pytest_selfheal.records.stops import PROGRESS_NOTES
from pytest_selfheal.records.tolerant import unique
from pytest_selfheal.records.vocab import Line, final_tone
from pytest_selfheal.report.data import flatten_config
from pytest_selfheal.report.timeline import mermaid_timeline

REPORT_HEADING = f"## {REPORT_TITLE}"

# The config keys of the head line, in the order GSD plan summaries write them.
HEAD_CONFIG_KEYS: tuple[str, ...] = ("max_iterations", "error_fingerprint_repeats", "no_progress_repeats")

# Bounds that keep a report readable (and a PR comment far below GitHub's limits).
GRID_MAX_TESTS = 30
GRID_MAX_COLUMNS = 10  # the capture column included
GRID_GROUP_MIN = 4  # this many tests or more with the same outcomes in every column share one row
MERMAID_MAX_INCIDENTS = 3
DASH = "—"  # an empty cell or a value not recorded
CELL_LIMIT = 200  # characters of one value in a table cell or list item
LIST_LIMIT = 5  # node ids / fingerprints shown in one cell
SECTION_MAX_ROWS = 10  # tests named per group of a section (tasks, new failures per section); the rest counted
TERMINAL_MAX_INCIDENTS = 5
TERMINAL_MAX_TESTS = 3

NOT_RUN = "not run"

_PASS, _FAIL, _WARN = "✅", "❌", "⚠️"
_CELL_SYMBOL = {"passed": _PASS, "failed": _FAIL, "error": _FAIL, "skipped": _WARN, "missing": _WARN}
# Punctuation that opens a link, image, emphasis, code span or strike-through ("(", ")", "!"
# open nothing without a "["; "_" only where emphasis can open: not inside a word).
_MD_PUNCTUATION = re.compile(r"[\\`*\[\]~]|(?<![^\W_])_")
# GitHub's mentions, references ("#12", "org/repo#12", "GH-12"), e-mail links and autolinks:
# broken by a zero-width space (GitHub finds them in rendered text, backslashes do not help).
_REFERENCE = re.compile(r"(@|#|\bGH-)(?=[A-Za-z0-9])", re.IGNORECASE)
_AUTOLINK = re.compile(r"(?<=[A-Za-z]):(?=//)|(?<=\bwww)\.", re.IGNORECASE)


def _scalar(value: object) -> str:
    """A config value as JSON, but bare strings (a report read back holds its config frozen)."""
    if isinstance(value, str):
        return value
    return json.dumps(plain_json(value), sort_keys=True, ensure_ascii=False)


def text(value: object, limit: int = CELL_LIMIT) -> str:
    """Data as inert inline markdown (docs/report.md "Escaping"): one line,
    bounded; no HTML or entity (which could forge the comment's marker), no link, image,
    emphasis, code span, mention, cross-reference or autolink."""
    flat = shorten(str(value), limit)
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    flat = _MD_PUNCTUATION.sub(lambda m: "\\" + m.group(0), flat)
    flat = _REFERENCE.sub("\\1\u200b", flat)
    return _AUTOLINK.sub(lambda m: m.group(0) + "\u200b", flat)


def code(value: object, limit: int = CELL_LIMIT) -> str:
    """Data as an inline code span, safe for any backticks inside; ``—`` when empty."""
    flat = shorten(str(value), limit)
    if not flat:
        return DASH
    longest = max((len(run) for run in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def cell(markdown: str) -> str:
    """A table cell: pipes escaped (GitHub honours ``\\|`` inside code spans in tables too)."""
    return markdown.replace("|", "\\|")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [_row(header), "|" + "|".join("-" * (len(h) + 2) for h in header) + "|"] + [_row(r) for r in rows]


def _codes(items: Sequence[str], limit: int = LIST_LIMIT, sep: str = ", ") -> str:
    if not items:
        return DASH
    shown = sep.join(code(i) for i in items[:limit])
    return shown + (f"{sep}… +{len(items) - limit}" if len(items) > limit else "")


def _more(hidden: int, what: str) -> list[str]:
    """The line after a list cut at its bound: the rest counted, and where they all are."""
    return ["", f"… and {hidden:,} more {what}: `selfheal report --format json` has them all."] if hidden > 0 else []


def _reason(value: object) -> str:
    return code(value) if isinstance(value, str) and value else DASH


def _yes_no(value: Optional[bool]) -> str:
    return DASH if value is None else ("yes" if value else "no")


def _minutes(value: Optional[float]) -> str:
    if value is None:
        return DASH
    return (f"{value:.2f}".rstrip("0").rstrip(".") or "0") + " min"


def _multi(report: Report) -> bool:
    return len(report.incidents) > 1


def _per_incident(report: Report, heading: str, block: Callable[[ReportIncident], list[str]]) -> list[str]:
    lines = [heading, ""]
    for entry in report.incidents:
        lines += ([f"#### {code(entry.incident_id)}", ""] if _multi(report) else []) + block(entry) + [""]
    return lines[:-1]


def render_headline(report: ReportInput) -> str:
    """The one status line put before the report heading for PR comments and job summaries."""
    records = as_report(report)
    incidents = records.incidents
    if not incidents:
        return "**selfheal: no incidents — nothing to loop**"
    who = incidents[0].incident_id if len(incidents) == 1 else plural(len(incidents), "incident")
    iterations = sum(e.loops_used for e in incidents)
    details = [who, plural(iterations, "iteration")]
    flaky = sum(len(e.flaky_tests) for e in incidents)
    if records.triage_line is not None:
        details.append(text(records.triage_line, 120))  # "2 new, 1 known on main, 1 flaky" (flaky included)
    elif flaky:
        details.append(plural(flaky, "flaky test"))
    status = text(records.final_status or "unknown", 60)
    return f"**selfheal: {status} — {_verdict(records, code(records.stop_reason or '', 60))}** ({', '.join(details)})"


def _verdict(report: Report, reason: str) -> str:
    if report.stop_reason:
        return f"stop reason {reason}"
    return "loop not finished" if report.total_retries else "loop not run yet"


def _head(report: Report) -> list[str]:
    config = report.effective_config
    head_config = ", ".join(f"{k}={_scalar(config.get(k))}" for k in HEAD_CONFIG_KEYS)
    lines = [
        REPORT_HEADING,
        "",
        f"- Enabled: {'true' if report.enabled else 'false'}",
        f"- Effective config: {head_config}",
        f"- Auto tasks looped: {report.auto_tasks_looped}",
        f"- Total retries: {report.total_retries}",
        "",
        "### Task Attempts",
        "",
        "| Task | Attempts | Stop Reason |",
        "|------|----------|-------------|",
    ]
    tasks = [task for entry in report.incidents for task in entry.tasks]
    for task in tasks[:SECTION_MAX_ROWS]:
        stop = cell(text(task.stop_reason, 60)) if task.stop_reason else DASH
        lines.append(f"| {cell(text(task.label, 80)).ljust(4)} | {str(task.attempts).ljust(8)} | {stop} |")
    return lines + _more(len(tasks) - SECTION_MAX_ROWS, "tasks")


def _regression_text(incident: ReportIncident) -> str:
    check = incident.regression_check or {}
    listed = check.get("broken")
    broken = [n for n in listed if isinstance(n, str)] if isinstance(listed, (list, tuple)) else []
    found = f"broke {_codes(broken)}" if broken else "nothing broken"
    return f"ran {text(check.get('tests_run'))} test(s) that can reach the change: {found}"


def _section_stop(report: Report) -> list[str]:
    lines = ["### Stop Reason and Final Status", ""]
    incidents = report.incidents
    if not incidents:
        return lines + ["No incident was captured: nothing to loop."]
    shown = _reason(report.stop_reason) if report.stop_reason else (
        "not finished" if report.total_retries else f"{NOT_RUN} (the loop has not run yet)")
    # A test edit is never a fix to take on trust: it comes before everything else.
    lines += [f"- **Tests edited** in {code(e.incident_id)}: {_codes(e.tests_edited)} — the selection passes "
              "only with these test files changed; review the test diff first" for e in incidents if e.tests_edited]
    lines += [f"- **Never verified** in {code(e.incident_id)}: {e.unverified_failures:,} failing test(s) over the "
              "capture's cap; it cannot end in success" for e in incidents if e.unverified_failures]
    lines.append(f"- Stop reason: {shown}")
    lines.append(f"- Final status: {text(report.final_status)}")
    lines += [f"- Regression check{f' of {code(e.incident_id)}' if _multi(report) else ''}: {_regression_text(e)}"
              for e in incidents if e.regression_check is not None]
    lines += [f"- Repair{f' of {code(e.incident_id)}' if _multi(report) else ''}: {text(line, 300)}"
              for e in incidents for line in e.repair_summary]
    if len(incidents) > 1 and report.deciding_incident:
        lines.append(f"- Decided by: {code(report.deciding_incident)} (the worst outcome; docs/report.md)")
    lines.append("")
    rows = []
    for e in incidents:
        rows.append([
            code(e.incident_id), text(e.status), text(e.final_status),
            _reason(e.stop_reason) if e.stop_reason else (NOT_RUN if not e.loops_used else DASH),
            str(e.loops_used),
            DASH if e.same_error_repeats is None else str(e.same_error_repeats),
            _minutes(e.runtime_minutes),
            code(e.archived_to or ""),
        ])
    lines += _table(["Incident", "Status", "Final Status", "Stop Reason", "Iterations", "Same Error Repeats",
                     "Runtime", "Archived To"], rows)
    signatures = [f"- {f'{code(e.incident_id)} error signature' if _multi(report) else 'Error signature'}: "
                  f"{code(e.error_signature)}" for e in incidents if e.error_signature]
    return lines + ([""] + signatures if signatures else [])


def _section_triage(report: Report, quarantined: bool) -> list[str]:
    rows: list[list[str]] = []
    hidden: dict[str, int] = {}  # hidden: per label, the failures past the first SECTION_MAX_ROWS
    for entry in report.incidents:
        for t in entry.triage:
            label = t.triage.label or DASH
            if (label == "quarantined") == quarantined:
                seen = hidden[label] = hidden.get(label, -SECTION_MAX_ROWS) + 1
                if seen > 0:
                    continue
                row = [code(t.nodeid or DASH, 120), code(t.fingerprint or "")]
                row += [] if quarantined else [text(t.failure_type or DASH, 40), f"**{text(label, 20)}**"]
                rows.append(([code(entry.incident_id)] if _multi(report) else []) + row + [text(t.triage.detail or DASH)])
    if not rows:
        return []
    header = ["Test", "Fingerprint"] + (["Quarantine"] if quarantined else ["Type", "Triage", "Detail"])
    title = ["### Quarantined Failures", "", "Still run and reported; they do not fail the `selfheal ci` job (the "
             "quarantine file of the base revision on a pull request):", ""] if quarantined else ["### Failures", ""]
    counts = {text(label, 20): n for label, n in hidden.items() if n > 0}
    split = ", ".join(f"{n:,} {label}" for label, n in counts.items())
    what = f"{next(iter(counts))} failures" if len(counts) == 1 else f"failures ({split})"
    more = _more(sum(counts.values()), what)
    return title + _table((["Incident"] if _multi(report) else []) + header, rows) + more


def _section_tasks(report: Report) -> list[str]:
    rows = []
    tasks = [task for entry in report.incidents for task in entry.tasks]
    for task in tasks[:SECTION_MAX_ROWS]:
        stop = task.stop_reason
        places = [place for place in (task.where, task.also_where) if place]  # two: equal suspects
        rows.append([
            text(task.label, 80),
            text(task.title or DASH) + (f"<br>at {_codes(places, sep=' or ')}" if places else ""),
            # One task: its tests are the grid's (Iterations × Tests names them); several: a few each.
            plural(len(task.nodeids), "test") if len(tasks) == 1 else _codes(task.nodeids, 3, "<br>"),
            str(task.attempts),
            _reason(stop) if stop else (NOT_RUN if not task.attempts else DASH),
            "yes" if task.flaky else "no",
        ])
    if not rows:
        return ["### Tasks", "", "No plan yet: the tasks appear once `selfheal plan` has run."
                if report.incidents else "None: no incident, so no plan."]
    return (["### Tasks", ""] + _table(["Task", "Title", "Tests", "Attempts", "Stop Reason", "Flaky"], rows)
            + _more(len(tasks) - SECTION_MAX_ROWS, "tasks"))


def _config_difference_lines(report: Report) -> list[str]:
    lines: list[str] = []
    for diff in report.config_differences:
        values = diff.values
        shown = [f"{k}={_scalar(values[k])}" if k in values else k for k in diff.keys]
        lines.append(f"- Shard {text(diff.shard)} ran with {_codes(shown, limit=20)} "
                     "(the table shows the first shard's config)")
    base = flatten_config(report.effective_config)
    for entry in report.incidents:
        own = flatten_config(entry.run_config or {})
        keys = sorted(k for k in own if k in base and own[k] != base[k])
        if keys:
            ran_with = ", ".join(f"{k}={_scalar(own[k])}" for k in keys)
            lines.append(f"- {code(entry.incident_id)} ran with {code(ran_with)} (from its run_result.json)")
    return lines


def _section_config(report: Report) -> list[str]:
    """The keys set away from their defaults (every key is in the JSON and `selfheal config --show-origin`)."""
    origins, values = report.origins, flatten_config(report.effective_config)
    rows = [[code(key), code(_scalar(value)), text(origins.get(key, DASH))]
            for key, value in values.items() if origins.get(key, DEFAULT_ORIGIN) != DEFAULT_ORIGIN]
    rest = (f"The other {len(values) - len(rows)} keys are at their defaults" if rows
            else f"Every key is at its default ({len(values)} keys)")
    table = _table(["Key", "Value", "Origin"], rows) + [""] if rows else []
    notes = _config_difference_lines(report)
    return ["### Effective Config", "", *table, f"{rest}; `selfheal config --show-origin` lists every key."] + (
        [""] + notes if notes else [])


def _fingerprints(entry: ReportIncident) -> list[str]:
    capture = entry.capture_fingerprints
    rows = [["0", "capture", _FAIL if capture or entry.capture_tests else DASH, _codes(capture), DASH, DASH]]
    for it in entry.iterations:
        reasons = it.progress_reasons
        progress = _yes_no(it.progress)
        if reasons and it.progress is not None:
            progress += f" ({', '.join(text(PROGRESS_NOTES.get(r, r), 40) for r in reasons)})"
        fps = it.fingerprints
        # Skipped or absent tests verified nothing: say so, never a bare ❌ without a fingerprint.
        unverified = unverified_tests(it.outcomes)
        cells = ([_codes(fps)] if fps or not unverified else []) + [text(unverified_summary(unverified, 3), 300)] * bool(unverified)
        rows.append([str(it.iteration), text(it.mode or DASH),
                     _PASS if it.verification_passed else (_WARN if unverified and not fps else _FAIL),
                     "; ".join(cells), _yes_no(it.fingerprint_changed), progress])
    return _table(["Iteration", "Mode", "Passed", "Fingerprints", "Changed", "Progress"], rows)


def _test_list(report: Report, fixed: bool) -> list[str]:
    items: list[str] = []
    hidden = 0
    for entry in report.incidents:
        where = f" — {code(entry.incident_id)}" if _multi(report) else ""
        tests = entry.tests_fixed if fixed else entry.flaky_tests
        if tests and set(tests) == set(entry.capture_tests):  # Failures and the grid name them already
            items.append(f"- {'The captured failure' if len(tests) == 1 else f'All {len(tests):,} captured failures'}"
                         f"{where}")
            continue
        items += [f"- {code(nodeid)}{where}" for nodeid in tests[:SECTION_MAX_ROWS]]
        hidden += max(0, len(tests) - SECTION_MAX_ROWS)
    return items + _more(hidden, "tests") if items else ["None."]


def _section_tests(report: Report, fixed: bool) -> list[str]:
    items = _test_list(report, fixed)
    said = ["Failed, then passed on re-run with no code change:", ""] if not fixed and items != ["None."] else []
    return [f"### {'Tests Fixed Along the Way' if fixed else 'Flaky Tests'}", "", *said, *items]


def _section_new_failures(report: Report) -> list[str]:
    rows = [([code(e.incident_id)] if _multi(report) else []) + [code(f.nodeid or DASH), code(f.fingerprint or ""),
                                                                 str(f.iteration)]
            for e in report.incidents for f in e.new_failures]
    if not rows:
        return []
    header = (["Incident"] if _multi(report) else []) + ["Test", "Fingerprint", "First Seen (Iteration)"]
    return (["### New Failures", "", "Failures outside the verification selection:", ""]
            + _table(header, rows[:SECTION_MAX_ROWS]) + _more(len(rows) - SECTION_MAX_ROWS, "new failures"))


def _grid_tests(entry: ReportIncident) -> list[str]:
    ordered = unique([*entry.capture_tests, *(n for task in entry.tasks for n in task.nodeids)])
    rest = {n for it in entry.iterations for n in it.outcomes}
    return ordered + sorted(rest - set(ordered))


def _grid(entry: ReportIncident) -> list[str]:
    tests = _grid_tests(entry)
    if not tests:
        return ["No per-test outcomes recorded."]
    iterations = entry.iterations
    hidden_iterations = max(0, len(iterations) - (GRID_MAX_COLUMNS - 1))
    shown = iterations[hidden_iterations:]
    capture = set(entry.capture_tests)
    header = ["Test", "capture"] + [str(it.iteration) for it in shown]
    # Tests with the same outcomes in every column share one row: the grid scales with the
    # different histories, not with the tests (the JSON has each test's outcomes).
    groups: dict[tuple[str, ...], list[str]] = {}
    for nodeid in tests:
        outcomes = [it.outcomes.get(nodeid) for it in shown]
        key = (_FAIL if nodeid in capture else DASH,) + tuple(
            DASH if o is None else _CELL_SYMBOL.get(o, _WARN) for o in outcomes)
        groups.setdefault(key, []).append(nodeid)
    more = {ids[0]: len(ids) - 1 for ids in groups.values() if len(ids) >= GRID_GROUP_MIN}
    named = [(t, k) for k, ids in groups.items() for t in ids if len(ids) < GRID_GROUP_MIN or t in more]
    order = {nodeid: i for i, nodeid in enumerate(tests)}
    named.sort(key=lambda row: order[row[0]])  # in the order of the tests
    rows = [[code(nodeid, 120) + (f" and {more[nodeid]:,} more with these outcomes" if nodeid in more else ""),
             *key] for nodeid, key in named[:GRID_MAX_TESTS]]
    lines = _table(header, rows)
    notes = []
    hidden_tests = sum(1 + more.get(nodeid, 0) for nodeid, _ in named[GRID_MAX_TESTS:])
    if hidden_tests:
        notes.append(f"… {hidden_tests:,} more tests not shown")
    if hidden_iterations:
        notes.append(f"… {plural(hidden_iterations, 'earlier iteration')} not shown")
    return lines + ([""] + ["; ".join(notes) + "."] if notes else [])


def _section_grid(report: Report) -> list[str]:
    return _per_incident(report, "### Iterations × Tests", _grid) + [
        "", f"{_PASS} passed · {_FAIL} failed or error · {_WARN} skipped or missing from the results · "
        f"{DASH} not run in that iteration"]


def _section_timeline(report: Report) -> list[str]:
    if len(report.incidents) > MERMAID_MAX_INCIDENTS:
        return ["### Loop Timeline", "", f"Omitted for more than {MERMAID_MAX_INCIDENTS} incidents; see the tables above."]
    return _per_incident(report, "### Loop Timeline", mermaid_timeline)


def _decision(entry: ReportIncident) -> list[str]:
    point = entry.decision_point
    if point is None:
        return ["None recorded: the loop has not stopped." if not entry.finished else "None recorded."]
    lines = [f"- Reason: {_reason(point.reason)}"]
    if point.message:
        lines.append(f"- Message: {text(point.message, 500)}")
    if point.options:
        lines.append("- Options:")
        lines += [f"  - {f'{code(o.id)}: ' if o.id else ''}{text(o.label or DASH)}"
                  f"{f' — {code(o.command)}' if o.command is not None else ''}" for o in point.options]
    return lines


def _section_next(report: Report) -> list[str]:
    if len(report.incidents) <= 1:
        return ["### Recommended Next Action", "", text(report.recommended_next_action, 500)]
    return ["### Recommended Next Action", ""] + [f"- {code(e.incident_id)}: {text(e.next_action or DASH, 500)}"
                                                   for e in report.incidents]


def _section_shards(report: Report) -> list[str]:
    shards = report.shards
    if not shards:
        return []
    notes = any(shard.duplicates for shard in shards)
    rows = []
    for shard in shards:
        ids, dup = shard.incidents, shard.duplicates
        rows.append([text(shard.name), _codes(ids, sep="<br>") if ids else "none", _reason(shard.stop_reason),
                     text(shard.final_status or DASH)] + ([f"{plural(len(dup), 'incident')} already in an earlier "
                                                          f"shard: {_codes(dup)}" if dup else ""] if notes else []))
    header = ["Shard", "Incidents", "Stop Reason", "Final Status"] + (["Note"] if notes else [])
    return ["### Shards", ""] + _table(header, rows)


def render_markdown(
    report: ReportInput,
    *,
    extra_sections: Sequence[Mapping[str, str]] = (),
    headline: bool = False,
    mermaid: bool = True,
) -> str:
    """The report as markdown; ``headline`` before it (PR comment, job summary), hook sections after."""
    records = as_report(report)
    lines: list[str] = [render_headline(records), ""] if headline else []
    lines += _head(records)
    sections = [
        _section_stop(records),
        _section_triage(records, quarantined=False),
        _section_triage(records, quarantined=True),
        _section_tasks(records),
        _section_config(records),
        _per_incident(records, "### Fingerprint per Iteration", _fingerprints) if records.incidents else [],
        _section_tests(records, True) if records.incidents else [],
        _section_tests(records, False) if records.incidents else [],
        _section_new_failures(records),
        _section_grid(records) if records.incidents else [],
        _section_timeline(records) if mermaid and records.incidents else [],
        _per_incident(records, "### Decision Point", _decision) if records.incidents else [],
        _section_next(records),
        _section_shards(records),
    ]
    for extra in extra_sections:
        title = text(extra.get("title") or "Extra", 120)
        body = str(extra.get("markdown") or "").strip("\n")
        sections.append([f"### {title}", ""] + ([body] if body else []))
    for section in sections:
        if section:
            lines += [""] + section
    return "\n".join(line.rstrip() if line.strip() else "" for line in lines) + "\n"


def render_terminal(report: ReportInput) -> list[str]:
    """A few plain lines for pytest's terminal summary (no markdown, each one line)."""
    records = as_report(report)
    incidents = records.incidents
    if not incidents:
        return [f"{REPORT_TITLE}: no incidents"]
    verdict = _verdict(records, records.stop_reason or "")
    retries = records.total_retries
    lines = [
        f"{REPORT_TITLE}: {records.final_status}, {verdict} ({plural(len(incidents), 'incident')}, "
        f"{retries} {'retry' if retries == 1 else 'retries'}{'' if records.enabled else ', disabled'})"
    ]
    shown_incidents = incidents[:TERMINAL_MAX_INCIDENTS]
    for entry in shown_incidents:
        tasks = [f"{t.task} {t.attempts}x {t.stop_reason or NOT_RUN}" if t.attempts else f"{t.task} {NOT_RUN}"
                 for t in entry.tasks]
        shown = ", ".join(tasks[:6]) + (f", +{len(tasks) - 6} more" if len(tasks) > 6 else "") or "no plan yet"
        state = entry.stop_reason or ("not finished" if entry.loops_used else NOT_RUN)
        lines.append(f"  {entry.incident_id}: {entry.final_status} ({state}) "
                     f"after {plural(entry.loops_used, 'iteration')}: {shown}")
    if len(incidents) > TERMINAL_MAX_INCIDENTS:
        lines.append(f"  … {len(incidents) - TERMINAL_MAX_INCIDENTS} more incidents")
    for fixed, label in ((False, "flaky"), (True, "fixed")):
        tests = unique(t for e in incidents for t in (e.tests_fixed if fixed else e.flaky_tests))
        if tests:
            more = f", +{len(tests) - TERMINAL_MAX_TESTS} more" if len(tests) > TERMINAL_MAX_TESTS else ""
            lines.append(f"  {label}: {', '.join(tests[:TERMINAL_MAX_TESTS])}{more}")
    lines.append(f"  next: {records.recommended_next_action}")
    # Data may hold newlines: keep every entry one terminal line.
    plain = [("  " if line.startswith("  ") else "") + " ".join(line.split()) for line in lines]
    # The headline and each incident's line are shown in the colour of their final status.
    tones = [final_tone(s) for s in [records.final_status] + [e.final_status for e in shown_incidents]]
    return [Line(line, tone) for line, tone in zip(plain, tones)] + plain[len(tones):]
