"""The end of a ``pytest --selfheal`` session that has something to record (edge).

Loaded by the recorder at session end, on the controller, only when a test failed or an
open incident's test ran: a green run never imports this module nor the capture, plan,
report and store machinery below it (docs/benchmarks.md, "Green run"). It records the next
iteration of an open incident (agent mode) or captures a new incident, optionally runs the
loop, and writes the report.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from pytest_selfheal.capture.context import probe_platform
from pytest_selfheal.capture.options import capture_options
from pytest_selfheal.capture.run import (
    analyse_run,
    capture_incident,
    invocation_dir,
    record_passed_on_rerun,
    root_cause_of,
)
from pytest_selfheal.config.seal import Loaded, loaded_now, take_seal
from pytest_selfheal.config.settings import judging_values
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gitrepo import PendingSnapshot, diff_hash
from pytest_selfheal.history.segment_dir import ci_capture_run_id
from pytest_selfheal.junit import reader
from pytest_selfheal.junit.writer import FailedReport
from pytest_selfheal.names import PROJECT_DIR
from pytest_selfheal.recorder import DETAIL, ESSENTIAL, SUMMARY, Failed, Recorder
from pytest_selfheal.records.models import Failure
from pytest_selfheal.records.redacted import bounded_nodeid
from pytest_selfheal.records.seal import Seal
from pytest_selfheal.records.vocab import Line, Tone
from pytest_selfheal.report.data import IncidentRun, build_report
from pytest_selfheal.report.load import load_incident_run
from pytest_selfheal.report.render import render_terminal
from pytest_selfheal.report.sections import report_markdown
from pytest_selfheal.store.fsio import atomic_write_text, project_path

if TYPE_CHECKING:
    from pytest_selfheal.loop.agent_mode import OpenIncident


def failed_reports(recorder: Recorder, kept: Optional[Sequence[Failed]] = None) -> list[FailedReport]:
    """The failing reports the run kept (or ``kept``), as every document holds them: the node
    id redacted (a parametrize id can carry a secret), the failing tests marked ``tdd`` noted
    on the recorder."""
    redactor = recorder.redactor
    reports: list[FailedReport] = []
    for failed in recorder.failed if kept is None else kept:
        nodeid = redactor.redact(bounded_nodeid(failed.nodeid))  # cut as the junit reader cuts it
        if kept is None and failed.tdd and nodeid not in recorder.tdd_nodeids:
            recorder.tdd_nodeids.append(nodeid)
        reports.append(FailedReport(nodeid=nodeid, when=failed.when, message=failed.message, text=failed.text,
                                    file=failed.file, line=failed.line, duration=failed.duration,
                                    root_cause=root_cause_of(failed.root_cause)))
    return reports


def finish_session(recorder: Recorder, exitstatus: int) -> None:
    """Record what the run found: agent attempts, a stopped incident's next iteration or a new
    incident (with the loop when asked), then the report; the lines go to ``recorder.lines``.
    An error is one line there: the plugin never changes pytest's outcome."""
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
        # Every failure will be captured: the capture's git and platform reads (subprocesses)
        # run while the failures are analysed.
        git = PendingSnapshot(Path(recorder.config.rootpath), exclude=[recorder.reports_root])
        probe_platform()
    # Evidence resolved in this process after the report was logged (xdist's rides on the report).
    evidence = recorder.evidence
    reports = [
        replace(r, root_cause=evidence[r.nodeid]) if r.root_cause is None and r.nodeid in evidence else r
        for r in reports
    ]
    if recorder.spectrum is not None:
        ranked = recorder.spectrum.evidence()
        reports = [replace(r, root_cause=ranked.root_cause(r.nodeid, r.root_cause)) for r in reports]
        if reports and not ranked.top:
            warnings.append(f"--selfheal-spectrum recorded no spectrum: {recorder.spectrum.why_empty()}")
    failures = analyse_run(
        config=recorder.config, effective=recorder.effective, reports=reports, counts=counts, warnings=warnings,
        redactor=recorder.redactor,
    )
    passed_on_rerun = _passed_on_rerun(recorder, counts, warnings)
    covered: set[str] = set()
    still_open: list[str] = []
    iterated: list[str] = []  # incidents this run was an iteration of: never "already stopped" by it
    # The run's replayable options: compared by agent mode, recorded by a capture.
    options, options_problem = capture_options(recorder.config)
    if recorder.outcomes or recorder.gone:
        # Imported here: a run that only captures never loads the loop side.
        from pytest_selfheal.loop.agent_mode import record_agent_attempts

        agent = record_agent_attempts(
            store=recorder.store(),
            effective=recorder.effective,
            incidents=recorder.open_incidents,
            outcomes=recorder.outcomes,
            failures=failures,
            project_root=Path(recorder.config.rootpath),
            reports_root=recorder.reports_root,
            invocation=list(recorder.config.invocation_params.args),
            started_at=recorder.started_at,
            exit_code=exitstatus,
            run_options=None if options_problem else options,
            run_dir=invocation_dir(recorder.config),
            loaded=_loaded(recorder),
            gone=recorder.gone,
        )
        recorder.lines.extend((ESSENTIAL, line) for line in agent.lines)
        covered, still_open, iterated = agent.covered, agent.still_open, agent.touched
    remaining = [f for f in failures if f.nodeid not in covered]
    if (remaining or recorder.passed) and not still_open and not recorder.ci_run and recorder.has_stopped_incidents():
        remaining, continued = _attach_to_stopped(recorder, remaining, failures, git, exitstatus,
                                                  None if options_problem else options, iterated)
        still_open += continued
    if remaining and still_open:
        # One incident at a time: new failures wait in the attempt until the open one closes.
        recorder.lines.append((SUMMARY,
            f"{len(remaining)} new failure(s) outside the open incident's selection: recorded in its attempt; "
            "they are captured as their own incident once it closes"
        ))
    elif remaining:
        nodeids = {f.nodeid for f in remaining}
        if options_problem:
            warnings.append(options_problem)
        # Failing tests the junit reader did not keep (its cap): counted, never verified.
        failing_ids = len({r.nodeid for r in reports})
        unverified = failing_ids - len(failures) if len(failures) >= reader.MAX_FAILURES else 0
        result = capture_incident(
            config=recorder.config,
            effective=recorder.effective,
            reports=[r for r in reports if r.nodeid in nodeids],
            failures=remaining,
            counts=counts,
            reports_root=recorder.reports_root,
            tdd_nodeids=[n for n in recorder.tdd_nodeids if n in nodeids],
            pytest_options=options,
            warnings=warnings,
            ci_run=recorder.ci_run,
            redactor=recorder.redactor,
            git=git,
            unverified=max(0, unverified),
            seal=run_seal(recorder, [p for f in remaining for p in f.target_paths]),
            passed_on_rerun=passed_on_rerun,
            reruns=Counter(recorder.known_id(r.nodeid) for r in recorder.reruns),
        )
        passed_on_rerun = []  # recorded with the capture
        recorder.incident_id = result.incident_id
        recorder.captured = IncidentRun(incident=result.incident, plan=result.plan)
        recorder.lines.extend((ESSENTIAL if index == 0 else DETAIL, line)
                              for index, line in enumerate(result.summary_lines))
        if recorder.loop_requested():
            _run_loop(recorder, result.incident_id)
    if passed_on_rerun:
        lines = record_passed_on_rerun(config=recorder.config, effective=recorder.effective,
                                       passed_on_rerun=passed_on_rerun, counts=counts,
                                       reports_root=recorder.reports_root, warnings=warnings,
                                       run_id=ci_capture_run_id(recorder.ci_run) if recorder.ci_run else None)
        recorder.lines.extend((SUMMARY if index == 0 else DETAIL, line) for index, line in enumerate(lines))
    recorder.lines.extend((SUMMARY, Line(f"warning: {w}", Tone.WARN)) for w in warnings)
    _write_report(recorder)


