"""Capture a failing pytest run as an incident with its plan (edge): junit → fingerprinted,
classified failures → ``error_inbox/<id>/`` → ``error_plans/<id>/``."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Optional

from pytest_selfheal import hooks
from pytest_selfheal.analysis.analyse import failures_from_cases
from pytest_selfheal.analysis.frames import target_paths
from pytest_selfheal.analysis.rules import parse_hook_rules, rules_for_run
from pytest_selfheal.analysis.testfiles import digests, test_code_paths
from pytest_selfheal.capture.context import run_context
from pytest_selfheal.capture.imports import local_imports
from pytest_selfheal.capture.incident import Reports, attach_nodeids, build_incident
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.gitrepo import PendingSnapshot, git_snapshot, ignored
from pytest_selfheal.history.recording import HistoryResult, record_and_triage, run_info
from pytest_selfheal.history.records import CAPTURE, FAILED, PASSED_ON_RERUN, TestOutcome
from pytest_selfheal.history.triage import rerun_count, triage_headline
from pytest_selfheal.junit.reader import iter_testcases
from pytest_selfheal.junit.writer import failure_text, junit_case
from pytest_selfheal.names import INBOX_DIR
from pytest_selfheal.plan.build import build_plan
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.records.context import GitContext
from pytest_selfheal.records.incident import Failure, Incident, RootCause, Triage
from pytest_selfheal.records.models import TestCaseResult
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.seal import Seal
from pytest_selfheal.records.vocab import FailureClass, TriageLabel
from pytest_selfheal.redact import redact_cases
from pytest_selfheal.store.events import FAILURE_CLASSIFIED, format_ts, pending
from pytest_selfheal.store.fsio import project_source
from pytest_selfheal.store.ids import new_run_id
from pytest_selfheal.store.root import Store

if TYPE_CHECKING:
    import pytest


@dataclass
class CaptureResult:
    """The incident id, the incident and plan as written (the report's input), the summary lines."""

    incident_id: str
    incident: Incident
    plan: Optional[Plan]
    summary_lines: list[str]


def log_tail(reports: Reports, max_lines: int) -> str:
    lines: list[str] = []
    for nodeid, report in reports:
        lines.append(f"{'_' * 20} {nodeid} ({report.when}) {'_' * 20}")
        lines.extend(failure_text(report).splitlines())
    if len(lines) > max_lines:
        dropped = len(lines) - max_lines
        lines = [f"[... {dropped} earlier lines omitted ...]"] + lines[-max_lines:]
    return "\n".join(lines) + "\n"


def invocation_dir(config: pytest.Config) -> str:
    """Where pytest was started, relative to its rootdir (POSIX; "" at the rootdir or outside it)."""
    try:
        rel = Path(os.path.realpath(config.invocation_params.dir)).relative_to(os.path.realpath(config.rootpath))
    except ValueError:
        return ""
    return "" if rel.as_posix() == "." else rel.as_posix()


def with_target_paths(
    failures: Sequence[Failure], reports: Reports, evidence: Mapping[str, RootCause], rootdir: Path, base: str = ""
) -> list[Failure]:
    """Attach the repo files each failure's traceback, test file and imports name, and its evidence."""
    text_by_nodeid: dict[str, str] = {}
    for nodeid, report in reports:
        text_by_nodeid[nodeid] = text_by_nodeid.get(nodeid, "") + failure_text(report) + "\n"
    repo_root = str(rootdir.resolve())
    imports_of: dict[str, list[str]] = {}  # one parse per test file, not one per failure
    out = []
    for failure in failures:
        nodeid = failure.nodeid or ""
        test_file = nodeid.split("::", 1)[0] if nodeid else ""
        if test_file and not (rootdir / test_file).is_file():
            test_file = ""  # not a file: a collector's directory, or an xdist worker (gw1) reporting an error
        if test_file and test_file not in imports_of:
            imports_of[test_file] = local_imports(test_file, rootdir)
        extra = [test_file] + imports_of[test_file] if test_file else []
        paths = target_paths(text_by_nodeid.get(nodeid, ""), repo_root, extra=extra, base=base)
        out.append(replace(failure, target_paths=tuple(paths), root_cause=evidence.get(nodeid)))
    # A generated, git-ignored file (``_version.py``) is never the code to fix: one git call.
    skip = ignored(rootdir, sorted({p for f in out for p in f.target_paths}))
    if skip:
        out = [replace(f, target_paths=tuple(p for p in f.target_paths if p not in skip)) for f in out]
    return out


# What a failure_classified event says of each failure.
_CLASSIFIED_KEYS = ("nodeid", "fingerprint", "signature", "failure_type", "code_fixable", "transient", "failure_class")


def _plan(written: Incident) -> tuple[Plan, str]:
    # From the incident as the store publishes it: no re-read of incident.json.
    built = build_plan(written, generated_at=format_ts(), source=project_source(written.rootdir))
    return built, render_plan_md(built)


def analyse_run(
    *,
    config: pytest.Config,
    effective: EffectiveConfig,
    reports: Reports,
    evidence: Mapping[str, RootCause],
    warnings: list[str],
    user_junit: bool = True,
) -> list[Failure]:
    """The run's failures from its junit testcases (the user's ``--junitxml`` or each report's), redacted first."""
    xmlpath = getattr(config.option, "xmlpath", None) if user_junit else None
    prefix = _junit_prefix(config)
    read: Iterable[TestCaseResult]
    if xmlpath and Path(xmlpath).is_file():
        read = iter_testcases(Path(xmlpath), warnings=warnings)
    else:
        read = [junit_case(report, nodeid, prefix) for nodeid, report in reports]
    rules = rules_for_run(effective.settings.classification_rules,
                          parse_hook_rules(hooks.classification_rules(config.pluginmanager)))
    failures = failures_from_cases(redact_cases(read, effective.redactor), extra_rules=rules, warnings=warnings)
    known = {nodeid for nodeid, _ in reports}
    failures = attach_nodeids(failures, reports, prefix)
    # A user's --junitxml holds the whole run; keep what this run's reports say failed.
    failures = [f for f in failures if f.nodeid in known] or failures
    return with_target_paths(failures, reports, evidence, Path(config.rootpath), invocation_dir(config))


def capture_incident(
    *,
    config: pytest.Config,
    effective: EffectiveConfig,
    reports: Reports,
    failures: Sequence[Failure],
    counts: Mapping[str, int],
    reports_root: Path,
    tdd_nodeids: Sequence[str] = (),
    pytest_options: Sequence[str] = (),
    pytest_filters: Sequence[str] = (),
    warnings: Optional[list[str]] = None,
    ci_run: Optional[str] = None,
    git: Optional[PendingSnapshot] = None,
    unverified: int = 0,
    seal: Optional[Seal] = None,
    passed_on_rerun: Sequence[Failure] = (),
    reruns: Mapping[str, int] = MappingProxyType({}),
) -> CaptureResult:
    """Capture this run's failures as a new incident (``unverified``: failing tests over the reader's cap)."""
    rootdir = Path(config.rootpath)
    redactor = effective.redactor
    run_id = new_run_id()
    incident = build_incident(failures, reports, counts=counts, rootdir=str(rootdir), run_id=run_id)
    # One git pass for context.json, the diff hash (iteration 1 sees a code change) and the history.
    snapshot = git.result() if git is not None else git_snapshot(rootdir, exclude=[reports_root])
    # The failure history: record this run, and triage each failure against the base branch.
    history = _record_history(effective, reports_root, rootdir, run_id, counts, failures, passed_on_rerun, warnings,
                              snapshot.context or GitContext())
    entries = _triaged_entries(incident.failures, history.triage)
    incident = replace(
        incident,
        failures=entries,
        passed_on_rerun=_triaged_entries(passed_on_rerun, history.triage),
        failure_class=entries[0].failure_class or incident.failure_class if entries else incident.failure_class,
        diff_hash=snapshot.diff_hash,
        test_digests=MappingProxyType(digests(rootdir, test_code_paths(f.nodeid or "" for f in failures))),
        tdd_nodeids=tuple(tdd_nodeids),
        unverified_failures=unverified,
        pytest_options=tuple(pytest_options),
        pytest_filters=tuple(pytest_filters),
        invocation_dir=invocation_dir(config) or None,  # verification runs start there too
        ci_run=ci_run or None,
        seal=seal,
    )
    context = run_context(rootdir, list(config.invocation_params.args), git=snapshot.context, redactor=redactor)
    tail = redactor.redact(log_tail(reports, effective.settings.log_tail_lines))
    written: list[tuple[Incident, Optional[Plan]]] = []
    classified = [pending(FAILURE_CLASSIFIED, {key: getattr(f, key) for key in _CLASSIFIED_KEYS}) for f in failures]
    # One step: the events, the plan and the move to `planned` are in place when the incident appears.
    incident_id = Store(reports_root, redactor=redactor).create_incident(
        incident, log_tail=tail, context=context, events=classified, plan=_plan,
        published=lambda doc, plan: written.append((doc, plan)))
    where = reports_root / INBOX_DIR / incident_id
    if where.is_relative_to(config.invocation_params.dir):
        where = where.relative_to(config.invocation_params.dir)
    labels = [t.label for f in failures if (t := history.triage.get(f.nodeid or f.test)) is not None]
    triaged = f" ({triage_headline(labels, history.base_branch)})" if labels else ""
    flaky = f", {rerun_count(len(passed_on_rerun))}" if passed_on_rerun else ""
    lines = [f"captured {incident_id}: {len(failures)} failure(s){triaged}{flaky} -> {where}"]
    if unverified:
        lines.append(f"  {unverified:,} more failing test(s) over the capture's cap of {len(failures):,} are never "
                     "verified: this incident cannot end in success")
    lines += failure_lines(failures, history.triage, reruns)
    if len(failures) > 10:
        lines.append(f"  ... and {len(failures) - 10} more (selfheal show {incident_id})")
    lines += failure_lines(passed_on_rerun, history.triage)
    return CaptureResult(incident_id, written[0][0], written[0][1], lines)


def failure_lines(failures: Sequence[Failure], triage: Mapping[str, Triage],
                  reruns: Mapping[str, int] = MappingProxyType({})) -> list[str]:
    lines = []
    for failure in failures[:10]:
        nodeid = failure.nodeid or failure.test
        found = triage.get(nodeid)
        label = f"{found.label:<11} " if found is not None else ""
        times = reruns.get(nodeid, 0)
        again = f" (failed again on {times} re-run{'s' if times != 1 else ''})" if times else ""
        lines.append(f"  {failure.fingerprint}  {failure.failure_type:<14} {label}{nodeid}{again}")
    return lines


def record_passed_on_rerun(
    *, config: pytest.Config, effective: EffectiveConfig, passed_on_rerun: Sequence[Failure],
    counts: Mapping[str, int], reports_root: Path, warnings: Optional[list[str]] = None, run_id: Optional[str] = None,
) -> list[str]:
    """Record tests that passed on a re-run as a history run of their own; the lines that say so."""
    history = _record_history(effective, reports_root, Path(config.rootpath), run_id or new_run_id(), counts, (),
                              passed_on_rerun, warnings)
    recorded = effective.settings.history.enabled and history.unavailable is None
    return [f"selfheal: {rerun_count(len(passed_on_rerun))}, {'' if recorded else 'not '}recorded in the history",
            *failure_lines(passed_on_rerun, history.triage)]


def _record_history(
    effective: EffectiveConfig, reports_root: Path, rootdir: Path, run_id: str, counts: Mapping[str, int],
    failures: Sequence[Failure], passed_on_rerun: Sequence[Failure], warnings: Optional[list[str]],
    git: Optional[GitContext] = None,
) -> HistoryResult:
    history = record_and_triage(
        reports_root, effective.settings.history,
        run_info(run_key=f"capture:{run_id}", kind=CAPTURE, project_root=rootdir, tests_run=counts.get("tests"), git=git),
        [TestOutcome(f.nodeid or f.test, outcome, f.fingerprint, f.failure_class)
         for outcome, group in ((FAILED, failures), (PASSED_ON_RERUN, passed_on_rerun)) for f in group],
        project_root=rootdir,
    )
    if warnings is not None:
        warnings.extend(history.warnings)
    return history


def _triaged_entries(entries: Sequence[Failure], triage: Mapping[str, Triage]) -> tuple[Failure, ...]:
    """The entries with their triage; one the history calls flaky is classed transient."""
    out = []
    for entry in entries:
        found = triage.get(str(entry.nodeid or entry.test))
        if found is not None:
            flaky = found.label == TriageLabel.FLAKY and entry.failure_class == FailureClass.DETERMINISTIC
            entry = replace(entry, triage=found, failure_class=FailureClass.TRANSIENT if flaky else entry.failure_class)
        out.append(entry)
    return tuple(out)


def _junit_prefix(config: pytest.Config) -> str:
    try:
        return str(config.getini("junit_prefix") or "")
    except ValueError:  # junitxml plugin disabled
        return ""
