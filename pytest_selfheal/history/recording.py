"""Record a run in the history and triage its failures (edge: the database, git, the environment).

The one entry every surface calls: the quarantine list, the base branch's sightings *before*
this run is added (a failure never makes itself known), the run recorded (its segment, then
the database), each failing test triaged. Any history problem is a warning line.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol

from pytest_selfheal.errors import SelfhealError, one_line
from pytest_selfheal.gitrepo import git_snapshot
from pytest_selfheal.history import records as hr
from pytest_selfheal.history.db import HISTORY_FILE, HistoryDB, HistoryUnavailable
from pytest_selfheal.history.segments import segments_dir, single_run, write_segment
from pytest_selfheal.history.sources import actions_event, head_repository, judge_event, quarantine_in_force
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


@dataclass(frozen=True)
class Failing:
    """One failing test of the run (already redacted)."""

    nodeid: str
    fingerprint: str
    failure_class: Optional[str] = None


@dataclass
class HistoryResult:
    triage: dict[str, Triage] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    base_branch: str = "main"
    unavailable: Optional[str] = None  # the database's one line when it could not be used (also in warnings)


def run_info(*, run_key: str, kind: str, project_root: Path, env: Optional[Mapping[str, str]] = None,
             incident_id: Optional[str] = None, iteration: Optional[int] = None, tests_run: Optional[int] = None,
             now: Optional[dt.datetime] = None, git: Optional[GitContext] = None) -> hr.RunInfo:
    """The run's record: time, commit and branch (the Actions variables, else the caller's
    ``git`` context, else git itself), the repository of that branch, CI ids."""
    source = os.environ if env is None else env
    if git is None:
        git = git_snapshot(project_root, diff_hash=False).context or GitContext()
    branch = source.get("GITHUB_HEAD_REF") or source.get("GITHUB_REF_NAME") or git.branch
    commit = source.get("GITHUB_SHA") or git.commit
    return hr.RunInfo(
        run_key=run_key, recorded_at=format_ts(now), kind=kind, incident_id=incident_id, iteration=iteration,
        commit=commit, branch=branch if branch and hr.plausible_ref_name(branch) else None,
        ci_workflow=source.get("GITHUB_WORKFLOW") or None, ci_job=source.get("GITHUB_JOB") or None,
        ci_run_id=source.get("GITHUB_RUN_ID") or None, tests_run=tests_run,
        repository=head_repository(source, actions_event(source)),
    )


def record_and_triage(reports_root: Path, settings: HistorySection, run: hr.RunInfo, failing: Sequence[Failing], *,
                      project_root: Path, passed_on_rerun: Sequence[str] = (), passed: Sequence[str] = (),
                      env: Optional[Mapping[str, str]] = None,
                      event: Optional[Mapping[str, object]] = None) -> HistoryResult:
    """Record ``run`` and triage each test of ``failing``: this run's failures, and the tests of
    ``passed_on_rerun`` (failed earlier, passed now with no code change) with the fingerprint
    they failed with. ``passed``: tests that passed after a code change."""
    source = os.environ if env is None else env
    if not settings.enabled:
        return HistoryResult(base_branch=settings.base_branch)
    base = judge_event(source, event, project_root, settings.base_branch)
    result = HistoryResult(base_branch=base.branch)
    quarantine, result.warnings = quarantine_in_force(project_root, settings.quarantine_file, source, base=base)
    rerun = set(passed_on_rerun)
    outcomes = [hr.TestOutcome(item.nodeid, hr.PASSED_ON_RERUN if item.nodeid in rerun
                               else hr.QUARANTINED if matching_entry(quarantine, nodeid=item.nodeid,
                                                                     fingerprint=item.fingerprint)
                               else hr.FAILED, item.fingerprint, item.failure_class) for item in failing]
    outcomes += [hr.TestOutcome(nodeid, hr.PASSED) for nodeid in passed if nodeid not in rerun]
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
            sightings = db.sightings([f.fingerprint for f in failing], base.branch, base.repository)
            db.record(run, outcomes, segment=segment)
            # After this run is recorded: its failure counts, so the triage's figure is the
            # one `selfheal flaky` shows next (3 of 7, not 3 of 6).
            rates = {r.nodeid: r for r in db.flake_rates(since, nodeids=[f.nodeid for f in failing])}
    except HistoryUnavailable as exc:
        result.unavailable = str(exc)
        result.warnings.append(result.unavailable)
        sightings, rates = {}, {}
    for item in failing:
        result.triage[item.nodeid] = triage_failure(
            item.nodeid, item.fingerprint, base_branch=result.base_branch, sightings=sightings, flake_rates=rates,
            passed_on_rerun=passed_on_rerun, quarantine=quarantine, flaky_rate=settings.flaky_rate,
        )
    return result