def _passed_on_rerun(recorder: Recorder, counts: dict[str, int], warnings: list[str]) -> list[Failure]:
    """The tests that passed on a re-run, fingerprinted and classified from their first
    failed run as any failure is (the one path: our junit document, the junit reader)."""
    nodeids = set(recorder.passed_on_rerun())
    if not nodeids:
        return []
    first: dict[str, Failed] = {}
    for failed in recorder.reruns:
        if failed.nodeid in nodeids:
            first.setdefault(failed.nodeid, failed)
    return analyse_run(config=recorder.config, effective=recorder.effective,
                       reports=failed_reports(recorder, list(first.values())), counts=counts, warnings=warnings,
                       redactor=recorder.redactor, user_junit=False)


def _loaded(recorder: Recorder) -> Loaded:
    """What this run loaded and read; selfheal's own files (the reports root, the project
    config) are no test data."""
    own = tuple(os.path.join(p, "") for p in (recorder.reports_root, Path(recorder.config.rootpath, PROJECT_DIR)))
    return loaded_now(recorder.config.pluginmanager.get_plugins(),
                      [f for f in recorder.read_files.files() if not f.startswith(own)])


def run_seal(recorder: Recorder, code: Sequence[str] = ()) -> Seal:
    """The seal of this run (config/seal.py), taken only when it captures: the test modules it
    collected (every test it reported is in one), its inifile, what it loaded, the judging keys.
    ``code``: modules to check for test-aware code beside those this process imported."""
    config = recorder.config
    root = Path(config.rootpath)
    reported = itertools.chain(recorder.passed, recorder.skipped_ids, (f.nodeid for f in recorder.failed))
    inipath = config.inipath
    inifile = None
    if inipath is not None:
        inifile = Path(inipath).relative_to(root).as_posix() if Path(inipath).is_relative_to(root) else str(inipath)
    return take_seal(root, test_files={n.split("::", 1)[0] for n in reported}, inifile=inifile,
                     judging=judging_values(recorder.effective), extra_code=code,
                     loaded=_loaded(recorder))


