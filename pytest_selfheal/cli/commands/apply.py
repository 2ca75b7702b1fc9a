"""``selfheal apply ID``: apply an incident's proposed patch to the working tree, after confirmation."""

from __future__ import annotations

import argparse
import sys

from pytest_selfheal.cli.commands._common import add_incident_arguments, incident_from_args, print_json, project_root
from pytest_selfheal.config.files import load_config
from pytest_selfheal.errors import EXIT_OK, EXIT_UNRESOLVED, RefusedError
from pytest_selfheal.repair.approval import approver_from
from pytest_selfheal.repair.patches import FINAL_PATCH, apply_proposed, proposed_patch

NAME = "apply"
HELP = "apply the repair patch proposed for an incident (error_runs/ID/final.patch) to the working tree"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_incident_arguments(parser)
    parser.add_argument("--yes", action="store_true",
                        help="apply without asking (needed when there is no terminal to ask on)")
    parser.add_argument("--allow-test-edits", action="store_true",
                        help="apply a patch that edits tests, conftest or fixtures (repair.allow_test_edits); "
                             "without it such a patch is refused, whatever the approval")


def run(args: argparse.Namespace) -> int:
    """Apply ``final.patch``; exit codes in docs/exit-codes.md (0 applied or already applied,
    1 declined at the prompt, 4 no incident or no patch, 5 refused: conflict, no confirmation, not git,
    test edits without ``repair.allow_test_edits``)."""
    root = project_root()
    effective = load_config(root)
    store, incident_id = incident_from_args(args, effective)
    proposed = proposed_patch(store, incident_id, root,  # unknown id or no patch: 4
                              allow_binary=effective.settings.repair.allow_binary,
                              allow_test_edits=effective.settings.repair.allow_test_edits or bool(args.allow_test_edits))
    top = proposed.working_tree

    def emit(text: str, *, applied: bool, already: bool = False) -> None:
        if not args.json:
            sys.stdout.write(text + "\n")
            return
        print_json({"incident_id": incident_id, "patch": str(proposed.path), "working_tree": str(top),
                    "applied": applied, "already_applied": already,
                    **({} if already else {"files_changed": proposed.files})}, effective.redactor)

    if proposed.already_applied:
        emit(f"nothing to do: {FINAL_PATCH} of {incident_id} is already applied to {top}", applied=False, already=True)
        return EXIT_OK
    approver = approver_from(approve=bool(args.yes))
    if not approver.approved and not approver.interactive:
        raise RefusedError(f"not applied: confirmation needed and there is no terminal to ask on; "
                           f"re-run with --yes: selfheal apply {incident_id} --yes")
    if not approver.confirm(proposed.question):
        emit("not applied", applied=False)
        return EXIT_UNRESOLVED
    apply_proposed(store, proposed)
    emit(f"applied {FINAL_PATCH} of {incident_id} to {top}: {', '.join(proposed.files)}", applied=True)
    return EXIT_OK
