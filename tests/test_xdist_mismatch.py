"""An xdist collection mismatch names a worker, not code: it is TOOLING_ENV with pytest's own
line, and no plan, verification or target path is made of the worker's name."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import capture, cli, make_project

# Random parametrize ids: each xdist worker collects other node ids.
RANDOM_IDS = """
import random

import pytest


@pytest.mark.parametrize("n", [random.random() for _ in range(3)])
def test_r(n):
    assert n
"""


def test_a_collection_mismatch_between_workers_stops_tooling_env(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", {"test_random.py": RANDOM_IDS})
    incident_id = capture(project, "-p", "xdist", "-n", "2")
    incident = json.loads((project / ".selfheal" / "error_inbox" / incident_id / "incident.json").read_text())
    [failure] = incident["failures"]
    assert failure["failure_type"] == "TOOLING_ENV"
    assert failure["message"].startswith("Different tests were collected between gw")
    assert failure["target_paths"] == []
    plan = json.loads((project / ".selfheal" / "error_plans" / incident_id / "plan.json").read_text())
    [action] = plan["actions"]
    assert not any("gw" in word for command in action["verification"] for word in command)
    assert " in gw" not in action["title"] and action["title"].startswith("Repair the test environment: ")
    shown = cli("show", incident_id, cwd=project).stdout
    assert "no test to re-run" in shown and "target paths" not in shown
    code, out, err = cli("loop", incident_id, cwd=project)
    assert "STOP tooling_env" in out + err
    assert "Different tests were collected between gw" in out + err
