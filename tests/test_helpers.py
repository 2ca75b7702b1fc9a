"""The in-process ``selfheal`` of the tests (``helpers.cli``) leaves nothing of a call behind."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import helpers
import pytest
from helpers import cli

from pytest_selfheal import __version__
from pytest_selfheal.errors import EXIT_USAGE
from pytest_selfheal.loop.control import KILL_ENV


def test_cwd_environment_and_stdin_are_the_call_s_and_restored_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake_main(argv: Optional[Sequence[str]] = None) -> int:
        seen.update(argv=list(argv or []), cwd=os.getcwd(), env=dict(os.environ), stdin=sys.stdin.read())
        os.environ["LEFT_BEHIND"] = "1"
        os.chdir(tmp_path.parent)
        print("out ✓")
        print("err", file=sys.stderr)
        return 3

    monkeypatch.setattr(helpers, "main", fake_main)
    cwd, env, stdin = os.getcwd(), dict(os.environ), sys.stdin
    result = cli("status", "--json", cwd=tmp_path, env={"ONLY": "this"}, stdin="y\n")
    assert (result.returncode, result.stdout, result.stderr) == (3, "out ✓\n", "err\n")
    assert seen == {"argv": ["status", "--json"], "cwd": str(tmp_path), "env": {"ONLY": "this"}, "stdin": "y\n"}
    assert (os.getcwd(), dict(os.environ), sys.stdin) == (cwd, env, stdin)


def test_argparse_exits_become_exit_codes(tmp_path: Path) -> None:
    assert tuple(cli("--version", cwd=tmp_path)) == (0, f"selfheal {__version__}\n", "")
    code, out, err = cli(cwd=tmp_path)
    assert (code, out) == (EXIT_USAGE, "") and err.startswith("selfheal: error: ")


def _ignores_ctrl_c(argv: Optional[Sequence[str]] = None) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return 0


def _logs_to_nowhere(argv: Optional[Sequence[str]] = None) -> int:
    logging.getLogger().addHandler(logging.NullHandler())
    return 0


def test_a_signal_or_logging_handler_left_installed_fails_and_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Start from Python's own handler: a worker that already ignores SIGINT would hide the change.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _check_handlers_are_watched(monkeypatch)
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_handlers_are_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    before = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(helpers, "main", _ignores_ctrl_c)
    with pytest.raises(AssertionError, match="left signal handlers installed"):
        cli("loop")
    assert signal.getsignal(signal.SIGINT) is before
    handlers = list(logging.getLogger().handlers)
    monkeypatch.setattr(helpers, "main", _logs_to_nowhere)
    with pytest.raises(AssertionError, match="left logging handlers"):
        cli("ci")
    assert logging.getLogger().handlers == handlers


def test_the_kill_switch_needs_a_process_of_its_own(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="selfheal_process"):
        cli("loop", "x", cwd=tmp_path, env={KILL_ENV: "iteration:before_verify"})
