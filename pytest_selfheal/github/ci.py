"""``selfheal ci``: the orchestration the GitHub Action runs (docs/action.md).

pytest --selfheal (subprocess) → the incident it captured → the loop (in process) → the
report (files, job summary, step outputs) → the sticky PR comment. The comment-only mode
(``--comment-from REPORT.json``) posts a written report and runs no code of the pull
request: the trusted half of the fork-PR recipe.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

from pytest_selfheal import hooks, process
from pytest_selfheal.config.files import find_project_root, load_config
from pytest_selfheal.config.settings import EffectiveConfig, parse_override
from pytest_selfheal.errors import (
    EXIT_OK,
    EXIT_UNRESOLVED,
    Cancelled,
    ConfigError,
    SelfhealError,
    UsageError,
)
from pytest_selfheal.github.actions_env import pull_request_number, warning, write_outputs, write_step_summary
from pytest_selfheal.github.ci_inputs import DEFAULT_REPORT_NAME, CiOptions
from pytest_selfheal.github.ci_verdict import (
    STOP_NONE,
    comment_footer,
    located,
    only_quarantined,
    render_ci_markdown,
    sanitize_ci_info,
    verdict_without_incident,
)
from pytest_selfheal.github.client import (
    CommentResult,
    GitHubClient,
    GitHubError,
    upsert_sticky_comment,
)
from pytest_selfheal.github.new_tests import NewTestsRun, check_new_tests, summary_line
from pytest_selfheal.history import records as hr
from pytest_selfheal.history.recording import record_and_triage, run_info
from pytest_selfheal.history.segments import (
    ci_capture_run_id,
    local_segments,
    passed_on_rerun_in,
    this_run_segments,
)
from pytest_selfheal.history.sources import (
    PULL_REQUEST_EVENTS,
    ActionsContext,
    RunBase,
    judge_event,
    quarantine_in_force,
)
from pytest_selfheal.loop.state import LoopRun
from pytest_selfheal.loop.sticky import ALREADY_STOPPED
from pytest_selfheal.names import CI_RUN_ENV
from pytest_selfheal.records.ci import CiVerdict, NewTestsCheck
from pytest_selfheal.records.incident import Incident
from pytest_selfheal.records.run_result import LoopResult
from pytest_selfheal.records.vocab import FinalStatus, StopReason
from pytest_selfheal.repair.patches import read_run_bytes
from pytest_selfheal.report.data import build_report
from pytest_selfheal.report.load import incident_run_of, read_report
from pytest_selfheal.run import (
    CANNOT_START,
    Snapshot,
    describe_pytest_exit,
    exit_code_for,
    pytest_argv,
    run_incident_loop,
    snapshot,
)
from pytest_selfheal.store import fsio, judging
from pytest_selfheal.store.reader import INBOX
from pytest_selfheal.store.root import Store

DEFAULT_REPORT_FILE = "ralf_lite_report.md"

Say = Callable[[str], None]


def run_pytest(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stream: IO[str]) -> int:
    """Run pytest (argv list, no shell, its own process group), copying its output to ``stream``
    as it comes; an interpreter that cannot start gives :data:`CANNOT_START` (an error verdict)."""
    buffer = getattr(stream, "buffer", None)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character may span two pieces

    def copy(line: bytes) -> None:
        if buffer is not None:
            stream.flush()
            buffer.write(line)  # the bytes as pytest wrote them, whatever our encoding
            buffer.flush()
        else:
            stream.write(decoder.decode(line))
            stream.flush()

    result = process.run(argv, cwd=cwd, env=env, on_line=copy)
    if not result.started or result.exit_code is None:
        stream.write(f"selfheal ci: cannot start {result.argv[0] if result.argv else 'pytest'}: {result.error}\n")
        stream.flush()
        return CANNOT_START
    return result.exit_code


def captured_incident(store: Store, before: Snapshot, token: str) -> Optional[Incident]:
    """The new incident holding ``ci_run == token`` (one committed to the repository, or captured
    by another ``selfheal ci`` on the same root, never holds it), else None."""
    for incident_id in reversed(store.incident_ids()):  # newest first
        try:
            if incident_id not in before and (incident := store.read_incident(incident_id)).ci_run == token:
                return incident
        except SelfhealError:
            continue  # a broken new incident is not ours to loop; `selfheal status` shows it
    return None


@dataclass
class CiResult:
    """What one ``selfheal ci`` run did (``--json`` prints :meth:`to_dict`)."""

    exit_code: int
    verdict: CiVerdict
    markdown: str
    report_path: Optional[Path] = None
    report_json_path: Optional[Path] = None
    pull_request: Optional[int] = None
    comment: Optional[CommentResult] = None
    warnings: list[str] = field(default_factory=list)
    error: Optional[str] = None
    #: The history segments the action's history-push step shares (only for merged code).
    history_segments: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary of the run (``--json``); the step outputs are its :data:`OUTPUTS`."""
        verdict, comment = self.verdict, self.comment
        return {
            "exit_code": self.exit_code, "final_status": verdict.final_status, "stop_reason": verdict.stop_reason,
            "iterations": verdict.iterations, "incident_id": verdict.incident_id,
            "pytest_exit_code": verdict.pytest_exit_code,
            "report_path": str(self.report_path) if self.report_path else None,
            "report_json_path": str(self.report_json_path) if self.report_json_path else None,
            "pull_request": self.pull_request,
            "comment": None if comment is None else {"action": comment.action, "id": comment.comment_id,
                                                     "url": comment.url, "warning": comment.warning},
            "warnings": list(self.warnings), "error": self.error, "new_flaky_tests": list(verdict.new_tests.flaky if verdict.new_tests else ()),
            "history_segments": list(self.history_segments),
        }

    def outputs(self) -> dict[str, str]:
        facts = self.to_dict()
        return {key.replace("_", "-"): _output_text(key, facts[key]) for key in OUTPUTS}


