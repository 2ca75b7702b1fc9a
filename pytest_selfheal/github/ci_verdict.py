"""The verdict of one ``selfheal ci`` run and its markdown (pure). A verdict read back from an
untrusted artifact is checked field by field (:func:`sanitize_ci_info`)."""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import pluggy

from pytest_selfheal.analysis.testfiles import tests_first
from pytest_selfheal.history.records import COMMIT_SHA
from pytest_selfheal.history.triage import QuarantineEntry, matching_entry, rerun_count
from pytest_selfheal.plan.markdown import fence
from pytest_selfheal.records.ci import NEW_FLAKY, NEW_STABLE, NEW_UNCHECKED, CiVerdict, NewTestResult, NewTestsCheck
from pytest_selfheal.records.models import FAILING_OUTCOMES
from pytest_selfheal.records.report import Report
from pytest_selfheal.records.vocab import FinalStatus
from pytest_selfheal.report.render import code, render_headline, text
from pytest_selfheal.report.sections import report_markdown
from pytest_selfheal.run import describe_pytest_exit
from pytest_selfheal.store.ids import is_incident_id

STOP_NONE = "none"  # the stop reason of ``selfheal ci`` when nothing was looped

_STATUS_WORD = re.compile(r"^[a-z][a-z_]{0,39}$")
_SAFE_URL = re.compile(r"^https?://[A-Za-z0-9._~:/?#@!$&'*+,;=%-]+$")


def verdict_without_incident(pytest_exit_code: int) -> CiVerdict:
    """The verdict when pytest captured no incident: passed, failed (not captured) or error."""
    status, reason = {0: (FinalStatus.PASSED, STOP_NONE), 1: (FinalStatus.FAILED, "not_captured")}.get(
        pytest_exit_code, (FinalStatus.ERROR, "pytest_error"))
    return CiVerdict(status, reason, 0, None, pytest_exit_code)


def located(verdict: CiVerdict, *, pull_request: Optional[int], head_sha: Any, run_url: Any) -> CiVerdict:
    """``verdict`` with where it ran; a head sha or URL that does not fit is dropped."""
    return dataclasses.replace(verdict, pull_request=pull_request,
                               head_sha=head_sha if isinstance(head_sha, str) and COMMIT_SHA.match(head_sha) else None,
                               run_url=normalised_url(run_url))


def normalised_url(url: Any) -> Optional[str]:
    """``url`` with its path's dot segments resolved (``%2e`` decoded first, as a browser
    does), or None when it is not a plain http(s) URL. A prefix check on the result means
    what it says: ``…/runs/1/../../../../attacker`` is ``https://github.com/attacker``."""
    if not isinstance(url, str) or not _SAFE_URL.match(url):
        return None
    parts = urllib.parse.urlsplit(url)
    segments = urllib.parse.unquote(parts.path).split("/")
    out: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment in (".", ".."):
            if segment == ".." and len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    path = urllib.parse.quote("/".join(out), safe="/:@!$&'()*+,;=-._~")
    rebuilt = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))
    return rebuilt if _SAFE_URL.match(rebuilt) else None


