"""One repair run: the loop with a provider in an isolated worktree (edge: subprocesses, git;
docs/repair.md), then the final patch and the approval to apply it. The worktree is removed
whatever happens, Ctrl-C included.

The provider is the ``pytest_selfheal_repair`` hooks (the first answer wins), else
``repair.command``. Its result is read from the worktree's diff, never from what it claims; a
provider that failed, or a diff out of scope nobody approved, is rolled back: each
verification sees the accepted state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from pytest_selfheal import hooks, process
from pytest_selfheal.analysis.frames import is_test_file
from pytest_selfheal.analysis.rules import Rule, parse_hook_rules
from pytest_selfheal.config.seal import differ
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import SelfhealError, one_line
from pytest_selfheal.gitrepo import GIT_LOCATING_ENV, isolated_git_env
from pytest_selfheal.hookspecs import RepairRequest
from pytest_selfheal.loop import driver as loop
from pytest_selfheal.loop.codepath import redirect_to_worktree
from pytest_selfheal.loop.messages import iteration_prefix, repair_line
from pytest_selfheal.loop.policy import (
    REPAIR_CRASHED,
    REPAIR_DIFF,
    REPAIR_NO_FIX_FOUND,
    REPAIR_TIMEOUT,
    LoopPolicy,
    reopened_after,
)
from pytest_selfheal.loop.state import LoopRun, split_runs
from pytest_selfheal.names import VERIFYING_ENV
from pytest_selfheal.process import tail_bytes
from pytest_selfheal.records.attempt import RepairBlock
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.jsondoc import every_key, freeze
from pytest_selfheal.records.plan import Plan
from pytest_selfheal.records.repair import WorktreeRecord
from pytest_selfheal.records.run_result import LoopResult, RunRepair
from pytest_selfheal.records.vocab import FinalStatus, StopReason, first_few
from pytest_selfheal.redact import Redactor
from pytest_selfheal.repair.approval import Approver, allowed_paths, approver_from, normalise, out_of_scope
from pytest_selfheal.repair.patches import (
    FINAL_PATCH,
    apply_command,
    read_run_bytes,
    refusal,
    summarise,
    write_patch,
)
from pytest_selfheal.repair.prompt import build_prompt
from pytest_selfheal.repair.worktree import (
    Worktree,
    apply_patch,
    check_patch,
    create,
    remove_recorded,
    user_state,
)
from pytest_selfheal.store import events as ev
from pytest_selfheal.store import fsio
from pytest_selfheal.store.ids import validate_incident_id
from pytest_selfheal.store.root import Store

if TYPE_CHECKING:
    import pluggy


PLACEHOLDERS: tuple[str, ...] = ("prompt_file", "incident_id", "worktree", "iteration")
LOG_MAX_BYTES = 1024 * 1024  # of a provider's output kept in repair_XX.log (the tail)
TAIL_CHARS = 2000  # of a crashed provider's output quoted in its message

Say = Callable[[str], None]


def _prompt_name(iteration: int) -> str:
    return f"prompt_{iteration:02d}.md"


def substitute(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Replace the :data:`PLACEHOLDERS` inside each argument; other brace text stays (``{"a": 1}``)."""
    argv = list(template)
    for name in PLACEHOLDERS:
        if name in values:
            argv = [text.replace("{" + name + "}", values[name]) for text in argv]
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


