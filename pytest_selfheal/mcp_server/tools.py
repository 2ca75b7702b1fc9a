"""The operations ``selfheal mcp`` serves, without the SDK (edge): each a thin call into the
home the CLI uses, its answer cut to ``mcp.max_chars`` (docs/mcp.md); every failure a
one-line :class:`~pytest_selfheal.errors.SelfhealError`."""

from __future__ import annotations

import collections
import re
import shlex
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Optional

from pytest_selfheal import hooks, process
from pytest_selfheal.config.files import find_project_root, is_project, load_config
from pytest_selfheal.config.keys import McpSettings
from pytest_selfheal.config.settings import EffectiveConfig, parse_override
from pytest_selfheal.errors import NotFoundError, RefusedError, SelfhealError, UsageError
from pytest_selfheal.loop.agent_mode import NOT_AN_ITERATION, open_incidents, recorded_options
from pytest_selfheal.loop.attempts import AGENT_UNCHANGED
from pytest_selfheal.loop.messages import unverified_summary, unverified_tests
from pytest_selfheal.loop.policy import FLAKY
from pytest_selfheal.loop.regression import NOT_YET_CHECKED, regression_words
from pytest_selfheal.loop.seal_check import NOT_APPLIED, judged_config
from pytest_selfheal.loop.sticky import (
    ALREADY_STOPPED,
    NO_VERDICT,
    PASSED_AFTER_STOP,
    parse_already_stopped,
    stopped_incidents,
)
from pytest_selfheal.loop.verify import check_command
from pytest_selfheal.mcp_server.digest import (
    FOR_THE_USER,
    bounded_verdict,
    fit,
    group_page,
    incident_blocks,
    one_line,
    structured_size,
    verdict_lines,
)
from pytest_selfheal.names import archive_dir
from pytest_selfheal.process import fresh_bytecode
from pytest_selfheal.records.attempt import Attempt
from pytest_selfheal.records.incident_view import IncidentView
from pytest_selfheal.records.mcp import ClosedRun, RunDecision, RunVerdict
from pytest_selfheal.records.models import OUTCOME_MISSING, OUTCOME_SKIPPED
from pytest_selfheal.records.vocab import FinalStatus, first_few
from pytest_selfheal.redact import Redactor, default_redactor
from pytest_selfheal.repair.patches import ProposedPatch, apply_proposed, proposed_patch
from pytest_selfheal.report.incident_view import incident_view
from pytest_selfheal.report.load import build_from_store, select_ids
from pytest_selfheal.report.sections import ESSENTIAL_VALUE, report_markdown, report_section_value
from pytest_selfheal.run import Snapshot, describe_pytest_exit, pytest_argv, run_incident_loop, snapshot
from pytest_selfheal.store.judging import RECORDS_GONE
from pytest_selfheal.store.reader import IncidentSummary
from pytest_selfheal.store.root import Store, project_store

UNVERIFIED_OUTCOMES = frozenset((OUTCOME_SKIPPED, OUTCOME_MISSING))  # ran to no verdict: not verified
NOT_LOADED = "is `-p no:selfheal` in addopts or PYTEST_ADDOPTS?"
TAIL_LINES = 400  # pytest output lines kept in memory while it runs (only its summary is read)
SIGNATURE_CHARS = 90  # of a signature in the incident table: the start tells them apart
PLUGIN_LINES = 20  # lines of the plugin's own `selfheal` section passed on
_SECTION = re.compile(r"^-+ selfheal -+$")
_SUMMARY = re.compile(r"\bin \d+(?:\.\d+)?s\b")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?)\b")


def captures_options(store: Store) -> list[str]:
    """The options recorded by the captures of every incident a run may be the next iteration
    of (open or stopped): trusted in ``run_tests`` as in every verification run."""
    words = [word for incident in open_incidents(store) for word in incident.options or ()]
    for stopped in stopped_incidents(store):
        try:
            words += recorded_options(store.read_incident(stopped.incident_id)) or []
        except SelfhealError:
            continue  # an unreadable incident recorded nothing to trust
    return words