def _opt_int(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def sanitize_ci_info(data: Any, report: Report) -> CiVerdict:
    """The ``ci`` block of an untrusted report JSON; a field that does not fit is taken from the report or dropped."""
    given: Mapping[str, Any] = data if isinstance(data, Mapping) else {}
    iterations, pr, incident = _opt_int(given.get("iterations")), _opt_int(given.get("pull_request")), given.get("incident_id")
    verdict = CiVerdict(
        final_status=_word(given.get("final_status"), report.final_status, "unknown"),
        stop_reason=_word(given.get("stop_reason"), report.stop_reason, STOP_NONE),
        iterations=iterations if iterations is not None and iterations >= 0
        else int(_opt_int(report.total_retries) or 0),
        incident_id=incident if is_incident_id(incident) else None,
        pytest_exit_code=_opt_int(given.get("pytest_exit_code")),
        new_tests=sanitize_new_tests(given.get("new_tests")),
        passed_on_rerun=_nodeids(given.get("passed_on_rerun")),
    )
    return located(verdict, pull_request=pr if pr is not None and pr > 0 else None,
                   head_sha=given.get("head_sha"), run_url=given.get("run_url"))


def _word(*candidates: Any) -> str:
    """The first candidate that is a status word (the last one always is)."""
    return str(next(value for value in candidates if isinstance(value, str) and _STATUS_WORD.match(value)))


MAX_NEW_TESTS = 500  # new or changed tests (or re-run passes) kept from an artifact's ``ci`` block
RERUN_NAMES_SHOWN = 5  # tests named in the headline of a green run that passed some only on a re-run


def _count(value: Any) -> int:
    number = _opt_int(value)
    return number if number is not None and 0 <= number < 10**6 else 0


def _nodeids(data: Any) -> tuple[str, ...]:
    return tuple(n[:500] for n in data if isinstance(n, str))[:MAX_NEW_TESTS] if isinstance(data, list) else ()


def sanitize_new_tests(data: Any) -> Optional[NewTestsCheck]:
    """The ``new_tests`` block of an untrusted ``ci`` block (None when absent)."""
    if not isinstance(data, Mapping):
        return None
    tests: list[NewTestResult] = []
    given = data.get("tests")
    for item in given if isinstance(given, list) else []:
        if isinstance(item, Mapping) and isinstance(item.get("nodeid"), str) and len(tests) < MAX_NEW_TESTS:
            message = item.get("first_failure")
            tests.append(NewTestResult(item["nodeid"][:500], _count(item.get("passed")), _count(item.get("failed")),
                                       message[:300] if isinstance(message, str) else "",
                                       reruns=_count(item.get("reruns")), planned=_count(item.get("planned"))))
    note = data.get("note")
    return NewTestsCheck(note[:500] if isinstance(note, str) else "", tuple(tests), _opt_int(data.get("seed")),
                         _count(data.get("reruns")), _count(data.get("not_rerun")), data.get("fails_job") is True,
                         data.get("unchecked_fails_job") is True)


NEW_TESTS_SHOWN = 20  # tests named per label in the summary and the comment


def _listed(tests: Sequence[NewTestResult], label: str, lines: list[str], consequence: str, detail: str) -> None:
    chosen = [t for t in tests if t.label == label]
    if not chosen:
        return
    word = label.split(" ")[0]  # "flaky (new)": these are new tests already
    lines += [f"**{len(chosen)} new or changed test{'s are' if len(chosen) != 1 else ' is'} {word}** — "
              f"{detail}; {consequence}:", ""]
    for test in chosen[:NEW_TESTS_SHOWN]:
        failure = f": {text(test.first_failure, 200)}" if test.first_failure else ""
        runs = (f"{test.passed} passed, {test.failed} failed" if label == NEW_FLAKY
                else f"re-run {test.reruns} of {test.planned} time(s)")
        lines.append(f"- {label} {code(test.nodeid, 200)} — {runs}{failure}")
    if len(chosen) > NEW_TESTS_SHOWN:
        lines.append(f"- … and {len(chosen) - NEW_TESTS_SHOWN} more (the report JSON lists them all)")
    lines.append("")


def new_tests_section(check: NewTestsCheck) -> str:
    """``### New tests checked for flakiness``: the flaky, the unchecked, the checked, the note."""
    lines = ["### New tests checked for flakiness", ""]
    _listed(check.tests, NEW_FLAKY, lines,
            "this fails the job" if check.fails_job else "reported only (`fail-on-new-flaky: false`)",
            "passed and failed on the same code")
    _listed(check.tests, NEW_UNCHECKED, lines,
            "this fails the job" if check.unchecked_fails_job else "reported only (`fail-on-new-unchecked: false`)",
            "not re-run their count, so not checked")
    stable = [t for t in check.tests if t.label == NEW_STABLE]
    if stable:
        shown = ", ".join(code(t.nodeid, 120) for t in stable[:NEW_TESTS_SHOWN])
        more = f" and {len(stable) - NEW_TESTS_SHOWN} more" if len(stable) > NEW_TESTS_SHOWN else ""
        lines += [f"Checked, passed every run: {shown}{more}", ""]
    flaky = check.flaky
    if flaky and check.seed is not None:
        lines += [f"Next: make {'them' if len(flaky) != 1 else 'it'} deterministic (shared state, run order, time, "
                  f"randomness); `selfheal ci --set new_tests.seed={check.seed}` replays the same orders.", ""]
    lines += [f"_{text(check.note, 500)}_", ""]
    return "\n".join(lines) + "\n"


def ci_headline(report: Report, info: CiVerdict) -> str:
    """The first line of the job summary and the PR comment: the report's own headline when it
    agrees with ``info``, else the same shape built from ``info``."""
    if report.incidents and report.stop_reason == info.stop_reason and report.final_status == info.final_status:
        return render_headline(report)
    status = text(info.final_status, 60)
    verdict = f"{status} — stop reason {code(info.stop_reason, 60)}"
    exit_code, new_tests = info.pytest_exit_code, info.new_tests
    odd, what = ((), "") if new_tests is None else (new_tests.flaky, "passed and failed on re-runs") if (
        new_tests.flaky) else (new_tests.unchecked, "could not be re-run their count")
    if info.final_status == FinalStatus.PASSED and new_tests is not None and odd:
        details = (f"pytest passed, but {len(odd)} new or changed test{'s' if len(odd) != 1 else ''} {what} (below)"
                   + ("; the job fails" if new_tests.fails else ""))
    elif info.final_status == FinalStatus.PASSED and info.passed_on_rerun:
        shown = info.passed_on_rerun[:RERUN_NAMES_SHOWN]
        more = f" and {len(info.passed_on_rerun) - len(shown)} more" if len(info.passed_on_rerun) > len(shown) else ""
        details = (f"pytest passed, {rerun_count(len(info.passed_on_rerun))}: "
                   f"{', '.join(shown)}{more}; nothing to loop")
    elif info.final_status == FinalStatus.PASSED:
        details = "pytest passed: no failing test, nothing to loop"
    elif info.final_status == FinalStatus.FAILED:
        details = f"pytest exit code {exit_code}: tests failed but no incident was captured — see the job log"
    elif info.final_status == FinalStatus.ERROR:
        details = f"pytest exit code {exit_code}: {describe_pytest_exit(exit_code)}"
    elif info.final_status == FinalStatus.FIX_PROPOSED:
        details = ("fixed in an isolated worktree and verified there; the fix is only proposed (below): "
                   "the code of this commit still fails")
    else:
        iterations = info.iterations
        who = info.incident_id or f"{len(report.incidents)} incidents"
        details = f"{who}, {iterations} iteration{'s' if iterations != 1 else ''}"
    return f"**selfheal: {verdict}** ({text(details, 300)})"


def unresolved_failures(report: Report) -> dict[str, Optional[str]]:
    """``{node id: fingerprint}`` of every test still failing when the loop stopped, by its latest
    outcome (one no iteration re-ran still fails), neither fixed nor flaky."""
    failing: dict[str, Optional[str]] = {}
    for entry in report.incidents:
        fingerprints: dict[str, Optional[str]] = dict.fromkeys(entry.capture_tests)
        for item in entry.triage + entry.new_failures:
            if item.nodeid:
                fingerprints[item.nodeid] = fingerprints.get(item.nodeid) or item.fingerprint
        latest = {nodeid: outcome for iteration in entry.iterations for nodeid, outcome in iteration.outcomes.items()}
        done = set(entry.tests_fixed) | set(entry.flaky_tests)
        for nodeid, fingerprint in fingerprints.items():
            if nodeid not in done and latest.get(nodeid, "failed") in FAILING_OUTCOMES:
                failing[nodeid] = fingerprint
    return failing


def only_quarantined(report: Report, quarantine: Sequence[QuarantineEntry]) -> dict[str, str]:
    """``{node id: reason}`` when ``quarantine`` covers every test still failing, else ``{}``."""
    found = {nodeid: matching_entry(quarantine, nodeid=nodeid, fingerprint=fingerprint or "")
             for nodeid, fingerprint in unresolved_failures(report).items()}
    return {nodeid: entry.reason for nodeid, entry in found.items() if entry} if all(found.values()) else {}


def render_ci_markdown(report: Report, info: CiVerdict, *, error: Optional[str] = None,
                       pm: Optional[pluggy.PluginManager] = None, proposed_patch: Optional[bytes] = None) -> str:
    """The headline, the check of new tests, a fix only proposed, the report with the sections of
    ``pm``'s hooks (a failing one is a ``ConfigError``), and a loop ``error``."""
    body = f"{ci_headline(report, info)}\n\n"
    if info.new_tests is not None:
        body += new_tests_section(info.new_tests)
    if proposed_patch is not None:
        body += proposed_fix_section(proposed_patch)
    body += report_markdown(report, pm)
    if error:
        body += f"\n### selfheal ci error\n\n{text(error, 500)}\n"
    return body


PATCH_LIMIT = 20_000  # characters of a proposed patch shown in the summary and the comment


def proposed_fix_section(patch: bytes, limit: int = PATCH_LIMIT) -> str:
    """``### Proposed fix``: the patch in an inert diff fence, cut to ``limit`` characters."""
    text = tests_first(patch.decode("utf-8", errors="replace"))
    note = ""
    if len(text) > limit:
        note = f"\n_(cut at {limit:,} of {len(text):,} characters: the whole patch is `final.patch` in the reports root)_\n"
        text = text[:limit]
    ticks = fence(text)
    return (f"### Proposed fix\n\nNot in this commit: apply it with `selfheal apply` (or as a suggestion), then push."
            f"\n\n{ticks}diff\n{text.rstrip()}\n{ticks}\n{note}\n")


def comment_footer(info: CiVerdict) -> str:
    """The PR comment's last line: the workflow run and the commit."""
    parts = []
    if info.run_url:
        parts.append(f"[workflow run]({info.run_url})")
    if info.head_sha:
        parts.append(f"commit `{info.head_sha[:12]}`")
    return f"\n<sub>pytest-selfheal · {' · '.join(parts)}</sub>\n" if parts else ""