def _attach_to_stopped(
    recorder: Recorder, remaining: list[Any], failures: list[Any], git: Optional[PendingSnapshot], exitstatus: int,
    run_options: Optional[list[str]], iterated: list[str],
) -> tuple[list[Any], list[str]]:
    """A stop sticks (loop/sticky.py): failures a stopped incident holds are not a new
    incident, and tests it holds passing may be the same verdict. Code unchanged → STOP
    already_stopped; changed → that incident's next iteration. Returns the failures left to
    capture and the incidents still open."""
    # Imported here: a run that only captures never loads the loop side.
    from pytest_selfheal.loop import agent_mode, sticky

    store = recorder.store()
    stopped = sticky.stopped_incidents(store)
    if not stopped:
        return remaining, []
    root = Path(recorder.config.rootpath)
    diff = git.result().diff_hash if git is not None else diff_hash(root, exclude=[recorder.reports_root])
    matches, rest = sticky.match_stopped(stopped, remaining, diff) if remaining else ([], [])
    matches += sticky.match_green(
        stopped, sticky.as_known(stopped, recorder.passed, recorder.known_id), {f.nodeid for f in failures if f.nodeid},
        diff,
        sticky.tests_changed(store, root),
        taken={m.incident.incident_id for m in matches} | set(iterated))
    still_open: list[str] = []
    max_iterations = recorder.effective.settings.max_iterations
    for match in matches:
        sticky.record_attached(store, match, diff)
        if match.attachment is sticky.Attachment.ALREADY_STOPPED:
            recorder.lines.append((ESSENTIAL, sticky.already_stopped_line(match, max_iterations)))
            recorder.lines.append((ESSENTIAL, sticky.next_step(match)))
            continue
        incident_id = match.incident.incident_id
        sticky.continue_stopped(store, match)
        recorder.lines.append((SUMMARY, f"selfheal: incident {incident_id} stopped ({match.incident.stop_reason}) "
                                        "and the code changed since: this run is its next iteration"))
        resumed = [i for i in agent_mode.open_incidents(store) if i.incident_id == incident_id]
        outcomes = _outcomes_of(recorder, resumed, failures)
        agent = agent_mode.record_agent_attempts(
            store=store, effective=recorder.effective, incidents=resumed, outcomes=outcomes, failures=failures,
            project_root=root, reports_root=recorder.reports_root,
            invocation=list(recorder.config.invocation_params.args),
            started_at=recorder.started_at, exit_code=exitstatus, run_options=run_options,
            loaded=_loaded(recorder),
        )
        recorder.lines.extend((ESSENTIAL, line) for line in agent.lines)
        still_open += agent.still_open
        recorder.outcomes.update(outcomes)
        recorder.open_incidents += resumed
    return rest, still_open


