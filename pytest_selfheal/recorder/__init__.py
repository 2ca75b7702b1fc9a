"""The recording side of ``pytest --selfheal`` (edge), loaded only when it is on.

During the run it keeps counters, the failing reports and the failed runs a re-run plugin
ran again, nothing more. pytest marks every
module of a plugin's distribution for assertion rewriting, so where bytecode is not written
(``PYTHONDONTWRITEBYTECODE``, a read-only site-packages) each module imported is parsed and
compiled again on every run: a green run imports no module of the package but the plugin,
this one, :mod:`pytest_selfheal.names` and the hookspecs (tests/test_entry_point.py). So the
config is read at the start only when there is one to read (a ``--selfheal-*`` flag, a
``selfheal_*`` ini option, a config file), and everything else is imported inside the
function that first needs it: a failure, an open incident, ``--selfheal-spectrum``. At
session end, on the controller only and only when something failed or an open incident's
test ran, the session end (:mod:`.finish`) records the next iteration of an open incident
(agent mode) or captures a new incident, optionally runs the loop, and writes the report.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Generator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

import pytest

from pytest_selfheal.names import (
    CI_RUN_ENV,
    DEFAULT_REPORTS_DIR,
    INBOX_DIR,
    INCIDENT_PREFIX,
    INI_KEYS,
    RECORDER_PLUGIN,
    archive_dir,
    global_config_path,
    project_config_paths,
)

if TYPE_CHECKING:
    from _pytest.terminal import TerminalReporter

    from pytest_selfheal.capture.evidence import Resolver
    from pytest_selfheal.capture.spectrum import SpectrumHook
    from pytest_selfheal.config.settings import EffectiveConfig
    from pytest_selfheal.loop.agent_mode import OpenIncident
    from pytest_selfheal.records.incident import RootCause
    from pytest_selfheal.records.vocab import Tone
    from pytest_selfheal.redact import Redactor
    from pytest_selfheal.report.data import IncidentRun
    from pytest_selfheal.store.root import Store


# Flags of the plugin and the config key each one overrides (None: not a config key).
_FLAG_KEYS = {
    "selfheal_dir": "reports_dir",
    "selfheal_report": "report_path",
    "selfheal_max_iterations": "max_iterations",
    "selfheal_approve": "repair.approve",
}
_ROOT_CAUSE_NAME = "selfheal-root-cause"
_SPECTRUM_NAME = "selfheal-spectrum"
_READ_FILES_NAME = "selfheal-read-files"
# The outcome pytest-rerunfailures gives the report of a failed run it runs again.
RERUN_OUTCOME: str = "rerun"
# The report attribute carrying a failure's root-cause evidence: its JSON (RootCause.to_json),
# so that xdist serialises it from the worker to the controller with the rest of the report.
ROOT_CAUSE_ATTR = "selfheal_root_cause"

def start(config: pytest.Config, ci_run: Optional[str] = None) -> None:
    """Read the config if there is one (refusing to run on a bad one) and register the
    recorder on the controller."""
    effective = load_effective_config(config) if has_config(config) else None
    worker = hasattr(config, "workerinput")
    spectrum: Optional[SpectrumHook] = None
    if config.getoption("selfheal_spectrum") or (config.getoption("selfheal_spectrum") is None
                                                 and config.getini("selfheal_spectrum")):
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


def has_config(config: pytest.Config) -> bool:
    """Whether this run has a config to read: a ``--selfheal-*`` flag that sets a key, a
    ``selfheal_*`` ini option, or a config file (global or project). Without one the
    effective config is the defaults, and the run reads no file to know it."""
    if any(config.getoption(dest) is not None for dest in _FLAG_KEYS) or config.getoption("selfheal_set"):
        return True
    if any(config.getini(name) not in (None, "", []) for name in INI_KEYS):
        return True
    global_path = global_config_path(os.environ)
    paths = [*project_config_paths(config.rootpath), *([global_path] if global_path is not None else [])]
    # No home for the global file: reading the config says so.
    return global_path is None or any(os.path.lexists(path) for path in paths)


def _ini_values(config: pytest.Config) -> dict[str, str]:
    values: dict[str, str] = {}
    for ini_name in INI_KEYS:
        value = config.getini(ini_name)
        if ini_name == "selfheal_config":
            if value:
                values[ini_name] = "\n".join(value)
        elif value not in (None, ""):
            values[ini_name] = str(value)
    return values


def load_effective_config(config: pytest.Config) -> EffectiveConfig:
    """The effective config for this pytest run (files ← ini ← flags); a bad one is a usage error."""
    # Imported here: a run without a config to read (has_config) never loads the config modules.
    from pytest_selfheal.config.files import load_config
    from pytest_selfheal.config.settings import Override, parse_override
    from pytest_selfheal.errors import SelfhealError

    overrides: list[Override] = []
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
    try:
        return load_config(config.rootpath, ini=_ini_values(config), overrides=overrides, ini_origin=ini_origin)
    except SelfhealError as exc:
        raise pytest.UsageError(f"selfheal: {exc}") from None



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
    (capture/evidence.py), keyed by node id; the first failing phase wins.

    ``pytest_exception_interact`` runs only for a failing phase (not for a pass, a skip or
    an xfail), so a passing test pays nothing. It runs after the report was logged, which
    is why the recorder reads :attr:`evidence` at session end.
    """

    def __init__(self, rootdir: str) -> None:
        self.rootdir = rootdir
        self.resolver: Optional[Resolver] = None  # made at the first failure: a green run never needs it
        self.evidence: dict[str, RootCause] = {}

    def resolve(self, item: Any, excinfo: Any) -> Optional[RootCause]:
        """The evidence of ``item``'s failure (``excinfo`` a pytest ``ExceptionInfo``)."""
        # Imported here: only a failing test is read for evidence.
        from pytest_selfheal.capture import evidence

        if self.resolver is None:
            self.resolver = evidence.Resolver(self.rootdir)
        resolver: Resolver = self.resolver
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
    """The same in an xdist worker: the evidence must ride on the report itself (its
    JSON, serialised with it to the controller), so it is resolved when the report is made.
    Only workers pay for this wrapper (a generator per test phase)."""

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
        """Nothing: the wrapper above has resolved it."""


