"""``selfheal apply ID``: apply an incident's proposed patch to the working tree, after confirmation."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any, Dict, List

from pytest_selfheal.cli.commands._common import (
    ID_HELP,
    add_dir_argument,
    incident_id_from_args,
    print_json,
    project_root,
    store_from_args,
)
from pytest_selfheal.entry import verification_root
from pytest_selfheal.errors import EXIT_OK, EXIT_UNRESOLVED, NotFoundError, RefusedError
from pytest_selfheal.gitrepo import isolated_git_env, repo_top
from pytest_selfheal.records.run_result import RunRepair
from pytest_selfheal.repair.approval import approver_from
from pytest_selfheal.repair.patches import FINAL_PATCH, read_run_bytes
from pytest_selfheal.repair.worktree import apply_patch, check_patch
from pytest_selfheal.store.events import format_ts
from pytest_selfheal.store.reader import RUN_RESULT_JSON
from pytest_selfheal.store.root import Store

NAME = "apply"
HELP = "apply the repair patch proposed for an incident (error_runs/ID/final.patch) to the working tree"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``ID [--yes] [--json] [--dir DIR]``."""
    parser.add_argument("incident_id", metavar="ID", help=ID_HELP)
    parser.add_argument("--yes", action="store_true",
                        help="apply without asking (needed when there is no terminal to ask on)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_dir_argument(parser)


def _record_applied(store: "Store", incident_id: str, top: Path) -> None:
    """Note the application in ``run_result.json``'s ``repair`` block (when there is one)."""
    existing = store.read_run_result(incident_id)
    if existing is None:
        return
    block = existing.repair.to_json() if existing.repair is not None else {}
    block.update({"final_patch": block.get("final_patch") or "final.patch", "applied": True,
                  "applied_at": format_ts(), "applied_to": str(top), "apply_command": None,
                  "message": f"applied to {top} with `selfheal apply`"})
    repair = RunRepair.from_json(block, f"{RUN_RESULT_JSON}: repair")
    store.write_run_result(incident_id, dataclasses.replace(existing, repair=repair))


def run(args: argparse.Namespace) -> int:
    """Apply ``final.patch``; exit codes in docs/exit-codes.md (0 applied or already applied,
    1 declined at the prompt, 4 no incident or no patch, 5 refused: conflict, no confirmation, not git)."""
    store = store_from_args(args)  # --dir, else the configured reports_dir of the project
    incident_id = incident_id_from_args(store, args)
    incident = store.read_incident(incident_id)  # unknown id: exit 4
    patch = read_run_bytes(store, incident_id, FINAL_PATCH)
    where = (store.runs_dir(incident_id) / FINAL_PATCH)
    if patch is None or not patch.strip():
        raise NotFoundError(f"no proposed patch for incident {incident_id} (expected {where})")
    with isolated_git_env():
        top = repo_top(verification_root(incident, project_root()))
        verdict = check_patch(top, patch)
        data: Dict[str, Any] = {"incident_id": incident_id, "patch": str(where), "working_tree": str(top)}
        if verdict.already_applied:
            data.update(applied=False, already_applied=True)
            _emit(args, data, f"nothing to do: {FINAL_PATCH} of {incident_id} is already applied to {top}")
            return EXIT_OK
        if not verdict.ok:
            raise RefusedError(
                f"{FINAL_PATCH} of {incident_id} does not apply cleanly to {top} ({verdict.error}); "
                "nothing was changed"
            )
        files = _files(patch)
        approver = approver_from(approve=bool(args.yes))
        if not approver.approved and not approver.interactive:
            raise RefusedError(f"not applied: confirmation needed and there is no terminal to ask on; "
                               f"re-run with --yes: selfheal apply {incident_id} --yes")
        question = f"Apply {FINAL_PATCH} of {incident_id} ({len(files)} file(s): {', '.join(files)}) to {top}?"
        if not approver.confirm(question):
            data.update(applied=False, already_applied=False, files_changed=files)
            _emit(args, data, "not applied")
            return EXIT_UNRESOLVED
        apply_patch(top, patch)
    _record_applied(store, incident_id, top)
    data.update(applied=True, already_applied=False, files_changed=files)
    _emit(args, data, f"applied {FINAL_PATCH} of {incident_id} to {top}: {', '.join(files)}")
    return EXIT_OK


def _files(patch: bytes) -> List[str]:
    """The files a git patch touches (its ``diff --git a/X b/X`` headers), in order."""
    names: List[str] = []
    for line in patch.decode("utf-8", errors="replace").splitlines():
        if line.startswith("diff --git a/"):
            rest = line[len("diff --git a/"):]
            name = rest.split(" b/", 1)[0]
            if name not in names:
                names.append(name)
    return names


def _emit(args: argparse.Namespace, data: Dict[str, Any], text: str) -> None:
    if args.json:
        print_json(data)
    else:
        sys.stdout.write(text + "\n")
