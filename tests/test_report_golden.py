"""Golden files of the loop report: tests/golden_reports/<case>.input.json -> expected .md and .json.

On an intended change, regenerate with ``python scripts/regen_report_golden.py`` and review
the diff.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from pytest_selfheal.records.report import Report
from pytest_selfheal.report.render import REPORT_HEADING

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "regen_report_golden.py"
REGEN = "python scripts/regen_report_golden.py"

# The cases the issue asks for; more may be added.
REQUIRED_CASES = (
    "flaky_success",
    "deterministic_repeated_fingerprint",
    "agent_fixed",
    "two_actions",
    "planned_not_run",
    "replan_requested",
    "tooling_env",
    "max_iterations_progress",
    "merge_two_shards",
)


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("regen_report_golden", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REGEN_MODULE = _load_script()
CASES: list[Path] = REGEN_MODULE.cases()


def test_every_required_case_exists() -> None:
    names = {case.name[: -len(".input.json")] for case in CASES}
    assert set(REQUIRED_CASES) <= names


@pytest.mark.parametrize("case", CASES, ids=[c.name[: -len(".input.json")] for c in CASES])
def test_golden(case: Path) -> None:
    doc = json.loads(case.read_text(encoding="utf-8"))
    json_text, markdown = REGEN_MODULE.render_case(doc, case.name)
    json_path, md_path = REGEN_MODULE.expected_paths(case)
    for path, actual in ((json_path, json_text), (md_path, markdown)):
        assert path.exists(), f"{path.name} is missing: run `{REGEN}`"
        expected = path.read_text(encoding="utf-8")
        if actual != expected:
            pytest.fail(f"{path.name} drifted from the rendering; if the change is intended run `{REGEN}` "
                        f"and review the diff", pytrace=False)
    # The expected JSON is a valid report: what `selfheal merge` accepts.
    Report.read(json.loads(json_text), json_path.name)
    head = markdown.split("\n### Stop Reason", 1)[0]
    assert REPORT_HEADING in head and "- Total retries: " in head


def test_check_mode_reports_no_drift(capsys: pytest.CaptureFixture[str]) -> None:
    assert REGEN_MODULE.main(["--check"]) == 0
    assert "0 files stale" in capsys.readouterr().out