# The files the tests open (the seal's test data, config/seal.py): one audit hook per process,
# installed with the first session that records (a hook cannot be removed), adding to the
# innermost session recording (pytester runs sessions inside a session). A copy of this
# module imported again (pytester drops the modules a run imported) finds that hook's stack
# through an audit event of its own rather than installing a second hook.
_OPENING: list[set[tuple[Any, Any, Any]]] = []
_PROBE = "pytest_selfheal.read_files"
_OPENED_KEY = "selfheal_read_files"  # an xdist worker's read files, in its workeroutput
_WRITES = frozenset("wax+")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open":
        if _OPENING:
            try:
                _OPENING[-1].add((os.path.abspath(args[0]), args[1], args[2]))
            except Exception:  # a file descriptor, or a path object that cannot be hashed
                pass
    elif event == _PROBE:
        args[0].append(_OPENING)


def _opening() -> list[set[tuple[Any, Any, Any]]]:
    """The stack of the sessions recording, the hook's (installed here if none is)."""
    found: list[list[set[tuple[Any, Any, Any]]]] = []
    sys.audit(_PROBE, found)
    if found:
        return found[0]
    sys.addaudithook(_audit)
    return _OPENING


class ReadFiles:
    """The files under the rootdir this session's tests opened for reading and never for
    writing, on a worker sent to the controller (xdist's ``workeroutput``)."""

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
        """The absolute paths, sorted."""
        read: set[str] = set()
        written: set[str] = set()
        for path, mode, flags in self.opened:
            if isinstance(path, str) and path.startswith(self.prefix):
                writes = bool(flags & (os.O_WRONLY | os.O_RDWR)) if mode is None else not _WRITES.isdisjoint(str(mode))
                (written if writes else read).add(path)
        return sorted((read | self.from_workers) - written)


# The least pytest verbosity at which a summary line shows: -qq shows only what a script or
# an agent must see (the incident, each iteration's verdict, the next command), -q adds the
# headlines, the default adds the details.
ESSENTIAL = -2
SUMMARY = -1
DETAIL = 0


# A Tone is its string value (records/vocab.py).
_MARKUP: dict[str, dict[str, bool]] = {
    "good": {"green": True},
    "bad": {"red": True, "bold": True},
    "warn": {"yellow": True},
    "plain": {},
}


def _markup(tone: Tone) -> dict[str, bool]:
    """Colour of a summary line of ``tone`` (pytest drops it under --color=no)."""
    return _MARKUP[tone]


# Worst outcome wins when a test has several reports (setup, call, teardown).
_OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _any_redacted(nodeids: set[str]) -> bool:
    """Whether any of ``nodeids`` (an open incident's, as stored) was redacted or truncated."""
    # Imported here: only a run with open incidents watches node ids.
    from pytest_selfheal.records.redacted import TRUNCATED, is_redacted

    return any(is_redacted(n) or TRUNCATED in n for n in nodeids)