class RepairSession:
    """The loop's provider for one run: asks the hooks, then the command, and inspects the diff."""

    def __init__(self, store: Store, incident_id: str, *, effective: EffectiveConfig, worktree: Worktree,
                 approver: Approver, pluginmanager: Optional[pluggy.PluginManager] = None, say: Optional[Say] = None,
                 env: Optional[Mapping[str, str]] = None) -> None:
        self.store = store
        self.incident_id = incident_id
        self.effective = effective
        self.wt = worktree
        self.approver = approver
        self.pm = pluginmanager
        self.say: Say = say or (lambda line: None)
        self.env = env
        self.redactor: Redactor = effective.redactor
        self.command: Optional[list[str]] = list(effective.settings.repair.command or ()) or None
        self.timeout = float(effective.settings.repair.timeout_seconds)
        self.allow_test_edits = effective.settings.repair.allow_test_edits
        # Import locations of the user's tree the verification could not point at the worktree.
        self.not_redirected: list[str] = []
        self.policy = LoopPolicy.from_settings(effective.settings)
        self.results: list[RepairBlock] = []

    def __call__(self, *, incident_id: str, iteration: int, store: Store, plan: Plan,
                 observations: Sequence[Any], **_: Any) -> RepairBlock:
        """One repair before verification ``iteration`` (the attempt number): the attempt's repair block."""
        attempts = store.read_attempts(incident_id)
        incident = store.read_incident(incident_id)
        loop_iteration = max(1, len(observations))  # this iteration's number within the run
        remaining = max(0, self.policy.max_iterations - loop_iteration)
        targets, globs = allowed_paths(plan, self.effective.settings.repair.allowed_paths,
                                       allow_test_edits=self.allow_test_edits)
        try:
            log_tail = store.read_log_tail(incident_id)
        except SelfhealError:
            log_tail = ""
        prompt = self.redactor.redact(build_prompt(
            incident=incident, plan=plan, attempts=attempts, iteration=loop_iteration,
            max_iterations=self.policy.max_iterations, log_tail=self.redactor.redact(log_tail),
            # What the agent may edit: test files only when repair.allow_test_edits says so.
            allowed_paths=[t for t in targets if self.allow_test_edits or not is_test_file(t)] + globs,
            remaining_budget=remaining,
            # The loop keeps no output of its verification runs: the tail is the capture's.
            log_tail_source="the captured run" if not attempts else
            "the captured run (the latest failures are listed above)",
        ))
        prompt_file = store.write_run_file(incident_id, _prompt_name(iteration), prompt)
        signature = next((a.error_signature for a in reversed(attempts) if a.error_signature),
                         incident.error_signature)
        store.append_event(incident_id, ev.REPAIR_ATTEMPT_STARTED, iteration=iteration, attempt=iteration,
                           provider=self.describe(), remaining=remaining, failureSignature=signature,
                           prompt=_prompt_name(iteration))
        # Numbered as the iteration it prepares (the attempt number keeps counting after a reopen).
        line = f"{iteration_prefix(incident_id, loop_iteration, self.policy.max_iterations)}: repair"
        self.say(f"{line}: asking {self.describe()}")

        def user_side() -> dict[str, str]:
            records = {path.relative_to(store.root).as_posix(): path for path in store.record_paths(incident_id)}
            return user_state(self.wt.repo_top, [store.root], records, self.wt.carried)

        guard, before = user_side(), self.wt.snapshot()
        call = self._call_provider(iteration, prompt, prompt_file, plan,
                                   [f.to_json() for f in (attempts[-1].failures if attempts else incident.failures)])
        escaped = differ(guard, user_side())
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
        store.append_event(incident_id, ev.REPAIR_ATTEMPT_COMPLETED, iteration=iteration, attempt=iteration,
                           provider=result.provider, result=result.result, files_changed=list(result.files_changed),
                           patch=result.patch, scope_denied=result.scope_denied, failureSignature=signature)
        self.say(f"{line}: {repair_line(result)}")
        return result

    def describe(self) -> str:
        """``hook:<name>`` (the first registered hook), ``command:<argv0>``, or ``none``."""
        names = hooks.repair_hook_names(self.pm)
        return f"hook:{names[0]}" if names else f"command:{os.path.basename(self.command[0])}" if self.command else "none"

    def _call_provider(self, iteration: int, prompt: str, prompt_file: Path, plan: Plan, failures: list[Any]) -> _Call:
        names = hooks.repair_hook_names(self.pm)
        if names and self.pm is not None:
            request: RepairRequest = {
                "incident_id": self.incident_id, "iteration": iteration, "worktree": str(self.wt.project_root),
                "prompt": prompt, "prompt_file": str(prompt_file), "plan": plan.to_json(), "failures": failures,
            }
            start, cwd = time.monotonic(), os.getcwd()
            os.chdir(self.wt.project_root)  # an in-process hook that writes relative paths must land in the worktree
            try:
                answer = hooks.call_repair(self.pm, request)
            except Exception as exc:  # a buggy hook is a crashed provider, not a crashed loop
                crashed = hooks.crashed_plugin(self.pm, "pytest_selfheal_repair", exc.__traceback__) or names[0]
                message = one_line(f"{type(exc).__name__}: {exc}")
                return _Call(f"hook:{crashed}", "crashed", None, time.monotonic() - start, self.redactor.redact(message))
            finally:
                os.chdir(cwd)
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
        declined = [f"hook:{name}" for name in names] or ["none"]
        who = ", ".join(declined) if names else "no provider"
        return _Call(declined[0], "declined", None, 0.0, f"every repair hook declined ({who})")

    def _run_configured_command(self, iteration: int, prompt_file: Path) -> _Call:
        assert self.command is not None
        values = {"prompt_file": str(prompt_file), "incident_id": self.incident_id,
                  "worktree": str(self.wt.project_root), "iteration": str(iteration)}
        argv = substitute(self.command, values)
        name = f"command:{os.path.basename(self.command[0])}"
        env = command_env(self.env, **{f"SELFHEAL_{key.upper()}": value for key, value in values.items()})
        raw = self.wt.scratch / f"repair_{iteration:02d}.raw"
        # argv list, no shell, its own process group killed on timeout with what it left behind,
        # stdin from /dev/null: a provider waiting for input hangs until the timeout.
        run = process.run(argv, cwd=self.wt.project_root, timeout_seconds=self.timeout, output_path=raw, env=env)
        text, cut = tail_bytes(raw, LOG_MAX_BYTES)
        header = f"$ {' '.join(shlex.quote(a) for a in argv)}\n" + (
            f"[... output cut: only the last {LOG_MAX_BYTES} bytes are kept ...]\n" if cut else "")
        trailer = (
            f"\n[timed out after {self.timeout:g} s: process group killed]\n" if run.timed_out
            else f"\n[exit code {run.exit_code}]\n" if run.started else f"\n[cannot start: {run.error}]\n"
        )
        log = f"repair_{iteration:02d}.log"
        self.store.write_run_file(self.incident_id, log, self.redactor.redact(header + text + trailer))
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

    def _inspect(self, iteration: int, call: _Call, before: str, plan: Plan, targets: Sequence[str],
                 globs: Sequence[str]) -> RepairBlock:
        base = RepairBlock(
            provider=call.provider, result=REPAIR_NO_FIX_FOUND, exit_code=call.exit_code,
            duration_seconds=round(max(0.0, call.duration), 3), message=call.message, prompt=_prompt_name(iteration),
            log=call.log, worktree=str(self.wt.project_root), scope_denied=False,
            keys=_BLOCK_KEYS if not self.not_redirected else _REDIRECTED_BLOCK_KEYS,
            extra=(("code_path_not_redirected", tuple(self.not_redirected)),) if self.not_redirected else (),
        )
        if call.status != "done":
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
            self.store.append_event(self.incident_id, ev.SCOPE_EXPANSION_REQUESTED, iteration=iteration, files=tests,
                                    reason="the repair edited test files; ralf_lite.repair.allow_test_edits is false, "
                                           "and approval never covers test edits")
            return replace(base, result=REPAIR_DIFF, scope_denied=True, out_of_scope=tuple(tests),
                           files_changed=tuple(changed), tests_edited=tuple(self._tests_edited(before)),
                           message=f"edited test files ({', '.join(tests)}): test edits need "
                                   "ralf_lite.repair.allow_test_edits (approval never covers them); rolled back")
        patch_name = f"attempt_{iteration:02d}.patch"
        cumulative = self.wt.diff(self.wt.base, after)
        write_patch(self.store, self.incident_id, patch_name, cumulative)
        result = replace(base, result=REPAIR_DIFF, files_changed=tuple(changed),
                         tests_edited=tuple(self._tests_edited(after)), patch=patch_name,
                         actions_applied=tuple(_actions_touched(plan, changed)))
        self.store.append_event(self.incident_id, ev.DIFF_PROPOSED, iteration=iteration, attempt=iteration,
                                kind="repair", diffId=patch_name, patch=patch_name, files_changed=changed)
        outside = out_of_scope(changed, targets, globs, allow_test_edits=self.allow_test_edits)
        if outside:
            result = replace(result, out_of_scope=tuple(outside))
            self.store.append_event(
                self.incident_id, ev.SCOPE_EXPANSION_REQUESTED, iteration=iteration, files=outside,
                reason="the repair changed files outside the plan's target paths and ralf_lite.repair.allowed_paths"
                       + ("" if self.allow_test_edits else ", or test files (ralf_lite.repair.allow_test_edits is false)"))
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