# The facts of a run that are step outputs too (action.yml spells them with "-").
OUTPUTS = ("final_status", "stop_reason", "iterations", "incident_id", "report_path", "report_json_path",
           "pytest_exit_code", "new_flaky_tests", "history_segments")


def _output_text(key: str, value: Any) -> str:
    # Segment names are file names a shell step splits on spaces; node ids may hold spaces: JSON.
    if key == "history_segments":
        return " ".join(value)
    return "" if value is None else json.dumps(value) if isinstance(value, list) else str(value)


@dataclass
class _Reporter:
    """Progress lines and warnings of one run (workflow-command warnings inside Actions)."""

    stream: IO[str]
    in_actions: bool
    warnings: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def warn(self, message: str) -> None:
        """Once per message: two steps reading the same file (the quarantine list) warn alike."""
        if message not in self.warnings:
            self.warnings.append(message)
            if self.in_actions:
                warning(message, stream=self.stream)
            else:
                self.say(f"selfheal: warning: {message}")


def _start(options: CiOptions, cwd: Optional[Path], env: Optional[Mapping[str, str]],
           stream: Optional[IO[str]]) -> tuple[Mapping[str, str], Path, ActionsContext, _Reporter, EffectiveConfig]:
    """What both modes start from."""
    source: Mapping[str, str] = os.environ if env is None else env
    here = Path.cwd() if cwd is None else Path(cwd)
    ctx = ActionsContext.from_env(source)
    rep = _Reporter(stream if stream is not None else sys.stdout, ctx.in_actions)
    overrides = [parse_override(text, origin) for text, origin in options.overrides]
    return source, here, ctx, rep, load_config(here, env=source, overrides=overrides)


