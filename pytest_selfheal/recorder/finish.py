"""The end of a ``pytest --selfheal`` session that has something to record (edge): an open
incident's next iteration or a new incident, the loop when asked, the report."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.capture.context import probe_platform
from pytest_selfheal.capture.incident import Reports
from pytest_selfheal.capture.options import capture_options
from pytest_selfheal.capture.run import analyse_run, capture_incident, record_passed_on_rerun
from pytest_selfheal.config.seal import loaded_now, take_seal
from pytest_selfheal.config.settings import judging_values
from pytest_selfheal.errors import InputError, SelfhealError
from pytest_selfheal.gitrepo import PendingSnapshot
from pytest_selfheal.history.segments import ci_capture_run_id
from pytest_selfheal.junit import reader
from pytest_selfheal.plan.suspects import PASSING_SPECTRUM_FILE, passing_spectrum
from pytest_selfheal.recorder import ROOT_CAUSE_ATTR, Recorder, flag_or_ini
from pytest_selfheal.records.incident import RootCause
from pytest_selfheal.records.models import Failure
from pytest_selfheal.records.redacted import bounded_nodeid
from pytest_selfheal.records.seal import Seal
from pytest_selfheal.records.vocab import DETAIL, ESSENTIAL, SUMMARY, Line, Tone
from pytest_selfheal.report.data import IncidentRun, build_report
from pytest_selfheal.report.load import load_incident_run
from pytest_selfheal.report.render import render_terminal
from pytest_selfheal.report.sections import report_markdown
from pytest_selfheal.store import judging
from pytest_selfheal.store.fsio import atomic_write_text, project_path


def failed_reports(recorder: Recorder, kept: Optional[Sequence[Any]] = None) -> list[tuple[str, Any]]:
    """pytest's failing reports with their node ids cut and redacted once for every document; the first of a phase."""
    redactor = recorder.redactor
    reports: list[tuple[str, Any]] = []
    phases: set[tuple[str, object]] = set()
    for report in recorder.failed if kept is None else kept:
        phase = (report.nodeid, getattr(report, "when", None))
        if phase in phases:
            continue
        phases.add(phase)
        nodeid = redactor.redact(bounded_nodeid(report.nodeid))
        if kept is None and "tdd" in getattr(report, "keywords", {}) and nodeid not in recorder.tdd_nodeids:
            recorder.tdd_nodeids.append(nodeid)
        reports.append((nodeid, report))
    return reports


def root_causes(reports: Reports, resolved: Mapping[str, RootCause]) -> dict[str, RootCause]:
    """Each failing test's evidence by node id as written: an xdist worker's rides on its report."""
    evidence: dict[str, RootCause] = {}
    for nodeid, report in reports:
        found = _carried(getattr(report, ROOT_CAUSE_ATTR, None)) or resolved.get(report.nodeid)
        if found is not None:
            evidence.setdefault(nodeid, found)
    return evidence


def _carried(payload: object) -> Optional[RootCause]:
    """The evidence an xdist worker's report carries, or None when it does not parse (it only groups failures)."""
    if not payload or not isinstance(payload, Mapping):
        return None
    try:
        return RootCause.from_json(dict(payload), "root cause")
    except InputError:
        return None


def finish_session(recorder: Recorder, exitstatus: int) -> None:
    """Record what the run found, then the report, in ``recorder.lines``; an error is one line there."""
    try:
        _finish(recorder, exitstatus)
    except SelfhealError as exc:
        recorder.lines.append((ESSENTIAL, Line(f"selfheal: error: {exc}", Tone.BAD)))
    except Exception as exc:
        recorder.lines.append((ESSENTIAL, Line(
            f"selfheal: internal error ({type(exc).__name__}: {exc}); the test run itself is unaffected", Tone.BAD)))


