"""The stop gate's decision (edge; docs/agents.md): run the tests as the MCP ``run_tests`` tool
does and answer the agent from the verdict. A gate fails open: what it cannot judge lets the
agent stop, with one line saying why. Claude Code does not say how often a stop hook blocked,
so the gate counts per session in ``<reports root>/gate/``; Cursor counts (``loop_count``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Optional

from pytest_selfheal.config.files import is_project
from pytest_selfheal.errors import SelfhealError
from pytest_selfheal.gate.agents import Agent, GateAnswer, HookPayload, cannot_judge, parse_payload
from pytest_selfheal.loop.agent_mode import open_incidents
from pytest_selfheal.loop.seal_check import NOT_APPLIED, judged_config
from pytest_selfheal.loop.sticky import ALREADY_STOPPED, stopped_incidents
from pytest_selfheal.mcp_server.digest import FOR_THE_USER, one_line
from pytest_selfheal.mcp_server.tools import Project
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.mcp import RunDecision, RunVerdict
from pytest_selfheal.records.vocab import FinalStatus, StopReason
from pytest_selfheal.store import fsio
from pytest_selfheal.store.root import Store

GATE_DIR = "gate"  # under the reports root: the block counts of Claude Code sessions
GREEN = (FinalStatus.PASSED, FinalStatus.RESOLVED)  # verdict statuses that mean nothing is left to fix


def _state_path(store: Store, payload: HookPayload) -> Path:
    key = hashlib.sha256(payload.session.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return Path(store.root) / GATE_DIR / f"{payload.agent.value}-{key}.json"


def blocks_so_far(store: Store, payload: HookPayload) -> int:
    if payload.agent is Agent.CURSOR:
        return payload.loop_count or 0
    if not payload.continued:
        return 0  # the agent stops on its own: a new chain starts
    try:
        data = fsio.read_json(_state_path(store, payload))
    except SelfhealError:
        return 0  # none yet, or unreadable: the loop's own budget still bounds the chain
    count = data.get("blocks") if isinstance(data, dict) else None
    return count if isinstance(count, int) and not isinstance(count, bool) and count >= 0 else 0


def _remember(store: Store, payload: HookPayload, blocks: int) -> None:
    if payload.agent is Agent.CURSOR:
        return
    path = _state_path(store, payload)
    if blocks == 0 and not path.exists():
        return  # nothing to reset: a green project gets no gate folder
    fsio.ensure_dir(path.parent)
    fsio.atomic_write_json(path, {"agent": payload.agent.value, "blocks": blocks})


def _stop_text(verdict: RunVerdict) -> str:
    if verdict.status in GREEN:
        return f"selfheal: tests passed; {verdict.summary}"  # not "pass:", a password label to the redactor
    reason = verdict.stop_reason or verdict.status
    text = f"selfheal: STOP {reason}: {verdict.summary}"
    # The message is the user's: their step, not the agent's (which is to stop, as it does).
    step = verdict.next.split(FOR_THE_USER, 1)[-1]
    return text + (f"; next: {step}" if step else "")


CONTINUE_NEXT = ("fix the code at the target paths of the root-cause groups, never the failing tests, then finish "
                 "your turn again: the stop gate re-runs the tests and lets you stop when they pass or the loop stops")


def _judging_incident(store: Store) -> tuple[bool, Optional[Incident]]:
    """``(an incident is open, the incident whose capture judges this stop)``: the open one, else
    the newest that stopped without success."""
    found = open_incidents(store)
    if found:
        return True, found[0].captured
    stopped = stopped_incidents(store, limit=1)
    try:
        return False, store.read_incident(stopped[0].incident_id) if stopped else None
    except SelfhealError:
        return False, None


# Stops by repetition: an agent that ran the tests itself before stopping may have spent
# them; with budget left, the gate's first answer still sends it back once.
SEND_BACK_ONCE = (StopReason.REPEATED_FINGERPRINT, StopReason.NO_PROGRESS, StopReason.NO_FIX_FOUND)


def send_back_once(verdict: RunVerdict, payload: HookPayload) -> bool:
    if payload.continued or verdict.decision is not RunDecision.STOP or verdict.iteration is None:
        return False
    red = any(kind in ("failed", "error", "errors") and number for kind, number in verdict.counts)
    return red and _stopped_by(verdict) in SEND_BACK_ONCE and verdict.iteration < verdict.max_iterations


def _stopped_by(verdict: RunVerdict) -> Optional[str]:
    return verdict.stopped_because if verdict.stop_reason == ALREADY_STOPPED else verdict.stop_reason


def _sent_back(verdict: RunVerdict) -> RunVerdict:
    left = verdict.max_iterations - int(verdict.iteration or 0)
    return replace(verdict, decision=RunDecision.CONTINUE, summary=(
        f"incident {verdict.incident_id} stopped ({_stopped_by(verdict)}) with {left} of {verdict.max_iterations} iteration(s) "
        "left and the tests still fail: nothing you ran changed the code enough; change it, and the next run "
        "continues the incident"))


def decide(project: Project, payload: HookPayload) -> GateAnswer:
    """Run the tests and answer from the verdict: CONTINUE blocks until the gate has blocked
    ``max_iterations`` times in a row. Its keys and budget are those of the judging incident's
    capture (a later edit is named, not obeyed)."""
    effective = project.effective()
    store = project.store(effective)
    is_open, judging = _judging_incident(store)
    edited_keys = None
    if judging is not None:
        effective, edited_keys = judged_config(effective, judging)
    settings = effective.settings
    blocks = blocks_so_far(store, payload)
    gate = settings.gate
    args: Optional[list[str]] = None if is_open else list(gate.pytest_args)
    verdict = project.run_verdict(effective, store, (), args, trusted=args or (),
                                  timeout=(gate.timeout_seconds, "gate.timeout_seconds"))
    redactor = effective.redactor
    if edited_keys and NOT_APPLIED not in verdict.summary:  # an iteration's summary names them already
        verdict = replace(verdict, summary=f"{verdict.summary} ({edited_keys.removeprefix('selfheal: ')})")
    if send_back_once(verdict, payload):
        verdict = _sent_back(verdict)
    if verdict.decision is not RunDecision.CONTINUE:
        _remember(store, payload, 0)
        return GateAnswer(False, redactor.redact(one_line(_stop_text(verdict), gate.max_chars)))
    if blocks >= settings.max_iterations:
        _remember(store, payload, 0)
        return GateAnswer(False, redactor.redact(one_line(
            f"selfheal: the stop gate let the agent stop: it blocked {blocks} time(s) in a row, the loop's budget "
            f"(max_iterations {settings.max_iterations}), and the tests still fail: {verdict.summary}",
            gate.max_chars)))
    _remember(store, payload, blocks + 1)
    more = (f"`selfheal show {verdict.incident_id}` prints the whole digest" if verdict.incident_id
            else "`selfheal status` lists them")
    return GateAnswer(True, project.verdict_result(store, replace(verdict, next=CONTINUE_NEXT), gate.max_chars,
                                                   redactor=redactor, structured=False, more=more).text)


def stop_gate(agent: Agent, raw: bytes, *, env: Mapping[str, str] = os.environ,
              cwd: Optional[Path] = None) -> tuple[GateAnswer, list[str]]:
    """The answer to one stop hook call and the lines for stderr."""
    try:
        payload = parse_payload(agent, raw)
        if payload.status not in (None, "completed"):
            return GateAnswer(False), [f"selfheal: stop-gate {agent.value}: the turn ended {payload.status}, "
                                       "not completed: no tests run; letting the agent stop"]
        # The payload's directory first; Claude Code also names the project in the environment.
        directory = ((cwd or Path.cwd()) / (payload.directory or env.get("CLAUDE_PROJECT_DIR") or "")).resolve()
        if not directory.is_dir():
            raise SelfhealError(f"{directory}: not a directory")
        if not is_project(directory):
            raise SelfhealError(f"{directory} is not a project (no pytest config, setup.py, pyproject.toml "
                                "or .git here or above); not running tests there")
        answer = decide(Project(directory), payload)
    except SelfhealError as exc:
        return cannot_judge(agent, str(exc))
    lines = [answer.message] if agent is Agent.CURSOR and not answer.block and answer.message else []
    return answer, lines
