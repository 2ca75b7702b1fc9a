"""The recorder's loop side (edge): the incidents on disk a run may be an iteration of, and the
loop of ``--selfheal-loop``; loaded only when there is an incident or the loop is asked for."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from pytest_selfheal.capture.run import invocation_dir
from pytest_selfheal.config.seal import loaded_now
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gitrepo import PendingSnapshot, diff_hash
from pytest_selfheal.loop import agent_mode, sticky
from pytest_selfheal.loop.state import LoopRun
from pytest_selfheal.loop.sticky import holds_passed
from pytest_selfheal.process import fresh_pycache
from pytest_selfheal.records.redacted import TRUNCATED, bounded_nodeid, is_redacted
from pytest_selfheal.records.vocab import ESSENTIAL, SUMMARY
from pytest_selfheal.report.data import IncidentRun
from pytest_selfheal.report.load import incident_run_of
from pytest_selfheal.run import run_incident_loop
from pytest_selfheal.store.root import Store, project_store

if TYPE_CHECKING:
    from pytest_selfheal.recorder import Recorder


def _unplaceable(nodeid: str) -> bool:
    """An id holding a secret (redacted or truncated) cannot be placed in the tree."""
    return is_redacted(nodeid) or TRUNCATED in nodeid


class LoopSide:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def store(self) -> Store:
        """The store of the run's reports root (RefusedError when it leads out of the project)."""
        return project_store(self.recorder.config.rootpath, self.recorder.effective.settings.reports_dir,
                             self.recorder.redactor)

    def open_incidents(self) -> list[agent_mode.OpenIncident]:
        """The open incidents whose tests this run may verify (none readable: a line says why)."""
        try:
            return agent_mode.open_incidents(self.store())
        except SelfhealError as exc:
            self.recorder.lines.append((ESSENTIAL, f"selfheal: open incidents not read: {exc}"))
            return []

    def fresh_pycache(self) -> tuple[Optional[str], str]:
        """Compile every module imported from now on afresh (docs/loop.md "The seal"); what to undo."""
        cache = (sys.pycache_prefix, fresh_pycache())
        sys.pycache_prefix = cache[1]
        return cache

    def known_id(self, nodeid: str) -> str:
        return self.recorder.redactor.redact(bounded_nodeid(nodeid))

    @staticmethod
    def any_redacted(nodeids: set[str]) -> bool:
        return any(map(_unplaceable, nodeids))

    def gone(self) -> set[str]:
        """Open incidents' tests this run should have run and did not (deleted, renamed, ``-k``-ed away)."""
        recorder = self.recorder
        config = recorder.config
        if recorder.cut_short:
            return set()
        rootdir = Path(config.rootpath)
        scopes = [(Path(os.path.abspath(Path(config.invocation_params.dir, path))), rest)
                  for path, _, rest in (str(arg).partition("::") for arg in config.args)]
        gone = set()
        for nodeid in recorder.watched - recorder.outcomes.keys():
            if _unplaceable(nodeid):
                continue
            path, _, rest = nodeid.partition("::")
            where = Path(os.path.abspath(rootdir / path))
            if any((where == scope and (not inner or rest == inner or rest.startswith((inner + "::", inner + "["))))
                   or (not inner and scope in where.parents) for scope, inner in scopes):
                gone.add(nodeid)
        return gone

    def stopped_hold_passed(self) -> bool:
        """May a stopped incident hold a test this green run passed (loop/sticky.py)?"""
        try:
            return holds_passed(self.store(), Path(self.recorder.config.rootpath), self.recorder.passed,
                                self.known_id)
        except SelfhealError:
            return False

    def record_attempts(
        self, failures: list[Any], exitstatus: int, run_options: list[str], store: Optional[Store] = None,
        incidents: Optional[list[agent_mode.OpenIncident]] = None, outcomes: Optional[dict[str, str]] = None,
    ) -> agent_mode.AgentResult:
        """This run as the next attempt of each open incident (default: the run's) whose tests it ran."""
        recorder = self.recorder
        config = recorder.config
        return agent_mode.record_agent_attempts(
            store=store or self.store(), effective=recorder.effective,
            incidents=recorder.open_incidents if incidents is None else incidents,
            outcomes=recorder.outcomes if outcomes is None else outcomes, failures=failures,
            project_root=Path(config.rootpath), reports_root=recorder.reports_root,
            invocation=list(config.invocation_params.args), started_at=recorder.started_at, exit_code=exitstatus,
            run_options=run_options, run_dir=invocation_dir(config),
            loaded=loaded_now(config.pluginmanager.get_plugins(), recorder.test_data_read()),
            gone=recorder.gone if incidents is None else (),
            ran=None if recorder.cut_short else self.every_outcome(failures),
        )

    def attach_to_stopped(
        self, remaining: list[Any], failures: list[Any], git: Optional[PendingSnapshot], exitstatus: int,
        run_options: list[str], iterated: list[str],
    ) -> tuple[list[Any], list[str]]:
        """A stop sticks (loop/sticky.py): code unchanged → STOP already_stopped, changed → that
        incident's next iteration. Returns the failures left to capture, the incidents still open."""
        recorder = self.recorder
        store = self.store()
        stopped = sticky.stopped_incidents(store)
        if not stopped:
            return remaining, []
        root = Path(recorder.config.rootpath)
        diff = git.result().diff_hash if git is not None else diff_hash(root, exclude=[recorder.reports_root])
        matches, rest = sticky.match_stopped(stopped, remaining, diff) if remaining else ([], [])
        matches += sticky.match_green(
            stopped, sticky.as_known(stopped, recorder.passed, self.known_id), {f.nodeid for f in failures if f.nodeid},
            diff, sticky.tests_changed(store, root), taken={m.incident.incident_id for m in matches} | set(iterated))
        still_open: list[str] = []
        for match in matches:
            incident_id = match.incident.incident_id
            if match.attachment is sticky.Attachment.NOT_COLLECTED:
                try:
                    options = agent_mode.recorded_options(store.read_incident(incident_id))
                except SelfhealError:
                    options = None
                recorder.lines.append((ESSENTIAL, sticky.not_collected_line(
                    match, sticky.as_known(stopped, recorder.skipped_ids, self.known_id), options)))
                continue
            if match.attachment is sticky.Attachment.PASSED_AFTER_STOP:
                recorder.lines.append((ESSENTIAL, sticky.passed_after_stop_line(match)))
                continue
            if match.attachment is sticky.Attachment.CONTINUED:
                # Like with like: a run with other options, or from another directory, is no
                # iteration of it, and leaves it stopped.
                captured = store.read_incident(incident_id)
                unlike = agent_mode.not_an_iteration(captured, run_options, invocation_dir(recorder.config))
                if unlike is not None:
                    recorder.lines.append((ESSENTIAL, unlike))
                    continue
            sticky.record_attached(store, match, diff)
            if match.attachment is sticky.Attachment.ALREADY_STOPPED:
                recorder.lines += [(ESSENTIAL, sticky.already_stopped_line(match, recorder.effective.settings.max_iterations)),
                                   (ESSENTIAL, sticky.next_step(match))]
                continue
            sticky.continue_stopped(store, match)
            at = len(recorder.lines)
            resumed = [i for i in agent_mode.open_incidents(store) if i.incident_id == incident_id]
            # This run's outcome of each test the resumed incident selects.
            every = self.every_outcome(failures)
            outcomes = {n: every[n] for i in resumed for n in i.selection if n in every}
            agent = self.record_attempts(failures, exitstatus, run_options, store, resumed, outcomes)
            recorder.lines.extend((ESSENTIAL, line) for line in agent.lines)
            # A narrower run that passes is continued, not counted (loop/agent_mode.py).
            recorder.lines.insert(at, (SUMMARY, f"selfheal: incident {incident_id} stopped ({match.incident.stop_reason}) "
                                                "and the code changed since: " + ("this run is its next iteration"
                                                if incident_id in agent.touched else "it continues")))
            still_open += agent.still_open
            recorder.outcomes.update(outcomes)
            recorder.open_incidents += resumed
        return rest, still_open

    def every_outcome(self, failures: list[Any]) -> dict[str, str]:
        """This run's outcome of each test it ran, by the incidents' ids: a failure over a skip over a pass."""
        recorder = self.recorder
        passed, skipped = recorder.passed, recorder.skipped_ids
        if recorder.watched_redacted:  # as the incidents know them (Recorder._watched_id)
            passed = {self.known_id(n) for n in passed}
            skipped = {self.known_id(n) for n in skipped}
        out = {**dict.fromkeys(passed, "passed"), **dict.fromkeys(skipped, "skipped")}
        out.update((f.nodeid, f.outcome if f.outcome in ("failed", "error") else "failed") for f in failures if f.nodeid)
        return out

    def run_loop(self, captured: IncidentRun) -> IncidentRun:
        """``--selfheal-loop`` on the incident this run captured; its records as the loop left them."""
        recorder = self.recorder
        store = self.store()
        state = LoopRun.resume(store, captured.incident.incident_id, captured.incident, captured.plan)
        run_incident_loop(
            store,
            state.incident_id,
            effective=recorder.effective,
            cwd=Path(recorder.config.rootpath),
            approve=recorder.effective.settings.repair.approve,
            out=lambda line: recorder.lines.append((SUMMARY, line)),
            pluginmanager=recorder.config.pluginmanager,
            state=state,
        )
        return incident_run_of(state)
