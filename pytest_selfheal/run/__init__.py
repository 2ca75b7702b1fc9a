"""The one loop entry every surface calls (edge), pytest as a child process, and the final
status as an exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import pluggy

from pytest_selfheal import hooks
from pytest_selfheal.analysis.rules import parse_hook_rules
from pytest_selfheal.config.settings import EffectiveConfig
from pytest_selfheal.errors import EXIT_OK, EXIT_PYTEST, EXIT_UNRESOLVED, EXIT_USAGE
from pytest_selfheal.loop.driver import run_loop
from pytest_selfheal.loop.state import LoopRun
from pytest_selfheal.loop.verify import verification_root
from pytest_selfheal.records.run_result import LoopResult
from pytest_selfheal.records.vocab import FinalStatus
from pytest_selfheal.store.root import Store


def has_repair_provider(effective: EffectiveConfig, pluginmanager: Optional[pluggy.PluginManager]) -> bool:
    return bool(effective.settings.repair.command) or bool(hooks.repair_hook_names(pluginmanager))


def run_incident_loop(
    store: Store,
    incident_id: str,
    *,
    effective: EffectiveConfig,
    cwd: Path,
    pluginmanager: Optional[pluggy.PluginManager],
    out: Callable[[str], None],
    approve: bool = False,
    interactive: Optional[bool] = None,
    unattended: Optional[bool] = None,
    env: Optional[Mapping[str, str]] = None,
    verify_only: bool = False,
    shown: bool = False,
    state: Optional[LoopRun] = None,
) -> LoopResult:
    """Run (or resume) the loop of ``incident_id`` to its stop: with a repair provider in an
    isolated git worktree (repair/), else verify-only (loop/). ``cwd``: the project root;
    ``verify_only``: no provider (the MCP ``loop`` tool: its caller repairs); ``shown``: the
    caller shows the plan's suspects, so a verify-only loop ranks them too; ``state``: the
    incident's records as the caller holds them."""
    # Read once: the loop state holds it from here on.
    incident = state.incident if state is not None else store.read_incident(incident_id)
    project_root = verification_root(incident, cwd, store.root)
    recorded = incident.rootdir
    if recorded and Path(recorded).is_dir() and Path(recorded).resolve() != project_root:
        out(f"selfheal: warning: incident {incident_id} names rootdir {recorded}, outside the project root; "
            f"verifying in {project_root}")
    if interactive is None:
        interactive = sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()
    rules = parse_hook_rules(hooks.classification_rules(pluginmanager))
    if not verify_only and has_repair_provider(effective, pluginmanager):
        # Imported only when a provider runs: the repair side (providers, worktrees, patches,
        # approval) is never loaded by a verify-only loop, the common case (docs/benchmarks.md).
        from pytest_selfheal.repair.session import repair_loop

        return repair_loop(
            store, incident_id, effective=effective, project_root=project_root, approve=approve,
            interactive=interactive, pluginmanager=pluginmanager, out=out, env=env, hook_rules=rules,
            unattended=unattended, incident=incident, state=state,
        )
    return run_loop(
        store, incident_id, effective=effective, project_root=project_root, approve=approve, out=out,
        unattended=unattended, env=env, hook_rules=rules, incident=incident, shown=shown, state=state,
    )


PYTEST_USAGE_ERROR = 4  # pytest's own, for bad pytest arguments


def exit_code_for(final_status: str, *, fail_on_unresolved: bool = True,
                  pytest_exit_code: Optional[int] = None, pass_on_proposed_fix: bool = False) -> int:
    """The exit code of a run that ended with ``final_status`` (docs/exit-codes.md); ``error``
    fails whatever ``fail_on_unresolved`` says: a broken setup fails the job."""
    if final_status in (FinalStatus.RESOLVED, FinalStatus.PASSED):
        return EXIT_OK
    if final_status == FinalStatus.FIX_PROPOSED:
        return EXIT_OK if pass_on_proposed_fix or not fail_on_unresolved else EXIT_UNRESOLVED
    if final_status == FinalStatus.ERROR:
        return EXIT_USAGE if pytest_exit_code == PYTEST_USAGE_ERROR else EXIT_PYTEST
    return EXIT_UNRESOLVED if fail_on_unresolved else EXIT_OK


CANNOT_START = 127  # run_pytest's exit code when the interpreter cannot start
PYTEST_EXIT_MEANINGS: dict[int, str] = {
    0: "all tests passed",
    1: "tests failed",
    2: "the run was interrupted",
    3: "pytest hit an internal error",
    4: "pytest usage error (check the pytest arguments)",
    5: "no tests were collected",
    CANNOT_START: "pytest could not start",
}


def pytest_argv(root: Optional[Path], overrides: Sequence[tuple[str, str]], pytest_args: Sequence[str]) -> list[str]:
    """``python -m pytest --selfheal`` with our config overrides and, given a ``root``, our reports root."""
    argv = [sys.executable, "-m", "pytest", "--selfheal"]
    for text, _origin in overrides:
        argv += ["--selfheal-set", text]
    if root is not None:
        # Last, so it wins: the run writes exactly where this process looks.
        argv += ["--selfheal-set", f"reports_dir={root}"]
    return argv + list(pytest_args)


def describe_pytest_exit(code: Optional[int]) -> str:
    if code is None:
        return "pytest did not run"
    if code < 0:
        return f"pytest was killed by signal {-code}"
    return PYTEST_EXIT_MEANINGS.get(code, f"pytest exited with code {code}")


Snapshot = dict[str, tuple[Any, ...]]


def snapshot(store: Store) -> Snapshot:
    """``{incident id: (bucket, status, attempts)}`` of every incident of the root."""
    return {r.incident_id: (r.bucket, r.status, r.attempts) for r in store.list_incidents()}