# The repair block is written whole, nulls and empty lists too; the code paths verification
# could not redirect (an extra key, only when there are some) follow its scope's keys.
_BLOCK_KEYS = every_key(RepairBlock)
_AT = _BLOCK_KEYS.index("exit_code")
_REDIRECTED_BLOCK_KEYS = (*_BLOCK_KEYS[:_AT], "code_path_not_redirected", *_BLOCK_KEYS[_AT:])


def _actions_touched(plan: Plan, changed: Sequence[str]) -> list[str]:
    """Plan actions whose target paths the diff touched; all when none (a diff within the globs)."""
    files = {normalise(c) for c in changed}
    touched = [action.id for action in plan.actions if {normalise(p) for p in action.target_paths} & files]
    return touched or [action.id for action in plan.actions]


WORKTREE_RECORD = "worktree.json"


def repair_loop(
    store: Store,
    incident_id: str,
    *,
    effective: EffectiveConfig,
    project_root: Path,
    approve: bool = False,
    interactive: Optional[bool] = None,
    pluginmanager: Optional[pluggy.PluginManager] = None,
    out: Optional[Say] = None,
    input_fn: Optional[Callable[[str], str]] = None,
    env: Optional[Mapping[str, str]] = None,
    hook_rules: Optional[Sequence[Rule]] = None,
    unattended: Optional[bool] = None,
    incident: Optional[Incident] = None,
    state: Optional[LoopRun] = None,
) -> LoopResult:
    """Run (or resume) the loop with a repair provider in an isolated worktree (``RefusedError``
    outside git), write ``final.patch`` and apply it when resolved and approved. ``hook_rules``
    None asks ``pluginmanager``, so verification runs classify like the capture."""
    incident_id = validate_incident_id(incident_id)
    say: Say = out or (lambda line: None)
    pm = pluginmanager if pluginmanager is not None else hooks.cli_plugin_manager()
    approver = approver_from(approve=approve, config_approve=effective.settings.repair.approve,
                             interactive=interactive, input_fn=input_fn)
    rules = list(hook_rules) if hook_rules is not None else parse_hook_rules(hooks.classification_rules(pm))
    with isolated_git_env():
        store.locate(incident_id)  # an unknown id fails before a worktree is made
        record = store.runs_dir(incident_id) / WORKTREE_RECORD
        with contextlib.suppress(SelfhealError):  # none, or unreadable: nothing known to remove
            remove_recorded(WorktreeRecord.from_json(fsio.read_json(record), str(record)))
        wt = create(Path(project_root), name=incident_id, exclude=[store.root])
        try:
            # What the next run needs to remove this worktree if this one is killed.
            wt_record = WorktreeRecord(repo=str(wt.repo_top), path=str(wt.path), scratch=str(wt.scratch))
            store.write_run_file(incident_id, WORKTREE_RECORD, fsio.dumps_json(wt_record.to_json()))
            incident = state.incident if state is not None else incident or store.read_incident(incident_id)
            attempts = state.attempts if state is not None else store.read_attempts(incident_id)
            # The patch of the current run's latest accepted diff: resumed after a kill.
            accepted = next((a.repair.patch for a in reversed(split_runs(attempts, reopened_after(incident))[1])
                             if a.repair is not None and a.repair.result == REPAIR_DIFF and not a.repair.scope_denied
                             and a.repair.patch is not None), None)
            status = state.status if state is not None else store.read_status(incident_id) if accepted else None
            if accepted is not None and status == "running":
                data = read_run_bytes(store, incident_id, accepted)
                if data:
                    verdict = check_patch(wt.path, data)
                    if verdict.ok:
                        apply_patch(wt.path, data)
                        say(f"selfheal: incident {incident_id}: resumed the worktree from {accepted}")
                    else:
                        say(f"selfheal: warning: cannot replay {accepted} into the new worktree ({verdict.error}); "
                            "the repair starts again from your working tree")
            session = RepairSession(store, incident_id, effective=effective, worktree=wt, approver=approver,
                                    pluginmanager=pm, say=say, env=env)
            # The verification imports the worktree's code, also through editable installs.
            redirect = redirect_to_worktree(os.environ if env is None else env, Path(project_root), wt.project_root)
            if redirect.missing:
                say(f"selfheal: incident {incident_id}: cannot point {', '.join(redirect.missing)} at the repair "
                    "worktree (not in git there): verification runs may import your working tree's code")
                session.not_redirected = list(redirect.missing)  # recorded in each attempt's repair block
            result = loop.run_loop(
                store, incident_id, effective=effective, project_root=wt.project_root, provider=session,
                approve=approve, out=say, env=redirect.env, hook_rules=rules, unattended=unattended,
                incident=incident, state=state,
            )
            return _close_out(store, incident_id, result, wt=wt, session=session, approver=approver, say=say,
                              state=state)
        finally:
            wt.remove()
            for warning in wt.warnings:
                say(f"selfheal: warning: {warning}")
            with contextlib.suppress(OSError):
                record.unlink()


