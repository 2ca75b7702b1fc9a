"""Repair providers between loop iterations (edge: subprocesses, git; docs/repair.md).

A provider changes code in the isolated worktree before each verification: first the
``pytest_selfheal_repair`` hooks (the first answer wins, ``None`` declines), else
``repair.command``, an argv list (never a shell string) run in the worktree with its own
process group and a timeout, its output kept redacted in ``repair_XX.log``.

The result is decided from the worktree, not from what the provider claims: its diff
against the state before the call (empty: ``no_fix_found``). A provider that timed out,
crashed or gave up is rolled back, and so is a diff out of scope that nobody approved:
the next verification always sees exactly the accepted state.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from pytest_selfheal import hooks, process
from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import SelfhealError, one_line
from pytest_selfheal.gitrepo import GIT_LOCATING_ENV
from pytest_selfheal.hookspecs import RepairRequest
from pytest_selfheal.loop.messages import iteration_prefix, repair_line
from pytest_selfheal.loop.policy import (
    REPAIR_CRASHED,
    REPAIR_DIFF,
    REPAIR_NO_FIX_FOUND,
    REPAIR_TIMEOUT,
    LoopPolicy,
)
from pytest_selfheal.names import VERIFYING_ENV
from pytest_selfheal.process import tail_bytes
from pytest_selfheal.records.attempt import Attempt, RepairBlock
from pytest_selfheal.records.jsondoc import freeze
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.vocab import StopReason, first_few
from pytest_selfheal.redact import Redactor
from pytest_selfheal.repair.approval import Approver, allowed_paths, normalise, out_of_scope
from pytest_selfheal.repair.patches import attempt_patch_name, log_name, prompt_name, write_patch
from pytest_selfheal.repair.prompt import build_prompt
from pytest_selfheal.repair.worktree import Worktree, changes, user_state
from pytest_selfheal.store import events as ev
from pytest_selfheal.store.root import Store

if TYPE_CHECKING:
    import pluggy


PLACEHOLDERS: tuple[str, ...] = ("prompt_file", "incident_id", "worktree", "iteration")
LOG_MAX_BYTES = 1024 * 1024  # of a provider's output kept in repair_XX.log (the tail)
TAIL_CHARS = 2000  # of a crashed provider's output quoted in its message

Say = Callable[[str], None]


def substitute(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Replace the :data:`PLACEHOLDERS` inside each argument; other brace text stays (``{"a": 1}``)."""
    argv = []
    for text in template:
        for name in PLACEHOLDERS:
            if name in values:
                text = text.replace("{" + name + "}", values[name])
        argv.append(text)
    return argv


