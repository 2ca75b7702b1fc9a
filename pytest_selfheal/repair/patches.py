"""The files of a repair in ``error_runs/<id>/`` (edge: the store; docs/repair.md): the
attempt's cumulative diff, prompt and provider log, the final patch, and the command that
applies it. Patches are kept byte for byte, never redacted: they must apply."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from pytest_selfheal.store import fsio
from pytest_selfheal.store.root import Store

FINAL_PATCH = "final.patch"


def attempt_patch_name(iteration: int) -> str:
    return f"attempt_{iteration:02d}.patch"


def prompt_name(iteration: int) -> str:
    return f"prompt_{iteration:02d}.md"


def log_name(iteration: int) -> str:
    return f"repair_{iteration:02d}.log"


def write_patch(store: Store, incident_id: str, name: str, data: bytes) -> Path:
    """Write a patch into ``error_runs/<id>/`` atomically, byte for byte (a Latin-1 source file too)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None:
        return store.write_run_file(incident_id, name, text, raw=True)
    store.write_run_file(incident_id, name, "", raw=True)  # validates the name and the incident
    with store.lock():
        path = store.confined(store.runs_dir(incident_id) / name)
        fsio.atomic_write_bytes(path, data)
        return path


def read_run_bytes(store: Store, incident_id: str, name: str) -> Optional[bytes]:
    path = store.runs_dir(incident_id) / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fsio.io_error("read", path, exc) from None


def apply_command(store: Store, incident_id: str, cwd: Optional[Path] = None) -> str:
    """``selfheal apply ID``, with ``--dir`` when the reports root is not ``./.selfheal`` of ``cwd``."""
    here = (cwd or Path.cwd()).resolve()
    root = store.root.resolve()
    command = f"selfheal apply {incident_id}"
    if root != here / ".selfheal":
        command += f" --dir {shlex.quote(str(root))}"
    return command
