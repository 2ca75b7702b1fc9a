"""The recording side of ``pytest --selfheal`` (edge), registered only when it is on.

During the run it keeps counters and pytest's failing reports, nothing more. pytest rewrites
every module of a plugin's distribution, so a green run imports only the plugin, this module,
:mod:`pytest_selfheal.names` and the hookspecs (tests/test_entry_point.py); the config, the
resolver, the loop side and the session end load when a run needs them.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Generator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import pytest

from pytest_selfheal.names import (
    DEFAULT_REPORTS_DIR,
    FLAG_KEYS,
    INBOX_DIR,
    INCIDENT_PREFIX,
    INI_KEYS,
    PROJECT_DIR,
    RECORDER_PLUGIN,
    archive_dir,
    global_config_path,
    project_config_paths,
    remembered_stops,
)

if TYPE_CHECKING:
    from pytest_selfheal.capture.evidence import Resolver
    from pytest_selfheal.capture.spectrum import SpectrumHook
    from pytest_selfheal.config.settings import EffectiveConfig
    from pytest_selfheal.loop.agent_mode import OpenIncident
    from pytest_selfheal.recorder.loop_side import LoopSide
    from pytest_selfheal.records.incident import RootCause
    from pytest_selfheal.redact import Redactor
    from pytest_selfheal.report.data import IncidentRun


_ROOT_CAUSE_NAME = "selfheal-root-cause"
_SPECTRUM_NAME = "selfheal-spectrum"
_READ_FILES_NAME = "selfheal-read-files"
# The outcome pytest-rerunfailures gives the report of a failed run it runs again.
RERUN_OUTCOME: str = "rerun"
# The report attribute carrying a failure's root-cause evidence as JSON, which xdist serialises.
ROOT_CAUSE_ATTR = "selfheal_root_cause"

def start(config: pytest.Config, ci_run: Optional[str]) -> None:
    """Read the config if there is one (refusing a bad one) and register the recorder on the controller."""
    effective = load_effective_config(config) if has_config(config) else None
    worker = hasattr(config, "workerinput")
    spectrum: Optional[SpectrumHook] = None
    if flag_or_ini(config, "selfheal_spectrum"):
        # Imported here: only --selfheal-spectrum records what each test runs.
        from pytest_selfheal.capture.spectrum import SpectrumHook

        spectrum = SpectrumHook(str(config.rootpath), worker=worker)
        config.pluginmanager.register(spectrum, _SPECTRUM_NAME)
    read_files = ReadFiles(config.rootpath)
    config.pluginmanager.register(read_files, _READ_FILES_NAME)
    if worker:
        # xdist worker: reports reach the controller, which alone writes; the evidence rides on them.
        config.pluginmanager.register(WorkerRootCauseHook(str(config.rootpath)), _ROOT_CAUSE_NAME)
        return
    root_cause = RootCauseHook(str(config.rootpath))
    config.pluginmanager.register(root_cause, _ROOT_CAUSE_NAME)
    config.pluginmanager.register(Recorder(config, effective, root_cause.evidence, spectrum, ci_run, read_files),
                                  RECORDER_PLUGIN)


def flag_or_ini(config: pytest.Config, name: str) -> bool:
    flag = config.getoption(name)
    return bool(flag) if flag is not None else bool(config.getini(name))


def has_config(config: pytest.Config) -> bool:
    """Whether this run has a config to read (a flag, an ini option or a config file)."""
    if any(config.getoption(dest) is not None for dest in FLAG_KEYS) or config.getoption("selfheal_set"):
        return True
    if any(config.getini(name) not in (None, "", []) for name in INI_KEYS):
        return True
    global_path = global_config_path(os.environ)
    # No home for the global file: reading the config says so.
    return global_path is None or any(os.path.lexists(p) for p in [*project_config_paths(config.rootpath), global_path])


def load_effective_config(config: pytest.Config) -> EffectiveConfig:
    # Imported here: a green run without a config to read (has_config) never loads the config.
    from pytest_selfheal.recorder import run_config

    return run_config.load_effective_config(config)


class RootCauseHook:
    """Resolves each failing test's evidence while its objects are alive (only a failing phase pays)."""

    def __init__(self, rootdir: str) -> None:
        self.rootdir = rootdir
        self.resolver: Optional[Resolver] = None  # made at the first failure: a green run never needs it
        self.evidence: dict[str, RootCause] = {}

    def resolve(self, item: Any, excinfo: Any) -> Optional[RootCause]:
        # Imported here: only a failing test is read for evidence.
        from pytest_selfheal.capture import evidence

        resolver = self.resolver = self.resolver or evidence.Resolver(self.rootdir)
        dtest = getattr(item, "dtest", None)  # a DoctestItem: no test function to read
        if dtest is not None:
            return resolver.doctest(dtest, excinfo)
        funcargs = getattr(item, "funcargs", None)
        return resolver.resolve(getattr(item, "obj", None), evidence.traceback_of(excinfo),
                                funcargs if isinstance(funcargs, dict) else None, getattr(item, "cls", None),
                                getattr(excinfo, "value", None))

    @pytest.hookimpl
    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        nodeid = getattr(report, "nodeid", "")
        if not isinstance(node, pytest.Item) or getattr(call, "excinfo", None) is None or nodeid in self.evidence:
            return
        evidence = self.resolve(node, call.excinfo)
        if evidence is not None:
            self.evidence[nodeid] = evidence