def incident_table(rows: Sequence[IncidentSummary]) -> list[str]:
    """The incidents as the lines of an aligned table (ID, STATUS, BUCKET, ATTEMPTS, SIGNATURE),
    each cell on one line; a corrupted incident shows its whole error: that is what to fix."""
    header = ("ID", "STATUS", "BUCKET", "ATTEMPTS", "SIGNATURE")
    body = [(one_line(row.incident_id), one_line(row.status), one_line(row.bucket), str(row.attempts),
             one_line(row.error, 2000) if row.corrupted else one_line(row.error_signature, SIGNATURE_CHARS))
            for row in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header) - 1)]
    return ["  ".join([*(cell.ljust(width) for cell, width in zip(line, widths)), line[-1]]).rstrip()
            for line in [header, *body]]


@dataclass(frozen=True)
class ToolResult:
    """A tool's answer: text for the model, and (run_tests) the verdict as structured data."""

    text: str
    data: Optional[dict[str, Any]] = None


def _plugin_section(lines: Sequence[str]) -> list[str]:
    """The lines of the plugin's ``selfheal`` terminal section (what it captured or decided)."""
    out: list[str] = []
    inside = False
    for line in lines:
        if _SECTION.match(line):
            inside, out = True, []
            continue
        if inside and (line.startswith("===") or re.match(r"^-{3,} .* -{3,}$", line)):
            inside = False
        elif inside and line.strip():
            out.append(line.rstrip())
    return out[:PLUGIN_LINES]


def _counts(lines: Sequence[str]) -> dict[str, int]:
    """pytest's final ``3 failed, 1 passed in 0.14s`` line as counts (empty when absent)."""
    for line in reversed(lines):
        if _SUMMARY.search(line):
            found = _COUNT.findall(line)
            if found:
                return {kind: int(number) for number, kind in found}
    return {}


