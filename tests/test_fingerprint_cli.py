"""`selfheal fingerprint FILE... [--json]` through the console script's ``main`` (in process; the
entry point as a process: test_entry_point.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import cli

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"

LINE = re.compile(r"^[0-9a-f]{12}  [A-Z_]+ \| [^|]+ \| .*$")
REQUIRED = {
    "test", "fingerprint", "signature", "scheme", "failure_type", "code_fixable", "transient",
    "failure_class", "message", "file", "outcome", "rule",
}  # fmt: skip


def selfheal(*args: str, cwd: Path = GOLDEN) -> tuple[int, str, str]:
    """``selfheal fingerprint ARGS`` in ``cwd`` (the console script's ``main``, in process)."""
    code, out, err = cli("fingerprint", *args, cwd=cwd)
    return code, out, err


def test_text_output_one_line_per_failure() -> None:
    code, out, err = selfheal("go_junit_report.xml", "mocha.xml")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == 5 + 3
    assert all(LINE.match(line) for line in lines), lines
    assert "TOOLING_ENV | charges the card::Checkout charges the card | Error: Cannot find module 'stripe'" in out


def test_json_output() -> None:
    code, out, err = selfheal("--json", "unittest_xml_reporting.xml")
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert len(rows) == 4
    for row in rows:
        assert REQUIRED <= set(row)
        assert row["file"] == "unittest_xml_reporting.xml"
    assert [r["failure_type"] for r in rows] == ["TEST_ASSERTION"] * 3 + ["TOOLING_ENV"]
    assert rows[3]["code_fixable"] is False and rows[3]["failure_class"] == "environment"


def test_no_failures_is_success_with_empty_output(tmp_path: Path) -> None:
    (tmp_path / "green.xml").write_text('<testsuite><testcase classname="a" name="b"/></testsuite>')
    assert selfheal("green.xml", cwd=tmp_path) == (0, "", "")
    assert selfheal("--json", "green.xml", cwd=tmp_path) == (0, "[\n]\n", "")


BAD_INPUTS = {
    "empty.xml": (b"", "empty.xml: empty file, not junit XML"),
    "garbage.xml": (bytes(range(256)) * 8, "garbage.xml: not XML (line 1, column 0: "),
    "laughs.xml": (
        b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;">'
        b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;">]><testsuite><testcase classname="x" name="&c;"/></testsuite>',
        "laughs.xml: refusing XML with a DOCTYPE/entity declaration (possible entity-expansion attack)",
    ),
    "xxe.xml": (
        b'<?xml version="1.0"?><!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        b'<testsuite><testcase classname="a" name="b"><failure message="&x;"/></testcase></testsuite>',
        "xxe.xml: refusing XML with a DOCTYPE/entity declaration (possible entity-expansion attack)",
    ),
    "html.xml": (b"<html><body>502 Bad Gateway</body></html>", "html.xml: root element is <html>, not"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_exit_3(tmp_path: Path, name: str) -> None:
    data, message = BAD_INPUTS[name]
    (tmp_path / name).write_bytes(data)
    code, out, err = selfheal(name, cwd=tmp_path)
    assert code == 3
    assert out == ""
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1
    assert err.startswith(f"selfheal: error: {message}")
    assert "root:" not in err  # never the contents of an external entity


def test_missing_file_and_directory(tmp_path: Path) -> None:
    code, out, err = selfheal("nope.xml", cwd=tmp_path)
    assert (code, out, err) == (3, "", "selfheal: error: nope.xml: no such file\n")
    code, out, err = selfheal(".", cwd=tmp_path)
    assert (code, out, err) == (3, "", "selfheal: error: .: is a directory, not a junit XML file\n")


def test_truncated_file_reports_what_was_read_with_a_warning(tmp_path: Path) -> None:
    data = (GOLDEN / "pytest_xunit2.xml").read_bytes()
    (tmp_path / "cut.xml").write_bytes(data[: len(data) * 2 // 3])
    code, out, err = selfheal("--json", "cut.xml", cwd=tmp_path)
    assert code == 0
    assert json.loads(out)
    assert re.fullmatch(
        r"selfheal: warning: cut\.xml: truncated at line \d+; read \d+ complete testcases\n", err
    ), err


def test_good_files_are_still_reported_when_another_is_bad(tmp_path: Path) -> None:
    (tmp_path / "bad.xml").write_bytes(b"")
    (tmp_path / "good.xml").write_bytes((GOLDEN / "mocha.xml").read_bytes())
    code, out, err = selfheal("bad.xml", "good.xml", cwd=tmp_path)
    assert code == 3
    assert len(out.splitlines()) == 3
    assert err == "selfheal: error: bad.xml: empty file, not junit XML\n"


def test_usage_error_is_exit_2() -> None:
    code, out, err = selfheal()
    assert code == 2
    assert "Traceback" not in err and "selfheal: error:" in err


def test_configured_rules_apply_unless_no_config(tmp_path: Path) -> None:
    (tmp_path / "report.xml").write_bytes((GOLDEN / "unittest_xml_reporting.xml").read_bytes())
    planning = tmp_path / ".planning"
    planning.mkdir()
    rule = {"name": "numpy_is_ours", "pattern": "No module named 'numpy'", "failure_type": "BUILD_COMPILE"}
    (planning / "config.json").write_text(json.dumps({"ralf_lite": {"classification": {"rules": [rule]}}}))
    code, out, err = selfheal("--json", "report.xml", cwd=tmp_path)
    assert (code, err) == (0, "")
    last = json.loads(out)[-1]
    assert (last["failure_type"], last["rule"], last["code_fixable"]) == ("BUILD_COMPILE", "numpy_is_ours", True)
    code, out, err = selfheal("--json", "--no-config", "report.xml", cwd=tmp_path)
    assert (json.loads(out)[-1]["failure_type"], code) == ("TOOLING_ENV", 0)


def test_bad_config_is_a_one_line_usage_error(tmp_path: Path) -> None:
    (tmp_path / "report.xml").write_bytes((GOLDEN / "mocha.xml").read_bytes())
    (tmp_path / ".planning").mkdir()
    bad = {"ralf_lite": {"classification": {"rules": [{"name": "x", "pattern": "(", "failure_type": "LINT"}]}}}
    (tmp_path / ".planning" / "config.json").write_text(json.dumps(bad))
    code, out, err = selfheal("report.xml", cwd=tmp_path)
    assert (code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith("selfheal: error: ") and "Traceback" not in err
