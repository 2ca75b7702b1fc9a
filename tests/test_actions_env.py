"""The Actions environment files: step summary limit, outputs heredoc safety, event payloads."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_selfheal.github.actions_env import (
    STEP_SUMMARY_LIMIT,
    fit_step_summary,
    format_outputs,
    pull_request_number,
    warning,
    write_outputs,
    write_step_summary,
)
from pytest_selfheal.history import sources
from pytest_selfheal.history.sources import ActionsContext

# --- a parser that reads $GITHUB_OUTPUT like the runner does ------------------------------------
# (actions/runner, FileCommandManager: lines split on "\n" with an optional "\r"; NAME=VALUE,
# or NAME<<DELIMITER then raw text up to a line equal to the delimiter.)


def _read_line(text: str, index: int) -> tuple[Optional[str], int, Optional[str]]:
    if index >= len(text):
        return None, index, None
    nl = text.find("\n", index)
    if nl == -1:
        return text[index:], len(text), None
    if nl > index and text[nl - 1] == "\r":
        return text[index : nl - 1], nl + 1, "\r\n"
    return text[index:nl], nl + 1, "\n"


def parse_github_output(text: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    line, index, _ = _read_line(text, 0)
    while line is not None:
        if line:
            eq = line.find("=")
            heredoc = line.find("<<")
            if eq >= 0 and (heredoc < 0 or eq < heredoc):
                name, value = line.split("=", 1)
            elif heredoc >= 0:
                name, delimiter = line.split("<<", 1)
                assert name and delimiter
                start = end = index
                temp, index, newline = _read_line(text, index)
                while temp != delimiter:
                    if temp is None:
                        raise ValueError(f"Matching delimiter not found {delimiter!r}")
                    if newline is None:
                        raise ValueError("EOF marker missing new line")
                    end = index - len(newline)
                    temp, index, newline = _read_line(text, index)
                value = text[start:end] if end > start else ""
            else:
                raise ValueError(f"Invalid format {line!r}")
            pairs.append((name, value))
        line, index, _ = _read_line(text, index)
    return pairs


# --- step summary -----------------------------------------------------------------------------


def test_summary_no_path_outside_actions() -> None:
    assert write_step_summary("# hi", {}) is False


def test_summary_appends(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_text("existing\n", encoding="utf-8")
    assert write_step_summary("## Report\nline", {"GITHUB_STEP_SUMMARY": str(target)}) is True
    assert write_step_summary("second", {"GITHUB_STEP_SUMMARY": str(target)}) is True
    assert target.read_text(encoding="utf-8") == "existing\n## Report\nline\nsecond\n"


def test_summary_truncated_at_line_boundary_counting_existing_size(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_bytes(b"x" * (STEP_SUMMARY_LIMIT - 10_000) + b"\n")
    lines = [f"| row {i} | é ok |" for i in range(2_000)]
    markdown = "\n".join(lines) + "\n"
    assert write_step_summary(markdown, {"GITHUB_STEP_SUMMARY": str(target)}, full_report="reports/selfheal-report.md") is True
    data = target.read_bytes()
    assert len(data) <= STEP_SUMMARY_LIMIT
    appended = data[STEP_SUMMARY_LIMIT - 10_000 + 1 :].decode("utf-8")
    over = len(markdown.encode()) - (10_000 - 1)
    assert appended.endswith(
        f"> Report truncated: {over:,} bytes over GitHub's 1 MiB step summary limit. "
        "Full report: reports/selfheal-report.md\n"
    )
    body = appended.split("\n> Report truncated")[0]
    assert all(line in lines for line in body.splitlines())  # only whole lines kept
    assert body.startswith("| row 0 |")


def test_summary_nothing_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "summary.md"
    target.write_bytes(b"x" * (STEP_SUMMARY_LIMIT - 20))
    assert write_step_summary("a" * 1000, {"GITHUB_STEP_SUMMARY": str(target)}) is False
    assert target.stat().st_size == STEP_SUMMARY_LIMIT - 20
    assert capsys.readouterr().out.startswith("::warning::")


def test_summary_closes_an_open_code_fence() -> None:
    markdown = "intro\n```\n" + "".join(f"log line {i}\n" for i in range(200_000)) + "```\n"
    text = fit_step_summary(markdown, 0)
    assert text is not None
    assert len(text.encode()) <= STEP_SUMMARY_LIMIT
    before_note = text.split("\n> Report truncated")[0]
    assert before_note.endswith("```\n")
    assert sum(1 for line in before_note.splitlines() if line.startswith("```")) % 2 == 0


def test_summary_single_huge_line_cut_on_a_character_boundary() -> None:
    text = fit_step_summary("€" * 600_000, 0)  # 1.8 MB, one line, 3-byte characters
    assert text is not None
    assert len(text.encode("utf-8")) <= STEP_SUMMARY_LIMIT
    assert text.startswith("€€€") and "Report truncated" in text


def test_summary_write_error_is_a_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert write_step_summary("x", {"GITHUB_STEP_SUMMARY": str(tmp_path)}) is False  # a directory
    assert "::warning::Could not write the job summary" in capsys.readouterr().out


# --- outputs ----------------------------------------------------------------------------------

HOSTILE_VALUES = {
    "final-status": "resolved",
    "multi_line": "line 1\nline 2\n\nline 4",
    "injection": "ok\nstop-reason=evil\nother<<EOF\nx\nEOF",
    "fake_delimiter": "a\nghadelimiter_00000000-0000-0000-0000-000000000000\nb",
    "empty": "",
    "trailing_newline": "value\n",
    "crlf_inside": "a\r\nb",
    "unicode": "résumé ✓ 🚀",
    "heredoc_like": "x<<y=z",
}


def test_outputs_read_back_exactly(tmp_path: Path) -> None:
    target = tmp_path / "output"
    target.write_text("earlier=1\n", encoding="utf-8")
    assert write_outputs(HOSTILE_VALUES, {"GITHUB_OUTPUT": str(target)}) is True
    parsed = parse_github_output(target.read_bytes().decode("utf-8"))
    assert parsed == [("earlier", "1")] + list(HOSTILE_VALUES.items())


def test_outputs_env_path_and_outside_actions(tmp_path: Path) -> None:
    target = tmp_path / "out"
    assert write_outputs({"a": "1"}, {}) is False
    assert write_outputs({"a": "1"}, {"GITHUB_OUTPUT": str(target)}) is True
    assert parse_github_output(target.read_text(encoding="utf-8")) == [("a", "1")]


def test_outputs_delimiter_never_inside_the_value() -> None:
    delimiters = iter(["ghadelimiter_clash", "ghadelimiter_fresh"])
    text = format_outputs({"v": "x\nghadelimiter_clash\ny"}, delimiter_factory=lambda: next(delimiters))
    assert text.startswith("v<<ghadelimiter_fresh\n")
    assert parse_github_output(text) == [("v", "x\nghadelimiter_clash\ny")]


@pytest.mark.parametrize("name", ["", "a=b", "a<<b", "a\nb", "1abc", "has space"])
def test_outputs_reject_bad_names(name: str) -> None:
    with pytest.raises(ValueError, match="invalid output name"):
        format_outputs({name: "x"})


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,20}", fullmatch=True),
        # A trailing "\r" is eaten by the runner's CRLF handling: not representable.
        st.text(max_size=200).filter(lambda v: not v.endswith("\r")),
        max_size=6,
    )
)
def test_outputs_roundtrip_property(values: dict[str, str]) -> None:
    assert parse_github_output(format_outputs(values)) == list(values.items())


# --- event payload ----------------------------------------------------------------------------


def test_read_event_tolerant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ActionsContext().event(warning) == {}
    assert capsys.readouterr().out == ""
    assert ActionsContext(event_path=str(tmp_path / "missing.json")).event(warning) == {}
    assert "::warning::Could not read the event payload" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert ActionsContext(event_path=str(bad)).event(warning) == {}
    assert "not valid JSON" in capsys.readouterr().out
    array = tmp_path / "array.json"
    array.write_text("[1, 2]", encoding="utf-8")
    assert ActionsContext(event_path=str(array)).event(warning) == {}
    assert "not a JSON object" in capsys.readouterr().out
    good = tmp_path / "event.json"
    good.write_text(json.dumps({"number": 5}), encoding="utf-8")
    assert ActionsContext(event_path=str(good)).event(warning) == {"number": 5}


def test_one_reader_of_the_event_payload_bounds_its_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "event.json"
    big.write_text(json.dumps({"pull_request": {"base": {"sha": "a" * 40}}}), encoding="utf-8")
    assert ActionsContext.from_env({"GITHUB_EVENT_PATH": str(big)}).event()["pull_request"] == {"base": {"sha": "a" * 40}}
    monkeypatch.setattr(sources, "MAX_EVENT_BYTES", 16)
    assert ActionsContext(event_path=str(big)).event(warning) == {}
    assert f"::warning::The event payload {big} is larger than 16 bytes." in capsys.readouterr().out
    assert ActionsContext.from_env({"GITHUB_EVENT_PATH": str(big)}).event() == {}  # the history reads it silently
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "event_name, event, expected",
    [
        ("pull_request", {"pull_request": {"number": 12}, "number": 99}, 12),
        ("pull_request", {"number": 13}, 13),
        ("pull_request_target", {"pull_request": {"number": 14}}, 14),
        ("pull_request_target", {"number": 15}, 15),
        ("pull_request_review", {"pull_request": {"number": 16}}, 16),
        ("workflow_run", {"workflow_run": {"pull_requests": [{"number": 17}, {"number": 18}]}}, 17),
        ("workflow_run", {"workflow_run": {"pull_requests": []}}, None),  # fork PRs
        ("workflow_run", {"workflow_run": {}}, None),
        ("issue_comment", {"issue": {"number": 19, "pull_request": {"url": "u"}}}, 19),
        ("issue_comment", {"issue": {"number": 20}}, None),  # a plain issue
        ("push", {"number": 21}, None),
        ("schedule", {}, None),
        (None, {"pull_request": {"number": 1}}, None),
        ("pull_request", {"pull_request": {"number": True}}, None),
        ("pull_request", {"pull_request": {"number": "22"}}, 22),
        ("pull_request", {"pull_request": {"number": -3}}, None),
        ("pull_request", {"pull_request": "garbage"}, None),
        ("pull_request", {}, None),
    ],
)
def test_pull_request_number(event_name: Optional[str], event: dict[str, Any], expected: Optional[int]) -> None:
    assert pull_request_number(event_name, event) == expected


# --- context and workflow commands ------------------------------------------------------------


def test_context_from_env(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 42}}), encoding="utf-8")
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_API_URL": "https://ghe.example.com/api/v3/",
        "GITHUB_SERVER_URL": "https://ghe.example.com",
        "GITHUB_REPOSITORY": "octo/hello",
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_SHA": "abc123",
        "GITHUB_RUN_ID": "777",
        "GITHUB_RUN_ATTEMPT": "2",
        "GITHUB_STEP_SUMMARY": "/tmp/summary",
        "GITHUB_OUTPUT": "/tmp/output",
        "GITHUB_TOKEN": "ghs_secretTokenValue123",
    }
    ctx = ActionsContext.from_env(env)
    assert ctx.in_actions and ctx.api_url == "https://ghe.example.com/api/v3"
    assert ctx.repository == "octo/hello" and ctx.sha == "abc123" and ctx.token == "ghs_secretTokenValue123"
    assert ctx.run_url == "https://ghe.example.com/octo/hello/actions/runs/777/attempts/2"
    assert pull_request_number(ctx.event_name, ctx.event()) == 42
    assert "ghs_secretTokenValue123" not in repr(ctx)


def test_context_defaults() -> None:
    ctx = ActionsContext.from_env({"GITHUB_API_URL": "", "GITHUB_TOKEN": ""})
    assert ctx.api_url == "https://api.github.com" and ctx.server_url == "https://github.com"
    assert ctx.token is None and ctx.run_url is None and not ctx.in_actions
    assert pull_request_number(ctx.event_name, ctx.event()) is None
    assert ActionsContext.from_env({"GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "5"}).run_url == (
        "https://github.com/o/r/actions/runs/5"
    )


def test_workflow_commands_are_escaped() -> None:
    out = io.StringIO()
    warning("50% done\r\nnext line ::error::injected", stream=out)
    assert out.getvalue() == "::warning::50%25 done%0D%0Anext line ::error::injected\n"


def test_workflow_commands_default_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    warning("careful")
    assert capsys.readouterr().out == "::warning::careful\n"