class Failed(NamedTuple):
    """A failing pytest report reduced to plain data as it happens; the session end redacts
    its node id and makes it a ``junit.writer.FailedReport`` (recorder/finish.py)."""

    nodeid: str
    when: str  # setup | call | teardown | collect
    message: str  # pytest's crash message (reprcrash.message) or a derived one
    text: str  # the full longrepr text
    file: Optional[str]
    line: Optional[int]
    duration: float
    root_cause: object  # evidence resolved in an xdist worker: its JSON (ROOT_CAUSE_ATTR), read at session end
    tdd: bool  # marked @pytest.mark.tdd


def _failed(report: Any, when: str) -> Failed:
    location = getattr(report, "location", None)
    return Failed(
        nodeid=report.nodeid,
        when=when,
        message=_crash_message(report),
        text=str(report.longreprtext or ""),
        file=location[0] if location else None,
        line=(location[1] + 1) if location and location[1] is not None else None,
        duration=float(getattr(report, "duration", 0.0) or 0.0),
        root_cause=getattr(report, ROOT_CAUSE_ATTR, None),
        tdd="tdd" in getattr(report, "keywords", {}),
    )


class Recorder:
    """Collects failing reports during the run; at session end records agent attempts and captures."""

    def __init__(
        self, config: pytest.Config, effective: Optional[EffectiveConfig],
        evidence: Optional[dict[str, RootCause]] = None, spectrum: Optional[SpectrumHook] = None,
        ci_run: Optional[str] = None, read_files: Optional[ReadFiles] = None,
    ) -> None:
        self.config = config
        self.read_files = read_files or ReadFiles(config.rootpath)  # what the tests read (the seal's test data)
        self.evidence = evidence if evidence is not None else {}  # node id -> root cause (RootCauseHook)
        self.spectrum = spectrum  # --selfheal-spectrum: what each test ran
        self._effective = effective  # None: no config to read, the defaults (built when first asked for)
        self.failed: list[Failed] = []
        # Failed runs a re-run plugin ran again (outcome ``rerun``; one per attempt), and the tests whose
        # current attempt was re-run: a green run without a re-run only tests one empty set.
        self.reruns: list[Failed] = []
        self.rerun_attempt: set[str] = set()
        # Failing reports seen at their failure and not logged (yet), with what they say: see
        # pytest_exception_interact.
        self.unlogged: dict[str, list[tuple[Any, Failed]]] = {}
        self.tests = 0
        self.skipped = 0
        self.lines: list[tuple[int, str]] = []  # the terminal summary section: (least verbosity, line)
        self.incident_id: Optional[str] = None
        # The incident this run captured, as written: its report needs no read-back (None
        # once the loop has changed it).
        self.captured: Optional[IncidentRun] = None
        self.started_at = datetime.now(timezone.utc)
        self.reports_root = Path(config.rootpath, effective.settings.reports_dir if effective else DEFAULT_REPORTS_DIR)
        # `selfheal ci`'s run token: taken out of the environment before any test runs, so the
        # tests and the processes they start do not see it (it marks what this run captures).
        self.ci_run: Optional[str] = ci_run or os.environ.pop(CI_RUN_ENV, None) or None
        self._redactor: Optional[Redactor] = None
        self.open_incidents: list[OpenIncident] = self._open_incidents()
        # A run that may be an incident's verdict compiles every module it imports from now
        # on afresh: no .pyc left in a __pycache__ folder is what runs (docs/loop.md "The seal").
        self._pycache: Optional[tuple[Optional[str], str]] = None
        if self.open_incidents or self.has_stopped_incidents():
            from pytest_selfheal.cleanroom import fresh_pycache  # imported here: a green run compiles nothing afresh

            self._pycache = (sys.pycache_prefix, fresh_pycache())
            sys.pycache_prefix = self._pycache[1]
        # Outcomes are tracked only for tests an open incident verifies: a dict lookup per report.
        self.watched: set[str] = {n for i in self.open_incidents for n in i.selection}
        # Only then is a report's id redacted to be looked up (one redact per report).
        self.watched_redacted = bool(self.watched) and _any_redacted(self.watched)
        self.outcomes: dict[str, str] = {}
        # Every test that passed or skipped: a stopped incident continued after a code change
        # (loop/sticky.py) learns its tests' outcomes from them; failures are in self.failed.
        self.passed: set[str] = set()
        self.skipped_ids: set[str] = set()
        self.gone: set[str] = set()  # open incidents' tests this run should have run and did not (_gone)
        self.tdd_nodeids: list[str] = []  # failing tests marked @pytest.mark.tdd (apply_to.tdd_tasks)

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        if self._pycache is not None:
            sys.pycache_prefix = self._pycache[0]
            shutil.rmtree(self._pycache[1], ignore_errors=True)

    def _open_incidents(self) -> list[OpenIncident]:
        try:
            # Only an incident folder in the inbox can be open. Once every incident is closed
            # or archived, a run (a green one too) must not load the loop side to find none.
            if not any(name.startswith(INCIDENT_PREFIX) for name in os.listdir(self.reports_root / INBOX_DIR)):
                return []
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError:
            pass  # unreadable: reading the incidents says why (below)
        if self.ci_run:
            # Under `selfheal ci` no open incident on disk was captured by this run (one pytest
            # session): adopting one would let an incident committed to the repository choose
            # what runs under the job's token. The failures are captured as ci's own incident.
            return []

        # Imported here: only an incident in the inbox needs the loop side.
        from pytest_selfheal.errors import SelfhealError
        from pytest_selfheal.loop.agent_mode import open_incidents

        try:
            return open_incidents(self.store())
        except SelfhealError as exc:
            self.lines.append((ESSENTIAL, f"selfheal: open incidents not read: {exc}"))
            return []

    @property
    def effective(self) -> EffectiveConfig:
        """This run's effective config: read at the start, or the defaults (:func:`has_config`)."""
        if self._effective is None:
            # Imported here: only a run with something to record needs the settings.
            from pytest_selfheal.config.settings import default_config

            self._effective = default_config()
        return self._effective

    @property
    def redactor(self) -> Redactor:
        """This run's redactor (its settings), made on first use: a green run never needs one."""
        if self._redactor is None:
            self._redactor = self.effective.redactor
        redactor: Redactor = self._redactor
        return redactor

    def _record(self, report: Any, when: str) -> None:
        if self.unlogged:
            self._logged(report)
        self.failed.append(_failed(report, when))

    def _logged(self, report: Any) -> None:
        """A failing report logged after it was seen at its failure: not a hidden run."""
        pending = self.unlogged.get(report.nodeid)
        if pending:
            pending[:] = [(seen, failed) for seen, failed in pending if seen is not report]

    @pytest.hookimpl
    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        # Called at a failure only (a passing test pays nothing), after its report is logged;
        # pytest-rerunfailures calls it before, and flaky never logs the failed runs it
        # re-runs: a failure not logged by the session end is such a hidden run.
        last = self.failed[-1] if self.failed else None
        if not isinstance(report, pytest.TestReport) or not report.failed or (
                last is not None and last.nodeid == report.nodeid and last.when == report.when):
            return
        self.unlogged.setdefault(report.nodeid, []).append((report, _failed(report, report.when)))

    def _rerun(self, report: pytest.TestReport) -> None:
        """A failed run that a re-run plugin runs again (pytest-rerunfailures reports it with
        the outcome ``rerun``): kept, and its attempt not counted as a test of its own."""
        nodeid = report.nodeid
        if self.unlogged:
            self._logged(report)
        if nodeid not in self.rerun_attempt:  # an attempt's first failing phase (a teardown may follow)
            self.rerun_attempt.add(nodeid)
            self.tests -= 1
            self.reruns.append(_failed(report, report.when))

    def _take_hidden(self) -> None:
        """The failed runs flaky re-ran and never logged, as re-runs; an attempt whose setup
        was logged (it failed in its call) is not counted as a test of its own."""
        for hidden in self.unlogged.values():
            self.reruns += [failed for _, failed in hidden]
            self.tests -= sum(1 for _, failed in hidden if failed.when == "call")
        self.unlogged.clear()

    def passed_on_rerun(self) -> list[str]:
        """The tests that failed, were re-run and passed in the end (in the order re-run)."""
        if not self.reruns:
            return []
        failing = {f.nodeid for f in self.failed}
        return [n for n in dict.fromkeys(r.nodeid for r in self.reruns) if n in self.passed and n not in failing]

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._record(report, "collect")

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
            self._record(report, report.when)
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

    def known_id(self, nodeid: str) -> str:
        """``nodeid`` as the incidents keep it: cut and redacted (docs/redaction.md)."""
        # Imported here: only a run with incidents on disk compares ids with them.
        from pytest_selfheal.records.redacted import bounded_nodeid

        return self.redactor.redact(bounded_nodeid(nodeid))

    def _watched_id(self, nodeid: str) -> Optional[str]:
        """The id an open incident knows ``nodeid`` by, if it watches it: itself, or (an id
        holding a secret) its redacted form, as stored (docs/redaction.md)."""
        if nodeid in self.watched:
            return nodeid
        if self.watched_redacted:
            # Imported here: only an open incident whose ids hold a secret needs it.
            from pytest_selfheal.records.redacted import bounded_nodeid

            redacted = self.redactor.redact(bounded_nodeid(nodeid))
            if redacted in self.watched:
                return redacted
        return None

    def store(self) -> Store:
        """The store of this run's reports root, redacting with this run's settings; RefusedError
        when the configured root leads out of the project."""
        # Imported here: a green run without open incidents never opens the store.
        from pytest_selfheal.store.fsio import project_path
        from pytest_selfheal.store.root import Store

        project_path(self.config.rootpath, self.effective.settings.reports_dir, "reports_dir")
        return Store(self.reports_root, redactor=self.redactor)

    def _gone(self, session: pytest.Session, exitstatus: int) -> set[str]:
        """Open incidents' selected tests this run should have run and has no outcome for
        (deleted, renamed, deselected, ``-k``-ed away): its paths cover them and nothing cut
        it short (``-x``, ``--maxfail``, Ctrl-C) nor only collected. Empty without an open incident."""
        if not self.open_incidents or self.config.option.collectonly or session.shouldfail or session.shouldstop \
                or exitstatus == pytest.ExitCode.INTERRUPTED:
            return set()
        # Imported here: only a run with open incidents watches node ids.
        from pytest_selfheal.records.redacted import TRUNCATED, is_redacted

        rootdir = Path(self.config.rootpath)
        scopes = []
        for arg in self.config.args:
            path, _, rest = str(arg).partition("::")
            scopes.append((Path(os.path.abspath(Path(self.config.invocation_params.dir, path))), rest))
        gone = set()
        for nodeid in self.watched - self.outcomes.keys():
            if is_redacted(nodeid) or TRUNCATED in nodeid:
                continue  # an id holding a secret cannot be placed
            path, _, rest = nodeid.partition("::")
            where = Path(os.path.abspath(rootdir / path))
            if any((where == scope and (not inner or rest == inner or rest.startswith((inner + "::", inner + "["))))
                   or (not inner and scope in where.parents) for scope, inner in scopes):
                gone.add(nodeid)
        return gone

    def _stopped_hold_passed(self) -> bool:
        """May a stopped incident hold a test this green run passed (loop/sticky.py)? Its
        cheap look: the store and the incidents' last attempts, none of the capture side."""
        # Imported here: only a reports root holding incidents is looked at.
        from pytest_selfheal.errors import SelfhealError
        from pytest_selfheal.loop.stopped import holds_passed

        try:
            return holds_passed(self.store(), Path(self.config.rootpath), self.passed, self.known_id)
        except SelfhealError:
            return False

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
        """Whether the session end has anything to record: a failure, a test an open incident
        verifies (run, or gone), or a passed test a stopped incident may hold (a stop sticks:
        loop/sticky.py). Sets :attr:`gone`."""
        self.gone = self._gone(session, exitstatus)
        if self.unlogged:
            self._take_hidden()
        return bool(self.failed or self.outcomes or self.gone or self.passed_on_rerun() or (
            self.passed and not self.ci_run and self.has_stopped_incidents() and self._stopped_hold_passed()))

    def loop_requested(self) -> bool:
        """--selfheal-loop, or its ini option."""
        flag = self.config.getoption("selfheal_loop")
        return bool(flag) if flag is not None else bool(self.config.getini("selfheal_loop"))

    def outcomes_incidents(self) -> set[str]:
        """Open incidents this run recorded an attempt for."""
        return {i.incident_id for i in self.open_incidents if any(n in self.outcomes for n in i.selection)}

    def pytest_terminal_summary(self, terminalreporter: TerminalReporter) -> None:
        verbosity = int(self.config.get_verbosity())
        shown = [line for level, line in self.lines if verbosity >= level]
        if not shown:
            return
        # Imported here: a run with nothing to say shows no line.
        from pytest_selfheal.records.vocab import tone_of

        terminalreporter.section("selfheal", sep="-")
        for line in shown:
            terminalreporter.write_line(line, **_markup(tone_of(line)))
