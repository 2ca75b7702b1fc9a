"""Golden corpus: junit from many runners -> the fingerprints we promise (tests/golden/)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from helpers import cli

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
REGEN = "python scripts/regen_golden.py"


def _regen_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("regen_golden", ROOT / "scripts" / "regen_golden.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


regen = _regen_module()
INPUTS = [p.name for p in regen.golden_inputs()]


def expected(name: str) -> list[dict[str, Any]]:
    data = json.loads(regen.expected_path(GOLDEN / name).read_text(encoding="utf-8"))
    assert isinstance(data, list)
    return data


def test_corpus_covers_every_supported_dialect() -> None:
    assert set(INPUTS) >= {
        "pytest_xunit1.xml", "pytest_xunit2.xml", "pytest_xdist.xml", "pytest_collection_errors.xml",
        "pytest_rerunfailures.xml", "unittest_xml_reporting.xml", "jest_junit.xml", "go_junit_report.xml",
        "gotestsum.xml", "surefire.xml", "mocha.xml", "pair_run_a.xml", "pair_run_b.xml", "pair_other_bug.xml",
    }  # fmt: skip
    orphans = {p.name for p in GOLDEN.glob("*.expected.json")} - {regen.expected_path(GOLDEN / n).name for n in INPUTS}
    assert not orphans, f"expected files without an input: {sorted(orphans)}"


@pytest.mark.parametrize("name", INPUTS)
def test_no_drift(name: str) -> None:
    path = regen.expected_path(GOLDEN / name)
    assert path.is_file(), f"{path.name} is missing: run `{REGEN}`"
    actual = regen.render(regen.expected_for(GOLDEN / name))
    assert actual == path.read_text(encoding="utf-8"), (
        f"fingerprints of {name} drifted from {path.name}: if the change is intended, run `{REGEN}`,"
        " review the diff and bump fingerprint.SCHEME when normalisation changed"
    )


def test_same_failure_in_two_runs_has_one_fingerprint() -> None:
    run_a, run_b, other = (
        {row["test"]: row for row in expected(n)} for n in ("pair_run_a.xml", "pair_run_b.xml", "pair_other_bug.xml")
    )
    test = "test_pair::test_report_written"
    # The raw messages really differ: tmp path (basetemp), pid and object address.
    assert run_a[test]["message"] != run_b[test]["message"]
    assert "/tmp/pytest-of-" in run_a[test]["message"] and "/elsewhere/basetemp/" in run_b[test]["message"]
    assert run_a[test]["fingerprint"] == run_b[test]["fingerprint"]
    assert run_a[test]["signature"] == run_b[test]["signature"]
    # A different bug in the same test is a different fingerprint.
    assert other[test]["fingerprint"] != run_a[test]["fingerprint"]


def test_xdist_and_plain_runs_agree() -> None:
    plain = {(r["test"], r["fingerprint"]) for r in expected("pytest_xunit2.xml")}
    assert plain == {(r["test"], r["fingerprint"]) for r in expected("pytest_xdist.xml")}
    assert plain == {(r["test"], r["fingerprint"]) for r in expected("pytest_xunit1.xml")}


def test_fingerprints_are_unique_per_failure_within_a_file() -> None:
    for name in INPUTS:
        rows = expected(name)
        assert len({r["fingerprint"] for r in rows}) == len(rows), name


def test_real_cli_prints_the_expected_json() -> None:
    proc = cli("fingerprint", "--json", "surefire.xml", "jest_junit.xml", cwd=GOLDEN)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == expected("surefire.xml") + expected("jest_junit.xml")