class WorkerRootCauseHook(RootCauseHook):
    """The same in an xdist worker: the evidence rides on the report, resolved when it is made."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        if call.excinfo is None:
            return
        report = outcome.get_result()
        if report.failed:
            evidence = self.resolve(item, call.excinfo)
            if evidence is not None:
                setattr(report, ROOT_CAUSE_ATTR, evidence.to_json())

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        """Nothing: the wrapper above resolved it."""


# The files the tests open (the seal's test data): one audit hook per process (a hook cannot be
# removed), adding to the innermost session recording (pytester nests sessions). A copy of this
# module imported again finds that hook's stack through an audit event of its own.
_OPENING: list[set[tuple[Any, Any, Any]]] = []
_PROBE = "pytest_selfheal.read_files"
_OPENED_KEY = "selfheal_read_files"  # an xdist worker's read files, in its workeroutput
_WRITES = frozenset("wax+")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _OPENING:
        try:
            _OPENING[-1].add((os.path.abspath(args[0]), args[1], args[2]))
        except Exception:  # a file descriptor, or a path object that cannot be hashed
            pass
    elif event == _PROBE:
        args[0].append(_OPENING)


def _opening() -> list[set[tuple[Any, Any, Any]]]:
    found: list[list[set[tuple[Any, Any, Any]]]] = []
    sys.audit(_PROBE, found)
    if found:
        return found[0]
    sys.addaudithook(_audit)
    return _OPENING


class ReadFiles:
    """The files under the rootdir this session's tests opened for reading only (a worker's sent on)."""

    def __init__(self, rootdir: Path) -> None:
        self.prefix = os.path.join(rootdir, "")
        self.opened: set[tuple[Any, Any, Any]] = set()
        self.from_workers: set[str] = set()
        self.stack: list[set[tuple[Any, Any, Any]]] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self) -> None:
        self.stack = _opening()
        self.stack.append(self.opened)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.stack and self.stack[-1] is self.opened:
            self.stack.pop()
        output = getattr(session.config, "workeroutput", None)
        if output is not None:
            output[_OPENED_KEY] = self.files()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.from_workers.update(getattr(node, "workeroutput", {}).get(_OPENED_KEY, ()))

    def files(self) -> list[str]:
        read: set[str] = set()
        written: set[str] = set()
        for path, mode, flags in self.opened:
            if isinstance(path, str) and path.startswith(self.prefix):
                writes = bool(flags & (os.O_WRONLY | os.O_RDWR)) if mode is None else not _WRITES.isdisjoint(str(mode))
                (written if writes else read).add(path)
        return sorted((read | self.from_workers) - written)


# The colour of a summary line of each tone (a Tone is its string value).
_MARKUP: dict[str, dict[str, bool]] = {
    "good": {"green": True},
    "bad": {"red": True, "bold": True},
    "warn": {"yellow": True},
    "plain": {},
}


# Worst outcome wins when a test has several reports (setup, call, teardown).
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


class Recorder:
    def __init__(self, config: pytest.Config, effective: Optional[EffectiveConfig], evidence: dict[str, RootCause],
                 spectrum: Optional[SpectrumHook], ci_run: Optional[str], read_files: ReadFiles) -> None:
        self.config = config
        self.read_files = read_files  # what the tests read (the seal's test data)
        self.evidence = evidence  # node id -> root cause (RootCauseHook)
        self.spectrum = spectrum  # --selfheal-spectrum: what each test ran
        self._effective = effective  # None: no config to read, the defaults (built when first asked for)
        # pytest's failing test and collection reports, kept as they are for the session end.
        self.failed: list[Any] = []
        # Failed runs a re-run plugin ran again (one per attempt), and the tests whose current attempt was re-run.
        self.reruns: list[Any] = []
        self.rerun_attempt: set[str] = set()
        # Failing reports seen at their failure and not logged (yet): see pytest_exception_interact.
        self.unlogged: dict[str, list[Any]] = {}
        self.tests = 0
        self.skipped = 0
        self.lines: list[tuple[int, str]] = []  # the terminal summary section: (least verbosity, line)
        self.incident_id: Optional[str] = None
        # The incident this run captured, as written (or as its loop left it): its report reads no file.
        self.captured: Optional[IncidentRun] = None
        self.started_at = datetime.now(timezone.utc)
        self.reports_root = Path(config.rootpath, effective.settings.reports_dir if effective else DEFAULT_REPORTS_DIR)
        # `selfheal ci`'s run token, taken out of the environment before any test could see it (plugin.py).
        self.ci_run: Optional[str] = ci_run or None
        self._loop_side: Optional[LoopSide] = None
        self.open_incidents: list[OpenIncident] = self._open_incidents()
        # A run that may be an incident's verdict compiles afresh (LoopSide.fresh_pycache).
        self._pycache: Optional[tuple[Optional[str], str]] = None
        if self.open_incidents or self.has_stopped_incidents():
            self._pycache = self.loop_side().fresh_pycache()
        # Outcomes are tracked only for tests an open incident verifies: a dict lookup per report.
        self.watched: set[str] = {n for i in self.open_incidents for n in i.selection}
        # Only then is a report's id redacted to be looked up (one redact per report).
        self.watched_redacted = bool(self.watched) and self.loop_side().any_redacted(self.watched)
        self.outcomes: dict[str, str] = {}
        # Every test that passed or skipped: a stopped incident continued after a code change learns from them.
        self.passed: set[str] = set()
        self.skipped_ids: set[str] = set()
        self.gone: set[str] = set()  # open incidents' tests this run should have run and did not (has_work)
        self.cut_short = False  # -x, --maxfail, Ctrl-C or --collect-only: not every selected test ran
        self.tdd_nodeids: list[str] = []  # failing tests marked @pytest.mark.tdd (apply_to.tdd_tasks)

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        if self._pycache is not None:
            sys.pycache_prefix = self._pycache[0]
            shutil.rmtree(self._pycache[1], ignore_errors=True)

    def test_data_read(self) -> list[str]:
        """The files under the rootdir this run's tests read, selfheal's own left out."""
        own = tuple(os.path.join(p, "") for p in (self.reports_root, Path(self.config.rootpath, PROJECT_DIR)))
        return [f for f in self.read_files.files() if not f.startswith(own)]

    def loop_side(self) -> LoopSide:
        if self._loop_side is None:
            # Imported here: only a run with an incident on disk, or --selfheal-loop, loads the loop.
            from pytest_selfheal.recorder.loop_side import LoopSide

            self._loop_side = LoopSide(self)
        return self._loop_side

    def _open_incidents(self) -> list[OpenIncident]:
        try:
            # Only an incident folder in the inbox can be open: without one, the loop side is not loaded.
            if not any(name.startswith(INCIDENT_PREFIX) for name in os.listdir(self.reports_root / INBOX_DIR)):
                return []
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError:
            pass  # unreadable: reading the incidents says why (below)
        if self.ci_run:
            # Under `selfheal ci`, adopting an open incident would let one committed to the
            # repository choose what runs under the job's token: ci captures its own.
            return []
        return self.loop_side().open_incidents()

    @property
    def effective(self) -> EffectiveConfig:
        """This run's effective config: read at the start, or the defaults."""
        if self._effective is None:
            self._effective = load_effective_config(self.config)
        return self._effective

    @property
    def redactor(self) -> Redactor:
        return self.effective.redactor

    def _record(self, report: Any) -> None:
        self._logged(report)
        self.failed.append(report)

    def _logged(self, report: Any) -> None:
        pending = self.unlogged.get(report.nodeid)
        if pending:
            pending[:] = [seen for seen in pending if seen is not report]

    @pytest.hookimpl
    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        # Called at a failure only, after its report is logged; pytest-rerunfailures calls it before,
        # and flaky never logs the runs it re-runs: a failure unlogged at the session end is hidden.
        last = self.failed[-1] if self.failed else None
        if not isinstance(report, pytest.TestReport) or not report.failed or (
                last is not None and last.nodeid == report.nodeid and last.when == report.when):
            return
        self.unlogged.setdefault(report.nodeid, []).append(report)

    def _rerun(self, report: pytest.TestReport) -> None:
        """A failed run a re-run plugin runs again: kept, its attempt not counted as a test."""
        nodeid = report.nodeid
        self._logged(report)
        if nodeid not in self.rerun_attempt:  # an attempt's first failing phase (a teardown may follow)
            self.rerun_attempt.add(nodeid)
            self.tests -= 1
            self.reruns.append(report)

    def _take_hidden(self) -> None:
        """The failed runs flaky re-ran and never logged, as re-runs (not counted as tests)."""
        for hidden in self.unlogged.values():
            self.reruns += hidden
            self.tests -= sum(1 for failed in hidden if failed.when == "call")
        self.unlogged.clear()

    def passed_on_rerun(self) -> list[str]:
        if not self.reruns:
            return []
        failing = {f.nodeid for f in self.failed}
        return [n for n in dict.fromkeys(r.nodeid for r in self.reruns) if n in self.passed and n not in failing]

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._record(report)  # its phase (when) is "collect"

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Hot path: three calls per test. Keep it to comparisons, increments and one lookup.
        if report.when == "setup":
            if self.rerun_attempt:
                self.rerun_attempt.discard(report.nodeid)  # a new attempt of a re-run test
            self.tests += 1
            if report.skipped:
                self.skipped += 1
                self.skipped_ids.add(report.nodeid)
        elif report.when == "call" and report.passed:
            self.passed.add(report.nodeid)
        if report.failed:
            self._record(report)
        elif report.outcome == RERUN_OUTCOME:
            self._rerun(report)
            return
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
        """The id an open incident knows ``nodeid`` by (redacted, as stored), if it watches it."""
        if nodeid in self.watched:
            return nodeid
        if self.watched_redacted:
            redacted = self.loop_side().known_id(nodeid)
            if redacted in self.watched:
                return redacted
        return None

    def has_stopped_incidents(self) -> bool:
        """Cheap look before loading the loop side: any escalated or inbox incident at all."""
        for folder in (self.reports_root / archive_dir("escalated"), self.reports_root / INBOX_DIR):
            try:
                with os.scandir(folder) as entries:
                    if any(True for _ in entries):
                        return True
            except OSError:
                continue
        return False

    def has_work(self, session: pytest.Session, exitstatus: int) -> bool:
        """Whether the session end has anything to record (sets :attr:`gone`)."""
        self.cut_short = bool(self.config.option.collectonly or session.shouldfail or session.shouldstop
                              or exitstatus == pytest.ExitCode.INTERRUPTED)
        # Open incidents' tests this run should have run and did not (LoopSide.gone).
        self.gone = self.loop_side().gone() if self.open_incidents else set()
        if self.unlogged:
            self._take_hidden()
        return bool(self.failed or self.outcomes or self.gone or self.passed_on_rerun() or (
            self.passed and not self.ci_run and self.has_stopped_incidents() and self.loop_side().stopped_hold_passed())
            or (self.passed and self.remembers_stops()))

    def remembers_stops(self) -> bool:
        """Cheap look: are not-a-fix stops kept for this project outside it (store/judging.py)?"""
        path = remembered_stops(os.environ, os.path.realpath(self.config.rootpath))
        return path is not None and path.is_file()

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        verbosity = int(self.config.get_verbosity())
        shown = [line for level, line in self.lines if verbosity >= level]
        if not shown:
            return
        terminalreporter.section("selfheal", sep="-")
        for line in shown:
            terminalreporter.write_line(line, **_MARKUP[getattr(line, "tone", "plain")])
