"""Repair providers between loop iterations (edge: subprocesses, git; docs/repair.md).

A *repair provider* changes code in an isolated git worktree before each verification
run of the loop (SPEC §8). Two kinds, asked in this order:

1. **hooks**: implementations of ``pytest_selfheal_repair(request)`` (hookspecs.py) —
   from a conftest/plugin under pytest, or, for the ``selfheal`` CLI, from modules
   registered under the entry-point group ``pytest_selfheal``. The first implementation
   that returns a result wins; ``None`` declines.
2. **a command**: ``ralf_lite.repair.command``, an argv list from config (never a string
   for a shell) with ``{prompt_file}``, ``{incident_id}``, ``{worktree}``,
   ``{iteration}`` substituted per argument; run in the worktree through
   :func:`pytest_selfheal.process.run` (own process group, stdin from /dev/null, killed
   with its whole group after ``repair.timeout_seconds``), its output kept in
   ``error_runs/<id>/repair_XX.log`` (redacted).

One call gives one result (``attempt_XX.json`` ``repair``)::

    {provider: "hook:<name>" | "command:<argv0>",
     result: "diff" | "no_fix_found" | "timeout" | "crashed",
     files_changed, patch ("attempt_XX.patch" | null), scope_denied, out_of_scope,
     exit_code, duration_seconds, message, actions_applied, prompt, log, worktree}

The result is decided from the worktree, not from what the provider claims: the diff of
the worktree against its state before the call (empty → ``no_fix_found``). A provider
that timed out, crashed or gave up is rolled back, and so is a diff touching files out
of scope that nobody approved (``scope_denied``) — the next verification always sees
exactly the accepted state. :func:`repair_loop` wraps :func:`loop.run_loop` with the
worktree, the final patch and the approval to apply it.
"""

from __future__ import annotations

import os
import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from pytest_selfheal import hooks, process
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import SelfhealError, one_line
from pytest_selfheal.loop import driver as loop
from pytest_selfheal.loop.policy import (
    REPAIR_CRASHED,
    REPAIR_DIFF,
    REPAIR_NO_FIX_FOUND,
    REPAIR_TIMEOUT,
    LoopPolicy,
)
from pytest_selfheal.loop.resume import split_runs
from pytest_selfheal.loop.verify import VERIFYING_ENV
from pytest_selfheal.process import KILL_GRACE_SECONDS, tail_bytes
from pytest_selfheal.redact import Redactor, default_redactor
from pytest_selfheal.repair import scope
from pytest_selfheal.repair.approval import Approver, approver_from
from pytest_selfheal.repair.prompt import build_prompt
from pytest_selfheal.repair.scope import normalise
from pytest_selfheal.repair.worktree import Worktree, apply_patch, check_patch, create, remove_recorded, worktree_record
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.root import Store

if TYPE_CHECKING:
    import pluggy


PLACEHOLDERS: Tuple[str, ...] = ("prompt_file", "incident_id", "worktree", "iteration")
FINAL_PATCH = "final.patch"
WORKTREE_RECORD = "worktree.json"
LOG_MAX_BYTES = 1024 * 1024  # of a provider's output kept in repair_XX.log (the tail)
TAIL_CHARS = 2000  # of a crashed provider's output quoted in its message

# Variables that point git at a repository. A selfheal run started from a git hook
# (pre-commit running pytest sets GIT_INDEX_FILE) would otherwise aim every git command
# of the worktree — and the provider's — at the user's own index.
GIT_LOCATING_ENV: Tuple[str, ...] = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_NAMESPACE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
)

Say = Callable[[str], None]


# --------------------------------------------------------------------------- names, files


def attempt_patch_name(iteration: int) -> str:
    """``attempt_01.patch``: the cumulative diff (vs the user's state) proposed at an attempt."""
    return f"attempt_{iteration:02d}.patch"


def prompt_name(iteration: int) -> str:
    """``prompt_01.md``: the repair prompt of an attempt."""
    return f"prompt_{iteration:02d}.md"


def log_name(iteration: int) -> str:
    """``repair_01.log``: the (redacted) output of the repair command of an attempt."""
    return f"repair_{iteration:02d}.log"