def _finish(recorder: Recorder, exitstatus: int) -> None:
    project_path(recorder.config.rootpath, recorder.effective.settings.reports_dir, "reports_dir")
    reports = failed_reports(recorder)
    counts = {"tests": recorder.tests, "failed": len(reports), "skipped": recorder.skipped}
    if recorder.reruns:
        counts["rerun"] = len(recorder.reruns)  # pytest's own count: failed runs run again
    warnings: list[str] = []
    git: Optional[PendingSnapshot] = None
    if reports and not recorder.open_incidents:
        # Every failure will be captured: its git and platform subprocesses run during the analysis.
        git = PendingSnapshot(Path(recorder.config.rootpath), exclude=[recorder.reports_root])
        probe_platform()
    evidence = root_causes(reports, recorder.evidence)
    if recorder.spectrum is not None:
        ranked = recorder.spectrum.evidence()
        evidence = {nodeid: found for nodeid in dict.fromkeys(n for n, _ in reports)
                    if (found := ranked.root_cause(nodeid, evidence.get(nodeid))) is not None}
        if reports and not ranked.top:
            warnings.append(f"--selfheal-spectrum recorded no spectrum: {recorder.spectrum.why_empty()}")
    failures = analyse_run(config=recorder.config, effective=recorder.effective, reports=reports, evidence=evidence,
                           warnings=warnings)
    passed_on_rerun = _passed_on_rerun(recorder, warnings)
    covered: set[str] = set()
    still_open: list[str] = []
    iterated: list[str] = []  # incidents this run was an iteration of: never "already stopped" by it
    # The run's replayable options: compared by agent mode, recorded by a capture (and its filters).
    options, filters = capture_options(recorder.config)
    if recorder.outcomes or recorder.gone:
        agent = recorder.loop_side().record_attempts(failures, exitstatus, options)
        recorder.lines.extend((ESSENTIAL, line) for line in agent.lines)
        covered, still_open, iterated = agent.covered, agent.still_open, agent.touched
    remaining = [f for f in failures if f.nodeid not in covered]
    if (remaining or recorder.passed) and not still_open and not recorder.ci_run and recorder.has_stopped_incidents():
        remaining, continued = recorder.loop_side().attach_to_stopped(remaining, failures, git, exitstatus,
                                                                      options, iterated)
        still_open += continued
    if not remaining and not still_open and recorder.passed and recorder.remembers_stops():
        recorder.lines.extend((ESSENTIAL, line) for line in forgotten_stop_lines(
            Path(recorder.config.rootpath), recorder.reports_root))
    if remaining and still_open:
        # One incident at a time: new failures wait in the attempt until the open one closes.
        recorder.lines.append((SUMMARY,
            f"{len(remaining)} new failure(s) outside the open incident's selection: recorded in its attempt; "
            "they are captured as their own incident once it closes"
        ))
    elif remaining:
        nodeids = {f.nodeid for f in remaining}
        # Failing tests the junit reader did not keep (its cap): counted, never verified.
        failing_ids = len({nodeid for nodeid, _ in reports})
        unverified = failing_ids - len(failures) if len(failures) >= reader.MAX_FAILURES else 0
        result = capture_incident(
            config=recorder.config,
            effective=recorder.effective,
            reports=[(nodeid, report) for nodeid, report in reports if nodeid in nodeids],
            failures=remaining,
            counts=counts,
            reports_root=recorder.reports_root,
            tdd_nodeids=[n for n in recorder.tdd_nodeids if n in nodeids],
            pytest_options=options,
            pytest_filters=filters,
            warnings=warnings,
            ci_run=recorder.ci_run,
            git=git,
            unverified=max(0, unverified),
            seal=run_seal(recorder, [p for f in remaining for p in f.target_paths]),
            passed_on_rerun=passed_on_rerun,
            reruns=Counter(recorder.redactor.redact(bounded_nodeid(r.nodeid)) for r in recorder.reruns),
        )
        passed_on_rerun = []  # recorded with the capture
        recorder.incident_id = result.incident_id
        recorder.captured = IncidentRun(incident=result.incident, plan=result.plan)  # the report's input, as written
        if recorder.spectrum is not None and recorder.spectrum.passed:  # the regression check's reach
            recorder.loop_side().store().write_run_file(result.incident_id, PASSING_SPECTRUM_FILE, json.dumps(
                passing_spectrum(recorder.spectrum.covered, recorder.spectrum.passed)))
        recorder.lines.extend((ESSENTIAL if index == 0 else DETAIL, line)
                              for index, line in enumerate(result.summary_lines))
        if flag_or_ini(recorder.config, "selfheal_loop"):
            recorder.captured = recorder.loop_side().run_loop(recorder.captured)
    if passed_on_rerun:
        lines = record_passed_on_rerun(config=recorder.config, effective=recorder.effective,
                                       passed_on_rerun=passed_on_rerun, counts=counts,
                                       reports_root=recorder.reports_root, warnings=warnings,
                                       run_id=ci_capture_run_id(recorder.ci_run) if recorder.ci_run else None)
        recorder.lines.extend((SUMMARY if index == 0 else DETAIL, line) for index, line in enumerate(lines))
    recorder.lines.extend((SUMMARY, Line(f"warning: {w}", Tone.WARN)) for w in warnings)
    _write_report(recorder)


