"""Record a run in the history and triage its failures (edge: the database, git, the environment).

The one entry every surface calls: the quarantine list, the base branch's sightings *before*
this run is added (a failure never makes itself known), the run recorded (its segment, then
the database), each failing test triaged. Any history problem is a warning line.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Protocol

from pytest_selfheal.errors import SelfhealError, one_line
from pytest_selfheal.gitrepo import git_snapshot
from pytest_selfheal.history import records as hr
from pytest_selfheal.history.db import HISTORY_FILE, HistoryDB, HistoryUnavailable
from pytest_selfheal.history.segments import segments_dir, single_run, write_segment
from pytest_selfheal.history.sources import ActionsContext, head_repository, judge_event, quarantine_in_force
from pytest_selfheal.history.triage import matching_entry, triage_failure
from pytest_selfheal.records.context import GitContext
from pytest_selfheal.records.incident import Triage
from pytest_selfheal.store.events import format_ts


class HistorySection(Protocol):
    """The ``history`` settings (``config.keys.HistorySettings``) as this module reads them."""

    @property
    def enabled(self) -> bool: ...

    @property
    def base_branch(self) -> str: ...

    @property
    def flaky_rate(self) -> float: ...

    @property
    def window_days(self) -> float: ...

    @property
    def quarantine_file(self) -> str: ...


@dataclass
class HistoryResult:
    triage: dict[str, Triage] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    base_branch: str = "main"
    unavailable: Optional[str] = None  # the database's one line when it could not be used (also in warnings)


def run_info(*, run_key: str, kind: str, project_root: Path, actions: Optional[ActionsContext] = None,
             incident_id: Optional[str] = None, iteration: Optional[int] = None, tests_run: Optional[int] = None,
             now: Optional[dt.datetime] = None, git: Optional[GitContext] = None) -> hr.RunInfo:
    """The run's record: time, commit and branch (the Actions variables, else the caller's
    ``git`` context, else git itself), the repository of that branch, CI ids."""
    ci = actions or ActionsContext.from_env()
    if git is None:
        git = git_snapshot(project_root, diff_hash=False).context or GitContext()
    branch = ci.head_ref or ci.ref_name or git.branch
    return hr.RunInfo(
        run_key=run_key, recorded_at=format_ts(now), kind=kind, incident_id=incident_id, iteration=iteration,
        commit=ci.sha or git.commit, branch=branch if branch and hr.plausible_ref_name(branch) else None,
        ci_workflow=ci.workflow, ci_job=ci.job, ci_run_id=ci.run_id, tests_run=tests_run,
        repository=head_repository(ci, ci.event()),
    )


def record_and_triage(reports_root: Path, settings: HistorySection, run: hr.RunInfo, tests: Sequence[hr.TestOutcome],
                      *, project_root: Path, actions: Optional[ActionsContext] = None,
                      event: Optional[Mapping[str, object]] = None) -> HistoryResult:
    """Record ``run`` with ``tests``, each failed, passed on re-run (with the fingerprint it failed
    with) or passed after a code change, and triage each test that did not pass; a failure a
    quarantine entry covers is recorded as quarantined."""
    if not settings.enabled:
        return HistoryResult(base_branch=settings.base_branch)
    base = judge_event(actions or ActionsContext.from_env(), event, project_root, settings.base_branch)
    result = HistoryResult(base_branch=base.branch)
    quarantine, result.warnings = quarantine_in_force(project_root, settings.quarantine_file, base)
    rerun = [t.nodeid for t in tests if t.outcome == hr.PASSED_ON_RERUN]
    failing = {t.nodeid: t.fingerprint or "" for t in tests if t.outcome != hr.PASSED}
    outcomes = [replace(t, outcome=hr.QUARANTINED) if t.outcome == hr.FAILED and matching_entry(
        quarantine, nodeid=t.nodeid, fingerprint=failing[t.nodeid]) else t for t in tests]
    since = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=float(settings.window_days))).isoformat()
    # The segment first: it is the durable record that `selfheal history push` shares and the
    # database is rebuilt from; the database is the fast index over it.
    segment: Optional[str] = None
    try:
        segment = write_segment(reports_root, single_run(run, outcomes))
    except (SelfhealError, OSError) as exc:
        result.warnings.append(one_line(f"{segments_dir(reports_root)}: cannot write this run's history segment "
                                        f"({exc}); it stays in {HISTORY_FILE} only"))
    try:
        with HistoryDB.open(reports_root) as db:
            sightings = db.sightings(failing.values(), base.branch, base.repository)
            db.record(run, outcomes, segment=segment)
            # After this run is recorded: its failure counts, so the triage's figure is the
            # one `selfheal flaky` shows next (3 of 7, not 3 of 6).
            rates = {r.nodeid: r for r in db.flake_rates(since, nodeids=failing)}
    except HistoryUnavailable as exc:
        result.unavailable = str(exc)
        result.warnings.append(result.unavailable)
        sightings, rates = {}, {}
    for nodeid, fingerprint in failing.items():
        result.triage[nodeid] = triage_failure(
            nodeid, fingerprint, base_branch=result.base_branch, sightings=sightings, flake_rates=rates,
            passed_on_rerun=rerun, quarantine=quarantine, flaky_rate=settings.flaky_rate,
        )
    return result