def write_patch(store: "Store", incident_id: str, name: str, data: bytes) -> Path:
    """Write a patch into ``error_runs/<id>/`` atomically, byte for byte.

    Patches are not redacted: a redacted patch would no longer apply, and its content is
    the user's own code (see docs/repair.md). UTF-8 patches go through
    ``Store.write_run_file``; others (a Latin-1 source file) are written as bytes under
    the store lock.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        return store.write_run_file(incident_id, name, text)
    store.write_run_file(incident_id, name, "")  # validates the name and the incident
    with store.lock():
        path = store.runs_dir(incident_id) / name
        fsio.atomic_write_bytes(path, data)
        return path


def read_run_bytes(store: "Store", incident_id: str, name: str) -> Optional[bytes]:
    """A file of ``error_runs/<id>/`` as bytes, or None when it does not exist."""
    path = store.runs_dir(incident_id) / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fsio.io_error("read", path, exc) from None


def apply_command(store: "Store", incident_id: str, cwd: Optional[Path] = None) -> str:
    """The exact command that applies the proposed patch: ``selfheal apply ID`` (plus
    ``--dir`` when the reports root is not ``./.selfheal`` of ``cwd``)."""
    here = (cwd or Path.cwd()).resolve()
    root = store.root.resolve()
    command = f"selfheal apply {incident_id}"
    if root != here / ".selfheal":
        command += f" --dir {shlex.quote(str(root))}"
    return command


# --------------------------------------------------------------------------- the command


def substitute(template: Sequence[str], values: Mapping[str, str]) -> List[str]:
    """Replace ``{prompt_file}``, ``{incident_id}``, ``{worktree}``, ``{iteration}`` inside each
    argument; any other brace text is kept literally (``{"a": 1}`` survives)."""
    argv = []
    for arg in template:
        text = str(arg)
        for name in PLACEHOLDERS:
            if name in values:
                text = text.replace("{" + name + "}", values[name])
        argv.append(text)
    return argv


def command_env(base: Optional[Mapping[str, str]] = None, **extra: str) -> Dict[str, str]:
    """The provider's environment: ``base`` (default ``os.environ``; agents need their API
    keys) minus the git-locating variables, plus ``SELFHEAL_VERIFYING=1`` (pytest runs the
    agent starts stay passive: no incident, no attempt of their own) and ``extra``."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in GIT_LOCATING_ENV}
    env[VERIFYING_ENV] = "1"
    env.update(extra)
    return env


@dataclass(frozen=True)
class CommandRun:
    """What one repair command did."""

    argv: List[str]
    started: bool  # False: the executable could not be started
    exit_code: Optional[int]  # None when it did not start or was killed by the timeout
    timed_out: bool
    duration_seconds: float
    output_path: Path  # raw (unredacted) output, in the session's private temp dir
    error: str = ""  # why it could not start


def run_command(
    argv: Sequence[str],
    *,
    cwd: Path,
    timeout_seconds: Optional[float],
    output_path: Path,
    env: Optional[Mapping[str, str]] = None,
    kill_grace: float = KILL_GRACE_SECONDS,
) -> CommandRun:
    """Run one repair command and wait (:func:`pytest_selfheal.process.run`: argv list, no
    shell, own process group, stdin from /dev/null — a provider waiting for input hangs
    until the timeout).

    Output (stdout+stderr) goes to ``output_path``. On timeout — or any exception while
    waiting (Ctrl-C) — the whole process group gets SIGTERM, then SIGKILL; a background
    child the command left in its group is killed when it exits (it would keep writing
    into a worktree that is about to be removed).
    """
    result = process.run(
        argv, cwd=cwd, output_path=output_path, timeout_seconds=timeout_seconds, env=env, kill_grace=kill_grace
    )
    return CommandRun(
        result.argv, result.started, result.exit_code, result.timed_out, result.duration_seconds, output_path,
        result.error,
    )


# --------------------------------------------------------------------------- one repair call


@dataclass
class _Call:
    """What the provider did, before the worktree is inspected."""

    provider: str
    status: str  # done | gave_up | declined | timeout | crashed
    exit_code: Optional[int] = None
    duration: float = 0.0
    message: str = ""
    log: Optional[str] = None


def _failures_for_request(incident: Mapping[str, Any], attempts: Sequence[Mapping[str, Any]]) -> List[Any]:
    source = attempts[-1].get("failures") if attempts else incident.get("failures")
    return [dict(f) for f in source if isinstance(f, Mapping)] if isinstance(source, list) else []