def command_env(base: Optional[Mapping[str, str]] = None, **extra: str) -> dict[str, str]:
    """``base`` (agents need their API keys) without the git-locating variables, plus ``extra``
    and ``SELFHEAL_VERIFYING=1``: pytest runs the agent starts record no incident of their own."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in GIT_LOCATING_ENV}
    env[VERIFYING_ENV] = "1"
    env.update(extra)
    return env


@dataclass
class _Call:
    """What the provider did, before the worktree is inspected."""

    provider: str
    status: str  # done | gave_up | declined | timeout | crashed
    exit_code: Optional[int] = None
    duration: float = 0.0
    message: str = ""
    log: Optional[str] = None


def _records(store: Store, incident_id: str) -> dict[str, Path]:
    return {path.relative_to(store.root).as_posix(): path for path in store.record_paths(incident_id)}


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
    """The loop's provider for one run: asks hooks then the command, inspects the worktree's
    diff, checks the scope, records patches and events."""

    def __init__(
        self,
        store: Store,
        incident_id: str,
        *,
        effective: EffectiveConfig,
        worktree: Worktree,
        approver: Approver,
        pluginmanager: Optional[pluggy.PluginManager] = None,
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
        settings = effective.settings
        self.redactor: Redactor = effective.redactor
        self.command: Optional[list[str]] = list(settings.repair.command) if settings.repair.command else None
        self.timeout = float(settings.repair.timeout_seconds)
        self.globs: list[str] = list(settings.repair.allowed_paths)
        self.allow_test_edits = settings.repair.allow_test_edits
        # Import locations of the user's tree the verification could not point at the worktree.
        self.not_redirected: list[str] = []
        self.policy = LoopPolicy.from_settings(settings)
        self.results: list[RepairBlock] = []

    def __call__(
        self,
        *,
        incident_id: str,
        iteration: int,
        store: Optional[Store] = None,
        plan: Plan,
        last_attempt: Optional[Attempt] = None,
        observations: Sequence[Any] = (),
        **_: Any,
    ) -> RepairBlock:
        """One repair before verification ``iteration`` (the attempt number): the attempt's repair block."""
        store = store or self.store
        attempts = store.read_attempts(incident_id)
        incident = store.read_incident(incident_id)
        loop_iteration = max(1, len(observations))  # this iteration's number within the run
        remaining = max(0, self.policy.max_iterations - loop_iteration)
        targets, globs = allowed_paths(plan, self.globs, allow_test_edits=self.allow_test_edits)
        prompt = self.redactor.redact(
            build_prompt(
                incident=incident,
                plan=plan,
                attempts=attempts,
                iteration=loop_iteration,
                max_iterations=self.policy.max_iterations,
                log_tail=self.redactor.redact(self._log_tail()),
                # What the agent may edit: test files only when repair.allow_test_edits says so.
                allowed_paths=[t for t in targets if self.allow_test_edits or not is_test_file(t)] + globs,
                remaining_budget=remaining,
                # The loop keeps no output of its verification runs: the tail is the capture's.
                log_tail_source="the captured run" if not attempts else
                "the captured run (the latest failures are listed above)",
            )
        )
        prompt_file = store.write_run_file(incident_id, prompt_name(iteration), prompt)
        signature = next(
            (a.error_signature for a in reversed(attempts) if a.error_signature),
            incident.error_signature,
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
        # Numbered as the iteration it prepares (the attempt number keeps counting after a reopen).
        line = f"{iteration_prefix(incident_id, loop_iteration, self.policy.max_iterations)}: repair"
        self.say(f"{line}: asking {self.describe()}")
        guard = user_state(self.wt.repo_top, [store.root], _records(store, incident_id), self.wt.carried)
        before = self.wt.snapshot()
        call = self._call_provider(
            iteration=iteration,
            prompt=prompt,
            prompt_file=prompt_file,
            plan=plan,
            failures=[f.to_json() for f in (attempts[-1].failures if attempts else incident.failures)],
        )
        escaped = changes(guard, user_state(self.wt.repo_top, [store.root], _records(store, incident_id),
                                            self.wt.carried))
        if escaped:
            # Nothing of a repair that reached outside its worktree is kept (rolled back as a crash).
            call.status = "crashed"
            call.message = f"the provider changed your working tree or .git outside its worktree: {first_few(escaped, 10)}"
        result = self._inspect(iteration, call, before, plan, targets, globs)
        if escaped:
            key = StopReason.PROVIDER_ESCAPED.value
            result = replace(result, keys=(*(result.keys or ()), key), extra=(*result.extra, (key, freeze(escaped))))
            self.say(f"{line}: {call.message}; stopping "
                     f"({StopReason.PROVIDER_ESCAPED}), nothing of this repair is applied")
        self.results.append(result)
        store.append_event(
            incident_id,
            ev.REPAIR_ATTEMPT_COMPLETED,
            iteration=iteration,
            attempt=iteration,
            provider=result.provider,
            result=result.result,
            files_changed=list(result.files_changed),
            patch=result.patch,
            scope_denied=result.scope_denied,
            failureSignature=signature,
        )
        self.say(f"{line}: {repair_line(result)}")
        return result

    def describe(self) -> str:
        """``hook:<name>`` (the first registered hook), ``command:<argv0>``, or ``none``."""
        names = hooks.repair_hook_names(self.pm)
        if names:
            return f"hook:{names[0]}"
        if self.command:
            return f"command:{os.path.basename(self.command[0])}"
        return "none"

    def _log_tail(self) -> str:
        try:
            return self.store.read_log_tail(self.incident_id)
        except SelfhealError:
            return ""

    def _call_provider(
        self, *, iteration: int, prompt: str, prompt_file: Path, plan: Plan, failures: list[Any]
    ) -> _Call:
        names = hooks.repair_hook_names(self.pm)
        if names and self.pm is not None:
            request: RepairRequest = {
                "incident_id": self.incident_id,
                "iteration": iteration,
                "worktree": str(self.wt.project_root),
                "prompt": prompt,
                "prompt_file": str(prompt_file),
                "plan": plan.to_json(),  # the hook API takes JSON
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
        # argv list, no shell, its own process group killed on timeout with what it left behind,
        # stdin from /dev/null: a provider waiting for input hangs until the timeout.
        run = process.run(argv, cwd=self.wt.project_root, timeout_seconds=self.timeout, output_path=raw, env=env)
        text, cut = tail_bytes(raw, LOG_MAX_BYTES)
        header = f"$ {' '.join(shlex.quote(a) for a in argv)}\n"
        if cut:
            header += f"[... output cut: only the last {LOG_MAX_BYTES} bytes are kept ...]\n"
        trailer = (
            f"\n[timed out after {self.timeout:g} s: process group killed]\n" if run.timed_out
            else f"\n[exit code {run.exit_code}]\n" if run.started else f"\n[cannot start: {run.error}]\n"
        )
        redacted = self.redactor.redact(header + text + trailer)
        log = log_name(iteration)
        self.store.write_run_file(self.incident_id, log, redacted)
        raw.unlink(missing_ok=True)
        if run.timed_out:
            return _Call(name, "timeout", None, run.duration_seconds,
                         f"the repair command exceeded repair.timeout_seconds ({self.timeout:g} s)", log)
        if not run.started:
            return _Call(name, "crashed", None, run.duration_seconds, one_line(f"cannot start {argv[0]}: {run.error}"), log)
        if run.exit_code != 0:
            last = (self.redactor.redact(text[-TAIL_CHARS:]).strip().splitlines() or [""])[-1]
            return _Call(name, "crashed", run.exit_code, run.duration_seconds,
                         one_line(f"exit code {run.exit_code}" + (f": {last}" if last else "")), log)
        return _Call(name, "done", 0, run.duration_seconds, "", log)

    def _tests_edited(self, tree: str) -> list[str]:
        """The test files ``tree`` changes against the user's state: what its verification passes with."""
        return [f for f in self.wt.project_relative(self.wt.changed_files(self.wt.base, tree)) if is_test_file(f)]

    def _inspect(
        self,
        iteration: int,
        call: _Call,
        before: str,
        plan: Plan,
        targets: Sequence[str],
        globs: Sequence[str],
    ) -> RepairBlock:
        base = RepairBlock(
            provider=call.provider,
            result=REPAIR_NO_FIX_FOUND,
            exit_code=call.exit_code,
            duration_seconds=round(max(0.0, call.duration), 3),
            message=call.message,
            prompt=prompt_name(iteration),
            log=call.log,
            worktree=str(self.wt.project_root),
            scope_denied=False,
            keys=_BLOCK_KEYS if not self.not_redirected else _REDIRECTED_BLOCK_KEYS,
            extra=(("code_path_not_redirected", tuple(self.not_redirected)),) if self.not_redirected else (),
        )
        if call.status in ("timeout", "crashed", "gave_up", "declined"):
            # No new evidence may leak into the next verification: roll back partial edits.
            self.wt.restore(before)
            outcome = {"timeout": REPAIR_TIMEOUT, "crashed": REPAIR_CRASHED}.get(call.status, REPAIR_NO_FIX_FOUND)
            return replace(base, result=outcome, tests_edited=tuple(self._tests_edited(before)))
        self.wt.reset_head()  # undo commits the provider made; files stay
        after = self.wt.snapshot()
        changed = self.wt.project_relative(self.wt.changed_files(before, after))
        if not changed:
            return replace(base, message=call.message or "the provider changed nothing",
                           tests_edited=tuple(self._tests_edited(after)))
        tests = [f for f in changed if is_test_file(f)]
        if tests and not self.allow_test_edits:
            # Approval applies a fix; it never authorises weakening a test. Only
            # repair.allow_test_edits does, so nobody is asked: the whole repair is undone.
            self.wt.restore(before)
            self.store.append_event(
                self.incident_id, ev.SCOPE_EXPANSION_REQUESTED, iteration=iteration, files=tests,
                reason="the repair edited test files; ralf_lite.repair.allow_test_edits is false, and approval "
                       "never covers test edits",
            )
            return replace(base, result=REPAIR_DIFF, scope_denied=True, out_of_scope=tuple(tests),
                           files_changed=tuple(changed), tests_edited=tuple(self._tests_edited(before)),
                           message=f"edited test files ({', '.join(tests)}): test edits need "
                                   "ralf_lite.repair.allow_test_edits (approval never covers them); rolled back")
        patch_name = attempt_patch_name(iteration)
        cumulative = self.wt.diff(self.wt.base, after)
        write_patch(self.store, self.incident_id, patch_name, cumulative)
        result = replace(base, result=REPAIR_DIFF, files_changed=tuple(changed),
                         tests_edited=tuple(self._tests_edited(after)), patch=patch_name,
                         actions_applied=tuple(_actions_touched(plan, changed)))
        self.store.append_event(
            self.incident_id, ev.DIFF_PROPOSED, iteration=iteration, attempt=iteration, kind="repair",
            diffId=patch_name, patch=patch_name, files_changed=changed,
        )
        outside = out_of_scope(changed, targets, globs, allow_test_edits=self.allow_test_edits)
        if outside:
            result = replace(result, out_of_scope=tuple(outside))
            self.store.append_event(
                self.incident_id, ev.SCOPE_EXPANSION_REQUESTED, iteration=iteration, files=outside,
                reason="the repair changed files outside the plan's target paths and ralf_lite.repair.allowed_paths"
                       + ("" if self.allow_test_edits else ", or test files (ralf_lite.repair.allow_test_edits is false)"),
            )
            question = f"The repair of {self.incident_id} also changed {', '.join(outside)} (outside the plan's scope). Allow it?"
            details = self.redactor.redact(self.wt.diff(before, after).decode("utf-8", errors="replace"))
            if not self.approver.confirm(question, details=details):
                self.wt.restore(before)
                result = replace(result, tests_edited=tuple(self._tests_edited(before)), scope_denied=True, actions_applied=(),
                                 message=f"out of scope and not approved ({self.approver.how}): {', '.join(outside)}; rolled back")
            else:
                # Never silent: the files approval let in are named on the line, in the attempt and the report.
                how = "up front (--approve or repair.approve)" if self.approver.approved else "at the prompt"
                result = replace(result, message="; ".join(filter(None, (
                    f"out of scope, approved {how}: {', '.join(outside)}", call.message))))
        return result


# The repair block's keys in the order it is written (every one, empty lists and nulls included).
_BLOCK_HEAD = ("provider", "result", "files_changed", "patch", "scope_denied", "out_of_scope")
_BLOCK_TAIL = ("exit_code", "duration_seconds", "message", "actions_applied", "prompt", "log", "worktree", "tests_edited")
_BLOCK_KEYS = _BLOCK_HEAD + _BLOCK_TAIL
_REDIRECTED_BLOCK_KEYS = (*_BLOCK_HEAD, "code_path_not_redirected", *_BLOCK_TAIL)


def _actions_touched(plan: Plan, changed: Sequence[str]) -> list[str]:
    """Plan actions whose target paths the diff touched; all when none (a diff within the globs
    still works on the whole plan)."""
    files = {normalise(c) for c in changed}
    touched = [action.id for action in plan.actions if {normalise(p) for p in action.target_paths} & files]
    return touched or [action.id for action in plan.actions]
