"""``selfheal replay ID``: rebuild the loop state from the event log and compare it with the files."""

from __future__ import annotations

import argparse
import sys

from pytest_selfheal.cli.commands._common import add_incident_arguments, incident_from_args, print_json
from pytest_selfheal.errors import EXIT_BAD_INPUT, EXIT_OK
from pytest_selfheal.loop.replay import differences, replay, state_from_disk
from pytest_selfheal.records.loop_state import LoopState

NAME = "replay"
HELP = "rebuild the loop state from the incident's events alone and check it equals the files (exit 3 if not)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_incident_arguments(parser, "print {replayed, disk, equal, differences, warnings} as JSON")


def format_state(state: LoopState) -> list[str]:
    """The replayed state as readable lines."""
    lines = [
        f"incident      {state.incident_id}",
        f"status        {state.status} ({state.bucket})",
        f"stop_reason   {state.stop_reason or '-'}",
        f"final_status  {state.final_status or '-'}",
        f"archived_to   {state.archived_to or '-'}",
        f"iterations    {len(state.iterations)}",
    ]
    for entry in state.iterations:
        verdict = "passed" if entry.verification_passed else "failed"
        stop = f" {entry.stop_reason}" if entry.stop_reason else ""
        fps = ", ".join(entry.fingerprints) or "no failure"
        lines.append(f"  #{entry.iteration}: {verdict}, {entry.result}{stop} [{fps}]")
    for halt in state.loop_stops:
        lines.append(f"loop_stopped  {halt.stop_reason} at iteration {halt.iteration}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Replay; 0 when it equals the disk state, 3 when it differs (or files are corrupted)."""
    store, incident_id = incident_from_args(args)
    events, warnings = store.read_events(incident_id)
    replayed = replay(events)
    disk = state_from_disk(store, incident_id)
    diff = differences(replayed, disk)
    if args.json:
        print_json({
            "replayed": replayed.to_json(),
            "disk": disk.to_json(),
            "equal": not diff,
            "differences": diff,
            "warnings": warnings,
        })
    else:
        for line in format_state(replayed):
            print(line)
        if diff:
            print("replay differs from the files:")
            for line in diff:
                print(f"  {line}")
        else:
            print("replay equals the files")
    for warning in warnings:
        sys.stderr.write(f"selfheal: warning: {warning}\n")
    return EXIT_OK if not diff else EXIT_BAD_INPUT