@contextmanager
def _chdir(path: Path) -> Iterator[None]:
    # An in-process hook that writes relative paths must land in the worktree.
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


class RepairSession:
    """The loop's provider for one run: holds the worktree, asks hooks then the command,
    inspects the diff, checks the scope, records patches and events.

    Called by :func:`loop.run_loop` before each verification with keyword arguments
    ``incident_id, iteration, store, plan, last_attempt, observations``; returns the repair
    dict (with ``worktree``, where the loop verifies).
    """

    def __init__(
        self,
        store: "Store",
        incident_id: str,
        *,
        effective: "EffectiveConfig",
        worktree: "Worktree",
        approver: "Approver",
        pluginmanager: Optional["pluggy.PluginManager"] = None,
        say: Optional[Say] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.store = store
        self.incident_id = incident_id
        self.effective = effective
        self.wt = worktree
        self.approver = approver
        self.pm = pluginmanager
        self.say: Say = say or (lambda line: None)
        self.env = env
        self.redactor: "Redactor" = default_redactor(effective.get("redaction"))
        command = effective.get("repair.command")
        self.command: Optional[List[str]] = [str(a) for a in command] if command else None
        timeout = effective.get("repair.timeout_seconds")
        self.timeout: Optional[float] = float(timeout) if timeout is not None else None
        self.globs: List[str] = [str(g) for g in effective.get("repair.allowed_paths") or []]
        self.policy = LoopPolicy.from_config(effective.values)
        self.results: List[Dict[str, Any]] = []

    # -- the provider seam

    def __call__(
        self,
        *,
        incident_id: str,
        iteration: int,
        store: Optional["Store"] = None,
        plan: Mapping[str, Any],
        last_attempt: Optional[Mapping[str, Any]] = None,
        observations: Sequence[Any] = (),
        **_: Any,
    ) -> Dict[str, Any]:
        """One repair before verification ``iteration`` (the attempt number)."""
        store = store or self.store
        attempts = store.read_attempts(incident_id)
        incident = store.read_incident(incident_id)
        loop_iteration = max(1, len(observations))  # this iteration's number within the run
        remaining = max(0, self.policy.max_iterations - loop_iteration)
        targets, globs = scope.allowed_paths(plan, self.globs)
        prompt = self.redactor.redact(
            build_prompt(
                incident=incident,
                plan=plan,
                attempts=attempts,
                iteration=loop_iteration,
                max_iterations=self.policy.max_iterations,
                log_tail=self.redactor.redact(self._log_tail()),
                allowed_paths=targets + globs,
                remaining_budget=remaining,
                # The loop keeps no output of its verification runs: the tail is the capture's.
                log_tail_source="the captured run" if not attempts else
                "the captured run (the latest failures are listed above)",
            )
        )
        prompt_file = store.write_run_file(incident_id, prompt_name(iteration), prompt)
        signature = next(
            (str(a["error_signature"]) for a in reversed(attempts) if a.get("error_signature")),
            incident.get("error_signature"),
        )
        store.append_event(
            incident_id,
            ev.REPAIR_ATTEMPT_STARTED,
            iteration=iteration,
            attempt=iteration,
            provider=self.describe(),
            remaining=remaining,
            failureSignature=signature,
            prompt=prompt_name(iteration),
        )
        self.say(f"selfheal: incident {incident_id} repair {iteration}: asking {self.describe()}")
        before = self.wt.snapshot()
        call = self._call_provider(
            iteration=iteration,
            prompt=prompt,
            prompt_file=prompt_file,
            plan=plan,
            failures=_failures_for_request(incident, attempts),
        )
        result = self._inspect(iteration, call, before, plan, targets, globs)
        self.results.append(result)
        store.append_event(
            incident_id,
            ev.REPAIR_ATTEMPT_COMPLETED,
            iteration=iteration,
            attempt=iteration,
            provider=result["provider"],
            result=result["result"],
            files_changed=result["files_changed"],
            patch=result["patch"],
            scope_denied=result["scope_denied"],
            failureSignature=signature,
        )
        shown = f" ({', '.join(result['files_changed'])})" if result["files_changed"] else ""
        denied = " — out of scope, not approved, rolled back" if result["scope_denied"] else ""
        self.say(f"selfheal: incident {incident_id} repair {iteration}: {result['result']}{shown}{denied}")
        return result

    def describe(self) -> str:
        """``hook:<name>`` (the first registered hook), ``command:<argv0>``, or ``none``."""
        names = hooks.repair_hook_names(self.pm)
        if names:
            return f"hook:{names[0]}"
        if self.command:
            return f"command:{os.path.basename(self.command[0])}"
        return "none"

    # -- providers

    def _log_tail(self) -> str:
        try:
            return self.store.read_log_tail(self.incident_id)
        except SelfhealError:
            return ""

    def _call_provider(
        self, *, iteration: int, prompt: str, prompt_file: Path, plan: Mapping[str, Any], failures: List[Any]
    ) -> _Call:
        names = hooks.repair_hook_names(self.pm)
        if names and self.pm is not None:
            request = {
                "incident_id": self.incident_id,
                "iteration": iteration,
                "worktree": str(self.wt.project_root),
                "prompt": prompt,
                "prompt_file": str(prompt_file),
                "plan": dict(plan),
                "failures": failures,
            }
            start = time.monotonic()
            try:
                with _chdir(self.wt.project_root):
                    answer = hooks.call_repair(self.pm, request)
            except Exception as exc:  # a buggy hook is a crashed provider, not a crashed loop
                crashed = hooks.crashed_plugin(self.pm, "pytest_selfheal_repair", exc.__traceback__) or names[0]
                message = one_line(f"{type(exc).__name__}: {exc}")
                return _Call(f"hook:{crashed}", "crashed", None, time.monotonic() - start, self.redactor.redact(message))
            duration = time.monotonic() - start
            if answer is not None:
                # firstresult: pluggy returns the first answer; the provider named is the one that
                # says so (``provider``), else the first repair hook in call order.
                name = f"hook:{answer.get('provider') or names[0]}"
                status = answer.get("result")
                message = str(answer.get("message") or "")
                if status in ("gave_up", "done"):
                    return _Call(name, str(status), None, duration, self.redactor.redact(message))
                invalid = f"hook returned an invalid result {status!r} (expected done or gave_up)"
                return _Call(name, "crashed", None, duration, invalid)
        if self.command:
            return self._run_configured_command(iteration, prompt_file)
        declined = [f"hook:{name}" for name in names]
        who = ", ".join(declined) or "no provider"
        return _Call(declined[0] if declined else "none", "declined", None, 0.0, f"every repair hook declined ({who})")

    def _run_configured_command(self, iteration: int, prompt_file: Path) -> _Call:
        assert self.command is not None
        values = {
            "prompt_file": str(prompt_file),
            "incident_id": self.incident_id,
            "worktree": str(self.wt.project_root),
            "iteration": str(iteration),
        }
        argv = substitute(self.command, values)
        name = f"command:{os.path.basename(self.command[0])}"
        env = command_env(
            self.env,
            SELFHEAL_INCIDENT_ID=self.incident_id,
            SELFHEAL_ITERATION=str(iteration),
            SELFHEAL_WORKTREE=values["worktree"],
            SELFHEAL_PROMPT_FILE=values["prompt_file"],
        )
        raw = self.wt.scratch / f"repair_{iteration:02d}.raw"
        run = run_command(argv, cwd=self.wt.project_root, timeout_seconds=self.timeout, output_path=raw, env=env)
        text, cut = tail_bytes(raw, LOG_MAX_BYTES)
        header = f"$ {' '.join(shlex.quote(a) for a in argv)}\n"
        if cut:
            header += f"[... output cut: only the last {LOG_MAX_BYTES} bytes are kept ...]\n"
        trailer = (
            f"\n[timed out after {self.timeout:g} s: process group killed]\n" if run.timed_out
            else f"\n[exit code {run.exit_code}]\n" if run.started else f"\n[cannot start: {run.error}]\n"
        )
        redacted = self.redactor.redact(header + text + trailer)
        self.store.write_run_file(self.incident_id, log_name(iteration), redacted)
        try:
            raw.unlink()
        except OSError:
            pass
        tail = self.redactor.redact(text[-TAIL_CHARS:]).strip()
        if run.timed_out:
            return _Call(name, "timeout", None, run.duration_seconds,
                         f"the repair command exceeded repair.timeout_seconds ({self.timeout:g} s)", log_name(iteration))
        if not run.started:
            return _Call(name, "crashed", None, run.duration_seconds,
                         one_line(f"cannot start {argv[0]}: {run.error}"), log_name(iteration))
        if run.exit_code != 0:
            last = tail.splitlines()[-1] if tail else ""
            return _Call(name, "crashed", run.exit_code, run.duration_seconds,
                         one_line(f"exit code {run.exit_code}" + (f": {last}" if last else "")), log_name(iteration))
        return _Call(name, "done", 0, run.duration_seconds, "", log_name(iteration))

    # -- the worktree after the call

    def _inspect(
        self,
        iteration: int,
        call: _Call,
        before: str,
        plan: Mapping[str, Any],
        targets: Sequence[str],
        globs: Sequence[str],
    ) -> Dict[str, Any]:
        result: Dict[str, Any] = {
            "provider": call.provider,
            "result": REPAIR_NO_FIX_FOUND,
            "files_changed": [],
            "patch": None,
            "scope_denied": False,
            "out_of_scope": [],
            "exit_code": call.exit_code,
            "duration_seconds": round(max(0.0, call.duration), 3),
            "message": call.message,
            "actions_applied": [],
            "prompt": prompt_name(iteration),
            "log": call.log,
            "worktree": str(self.wt.project_root),
        }
        if call.status in ("timeout", "crashed", "gave_up", "declined"):
            # No new evidence may leak into the next verification: roll back partial edits.
            self.wt.restore(before)
            result["result"] = {"timeout": REPAIR_TIMEOUT, "crashed": REPAIR_CRASHED}.get(call.status, REPAIR_NO_FIX_FOUND)
            return result
        self.wt.reset_head()  # undo commits the provider made; files stay
        after = self.wt.snapshot()
        changed = self.wt.project_relative(self.wt.changed_files(before, after))
        if not changed:
            result["message"] = call.message or "the provider changed nothing"
            return result
        result["result"] = REPAIR_DIFF
        result["files_changed"] = changed
        patch_name = attempt_patch_name(iteration)
        cumulative = self.wt.diff(self.wt.base, after)
        write_patch(self.store, self.incident_id, patch_name, cumulative)
        result["patch"] = patch_name
        result["actions_applied"] = _actions_touched(plan, changed)
        self.store.append_event(
            self.incident_id, ev.DIFF_PROPOSED, iteration=iteration, attempt=iteration, kind="repair",
            diffId=patch_name, patch=patch_name, files_changed=changed,
        )
        outside = scope.out_of_scope(changed, targets, globs)
        if outside:
            result["out_of_scope"] = outside
            self.store.append_event(
                self.incident_id, ev.SCOPE_EXPANSION_REQUESTED, iteration=iteration, files=outside,
                reason="the repair changed files outside the plan's target paths and ralf_lite.repair.allowed_paths",
            )
            question = f"The repair of {self.incident_id} also changed {', '.join(outside)} (outside the plan's scope). Allow it?"
            details = self.redactor.redact(self.wt.diff(before, after).decode("utf-8", errors="replace"))
            if not self.approver.confirm(question, details=details):
                self.wt.restore(before)
                result["scope_denied"] = True
                result["actions_applied"] = []
                result["message"] = f"out of scope and not approved ({self.approver.how}): {', '.join(outside)}; rolled back"
        return result


def _actions_touched(plan: Mapping[str, Any], changed: Sequence[str]) -> List[str]:
    """Plan actions whose target paths the diff touched; every action when none is named
    (a diff within the extra globs still works on the whole plan)."""
    touched: List[str] = []
    every: List[str] = []
    files = {normalise(c) for c in changed}
    for action in plan.get("actions") or []:
        if not isinstance(action, Mapping) or not isinstance(action.get("id"), str):
            continue
        every.append(action["id"])
        paths = {normalise(p) for p in action.get("target_paths") or [] if isinstance(p, str)}
        if paths & files:
            touched.append(action["id"])
    return touched or every


# --------------------------------------------------------------------------- the whole run


@contextmanager
def isolated_git_env() -> Iterator[None]:
    """Drop the git-locating variables (GIT_DIR, GIT_INDEX_FILE…) from ``os.environ`` for
    the duration: every git command (ours, the loop's diff hash, the provider's) must find
    the repository from its working directory."""
    saved = {k: os.environ.pop(k) for k in GIT_LOCATING_ENV if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _accepted_patch(attempts: Sequence[Mapping[str, Any]]) -> Optional[str]:
    """The patch of the latest accepted diff of the current run (resume after a kill)."""
    _, run = split_runs(attempts)
    for attempt in reversed(run):
        repair = attempt.get("repair")
        if not isinstance(repair, Mapping):
            continue
        if repair.get("result") == REPAIR_DIFF and not repair.get("scope_denied") and isinstance(repair.get("patch"), str):
            return str(repair["patch"])
    return None


def _remove_stale(store: "Store", incident_id: str) -> None:
    path = store.runs_dir(incident_id) / WORKTREE_RECORD
    if not path.exists():
        return
    try:
        record = fsio.read_json(path)
    except SelfhealError:
        record = None
    if isinstance(record, Mapping):
        remove_recorded(record)


def repair_loop(
    store: "Store",
    incident_id: str,
    *,
    effective: "EffectiveConfig",
    project_root: Path,
    approve: bool = False,
    interactive: Optional[bool] = None,
    pluginmanager: Optional["pluggy.PluginManager"] = None,
    out: Optional[Say] = None,
    input_fn: Optional[Callable[[str], str]] = None,
    env: Optional[Mapping[str, str]] = None,
    hook_rules: Optional[Sequence[Mapping[str, Any]]] = None,
    unattended: Optional[bool] = None,
) -> Dict[str, Any]:
    """Run (or resume) the loop with a repair provider in an isolated worktree.

    1. create a worktree of the repository containing ``project_root`` holding the user's
       current state (``RefusedError``, exit 5, outside git); on resume the latest
       accepted attempt patch is replayed into it;
    2. :func:`loop.run_loop` with ``project_root`` = the worktree and the provider;
    3. write ``final.patch`` (the worktree vs the user's state); when the incident is
       resolved and approval is given (``approve``, ``repair.approve``, an interactive
       yes) apply it to the user's working tree (checked first; a conflict leaves it
       proposed); otherwise print ``selfheal apply ID``;
    4. remove the worktree — also on failure and Ctrl-C.

    ``interactive``: None = detect (stdin and stdout are terminals). ``hook_rules``: extra
    classification rules for the verification runs (None: asked from ``pluginmanager``'s
    ``pytest_selfheal_classification_rules``, so they classify like the capture). The run result gets
    ``repair: {final_patch, applied, apply_command, files_changed, message, provider_calls}``,
    also written into ``run_result.json`` when the loop wrote one.
    """
    incident_id = validate_incident_id(incident_id)
    say: Say = out or (lambda line: None)
    pm = pluginmanager if pluginmanager is not None else hooks.cli_plugin_manager()
    approver = approver_from(
        approve=approve, config_approve=effective.get("repair.approve"), interactive=interactive, input_fn=input_fn
    )
    rules = list(hook_rules) if hook_rules is not None else hooks.classification_rules(pm)
    with isolated_git_env():
        store.locate(incident_id)  # an unknown id fails before a worktree is made
        _remove_stale(store, incident_id)
        wt = create(Path(project_root), name=incident_id, exclude=[store.root])
        try:
            store.write_run_file(incident_id, WORKTREE_RECORD, fsio.dumps_json(worktree_record(wt)))
            accepted = _accepted_patch(store.read_attempts(incident_id))
            if accepted is not None and store.read_status(incident_id) == "running":
                data = read_run_bytes(store, incident_id, accepted)
                if data:
                    verdict = check_patch(wt.path, data)
                    if verdict.ok:
                        apply_patch(wt.path, data)
                        say(f"selfheal: incident {incident_id}: resumed the worktree from {accepted}")
                    else:
                        say(f"selfheal: warning: cannot replay {accepted} into the new worktree ({verdict.error}); "
                            "the repair starts again from your working tree")
            session = RepairSession(
                store, incident_id, effective=effective, worktree=wt, approver=approver, pluginmanager=pm, say=say,
                env=env,
            )
            result = loop.run_loop(
                store, incident_id, effective=effective, project_root=wt.project_root, provider=session,
                approve=approve, out=say, env=env, hook_rules=rules, unattended=unattended,
            )
            return _close_out(store, incident_id, result, wt=wt, session=session, approver=approver, say=say)
        finally:
            wt.remove()
            for warning in wt.warnings:
                say(f"selfheal: warning: {warning}")
            try:
                (store.runs_dir(incident_id) / WORKTREE_RECORD).unlink()
            except OSError:
                pass


def _close_out(
    store: "Store",
    incident_id: str,
    result: Dict[str, Any],
    *,
    wt: "Worktree",
    session: RepairSession,
    approver: "Approver",
    say: Say,
) -> Dict[str, Any]:
    """final.patch, approval, apply; the ``repair`` block of the run result."""
    final_tree = wt.snapshot()
    patch = wt.diff(wt.base, final_tree)
    files = wt.project_relative(wt.changed_files(wt.base, final_tree))
    resolved = result.get("final_status") == "resolved"
    block: Dict[str, Any] = {
        "final_patch": None,
        "applied": False,
        "apply_command": None,
        "files_changed": files,
        "message": "",
        "provider_calls": len(session.results),
    }
    if patch.strip():
        path = write_patch(store, incident_id, FINAL_PATCH, patch)
        block["final_patch"] = FINAL_PATCH
        store.append_event(
            incident_id, ev.DIFF_PROPOSED, iteration=result.get("iteration"), kind="final", diffId=FINAL_PATCH,
            patch=FINAL_PATCH, files_changed=files, final=True,
        )
        if session.redactor.redact(patch.decode("utf-8", errors="replace")) != patch.decode("utf-8", errors="replace"):
            say(f"selfheal: warning: {path} contains text that looks like a secret; patches are kept unredacted "
                "so that they apply — review it before sharing")
        command = apply_command(store, incident_id)
        if not resolved:
            block["message"] = (
                f"a partial patch is proposed ({FINAL_PATCH}); the incident is not resolved, so it is not applied"
            )
            say(f"selfheal: the loop did not resolve {incident_id}; the partial patch is in {path} "
                f"(apply it anyway with: {command})")
        else:
            summary = f"{len(files)} file(s): {', '.join(files)}"
            question = f"Apply the fix of {incident_id} ({summary}) to your working tree?"
            verdict = check_patch(wt.repo_top, patch)
            if not verdict.ok:
                block["apply_command"] = command
                block["message"] = f"not applied: the patch does not apply cleanly to your working tree ({verdict.error})"
                say(f"selfheal: {block['message']}; it stays proposed in {path}")
            elif approver.confirm(question, details=session.redactor.redact(patch.decode("utf-8", errors="replace"))):
                try:
                    apply_patch(wt.repo_top, patch)
                except SelfhealError as exc:
                    block["apply_command"] = command
                    block["message"] = f"not applied: {exc}"
                    say(f"selfheal: {block['message']}")
                else:
                    block["applied"] = True
                    block["message"] = f"applied to {wt.repo_top} ({approver.how}): {summary}"
                    say(f"selfheal: fix applied to your working tree: {summary}")
            else:
                block["apply_command"] = command
                block["message"] = f"proposed, not applied (no approval: {approver.how}); apply with `{command}`"
                say(f"selfheal: the fix is proposed, not applied: {path}")
                say(f"selfheal: to apply it run: {command}")
    else:
        # A previous run's partial patch (before a replan) must not be applied by mistake.
        with store.lock():
            try:
                (store.runs_dir(incident_id) / FINAL_PATCH).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise fsio.io_error("remove", store.runs_dir(incident_id) / FINAL_PATCH, exc) from None
        block["message"] = "no change was proposed" if not resolved else "resolved without a code change"
    result = dict(result)
    result["repair"] = block
    existing = store.read_run_result(incident_id)
    same_stop = existing is not None and all(existing.get(k) == result.get(k) for k in ("iteration", "stop_reason"))
    if existing is not None and same_stop:
        updated = dict(existing)
        updated["repair"] = block
        store.write_run_result(incident_id, updated)
    return result


__all__ = [
    "CommandRun",
    "FINAL_PATCH",
    "GIT_LOCATING_ENV",
    "PLACEHOLDERS",
    "RepairSession",
    "apply_command",
    "attempt_patch_name",
    "command_env",
    "isolated_git_env",
    "log_name",
    "prompt_name",
    "read_run_bytes",
    "repair_loop",
    "run_command",
    "substitute",
    "write_patch",
]