def _write_report_files(markdown: str, document: Mapping[str, Any], md_path: Path,
                        rep: _Reporter) -> tuple[Optional[Path], Optional[Path]]:
    """Both files atomically; a failure is a warning (the summary and comment still carry it)."""
    json_path = md_path.with_suffix(".json")
    try:
        fsio.ensure_dir(md_path.parent)
        fsio.atomic_write_text(md_path, markdown)
        fsio.atomic_write_text(json_path, json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    except SelfhealError as exc:
        rep.warn(f"Could not write the report file: {exc}")
        return None, None
    return md_path, json_path


def _publish(result: CiResult, *, ctx: ActionsContext, env: Mapping[str, str], options: CiOptions,
             rep: _Reporter) -> None:
    """Job summary, step outputs (not with ``post_only``), the PR comment; each failure a warning in ``result``."""
    if not options.post_only:
        write_step_summary(result.markdown, env, full_report=str(result.report_path) if result.report_path else None)
        write_outputs(result.outputs(), env)
    if options.comment:
        # A green run only updates an existing comment: no noise on green PRs.
        info = result.verdict
        create = (info.final_status not in (FinalStatus.PASSED, "no_incidents")
                  or bool(info.new_tests and (info.new_tests.flaky or info.new_tests.unchecked)))
        result.comment = post_comment(ctx, result.pull_request, result.markdown + comment_footer(info),
                                      name=options.report_name, create=create,
                                      expected_head_sha=options.expected_head_sha, warn=rep.warn, say=rep.say)
    result.warnings = rep.warnings


def _check_new_tests(options: CiOptions, effective: EffectiveConfig, store: Store, project: Path,
                     ctx: ActionsContext, event: Mapping[str, object], base: RunBase, test_env: Mapping[str, str],
                     run_seconds: float, captured: Optional[Incident], token: str, rep: _Reporter) -> NewTestsCheck:
    """The check of the pull request's new tests; a flaky one is recorded in the history."""
    failures = captured.failures if captured is not None else ()
    main_failures = {f.nodeid: (f.message, f.fingerprint) for f in failures if f.nodeid}
    check = check_new_tests(NewTestsRun(project, base, options.pytest_args, run_seconds,
                                        main_failures, test_env), effective, say=rep.say)
    check = dataclasses.replace(check, fails_job=options.fail_on_new_flaky,
                                unchecked_fails_job=options.fail_on_new_unchecked)
    rep.say(effective.redactor.redact(summary_line(check)))
    flaky = [t for t in check.tests if t.nodeid in check.flaky]
    if flaky and effective.settings.history.enabled:
        run = run_info(run_key=f"new-tests-{token}", kind=hr.NEW_TESTS, project_root=project, actions=ctx,
                       tests_run=len(check.tests))
        recorded = record_and_triage(
            Path(store.root), effective.settings.history, run,
            [hr.TestOutcome(t.nodeid, hr.PASSED_ON_RERUN, t.fingerprint or "flaky-new") for t in flaky],
            project_root=project, actions=ctx, event=event)
        for line in recorded.warnings:
            rep.warn(line)
    return check


def run_ci(options: CiOptions, *, cwd: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
           stream: Optional[IO[str]] = None) -> CiResult:
    """pytest --selfheal, the loop on what it captured, the report everywhere; see module doc.
    ConfigError/UsageError (2) before anything runs, InputError (3) for a corrupted reports root,
    Cancelled (130) during the loop. A loop error is reported, then decides the exit code;
    comment failures and a failing report-section hook are warnings."""
    source, here, ctx, rep, effective = _start(options, cwd, env, stream)
    # Read before the tests run: a PR's conftest could rewrite $GITHUB_EVENT_PATH (another base
    # sha makes the PR's own quarantine file apply; another number comments elsewhere).
    event = ctx.event(warning)
    redactor = effective.redactor
    project = find_project_root(here)
    # Judged before the tests run too: the base revision (a branch tip the tests could move),
    # the base repository, whether this run may share its history.
    base = judge_event(ctx, event, project, effective.settings.history.base_branch)
    # Once, before anything runs: the loop's repair hooks and the report's sections.
    pm = hooks.cli_plugin_manager()

    root = here / options.reports_dir if options.reports_dir else fsio.project_path(
        here, effective.settings.reports_dir, "reports_dir")
    md_path = here / options.report_path if options.report_path else root / DEFAULT_REPORT_FILE
    if md_path.suffix == ".json":
        raise UsageError(f"--report-path {md_path}: give the markdown path; the JSON is written beside it")
    store = Store(root, redactor=redactor)
    before = snapshot(store)
    segments_before = set(local_segments(root))
    # The test processes get no token (process.child_environment: every *TOKEN* variable);
    # what this run captures holds the run token, which only the capturing pytest gets.
    test_env = process.child_environment(source)
    token = secrets.token_hex(16)

    argv = pytest_argv(root, options.overrides, options.pytest_args)
    rep.say(redactor.redact(f"selfheal ci: running python {shlex.join(argv[1:])}"))
    started = time.monotonic()
    code = run_pytest(argv, cwd=here, env={**test_env, CI_RUN_ENV: token}, stream=rep.stream)
    run_seconds = time.monotonic() - started
    captured = captured_incident(store, before, token)
    error: Optional[SelfhealError] = None
    proposed: Optional[bytes] = None  # a repair provider's final patch when the fix is only proposed
    if captured is None:
        # Tests that passed only on a re-run: its pytest recorded them under the token's run id.
        verdict = dataclasses.replace(verdict_without_incident(code), passed_on_rerun=tuple(
            passed_on_rerun_in(this_run_segments(root, segments_before, ci_capture_run_id(token)))))
        report = build_report(incidents=[], effective_config=effective.values, origins=effective.origins)
        gone = judging.forgotten_stops(project, root) if verdict.final_status == FinalStatus.PASSED else []
        if gone:  # a stop kept outside the project whose records are gone: no pass (store/judging.py)
            verdict = CiVerdict(FinalStatus.ESCALATED, ALREADY_STOPPED, gone[0].iteration, gone[0].incident_id, code)
            rep.warn(f"incident {gone[0].incident_id} stopped {gone[0].stop_reason} ({gone[0].detail}); "
                     f"{judging.RECORDS_GONE}")
        elif verdict.final_status == FinalStatus.FAILED:
            rep.warn("pytest reported failing tests but no incident was captured (is the selfheal plugin "
                     "disabled by the pytest arguments, or did the capture fail? see the log above)")
        elif verdict.final_status == FinalStatus.ERROR:
            rep.warn(f"pytest exited with code {code}: {describe_pytest_exit(code)}")
    else:
        # The capture ran without the *TOKEN* variables (test_env), so it could not redact
        # their values: this process has them, and redacts the captured files once more.
        captured, plan = store.redact_again(captured)
        # The incident's records, read once: the loop writes through them, the report reads them.
        state = LoopRun.resume(store, captured.incident_id, captured, plan)
        loop_result: Optional[LoopResult] = None
        if state.bucket == INBOX:
            rep.say(f"selfheal ci: running the RALF-Lite loop on {state.incident_id}")
            try:
                loop_result = run_incident_loop(
                    store, state.incident_id, effective=effective, cwd=project, pluginmanager=pm,
                    interactive=False, unattended=True, out=rep.say, env=test_env, shown=True, state=state,
                )
            except Cancelled:
                raise
            except SelfhealError as exc:  # reported below, then it decides the exit code
                error = exc
                rep.say(f"selfheal: error: {exc}")
        report = build_report(incidents=[incident_run_of(state)],
                              effective_config=effective.values, origins=effective.origins)
        reason = report.stop_reason or (loop_result and loop_result.stop_reason) or STOP_NONE
        final = str(report.final_status or "unknown")
        repair = loop_result.repair if loop_result is not None else None
        if repair is not None and repair.final_patch and (final == FinalStatus.RESOLVED or reason == StopReason.TESTS_EDITED):
            # Fixed in the repair worktree (or green only with tests edited): shown, not in this commit.
            proposed = read_run_bytes(store, state.incident_id, repair.final_patch)
            if final == FinalStatus.RESOLVED:  # this job's checked-out code still fails
                final = FinalStatus.FIX_PROPOSED
        verdict = CiVerdict(final, str(reason), int(report.total_retries or 0), state.incident_id, code)

    number = options.pull_request if options.pull_request is not None else pull_request_number(ctx.event_name, event)
    new_tests = _check_new_tests(options, effective, store, project, ctx, event, base, test_env, run_seconds,
                                 captured, token, rep)
    info = dataclasses.replace(located(verdict, pull_request=number, head_sha=ctx.sha, run_url=ctx.run_url),
                               new_tests=new_tests)
    loop_error = str(error) if error else None
    try:
        markdown = render_ci_markdown(report, info, error=loop_error, pm=pm, proposed_patch=proposed)
    except ConfigError as exc:  # a broken section hook must not cost the summary, files and comment
        rep.warn(redactor.redact(str(exc)))
        markdown = render_ci_markdown(report, info, error=loop_error, proposed_patch=proposed)
    markdown = redactor.redact(markdown)
    document = redactor.redact_obj({**report.to_json(), "ci": info.to_json()})
    exit_code = error.exit_code if error is not None else exit_code_for(
        verdict.final_status, fail_on_unresolved=options.fail_on_unresolved, pytest_exit_code=verdict.pytest_exit_code,
        pass_on_proposed_fix=options.pass_on_proposed_fix)
    if captured is not None and exit_code == EXIT_UNRESOLVED:
        # The list in force is the base revision's for code not merged yet: a PR cannot quarantine its own failure.
        quarantine, warnings = quarantine_in_force(here, effective.settings.history.quarantine_file, base)
        for line in warnings:
            rep.warn(line)
        covered = only_quarantined(report, quarantine)
        if covered:
            rep.say(f"selfheal ci: every failure left is quarantined ({', '.join(sorted(covered))}): "
                    "they do not fail the job")
            exit_code = EXIT_OK
    for tests, fails, what, flag in ((new_tests.flaky, new_tests.fails_job, "flaky", "flaky"), (
            new_tests.unchecked, new_tests.unchecked_fails_job, "unchecked (not re-run their count)", "unchecked")):
        if tests and fails and exit_code == EXIT_OK:
            rep.say(f"selfheal ci: {len(tests)} new or changed test(s) {what}: the job fails "
                    f"(fail-on-new-{flag}: false only reports them)")
            exit_code = EXIT_UNRESOLVED
    result = CiResult(exit_code, info, markdown, pull_request=number, error=loop_error)
    if not base.unmerged and effective.settings.history.enabled:
        try:
            result.history_segments = [name for name, _ in this_run_segments(
                root, segments_before, captured.run_id if captured is not None else ci_capture_run_id(token),
                captured.incident_id if captured is not None else None)]
        except SelfhealError as exc:  # nothing to share is no reason to lose the report
            rep.warn(f"The history segments of this run are not shared: {exc}")
    result.report_path, result.report_json_path = _write_report_files(markdown, document, md_path, rep)
    _publish(result, ctx=ctx, env=source, options=options, rep=rep)
    rep.say(f"selfheal ci: {verdict.final_status} — stop reason {verdict.stop_reason} "
            f"({verdict.iterations} iteration(s)); exit code {exit_code}"
            + (f"; report: {result.report_path}" if result.report_path else ""))
    return result


def comment_from_report(options: CiOptions, *, stream: Optional[IO[str]] = None) -> CiResult:
    """Comment-only mode: post ``options.comment_from`` (a report JSON of ``selfheal ci`` or
    ``selfheal merge --json``) to the job summary, outputs and sticky comment. Runs no test,
    no code of the report's project and no hook. Exit 0; 3/4 for a bad or missing report."""
    assert options.comment_from is not None
    source, here, ctx, rep, effective = _start(options, None, None, stream)
    path = here / options.comment_from
    report = read_report(path)
    info = sanitize_ci_info(report.extra.get("ci"), report)
    number = options.pull_request or info.pull_request or pull_request_number(ctx.event_name, ctx.event(warning))
    # The artifact is untrusted: link only to a run of this repository, name the checked commit.
    runs = f"{ctx.server_url}/{ctx.repository}/actions/runs/" if ctx.repository else None
    run_url = info.run_url if runs and info.run_url and info.run_url.startswith(runs) else None
    info = dataclasses.replace(info, pull_request=number, run_url=run_url,
                               head_sha=options.expected_head_sha or info.head_sha)
    markdown = effective.redactor.redact(render_ci_markdown(report, info))
    result = CiResult(EXIT_OK, info, markdown, report_path=path.with_suffix(".md") if path.with_suffix(".md").is_file()
                      else None, report_json_path=path, pull_request=number)
    _publish(result, ctx=ctx, env=source, options=options, rep=rep)
    return result


def post_comment(ctx: ActionsContext, number: Optional[int], body: str, *, name: str = DEFAULT_REPORT_NAME,
                 create: bool = True, expected_head_sha: Optional[str] = None, warn: Say,
                 say: Say) -> Optional[CommentResult]:
    """Create or update the sticky comment on PR ``number``; GitHub trouble, a missing token or
    a PR whose head is not ``expected_head_sha`` is a warning, never raised. ``create=False``
    only updates an existing comment (a stale failure comment turns into "passed")."""
    if number is None:
        if ctx.event_name in PULL_REQUEST_EVENTS:
            warn(f"No pull request number in the {ctx.event_name} event payload: not commenting; "
                 "the report is in the job summary.")
        else:
            say(f"selfheal ci: not a pull request event ({ctx.event_name or 'no event'}): no comment")
        return None
    if not ctx.token:
        warn(f"No GitHub token (GITHUB_TOKEN is empty): not commenting on PR #{number}; "
             "the report is in the job summary.")
        return None
    if not ctx.repository:
        warn(f"GITHUB_REPOSITORY is not set: not commenting on PR #{number}.")
        return None
    try:
        client = GitHubClient(ctx.api_url, ctx.token, ctx.repository)
        if expected_head_sha:
            head = client.pull_request_head_sha(number)
            if head is None or head.lower() != expected_head_sha.lower():
                warn(f"PR #{number}'s head is {head or 'unknown'}, not {expected_head_sha}: not commenting "
                     "(the report belongs to another commit; a newer run will comment).")
                return CommentResult("skipped", warning="head sha mismatch")
        result = upsert_sticky_comment(client, number, body, name=name, create=create)
    except (GitHubError, ValueError) as exc:  # ValueError: GitHubClient refused the API URL or repository
        tail = "; the report is in the job summary." if isinstance(exc, GitHubError) else ""
        warn(f"Could not post the report comment on PR #{number}: {exc}{tail}")
        return None
    if result.warning:
        warn(result.warning)
    elif result.action == "skipped":
        say(f"selfheal ci: PR #{number}: passed, no earlier report comment to update: no comment")
    else:
        say(f"selfheal ci: PR #{number}: report comment {result.action}" + (f" ({result.url})" if result.url else ""))
    return result
