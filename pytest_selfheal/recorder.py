"""The recording side of ``pytest --selfheal`` (edge), loaded only when it is on.

Collects the failing reports during the run; at session end, on the controller only, it
records the next iteration of an open incident (agent mode) or captures a new incident,
optionally runs the loop, and writes the report.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, Generator, List, Optional, Set, Tuple

import pytest

from pytest_selfheal.capture.context import probe_platform
from pytest_selfheal.capture.evidence import Resolver, traceback_of
from pytest_selfheal.capture.options import capture_options
from pytest_selfheal.capture.run import analyse_run, capture_incident, invocation_dir
from pytest_selfheal.capture.spectrum import SpectrumHook
from pytest_selfheal.config.files import load_config
from pytest_selfheal.config.ini import CI_RUN_ENV, INI_KEYS
from pytest_selfheal.config.settings import EffectiveConfig, Override, parse_override
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gitrepo import PendingSnapshot, diff_hash
from pytest_selfheal.junit import reader
from pytest_selfheal.junit.writer import FailedReport
from pytest_selfheal.redact import default_redactor, is_redacted
from pytest_selfheal.report.data import IncidentRun, build_report
from pytest_selfheal.report.load import load_incident_run
from pytest_selfheal.report.render import render_terminal
from pytest_selfheal.report.sections import report_markdown
from pytest_selfheal.store.fsio import atomic_write_text
from pytest_selfheal.store.root import Store

if TYPE_CHECKING:
    from _pytest.terminal import TerminalReporter

    # Loaded late (see _loop_side); named here so that import-linter still checks the edges.
    from pytest_selfheal import entry  # noqa: F401
    from pytest_selfheal.loop import agent_mode, sticky  # noqa: F401
    from pytest_selfheal.loop.agent_mode import OpenIncident


# Flags of the plugin and the config key each one overrides (None: not a config key).
_FLAG_KEYS = {
    "selfheal_dir": "reports_dir",
    "selfheal_report": "report_path",
    "selfheal_max_iterations": "max_iterations",
    "selfheal_approve": "repair.approve",
}
_PLUGIN_NAME = "selfheal-recorder"
_ROOT_CAUSE_NAME = "selfheal-root-cause"
_SPECTRUM_NAME = "selfheal-spectrum"
# The report attribute carrying a failure's root-cause evidence: a plain dict, so that
# xdist serialises it from the worker to the controller with the rest of the report.
ROOT_CAUSE_ATTR = "selfheal_root_cause"

# The loop side: agent mode (loop/agent_mode.py) and the loop entry (entry.py), with the
# loop/ and repair/ modules they pull in (~20 ms of imports, docs/dev/benchmarks-log.md).
_LOOP_SIDE = {"agent_mode": "pytest_selfheal.loop.agent_mode", "entry": "pytest_selfheal.entry",
              "sticky": "pytest_selfheal.loop.sticky"}


def _loop_side(name: str) -> ModuleType:
    """The loop side's module ``name`` ("agent_mode" or "entry"), loaded on first use.

    The one late load of the recorder: a run that only captures (no open incident to
    verify, no stopped incident to compare with, no --selfheal-loop) never imports the
    loop, like a run without --selfheal never imports this module (plugin.py).
    """
    return importlib.import_module(_LOOP_SIDE[name])


def start(config: pytest.Config) -> None:
    """Load the config (refusing to run on a bad one) and register the recorder on the controller."""
    try:
        effective = load_effective_config(config)
    except SelfhealError as exc:
        raise pytest.UsageError(f"selfheal: {exc}") from None
    worker = hasattr(config, "workerinput")
    spectrum: Optional[SpectrumHook] = None
    if config.getoption("selfheal_spectrum") or (config.getoption("selfheal_spectrum") is None
                                                 and config.getini("selfheal_spectrum")):
        spectrum = SpectrumHook(str(config.rootpath), worker=worker)
        config.pluginmanager.register(spectrum, _SPECTRUM_NAME)
    if worker:
        # xdist worker: reports reach the controller, which alone writes; the evidence rides on them.
        config.pluginmanager.register(WorkerRootCauseHook(str(config.rootpath)), _ROOT_CAUSE_NAME)
        return
    root_cause = RootCauseHook(str(config.rootpath))
    config.pluginmanager.register(root_cause, _ROOT_CAUSE_NAME)
    config.pluginmanager.register(Recorder(config, effective, root_cause.evidence, spectrum), _PLUGIN_NAME)


def _ini_values(config: pytest.Config) -> Dict[str, str]:
    values: Dict[str, str] = {}
    for ini_name in INI_KEYS:
        value = config.getini(ini_name)
        if ini_name == "selfheal_config":
            if value:
                values[ini_name] = "\n".join(value)
        elif value not in (None, ""):
            values[ini_name] = str(value)
    return values


def load_effective_config(config: pytest.Config) -> "EffectiveConfig":
    """The effective config for this pytest run (files ← ini ← flags)."""
    overrides: List[Override] = []
    for dest, key in _FLAG_KEYS.items():
        value = config.getoption(dest)
        if value is None:
            continue
        if dest == "selfheal_dir":
            # A path given on the command line is relative to where pytest was invoked.
            value = str(Path(config.invocation_params.dir, value))
        flag = "--" + dest.replace("_", "-")
        overrides.append(Override(key, value, flag))
    for text in config.getoption("selfheal_set") or []:
        overrides.append(parse_override(text, "--selfheal-set"))
    ini_origin = f"pytest ini ({config.inipath})" if config.inipath else "pytest ini"
    return load_config(config.rootpath, ini=_ini_values(config), overrides=overrides, ini_origin=ini_origin)


def _crash_message(report: Any) -> str:
    reprcrash = getattr(report.longrepr, "reprcrash", None)
    if reprcrash is not None and getattr(reprcrash, "message", None):
        return str(reprcrash.message)
    text = str(report.longreprtext or "")
    # Collection errors carry no reprcrash: use the last "E   " line, which holds the exception.
    error_lines = [ln[1:].strip() for ln in text.splitlines() if ln.startswith("E ")]
    if error_lines:
        return error_lines[-1]
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


class RootCauseHook:
    """Resolves the root-cause evidence of each failing test while its objects are alive
    (capture/evidence.py, SPEC §7), keyed by node id; the first failing phase wins.

    ``pytest_exception_interact`` runs only for a failing phase (not for a pass, a skip or
    an xfail), so a passing test pays nothing. It runs after the report was logged, which
    is why the recorder reads :attr:`evidence` at session end.
    """

    def __init__(self, rootdir: str) -> None:
        self.resolver = Resolver(rootdir)
        self.evidence: Dict[str, Dict[str, Any]] = {}

    def resolve(self, item: Any, excinfo: Any) -> Optional[Dict[str, Any]]:
        """The evidence of ``item``'s failure (``excinfo`` a pytest ``ExceptionInfo``)."""
        dtest = getattr(item, "dtest", None)  # a DoctestItem: no test function to read
        if dtest is not None:
            return self.resolver.doctest(dtest, excinfo)
        funcargs = getattr(item, "funcargs", None)
        return self.resolver.resolve(getattr(item, "obj", None), traceback_of(excinfo),
                                     funcargs if isinstance(funcargs, dict) else None, getattr(item, "cls", None))

    @pytest.hookimpl
    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        nodeid = getattr(report, "nodeid", "")
        if not isinstance(node, pytest.Item) or getattr(call, "excinfo", None) is None or nodeid in self.evidence:
            return
        evidence = self.resolve(node, call.excinfo)
        if evidence is not None:
            self.evidence[nodeid] = evidence


