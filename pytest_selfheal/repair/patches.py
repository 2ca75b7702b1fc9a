"""The files of a repair in ``error_runs/<id>/`` (edge: the store; docs/repair.md).

Their names (``attempt_XX.patch``, ``prompt_XX.md``, ``repair_XX.log``, ``final.patch``),
patches written and read byte for byte (never redacted: they must apply), and the exact
``selfheal apply`` command that applies a proposed patch.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

from pytest_selfheal.store import fsio
from pytest_selfheal.store.root import Store

FINAL_PATCH = "final.patch"


def attempt_patch_name(iteration: int) -> str:
    """``attempt_01.patch``: the cumulative diff (vs the user's state) proposed at an attempt."""
    return f"attempt_{iteration:02d}.patch"


def prompt_name(iteration: int) -> str:
    """``prompt_01.md``: the repair prompt of an attempt."""
    return f"prompt_{iteration:02d}.md"


def log_name(iteration: int) -> str:
    """``repair_01.log``: the (redacted) output of the repair command of an attempt."""
    return f"repair_{iteration:02d}.log"


def write_patch(store: Store, incident_id: str, name: str, data: bytes) -> Path:
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
        return store.write_run_file(incident_id, name, text, raw=True)
    store.write_run_file(incident_id, name, "", raw=True)  # validates the name and the incident
    with store.lock():
        path = store.confined(store.runs_dir(incident_id) / name)
        fsio.atomic_write_bytes(path, data)
        return path


def read_run_bytes(store: Store, incident_id: str, name: str) -> Optional[bytes]:
    """A file of ``error_runs/<id>/`` as bytes, or None when it does not exist."""
    path = store.runs_dir(incident_id) / name
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise fsio.io_error("read", path, exc) from None


def apply_command(store: Store, incident_id: str, cwd: Optional[Path] = None) -> str:
    """The exact command that applies the proposed patch: ``selfheal apply ID`` (plus
    ``--dir`` when the reports root is not ``./.selfheal`` of ``cwd``)."""
    here = (cwd or Path.cwd()).resolve()
    root = store.root.resolve()
    command = f"selfheal apply {incident_id}"
    if root != here / ".selfheal":
        command += f" --dir {shlex.quote(str(root))}"
    return command