def _close_out(store: Store, incident_id: str, result: LoopResult, *, wt: Worktree, session: RepairSession,
               approver: Approver, say: Say, state: Optional[LoopRun] = None) -> LoopResult:
    """final.patch, approval, apply; the run result's ``repair`` block."""
    final_tree = wt.snapshot()
    patch = wt.diff(wt.base, final_tree)
    files = wt.project_relative(wt.changed_files(wt.base, final_tree))
    resolved = result.final_status == FinalStatus.RESOLVED
    applied = False
    command: Optional[str] = None  # the apply command, when the patch may be applied by hand
    message = ""
    if patch.strip():
        path = write_patch(store, incident_id, FINAL_PATCH, patch)
        store.append_event(incident_id, ev.DIFF_PROPOSED, iteration=result.iteration, kind="final",
                           diffId=FINAL_PATCH, patch=FINAL_PATCH, files_changed=files, final=True)
        text = patch.decode("utf-8", errors="replace")
        if session.redactor.redact(text) != text:
            say(f"selfheal: warning: {path} contains text that looks like a secret; patches are kept unredacted "
                "so that they apply — review it before sharing")
        suggested = apply_command(store, incident_id)
        # What the patch does, from the whole patch as git reads it (not the changed-file list).
        described = summarise(wt.repo_top, patch)
        if not resolved and described.test_files:
            # Approval never covers a test edit: the person reviews it, and allows it deliberately or not at all.
            tests = ", ".join(described.test_files)
            message = (f"a patch that edits test files ({tests}) is proposed for review ({FINAL_PATCH}); "
                       "it is not applied, and approval alone never applies it")
            say(f"selfheal: the loop did not resolve {incident_id}; the patch in {path} edits test files ({tests}): "
                f"review the test diff first (selfheal show {incident_id}); only if the tests were wrong, allow "
                f"the test edits deliberately: {suggested} --allow-test-edits")
        elif not resolved:
            message = f"a partial patch is proposed ({FINAL_PATCH}); the incident is not resolved, so it is not applied"
            say(f"selfheal: the loop did not resolve {incident_id}; the partial patch is in {path} "
                f"(apply it anyway with: {suggested})")
        else:
            refused = refusal(described, wt.repo_top, allow_binary=session.effective.settings.repair.allow_binary)
            summary = described.text()
            question = f"Apply the fix of {incident_id} ({summary}) to your working tree?"
            verdict = check_patch(wt.repo_top, patch)
            if refused or not verdict.ok:
                command = None if refused else suggested  # a refused patch gets no command to apply it
                why = refused or f"the patch does not apply cleanly to your working tree ({verdict.error})"
                message = f"not applied: {why}"
                say(f"selfheal: {message}; it stays proposed in {path}")
            elif approver.confirm(question, details=session.redactor.redact(text)):
                try:
                    apply_patch(wt.repo_top, patch)
                except SelfhealError as exc:
                    command = suggested
                    message = f"not applied: {exc}"
                    say(f"selfheal: {message}")
                else:
                    applied = True
                    who = "approved up front" if approver.approved else "approved at the prompt"
                    message = f"applied to {wt.repo_top} ({who}): {summary}"
                    say(f"selfheal: fix applied to your working tree: {summary}")
            else:
                command = suggested
                message = f"proposed, not applied (no approval: {approver.how}); apply with `{command}`"
                say(f"selfheal: the fix is proposed, not applied: {path}")
                say(f"selfheal: to apply it run: {command}")
    else:
        # A previous run's partial patch (before a replan) must not be applied by mistake.
        stale = store.runs_dir(incident_id) / FINAL_PATCH
        with store.lock():
            try:
                stale.unlink(missing_ok=True)
            except OSError as exc:
                raise fsio.io_error("remove", stale, exc) from None
        message = "no change was proposed" if not resolved else "resolved without a code change"
    repair = RunRepair(final_patch=FINAL_PATCH if patch.strip() else None, applied=applied, apply_command=command, files_changed=tuple(files),
                       message=message, provider_calls=len(session.results), keys=every_key(RunRepair, "applied_at", "applied_to"))
    existing = state.run_result if state is not None else store.read_run_result(incident_id)
    if existing is not None and (existing.iteration, existing.stop_reason) == (result.iteration, result.stop_reason):
        written = dataclasses.replace(existing, repair=repair)
        store.write_run_result(incident_id, written)
        if state is not None:
            state.run_result = written
    return dataclasses.replace(result, repair=repair)