class Project:
    """One project served over MCP; its config is read at every call (the user may change it
    while the server runs)."""

    def __init__(self, directory: Path, overrides: Sequence[str] = (), *, confirmed: bool = True) -> None:
        self.directory = directory.resolve()
        self.root = find_project_root(self.directory)
        self.override_texts = list(overrides)
        self.overrides = [parse_override(text, "--set") for text in overrides]  # bad: UsageError (2) now
        # False: started in a directory that is not a project (a client's / or $HOME); tests
        # run only once a root the client names, or --root, is one.
        self.confirmed = confirmed

    def adopt(self, directory: Path) -> bool:
        """Serve ``directory``, a root the client named, if it is a project; whether it is."""
        directory = directory.resolve()
        if not directory.is_dir() or not is_project(directory):
            return False
        self.directory, self.root, self.confirmed = directory, find_project_root(directory), True
        return True

    def require_project(self) -> None:
        """RefusedError unless the served directory is a project (tests are never run elsewhere)."""
        if not self.confirmed:
            raise RefusedError(
                f"{self.directory} is not a project (no pytest config, setup.py, pyproject.toml or .git here or "
                "above) and the client named no root that is one; not running tests there: start selfheal mcp "
                "in the project or with --root DIR")

    def effective(self) -> EffectiveConfig:
        return load_config(self.root, overrides=self.overrides)

    def store(self, effective: Optional[EffectiveConfig] = None) -> Store:
        effective = effective or self.effective()
        return project_store(self.root, effective.settings.reports_dir, effective.redactor)

    def error_line(self, text: str) -> str:
        """A tool error as the client gets it: one line, redacted, at most ``mcp.max_chars``
        (the defaults when the config cannot be read)."""
        try:
            effective = self.effective()
            redactor, limit = effective.redactor, effective.settings.mcp.max_chars
        except SelfhealError:
            redactor, limit = default_redactor(), McpSettings().max_chars
        return one_line(redactor.redact(text), limit)

    def incident_ids(self, limit: int = 50) -> list[str]:
        """The newest ``limit`` incident ids, newest first (the server lists them as resources)."""
        return [row.incident_id for row in reversed(self.store().list_incidents())][:limit]

    def status(self) -> ToolResult:
        effective = self.effective()
        store = self.store(effective)
        rows = list(reversed(store.list_incidents()))
        if not rows:
            return ToolResult(f"no incidents in {store.root}; call run_tests to run the suite")
        head = f"{len(rows)} incident(s), newest first:"
        return ToolResult(fit([head, *incident_table(rows)], effective.settings.mcp.max_chars, what="incident line(s)",
                              more="`selfheal status` lists them all", separator="\n"))

    def show(self, incident_id: str, group: Optional[int] = None, offset: Optional[int] = None) -> ToolResult:
        """The bounded digest of one incident, or one page of one of its root-cause groups
        (``group``, ranked by size; ``offset``: the first of its tests on the page)."""
        effective = self.effective()
        store = self.store(effective)
        resolved = store.resolve_id(incident_id)
        view = current_view(store, resolved)
        limit = effective.settings.mcp.max_chars
        if group is None:
            if offset is not None:
                raise UsageError("offset pages through one root-cause group: give group too")
            more = (f"call show with group=N for one root-cause group in full; `selfheal show {resolved} --json` "
                    "prints everything")
            return ToolResult(fit(incident_blocks(view), limit, what="block(s) (root-cause groups, plan, attempts)",
                                  more=more))
        head = f"# Incident {resolved}\n"
        return ToolResult(head + group_page(view, group, offset or 0, max(limit - len(head), 0)))

    def report(self, incident_id: Optional[str] = None) -> ToolResult:
        effective = self.effective()
        store = self.store(effective)
        ids = select_ids(store, incident_id, every=False)
        if not ids:
            raise NotFoundError(f"no incidents in {store.root}")
        report = build_from_store(store, ids, self.root)
        markdown = effective.redactor.redact(report_markdown(report, hooks.cli_plugin_manager(), headline=True))
        blocks = re.split(r"\n+(?=#{2,4} )", markdown.strip())
        return ToolResult(fit(blocks, effective.settings.mcp.max_chars, value=report_section_value, essential=ESSENTIAL_VALUE,
                              more=f"`selfheal report {ids[0]}` prints the whole report"))

    def loop(self, incident_id: str) -> ToolResult:
        self.require_project()
        effective = self.effective()
        store = self.store(effective)
        resolved = store.resolve_id(incident_id)
        progress: list[str] = []
        result = run_incident_loop(
            store, resolved, effective=effective, cwd=self.root, pluginmanager=hooks.cli_plugin_manager(),
            out=progress.append, interactive=False, unattended=True, verify_only=True, shown=True,
        )
        status = result.final_status.value if result.final_status is not None else "unknown"
        reason = result.stop_reason.value if result.stop_reason is not None else status
        head = f"STOP {reason}: incident {resolved} {status} after {result.loops_used} loop(s)"
        body = "\n".join(one_line(line, 400) for line in progress[-40:])
        blocks = [head, body] if body else [head]
        return ToolResult(fit(blocks, effective.settings.mcp.max_chars, what="block(s) of loop output",
                              more=f"call show with incident_id {resolved}"))

    def _check_words(self, effective: EffectiveConfig, selection: Sequence[str], pytest_args: Sequence[str],
                     replayed: Sequence[str] = ()) -> None:
        for word in selection:
            if not word or word.startswith("-"):
                raise UsageError(f"selection entries are node ids or paths, got {word!r} (options go in pytest_args)")
        for index, word in enumerate(pytest_args):
            value = word[2:] if word.startswith("-p") and len(word) > 2 else (
                pytest_args[index + 1] if word == "-p" and index + 1 < len(pytest_args) else "")
            if value.strip() in ("no:selfheal", "no:pytest_selfheal.plugin"):
                raise RefusedError("run_tests always runs with the selfheal plugin: '-p no:selfheal' is refused")
        settings = effective.settings
        check_command(["python", "-m", "pytest", *selection, *pytest_args],
                      allowlist=settings.verification.allowlist, root=self.root,
                      trusted=[*settings.verification.args, *replayed])

    def run_tests(self, selection: Sequence[str] = (), pytest_args: Optional[Sequence[str]] = None,
                  cancel: Optional[threading.Event] = None) -> ToolResult:
        """``pytest --selfheal`` in a child process and the verdict of what it recorded.
        ``pytest_args`` None: the options the open incident's capture recorded (trusted), so
        that the run counts as its next iteration."""
        effective = self.effective()
        store = self.store(effective)
        verdict = self.run_verdict(effective, store, selection, pytest_args, cancel=cancel)
        return self.verdict_result(store, verdict, effective.settings.mcp.max_chars, redactor=effective.redactor)

    def run_verdict(self, effective: EffectiveConfig, store: Store, selection: Sequence[str] = (),
                    pytest_args: Optional[Sequence[str]] = None, *, trusted: Sequence[str] = (),
                    timeout: Optional[tuple[float, str]] = None,
                    cancel: Optional[threading.Event] = None) -> RunVerdict:
        """:meth:`run_tests`'s verdict. ``trusted``: arguments passed without the allowlist check
        (config the user wrote); ``timeout``: seconds and the key that set them; ``cancel``: set
        from another thread, it stops pytest's whole process group."""
        self.require_project()
        waiting = open_incidents(store)
        replayed = [*trusted, *captures_options(store)]
        if pytest_args is None:
            pytest_args = list(waiting[-1].options or []) if waiting else []
        elif waiting and waiting[-1].options is None and any(word.startswith("-") for word in pytest_args):
            # Agent mode compares a run's options with the capture's; with none recorded it
            # cannot, and would count a run with other options as the next iteration.
            raise RefusedError(
                f"incident {waiting[-1].incident_id} was captured before pytest options were recorded, so a run "
                f"with options ({shlex.join(pytest_args)}) would count as its next iteration although it may "
                "not run like the capture; call run_tests without pytest_args for its next iteration")
        self._check_words(effective, selection, pytest_args, replayed)
        redactor = effective.redactor
        before = snapshot(store)
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)

        def keep(line: bytes) -> None:  # one line, or one piece of a very long one
            tail.append(line.decode("utf-8", errors="replace").rstrip("\r\n"))

        # No reports root of ours: the child reads the same config from the same directory.
        argv = pytest_argv(None, [(text, "--set") for text in self.override_texts],
                           [*selection, *pytest_args])
        seconds, key = timeout or (effective.settings.verification.timeout_seconds, "verification.timeout_seconds")
        with fresh_bytecode(process.child_environment()) as clean:
            completed = process.run(argv, cwd=self.directory, env=clean, on_line=keep,
                                    timeout_seconds=seconds, cancel=cancel)
        if cancel is not None and cancel.is_set():
            raise SelfhealError("cancelled: the test run was stopped with its process group")
        lines = [redactor.redact(line) for line in tail]
        if not completed.started:
            raise SelfhealError(f"cannot start pytest ({argv[0]}): {completed.error}")
        if completed.timed_out:
            raise SelfhealError(f"the test run passed its timeout of {seconds:g} s ({key}) "
                                "and was stopped; nothing was recorded for it")
        after = snapshot(store)
        captured = [i for i in after if i not in before]
        iterated = [i for i in after if i in before and after[i][2] != before[i][2]]
        code = completed.exit_code
        section = _plugin_section(lines)
        if not captured and not iterated and code not in (0, 1):
            refused = next((one_line(line, 300) for line in lines if "unrecognized arguments: --selfheal" in line), "")
            if refused:
                raise SelfhealError(f"the selfheal plugin is not loaded in the test run ({NOT_LOADED}): {refused}")
            first = next((one_line(line, 300) for line in lines if line.startswith(("ERROR", "E "))), "")
            raise SelfhealError(f"{describe_pytest_exit(code)} (exit code {code}); nothing was recorded"
                                + (f": {first}" if first else ""))
        if not captured and not iterated and code == 1 and not section:
            # A red run the plugin neither recorded nor spoke about: it did not run in it.
            last = next((one_line(line, 300) for line in reversed(lines) if line.strip()), "")
            raise SelfhealError(
                f"the test run failed and the selfheal plugin recorded nothing: it did not run there ({NOT_LOADED}, "
                "or pytest missing from this interpreter)" + (f"; the run's last line: {last}" if last else ""))
        return self._verdict(effective, store, code, _counts(lines), after, captured, iterated, section)

    def _verdict(self, effective: EffectiveConfig, store: Store, code: Optional[int], counts: dict[str, int],
                 after: Snapshot, captured: list[str], iterated: list[str], plugin_lines: list[str]) -> RunVerdict:
        verdict_of = partial(RunVerdict, pytest_exit_code=code, counts=tuple(counts.items()),
                       max_iterations=effective.settings.max_iterations, captured=captured[-1] if captured else None)
        iteration_verdict: Optional[RunVerdict] = None  # the verdict on the open incident this run was an iteration of
        last: Optional[Attempt] = None  # that iteration's record
        if iterated:
            incident_id = iterated[-1]
            last = store.read_attempts(incident_id)[-1]
            bucket, _ = store.locate(incident_id)
            stop = last.result == "stop"
            # Its budget is the one in force at its capture (loop/seal_check.py), not today's.
            judged, _ = judged_config(effective, store.read_incident(incident_id))
            iteration_verdict = verdict_of(decision=RunDecision.STOP if stop else RunDecision.CONTINUE,
                       stop_reason=last.stop_reason if stop else None, status=store.read_status(incident_id),
                       summary="", next="", incident_id=incident_id, iteration=last.iteration,
                       fingerprint_changed=bool(last.fingerprint_changed), progress=bool(last.progress),
                       tests_fixed=tuple(last.tests_fixed)[:20], flaky=FLAKY in last.progress_reasons, bucket=bucket,
                       max_iterations=judged.settings.max_iterations)
        stopped = parse_already_stopped(plugin_lines)  # a STOP already_stopped line of the plugin
        if captured:
            # A new incident to fix outweighs the verdict on the one that just closed: the
            # verdict is about the new one, the closed one is named apart.
            closed, also = None, ""
            if iteration_verdict is not None:
                closed = ClosedRun(iterated[-1], int(iteration_verdict.iteration or 0), iteration_verdict.stop_reason, iteration_verdict.status)
                also = f"; incident {closed.incident_id} stopped in the same run ({closed.stop_reason}, now {closed.status})"
            return verdict_of(
                decision=RunDecision.CONTINUE, stop_reason=None, status="captured", incident_id=captured[-1],
                tests_fixed=(), flaky=None if iteration_verdict is None else iteration_verdict.flaky, bucket="inbox", closed=closed,
                summary=f"captured incident {captured[-1]}: fix the code its root causes point at{also}",
                next=("edit the code at the target paths of its root-cause groups (the digest; show gives it whole), "
                      "never the failing tests; then call run_tests again without arguments: that run replays the "
                      "capture's pytest options and is the incident's next iteration"))
        if iteration_verdict is not None and last is not None:
            harness, tests = last.harness_changed, last.tests_edited
            nothing = "; nothing changed since the last run: an iteration with nothing tried" + (
                "" if iteration_verdict.decision is RunDecision.STOP else ", and a second such run in a row stops (no_fix_found)")
            unchanged = last.repair is not None and last.repair.message == AGENT_UNCHANGED
            # A changed harness is a change since the last run, though not of the code.
            summary = self._iteration_summary(iteration_verdict, bool(last.failures)) + (
                nothing if unchanged and not harness else "")
            if harness:
                summary += f"; changed since the capture (not the code under test): {first_few(harness)}"
            if tests:
                summary += f"; tests edited since the capture: {first_few(tests)}"
            edited = dict.fromkeys(line.strip().removeprefix("selfheal: ") for line in plugin_lines if NOT_APPLIED in line)
            checked = regression_words(last.tests_fixed, last.regressions, last.regression_tests_run)
            summary += f"; {checked}" if checked else ""
            summary += "".join(f"; {line}" for line in edited)  # each once, however often the plugin said it
            return replace(iteration_verdict, summary=summary, next=self._next(iteration_verdict, last, store))
        if stopped is not None:
            # The failures of an incident that stopped, the code unchanged: STOP again.
            incident_id, iteration, why = stopped
            gone = next((line for line in plugin_lines if RECORDS_GONE in line and "-> STOP" not in line), "")
            if gone:  # a stop kept outside the project whose records are gone (store/judging.py)
                return verdict_of(decision=RunDecision.STOP, stop_reason=ALREADY_STOPPED, incident_id=incident_id,
                                  iteration=iteration, status="escalated", stopped_because=why,
                                  summary=f"{gone.strip().removeprefix('selfheal: ')}: this green run is not a pass",
                                  next="stop here and report to the user")
            bucket, _ = store.locate(incident_id)
            return verdict_of(decision=RunDecision.STOP, stop_reason=ALREADY_STOPPED, incident_id=incident_id,
                        iteration=iteration, status=store.read_status(incident_id), bucket=bucket,
                        stopped_because=why,
                        summary=f"this run's tests are incident {incident_id}'s, which stopped ({why}); the code "
                                "under test has not changed since, so this run is not a new attempt",
                        next=f"stop here and report to the user; the loop goes on only after a code change or "
                             f"`selfheal reopen {incident_id}` (the user's decision)")
        open_ids = [i for i, (bucket, _status, _attempts) in after.items() if bucket == "inbox"]
        # A run that decided nothing for an incident (narrower than its capture, or not like
        # it): said, never "passed", for the tests may pass only by what made it no iteration.
        undecided = next((line.strip().removeprefix("selfheal: ") for line in plugin_lines
                          if NOT_YET_CHECKED in line or NOT_AN_ITERATION in line), "")
        if code == 0 and not open_ids and not undecided:
            # A stopped incident whose failing tests this run did not run, or passed: said, its stop kept.
            unseen = "".join(f"; {line.strip().removeprefix('selfheal: ')}" for line in plugin_lines
                             if NO_VERDICT in line or PASSED_AFTER_STOP in line)
            return verdict_of(decision=RunDecision.STOP, stop_reason="none", status="passed",
                        summary="all selected tests passed and no incident is open" + unseen, next="nothing to fix")
        if undecided:
            return verdict_of(decision=RunDecision.CONTINUE, stop_reason=None, status="not_counted",
                              summary=undecided, next="call run_tests with no selection: that run checks what "
                              "the change broke and is the incident's next iteration" if NOT_YET_CHECKED in undecided
                              else "run the incident's tests as its capture did (the summary says how); this run "
                              "decided nothing")
        # Only here the plugin's own lines say more than the verdict: why nothing was recorded.
        return verdict_of(decision=RunDecision.CONTINUE, stop_reason=None, status="not_counted",
                    plugin_lines=tuple(plugin_lines),
                    summary="this run recorded nothing" + (
                        " (the plugin's lines below say why)" if plugin_lines else
                        ": it did not re-run the open incident's failing tests" if open_ids else ""),
                    next="call run_tests with no arguments to re-run the open incident's tests"
                    if open_ids else "fix the failures above, then call run_tests again")

    @staticmethod
    def _iteration_summary(verdict: RunVerdict, failing: bool) -> str:
        if verdict.bucket != "inbox":
            return f"incident {verdict.incident_id} is {verdict.status}, archived to {archive_dir(str(verdict.bucket))}"
        if verdict.decision is RunDecision.STOP:
            return f"incident {verdict.incident_id} stopped and is {verdict.status}"
        if not failing:  # its tests were skipped, deselected or gone: `next` names them
            return (f"incident {verdict.incident_id} is not verified: its tests ran to no verdict; "
                    f"iteration {verdict.iteration} recorded")
        return f"incident {verdict.incident_id} is still failing; iteration {verdict.iteration} recorded"

    def _next(self, verdict: RunVerdict, last: Attempt, store: Store) -> str:
        if verdict.decision is RunDecision.CONTINUE:
            missing = unverified_tests(last.outcomes, [n for n in last.get_extra("not_run") or () if isinstance(n, str)])
            if missing:
                # Not run is not fixed: the budget goes on, the agent must make them run again.
                return (f"{unverified_summary(missing)}: not verified, and this run counts toward the budget; "
                        "make them run again (never delete, rename, skip or deselect a failing test), change the "
                        "code at the target paths, then call run_tests again")
            return "change the code at the target paths, then call run_tests again"
        if verdict.status == FinalStatus.RESOLVED:
            return f"done: {verdict.incident_id} is archived as resolved"
        report = build_from_store(store, [str(verdict.incident_id)], self.root)
        action = one_line(report.recommended_next_action or "read the loop report", 500)
        # The agent's step is to stop; the rest is for the user it hands over to.
        return f"stop trying and hand over to the user (the report tool gives the loop report){FOR_THE_USER}{action}"

    def verdict_result(self, store: Store, verdict: RunVerdict, limit: int, *, redactor: Redactor,
                       structured: bool = True, more: Optional[str] = None) -> ToolResult:
        """The verdict as a tool result: its lines and the open incident's root-cause groups,
        the whole at most ``limit`` characters (``structured``: the verdict's JSON counted in);
        ``more`` says where the groups left out are (default: the ``show`` tool)."""
        verdict = verdict.redacted(redactor.redact_obj)
        head = "\n".join(verdict_lines(verdict))
        open_id = verdict.incident_id if verdict.status != FinalStatus.RESOLVED else None
        groups = incident_blocks(current_view(store, open_id))[1:-2] if open_id else []  # its root-cause groups
        if more is None:
            more = (f"call show with incident_id {open_id} (and group=N for one group in full)"
                    if open_id else "call status")
        # The structured part holds the groups first: some clients give the model only it.
        data = bounded_verdict(verdict, limit, groups if structured else (), text_chars=len(head), more=more)
        text = fit([head, *groups], limit, what="root-cause group(s)",
                   reserved=structured_size(data) if structured else 0, more=more)
        return ToolResult(text, data)

    def proposed(self, incident_id: str) -> ProposedPatch:
        """The incident's proposed patch, checked against the working tree."""
        effective = self.effective()
        store = self.store(effective)
        return proposed_patch(store, store.resolve_id(incident_id), self.root,
                              allow_binary=effective.settings.repair.allow_binary,
                              allow_test_edits=effective.settings.repair.allow_test_edits)

    def approval_question(self, proposed: ProposedPatch) -> str:
        """What the user is asked before ``apply``: the question and the diff, redacted, within ``mcp.max_chars``."""
        effective = self.effective()
        question = effective.redactor.redact(proposed.question)
        diff = effective.redactor.redact(proposed.patch.decode("utf-8", errors="replace"))
        return fit([question, diff], effective.settings.mcp.max_chars, more=f"the whole patch: {proposed.path}")

    def apply(self, proposed: ProposedPatch) -> ToolResult:
        apply_proposed(self.store(), proposed)
        partial = "" if proposed.verified else f" (the patch is {proposed.verdict})"
        return ToolResult(f"applied final.patch of {proposed.incident_id} to {proposed.working_tree}: "
                          f"{', '.join(proposed.files)}{partial}")


def current_view(store: Store, incident_id: str) -> IncidentView:
    """The incident view with its failures as they are now: after an attempt, the groups keep
    the plan's root causes but hold only the tests still failing, with their latest messages
    and fingerprints (an agent must not chase the capture's stale messages)."""
    view = incident_view(store, incident_id)
    if not view.attempts:
        return view
    last = view.attempts[-1]
    # Still to fix: what failed, and what ran to no verdict (skipped, deselected, gone).
    failing = {entry.nodeid or entry.test for entry in last.failures}
    failing |= {n for n, outcome in last.outcomes.items() if outcome in UNVERIFIED_OUTCOMES}
    causes = []
    for cause in view.root_causes:
        nodeids = tuple(n for n in cause.nodeids if n in failing)
        if nodeids:
            causes.append(replace(cause, nodeids=nodeids))
    unverified = len(failing) - len(last.failures)
    now = f"attempt #{last.iteration}: {len(last.failures)} of the selection still failing" + (
        f", {unverified} not verified (skipped, deselected or no longer collected)" if unverified > 0 else "")
    return replace(view, incident=replace(view.incident, failures=last.failures), root_causes=tuple(causes), now=now)
