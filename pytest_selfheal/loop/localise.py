"""Localisation for a reader: the plan's suspects ranked by a coverage spectrum (edge).

A capture sees only the failing tests, so it cannot tell a symptom every failing test
reaches from the cause the passing tests never run. When the ranking will be read, before
the first iteration, the failing tests' files run once, recording what each test runs
(capture/localise.py), and the plan is rebuilt from the most suspicious functions. The run
judges nothing; one that cannot localise leaves the plan as it was and says why.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import InputError, RefusedError
from pytest_selfheal.loop.attempts import ensure_plan, require_inbox
from pytest_selfheal.loop.control import loop_lock
from pytest_selfheal.loop.seal_check import judged_config
from pytest_selfheal.loop.state import LoopRun
from pytest_selfheal.loop.verify import (
    check_command,
    run_selection,
    runner,
    start_dir,
    trusted_options,
    verify_dir_prefix,
)
from pytest_selfheal.names import LOCALISE_ENV
from pytest_selfheal.plan.build import build_plan, verification_argv
from pytest_selfheal.plan.groups import selection_file
from pytest_selfheal.plan.markdown import render_plan_md
from pytest_selfheal.plan.suspects import (
    PASSING_SPECTRUM_FILE,
    FunctionKey,
    Spectrum,
    passing_spectrum,
    read_passing_spectrum,
)
from pytest_selfheal.records.incident import CodeRef, Failure, Incident
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.store import events as ev
from pytest_selfheal.store.fsio import project_source
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.root import Store

PLUGIN_MODULE = "pytest_selfheal.plugin"
PLUGIN_NAME = "selfheal"  # its pytest11 entry point's name (pyproject.toml)


def why_not(incident: Incident, effective: EffectiveConfig, attempts: int) -> Optional[str]:
    """Why the incident's plan is not to be localised, or None."""
    failures = incident.failures
    counts = incident.counts
    passed = counts.get("tests", 1) - counts.get("failed", 0) - counts.get("skipped", 0) - counts.get("errors", 0)
    if not effective.settings.verification.localise:
        return "verification.localise is off"
    if attempts:
        return "its loop has run (a plan is localised before the first iteration)"
    if any(f.root_cause is not None and f.root_cause.spectrum for f in failures):
        return "its failures have a spectrum already"
    if passed <= 0:
        return "no test passed in the capture (a spectrum of failing tests alone ranks nothing new)"
    return None


def wanted(incident: Incident, effective: EffectiveConfig, attempts: int, *, read: bool) -> bool:
    """Whether the loop localises before its next iteration: only when the ranking will be
    ``read`` (a verify-only loop runs its failing tests and nothing else)."""
    return read and why_not(incident, effective, attempts) is None


def _files(incident: Incident, root: Path) -> list[str]:
    out: list[str] = []
    for failure in incident.failures:
        path = selection_file(failure.nodeid) if failure.nodeid else None
        if path and path not in out and (root / path).is_file():
            out.append(path)
    return out


_NOTHING = Spectrum({}, {})


def read_written(path: Path) -> Optional[dict[str, Any]]:
    """What a localisation run wrote: None when it wrote nothing JSON, ``{}`` for JSON not an object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else {}


def read_spectrum(doc: Any) -> Spectrum:
    """The spectrum of what a localisation run wrote (:func:`read_written`); empty when it has none."""
    try:
        top = {str(n): tuple(CodeRef.from_json(r, "spectrum") for r in refs) for n, refs in doc["spectrum"].items()}
        scores: dict[FunctionKey, float] = {}
        for path_, name, line, score in doc.get("scores", []):
            if not (isinstance(path_, str) and isinstance(name, str) and type(line) is int
                    and isinstance(score, (int, float)) and 0 <= score <= 1):
                raise ValueError("a spectrum score is not [path, name, line, score]")
            scores[(path_, name, line)] = float(score)
        return Spectrum(top, scores)
    except (ValueError, KeyError, TypeError, AttributeError, InputError):
        return _NOTHING


def unrecorded_reason(doc: Optional[dict[str, Any]], timed_out: bool, exit_code: Optional[int],
                      timeout: Optional[float]) -> str:
    """Why the localisation run that wrote ``doc`` (:func:`read_written`) ranks no failing test."""
    if timed_out:
        return f"its run timed out after {timeout:g} s" if timeout else "its run timed out"
    if doc is None:
        return f"its run wrote no spectrum: pytest exited {exit_code}" if exit_code is not None else \
            "its run did not start"
    reason = doc.get("unrecorded")
    return str(reason) if isinstance(reason, str) and reason else "its spectrum does not parse"


def with_spectra(failures: Sequence[Failure], spectrum: Spectrum) -> tuple[Failure, ...]:
    """``failures`` with the localisation run's spectrum in the ``root_cause`` of each it ranked."""
    return tuple(replace(f, root_cause=spectrum.root_cause(f.nodeid, f.root_cause)) for f in failures)