def _outcomes_of(recorder: Recorder, incidents: list[OpenIncident], failures: list[Any]) -> dict[str, str]:
    """This run's outcome of each test the incidents select (a test it did not run: absent)."""
    failed = {f.nodeid: f.outcome for f in failures if f.nodeid}
    passed, skipped = recorder.passed, recorder.skipped_ids
    if recorder.watched_redacted:  # as the incidents know them (Recorder._watched_id)
        passed = {recorder.redactor.redact(bounded_nodeid(n)) for n in passed}
        skipped = {recorder.redactor.redact(bounded_nodeid(n)) for n in skipped}
    out: dict[str, str] = {}
    for nodeid in (n for i in incidents for n in i.selection):
        if nodeid in failed:
            out[nodeid] = failed[nodeid] if failed[nodeid] in ("failed", "error") else "failed"
        elif nodeid in skipped:
            out[nodeid] = "skipped"
        elif nodeid in passed:
            out[nodeid] = "passed"
    return out


def _run_loop(recorder: Recorder, incident_id: str) -> None:
    approve = recorder.effective.settings.repair.approve
    recorder.captured = None  # the loop adds attempts and moves it: the report reads it back
    # Imported here: only --selfheal-loop runs the loop.
    from pytest_selfheal.run.entry import run_incident_loop

    run_incident_loop(
        recorder.store(),
        incident_id,
        effective=recorder.effective,
        cwd=Path(recorder.config.rootpath),
        approve=approve,
        out=lambda line: recorder.lines.append((SUMMARY, line)),
        pluginmanager=recorder.config.pluginmanager,
    )


def _write_report(recorder: Recorder) -> None:
    """The compact report in the terminal; the full markdown to report_path when set."""
    store = recorder.store()
    ids = [i for i in [recorder.incident_id] if i] + [
        i.incident_id for i in recorder.open_incidents if i.incident_id in recorder.outcomes_incidents()
    ]
    if not ids:
        return
    captured = recorder.captured
    report = build_report(
        incidents=[captured if captured is not None and i == recorder.incident_id else load_incident_run(store, i)
                   for i in dict.fromkeys(ids)],
        effective_config=recorder.effective.values,
        origins=recorder.effective.origins,
        enabled=recorder.effective.settings.enabled,
    )
    for line in render_terminal(report):
        if recorder.ci_run and line.startswith("  next:"):
            # `selfheal ci` started this run and loops what it captured right after it: no
            # command for the reader to type.
            line = "  next: selfheal ci runs the RALF-Lite loop on what this run captured"
        # The one `next:` line is essential; the report's per-incident lines are details.
        level = ESSENTIAL if line.startswith("  next:") else DETAIL if line.startswith("  ") else SUMMARY
        recorder.lines.append((level, line))
    path = recorder.effective.settings.report_path
    if path:
        target = project_path(recorder.config.rootpath, str(path), "report_path")
        atomic_write_text(target, recorder.redactor.redact(report_markdown(report, recorder.config.pluginmanager)))
        recorder.lines.append((SUMMARY, f"report written to {target}"))