def forgotten_stop_lines(project_root: Path, reports_root: Path) -> list[str]:
    """A green run over a not-a-fix stop whose records are gone: that stop again, never a pass."""
    return [line for stop in judging.forgotten_stops(project_root, reports_root) for line in (
        Line(judging.forgotten_line(stop), Tone.BAD),
        f"selfheal: incident {stop.incident_id} stopped {stop.stop_reason} ({stop.detail}); {judging.RECORDS_GONE}: "
        "kept outside the project, the stop stands (docs/loop.md)")]


def _passed_on_rerun(recorder: Recorder, warnings: list[str]) -> list[Failure]:
    """The tests that passed on a re-run, analysed from their first failed run as any failure is."""
    nodeids = set(recorder.passed_on_rerun())
    if not nodeids:
        return []
    first: dict[str, Any] = {}
    for failed in recorder.reruns:
        if failed.nodeid in nodeids:
            first.setdefault(failed.nodeid, failed)
    reports = failed_reports(recorder, list(first.values()))
    return analyse_run(config=recorder.config, effective=recorder.effective, reports=reports,
                       evidence=root_causes(reports, {}), warnings=warnings, user_junit=False)


def run_seal(recorder: Recorder, code: Sequence[str] = ()) -> Seal:
    """This run's seal (taken when it captures); ``code``: more modules to check for test-aware code."""
    config = recorder.config
    root = Path(config.rootpath)
    reported = itertools.chain(recorder.passed, recorder.skipped_ids, (f.nodeid for f in recorder.failed))
    ini = config.inipath
    inifile = None if ini is None else Path(ini).relative_to(root).as_posix() if ini.is_relative_to(root) else str(ini)
    return take_seal(root, test_files={n.split("::", 1)[0] for n in reported}, inifile=inifile,
                     judging=judging_values(recorder.effective), extra_code=code,
                     loaded=loaded_now(config.pluginmanager.get_plugins(), recorder.test_data_read()))


def _write_report(recorder: Recorder) -> None:
    """The compact report in the terminal; the full markdown to report_path when set."""
    ids = [i for i in [recorder.incident_id] if i] + [  # and the open incidents this run was an attempt of
        i.incident_id for i in recorder.open_incidents if any(n in recorder.outcomes for n in i.selection)]
    if not ids:
        return
    captured = recorder.captured
    report = build_report(
        incidents=[captured if captured is not None and i == recorder.incident_id
                   else load_incident_run(recorder.loop_side().store(), i)
                   for i in dict.fromkeys(ids)],
        effective_config=recorder.effective.values,
        origins=recorder.effective.origins,
        enabled=recorder.effective.settings.enabled,
    )
    for line in render_terminal(report):
        if recorder.ci_run and line.startswith("  next:"):
            # `selfheal ci` loops what this run captured right after it: no command to type.
            line = "  next: selfheal ci runs the RALF-Lite loop on what this run captured"
        # The one `next:` line is essential; the report's per-incident lines are details.
        level = ESSENTIAL if line.startswith("  next:") else DETAIL if line.startswith("  ") else SUMMARY
        recorder.lines.append((level, line))
    path = recorder.effective.settings.report_path
    if path:
        target = project_path(recorder.config.rootpath, str(path), "report_path")
        atomic_write_text(target, recorder.redactor.redact(report_markdown(report, recorder.config.pluginmanager)))
        recorder.lines.append((SUMMARY, f"report written to {target}"))