class WorkerRootCauseHook(RootCauseHook):
    """The same in an xdist worker: the evidence must ride on the report itself (a plain
    dict, serialised with it to the controller), so it is resolved when the report is made.
    Only workers pay for this wrapper (a generator per test phase)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: "pytest.CallInfo[None]") -> Generator[None, Any, None]:
        outcome = yield
        if call.excinfo is None:
            return
        report = outcome.get_result()
        if report.failed:
            evidence = self.resolve(item, call.excinfo)
            if evidence is not None:
                setattr(report, ROOT_CAUSE_ATTR, evidence)

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        """Nothing: the wrapper above has resolved it."""


# The least pytest verbosity at which a summary line shows: -qq shows only what a script or
# an agent must see (the incident, each iteration's verdict, the next command), -q adds the
# headlines, the default adds the details.
ESSENTIAL = -2
SUMMARY = -1
DETAIL = 0


def _markup(line: str) -> Dict[str, bool]:
    """Colour of a summary line (pytest drops it under --color=no)."""
    if "-> STOP success" in line or " resolved" in line:
        return {"green": True}
    if "-> STOP" in line or " escalated" in line or line.startswith(("selfheal: error", "selfheal: internal error")):
        return {"red": True, "bold": True}
    if "-> CONTINUE" in line or line.startswith("warning:"):
        return {"yellow": True}
    return {}


# Worst outcome wins when a test has several reports (setup, call, teardown).
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


class Recorder:
    """Collects failing reports during the run; at session end records agent attempts and captures."""

    def __init__(
        self, config: pytest.Config, effective: "EffectiveConfig", evidence: Optional[Dict[str, Dict[str, Any]]] = None,
        spectrum: Optional[SpectrumHook] = None,
    ) -> None:
        self.config = config
        self.evidence = evidence if evidence is not None else {}  # node id -> root cause (RootCauseHook)
        self.spectrum = spectrum  # --selfheal-spectrum: what each test ran
        self.effective = effective
        self.failed: List[FailedReport] = []
        self.tests = 0
        self.skipped = 0
        self.lines: List[Tuple[int, str]] = []  # the terminal summary section: (least verbosity, line)
        self.incident_id: Optional[str] = None
        # The incident this run captured, as written: its report needs no read-back (None
        # once the loop has changed it).
        self.captured: Optional[IncidentRun] = None
        self.started_at = datetime.now(timezone.utc)
        self.reports_root = Path(config.rootpath, effective.settings.reports_dir)
        # `selfheal ci`'s run token: taken out of the environment before any test runs, so the
        # tests and the processes they start do not see it (it marks what this run captures).
        self.ci_run: Optional[str] = os.environ.pop(CI_RUN_ENV, None) or None
        self.redactor = default_redactor(effective.settings.redaction)
        self.open_incidents: List["OpenIncident"] = self._open_incidents()
        # Outcomes are tracked only for tests an open incident verifies: a dict lookup per report.
        self.watched: Set[str] = {n for i in self.open_incidents for n in i.selection}
        # Only then is a report's id redacted to be looked up (one redact per report).
        self.watched_redacted = any(is_redacted(n) for n in self.watched)
        self.outcomes: Dict[str, str] = {}
        # Every test that passed or skipped: a stopped incident continued after a code change
        # (loop/sticky.py) learns its tests' outcomes from them; failures are in self.failed.
        self.passed: Set[str] = set()
        self.skipped_ids: Set[str] = set()
        self.tdd_nodeids: List[str] = []  # failing tests marked @pytest.mark.tdd (apply_to.tdd_tasks)

    def _open_incidents(self) -> List["OpenIncident"]:
        if not (self.reports_root / "error_inbox").is_dir():
            return []
        if self.ci_run:
            # Under `selfheal ci` no open incident on disk was captured by this run (one pytest
            # session): adopting one would let an incident committed to the repository choose
            # what runs under the job's token. The failures are captured as ci's own incident.
            return []

        try:
            found: List["OpenIncident"] = _loop_side("agent_mode").open_incidents(self.store())
            return found
        except SelfhealError as exc:
            self.lines.append((ESSENTIAL, f"selfheal: open incidents not read: {exc}"))
            return []

    def _record(self, report: Any, when: str) -> None:
        location = getattr(report, "location", None)
        # The id as every document will hold it: a parametrize id can carry a secret.
        nodeid = self.redactor.redact(report.nodeid)
        if "tdd" in getattr(report, "keywords", {}) and nodeid not in self.tdd_nodeids:
            self.tdd_nodeids.append(nodeid)
        self.failed.append(
            FailedReport(
                nodeid=nodeid,
                when=when,
                message=_crash_message(report),
                text=str(report.longreprtext or ""),
                file=location[0] if location else None,
                line=(location[1] + 1) if location and location[1] is not None else None,
                duration=float(getattr(report, "duration", 0.0) or 0.0),
                root_cause=getattr(report, ROOT_CAUSE_ATTR, None),
            )
        )

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._record(report, "collect")

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Hot path: three calls per test. Keep it to comparisons, increments and one lookup.
        if report.when == "setup":
            self.tests += 1
            if report.skipped:
                self.skipped += 1
                self.skipped_ids.add(report.nodeid)
        elif report.when == "call" and report.passed:
            self.passed.add(report.nodeid)
        if report.failed:
            self._record(report, report.when)
        nodeid = self._watched_id(report.nodeid) if self.watched else None
        if nodeid is not None:
            if report.failed:
                outcome = "failed" if report.when == "call" else "error"
            elif report.skipped:
                outcome = "skipped"
            elif report.when == "call":
                outcome = "passed"
            else:
                return
            previous = self.outcomes.get(nodeid)
            if previous is None or _OUTCOME_RANK[outcome] > _OUTCOME_RANK[previous]:
                self.outcomes[nodeid] = outcome

    def _watched_id(self, nodeid: str) -> Optional[str]:
        """The id an open incident knows ``nodeid`` by, if it watches it: itself, or (an id
        holding a secret) its redacted form, as stored (docs/redaction.md)."""
        if nodeid in self.watched:
            return nodeid
        if self.watched_redacted:
            redacted = self.redactor.redact(nodeid)
            if redacted in self.watched:
                return redacted
        return None

    def store(self) -> Store:
        """The store of this run's reports root, redacting with this run's settings."""
        return Store(self.reports_root, redactor=self.redactor)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        # trylast: pytest's own junitxml has written --junitxml by now.
        if not self.failed and not self.outcomes:
            return

        try:
            self._finish(int(exitstatus))
        except SelfhealError as exc:
            self.lines.append((ESSENTIAL, f"selfheal: error: {exc}"))
        except Exception as exc:  # the plugin never changes pytest's outcome
            self.lines.append((ESSENTIAL,
                               f"selfheal: internal error ({type(exc).__name__}: {exc}); the test run itself is unaffected"))

    def _finish(self, exitstatus: int) -> None:
        counts = {"tests": self.tests, "failed": len(self.failed), "skipped": self.skipped}
        warnings: List[str] = []
        git: Optional[PendingSnapshot] = None
        if self.failed and not self.open_incidents:
            # Every failure will be captured: the capture's git and platform reads (subprocesses)
            # run while the failures are analysed.
            git = PendingSnapshot(Path(self.config.rootpath), exclude=[self.reports_root])
            probe_platform()
        # Evidence resolved in this process after the report was logged (xdist's rides on the report).
        self.failed = [
            replace(r, root_cause=self.evidence[r.nodeid]) if not r.root_cause and r.nodeid in self.evidence else r
            for r in self.failed
        ]
        if self.spectrum is not None:
            ranked = self.spectrum.evidence()
            self.failed = [replace(r, root_cause={**(r.root_cause or {}), "spectrum": ranked[r.nodeid]})
                           if r.nodeid in ranked else r for r in self.failed]
        failures = analyse_run(
            config=self.config, effective=self.effective, reports=self.failed, counts=counts, warnings=warnings,
            redactor=self.redactor,
        )
        covered: Set[str] = set()
        still_open: List[str] = []
        # The run's replayable options: compared by agent mode, recorded by a capture.
        options, options_problem = capture_options(self.config) if self.outcomes or failures else ([], None)
        if self.outcomes:
            agent = _loop_side("agent_mode").record_agent_attempts(
                store=self.store(),
                effective=self.effective,
                incidents=self.open_incidents,
                outcomes=self.outcomes,
                failures=failures,
                project_root=Path(self.config.rootpath),
                reports_root=self.reports_root,
                invocation=list(self.config.invocation_params.args),
                started_at=self.started_at,
                exit_code=exitstatus,
                run_options=None if options_problem else options,
                run_dir=invocation_dir(self.config),
            )
            self.lines.extend((ESSENTIAL, line) for line in agent.lines)
            covered, still_open = agent.covered, agent.still_open
        remaining = [f for f in failures if f.nodeid not in covered]
        if remaining and not still_open and not self.ci_run and self._has_stopped_incidents():
            remaining, continued = self._attach_to_stopped(remaining, failures, git, exitstatus,
                                                           None if options_problem else options)
            still_open += continued
        if remaining and still_open:
            # One incident at a time: new failures wait in the attempt until the open one closes.
            self.lines.append((SUMMARY,
                f"{len(remaining)} new failure(s) outside the open incident's selection: recorded in its attempt; "
                "they are captured as their own incident once it closes"
            ))
        elif remaining:
            nodeids = {f.nodeid for f in remaining}
            if options_problem:
                warnings.append(options_problem)
            # Failing tests the junit reader did not keep (its cap): counted, never verified.
            failing_ids = len({r.nodeid for r in self.failed})
            unverified = failing_ids - len(failures) if len(failures) >= reader.MAX_FAILURES else 0
            result = capture_incident(
                config=self.config,
                effective=self.effective,
                reports=[r for r in self.failed if r.nodeid in nodeids],
                failures=remaining,
                counts=counts,
                reports_root=self.reports_root,
                tdd_nodeids=[n for n in self.tdd_nodeids if n in nodeids],
                pytest_options=options,
                warnings=warnings,
                ci_run=self.ci_run,
                redactor=self.redactor,
                git=git,
                unverified=max(0, unverified),
            )
            self.incident_id = result.incident_id
            self.captured = IncidentRun(incident=result.incident, plan=result.plan)
            self.lines.extend((ESSENTIAL if index == 0 else DETAIL, line)
                              for index, line in enumerate(result.summary_lines))
            if self._loop_requested():
                self._run_loop(result.incident_id)
        self.lines.extend((SUMMARY, f"warning: {w}") for w in warnings)
        self._write_report()

    def _has_stopped_incidents(self) -> bool:
        """Cheap look before loading the loop side: any escalated or inbox incident at all."""
        for folder in (self.reports_root / "error_archive" / "escalated", self.reports_root / "error_inbox"):
            try:
                if any(True for _ in os.scandir(folder)):
                    return True
            except OSError:
                continue
        return False

    def _attach_to_stopped(
        self, remaining: List[Any], failures: List[Any], git: Optional[PendingSnapshot], exitstatus: int,
        run_options: Optional[List[str]],
    ) -> Tuple[List[Any], List[str]]:
        """A stop sticks (loop/sticky.py): failures a stopped incident holds are not a new
        incident. Code unchanged → STOP already_stopped; changed → that incident's next
        iteration. Returns the failures left to capture and the incidents still open."""
        sticky = _loop_side("sticky")
        store = self.store()
        stopped = sticky.stopped_incidents(store)
        if not stopped:
            return remaining, []
        root = Path(self.config.rootpath)
        diff = git.result().diff_hash if git is not None else diff_hash(root, exclude=[self.reports_root])
        matches, rest = sticky.match_stopped(stopped, remaining, diff)
        still_open: List[str] = []
        max_iterations = self.effective.settings.max_iterations
        for match in matches:
            sticky.record_attached(store, match, diff)
            if match.attachment is sticky.Attachment.ALREADY_STOPPED:
                self.lines.append((ESSENTIAL, sticky.already_stopped_line(match, max_iterations)))
                self.lines.append((ESSENTIAL, sticky.next_step(match)))
                continue
            agent_mode = _loop_side("agent_mode")
            incident_id = match.incident.incident_id
            sticky.continue_stopped(store, match)
            self.lines.append((SUMMARY, f"selfheal: incident {incident_id} stopped ({match.incident.stop_reason}) "
                                        "and the code changed since: this run is its next iteration"))
            resumed = [i for i in agent_mode.open_incidents(store) if i.incident_id == incident_id]
            outcomes = self._outcomes_of(resumed, failures)
            agent = agent_mode.record_agent_attempts(
                store=store, effective=self.effective, incidents=resumed, outcomes=outcomes, failures=failures,
                project_root=root, reports_root=self.reports_root, invocation=list(self.config.invocation_params.args),
                started_at=self.started_at, exit_code=exitstatus, run_options=run_options,
            )
            self.lines.extend((ESSENTIAL, line) for line in agent.lines)
            still_open += agent.still_open
            self.outcomes.update(outcomes)
            self.open_incidents += resumed
        return rest, still_open

    def _outcomes_of(self, incidents: List["OpenIncident"], failures: List[Any]) -> Dict[str, str]:
        """This run's outcome of each test the incidents select (a test it did not run: absent)."""
        failed = {f.nodeid: f.outcome for f in failures if f.nodeid}
        out: Dict[str, str] = {}
        for nodeid in (n for i in incidents for n in i.selection):
            if nodeid in failed:
                out[nodeid] = failed[nodeid] if failed[nodeid] in ("failed", "error") else "failed"
            elif nodeid in self.skipped_ids:
                out[nodeid] = "skipped"
            elif nodeid in self.passed:
                out[nodeid] = "passed"
        return out

    def _loop_requested(self) -> bool:
        flag = self.config.getoption("selfheal_loop")
        return bool(flag) if flag is not None else bool(self.config.getini("selfheal_loop"))

    def _run_loop(self, incident_id: str) -> None:
        approve = self.effective.settings.repair.approve
        self.captured = None  # the loop adds attempts and moves it: the report reads it back
        _loop_side("entry").run_incident_loop(
            self.store(),
            incident_id,
            effective=self.effective,
            cwd=Path(self.config.rootpath),
            approve=approve,
            out=lambda line: self.lines.append((SUMMARY, line)),
            pluginmanager=self.config.pluginmanager,
        )

    def _write_report(self) -> None:
        """The compact report in the terminal; the full markdown to report_path when set."""
        store = self.store()
        ids = [i for i in [self.incident_id] if i] + [
            i.incident_id for i in self.open_incidents if i.incident_id in self.outcomes_incidents()
        ]
        if not ids:
            return
        captured = self.captured
        report = build_report(
            incidents=[captured if captured is not None and i == self.incident_id else load_incident_run(store, i)
                       for i in dict.fromkeys(ids)],
            effective_config=self.effective.values,
            origins=self.effective.origins,
            enabled=self.effective.settings.enabled,
        )
        for line in render_terminal(report):
            # The one `next:` line is essential; the report's per-incident lines are details.
            level = ESSENTIAL if line.startswith("  next:") else DETAIL if line.startswith("  ") else SUMMARY
            self.lines.append((level, line))
        path = self.effective.settings.report_path
        if path:
            redactor = self.redactor
            target = Path(self.config.rootpath, str(path))
            atomic_write_text(target, redactor.redact(report_markdown(report, self.config.pluginmanager)))
            self.lines.append((SUMMARY, f"report written to {target}"))

    def outcomes_incidents(self) -> Set[str]:
        """Open incidents this run recorded an attempt for."""
        return {i.incident_id for i in self.open_incidents if any(n in self.outcomes for n in i.selection)}

    def pytest_terminal_summary(self, terminalreporter: "TerminalReporter") -> None:
        verbosity = int(self.config.get_verbosity())
        shown = [line for level, line in self.lines if verbosity >= level]
        if not shown:
            return
        terminalreporter.section("selfheal", sep="-")
        for line in shown:
            terminalreporter.write_line(line, **_markup(line))