def localise(
    run: LoopRun,
    *,
    plan: Plan,
    effective: EffectiveConfig,
    project_root: Path,
    env: Optional[Mapping[str, str]],
    say: Callable[[str], None],
) -> Plan:
    """Run the localisation of ``run``'s incident and return its plan, rebuilt when the run
    ranked some failing test (else ``plan`` as it was). Call without the store lock (it runs tests)."""
    incident, incident_id = run.incident, run.incident_id
    argvs = verification_argv(plan)
    # The capture's filters too (-k, -m, --deselect): a test its run left out lends the ranking
    # nothing (a deselected failure would count as one of this fault's).
    trusted = [*trusted_options(incident, effective), *incident.pytest_filters]
    files = _files(incident, project_root)
    if not argvs or not files:
        return plan
    child = dict(os.environ if env is None else env)
    # The run records with the plugin loaded once, by its module name, however the capture
    # loaded it: an entry point (blocked by its name), `-p` or PYTEST_PLUGINS.
    head = argvs[0][: runner(argvs[0])[1]]
    try:
        check_command([*head, *files, *trusted], allowlist=effective.settings.verification.allowlist,
                      root=project_root, trusted=trusted)
    except RefusedError as exc:
        say(f"selfheal: localisation not run: {exc}")
        return plan
    argv = [*head, "-q", "-p", f"no:{PLUGIN_NAME}", "-p", PLUGIN_MODULE, *files, *trusted]
    say(f"selfheal: incident {incident_id}: localising: running the {len(files)} test file(s) of its failures")
    with tempfile.TemporaryDirectory(prefix=verify_dir_prefix()) as tmp:
        out = Path(tmp) / "spectrum.json"
        child[LOCALISE_ENV] = str(out)
        done = run_selection(argv, cwd=project_root, junit_path=Path(tmp) / "junit.xml",
                             timeout_seconds=effective.settings.verification.timeout_seconds, env=child,
                             invocation_dir=start_dir(project_root, incident.invocation_dir))
        written = None if done.timed_out else read_written(out)
    spectrum = read_spectrum(written)
    why = unrecorded_reason(written, done.timed_out, done.exit_code, effective.settings.verification.timeout_seconds)
    passing = read_passing_spectrum(written)
    if passing:  # what the passing neighbours ran: the regression check's reach
        run.store.write_run_file(incident_id, PASSING_SPECTRUM_FILE,
                                 json.dumps(passing_spectrum(passing, passing)))
    if not spectrum.top:
        say(f"selfheal: localisation recorded nothing ({why}); the capture's plan stands")
        return plan
    with run.store.lock():
        run.incident = run.store.update_incident(
            incident_id, held=run.incident, failures=[f.to_json() for f in with_spectra(incident.failures, spectrum)])
        rebuilt = build_plan(run.incident, generated_at=ev.format_ts(), source=project_source(run.incident.rootdir))
        run.write_plan(rebuilt, render_plan_md(rebuilt))
        run.append_event(ev.PLAN_GENERATED, actions=[a.id for a in rebuilt.actions], localised=True)
    return rebuilt


def localise_plan(store: Store, incident_id: str, *, effective: EffectiveConfig, project_root: Path,
                  say: Callable[[str], None]) -> Plan:
    """``selfheal plan ID --localise``: rank the plan's suspects now, as the loop would; refuses like the loop."""
    incident_id = validate_incident_id(incident_id)
    require_inbox(store, incident_id)
    with loop_lock(store, incident_id):
        run = LoopRun.resume(store, incident_id)
        with store.lock():
            plan = ensure_plan(run)
        effective, _ = judged_config(effective, run.incident)
        why = why_not(run.incident, effective, len(run.attempts))
        if why is not None:
            say(f"selfheal: incident {incident_id}: not localised: {why}")
            return plan
        return localise(run, plan=plan, effective=effective, project_root=project_root, env=None, say=say)
