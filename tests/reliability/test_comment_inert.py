"""The PR comment renders nothing taken from test output.

A failing test whose message and parametrize id carry markdown (an image, a link, bold,
an autolink, ``www.``, an e-mail, ``#1`` / ``org/repo#5`` cross-references, an ``@user``
mention, HTML entities) goes through ``selfheal ci`` against the loopback GitHub: in the
comment and the job summary every such piece is inert, either inside a code span or
escaped (backslashes, a zero-width space that breaks GitHub's references, mentions and
autolinks). The ``run_url`` of an untrusted report is normalised (``..`` resolved,
``%2e`` decoded) before its prefix check.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fake_github import FakeGitHub
from helpers import cli, make_project

from pytest_selfheal.github.ci_verdict import comment_footer, sanitize_ci_info
from pytest_selfheal.report.data import build_report
from pytest_selfheal.report.render import code, text

from .test_secrets_everywhere import ci_env

HOSTILE = ("![pixel](https://attacker.example/p.png) [Approve](https://attacker.example/ok) **bold** _em_ "
           "~~gone~~ see #1 and org/repo#5 cc @octocat mail me@attacker.example www.attacker.example "
           "https://attacker.example/x &#64;octocat <b>html</b>")

# What must not be left live outside code spans (each is what GitHub would render).
LIVE = {
    "image": re.compile(r"!\["),
    "link": re.compile(r"(?<!\\)\]\("),
    "bold": re.compile(r"\*\*bold\*\*"),
    "emphasis": re.compile(r"(?<!\\)_em(?<!\\)_"),
    "strikethrough": re.compile(r"(?<!\\)~~gone"),
    "issue reference": re.compile(r"(?<![\w/])#\d"),
    "cross-repo reference": re.compile(r"org/repo#\d"),
    "mention": re.compile(r"@octocat"),
    "url autolink": re.compile(r"https?://attacker"),
    "www autolink": re.compile(r"www\.attacker"),
    "e-mail autolink": re.compile(r"me@attacker"),
    "entity": re.compile(r"&#64;"),
    "html": re.compile(r"<b>"),
}


def outside_code_spans(markdown: str) -> str:
    """``markdown`` without its fenced blocks and inline code spans (CommonMark: a run of
    N backticks closes at the next run of exactly N)."""
    markdown = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", markdown, flags=re.S)


def live_pieces(markdown: str) -> list[str]:
    """Each live piece as ``name: context`` (empty: the markdown is inert)."""
    rest = outside_code_spans(markdown)
    return [f"{name}: {rest[max(0, m.start() - 40):m.end() + 40]!r}"
            for name, pattern in LIVE.items() for m in [pattern.search(rest)] if m]


def test_text_and_code_are_inert() -> None:
    assert live_pieces(text(HOSTILE, 1000)) == []
    assert live_pieces(code(HOSTILE, 1000)) == []
    # Escaping keeps the text readable: a reader still sees every word.
    shown = text(HOSTILE, 1000).replace("\\", "").replace("\u200b", "").replace("&amp;", "&")
    assert "Approve" in shown and "org/repo#5" in shown and "@octocat" in shown


HOSTILE_TEST = """
    import os

    import pytest

    HOSTILE = open(os.environ["HOSTILE_FILE"]).read()


    @pytest.mark.parametrize("label", [HOSTILE[:60]])
    def test_param(label):
        assert False, HOSTILE


    def test_message():
        raise AssertionError(HOSTILE)
"""


def test_the_pr_comment_renders_nothing_from_test_output(tmp_path: Path, fake_github: FakeGitHub) -> None:
    hostile = tmp_path / "outside" / "hostile.txt"
    hostile.parent.mkdir()
    hostile.write_text(HOSTILE)
    project = make_project(tmp_path / "p", {"test_hostile.py": HOSTILE_TEST})
    env: dict[str, str] = ci_env(tmp_path, fake_github, {"HOSTILE_FILE": str(hostile)})
    done = cli("ci", "--", "-q", cwd=project, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    (comment,) = fake_github.comments(7)
    body, _, footer = str(comment["body"]).partition("\n<sub>pytest-selfheal")
    # Our own footer links our own run (from the environment, not from test output).
    assert re.findall(r"\]\((\S+?)\)", footer) == [f"https://github.com/{fake_github.repository}/actions/runs/4242"]
    assert "Approve" in body  # the hostile text did reach the comment ...
    assert live_pieces(body) == []  # ... inert
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "Approve" in summary and live_pieces(summary) == []


@pytest.mark.parametrize("escape", [
    "../../../../../attacker/x",
    "%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/attacker/x",
    "./../../../../../attacker/x",
])
def test_run_url_is_normalised_before_its_prefix_check(escape: str, tmp_path: Path, fake_github: FakeGitHub) -> None:
    report = build_report(incidents=[])
    info = sanitize_ci_info({"run_url": f"https://github.com/o/r/actions/runs/1/{escape}"}, report)
    assert info.run_url == "https://github.com/attacker/x"  # what a browser opens
    # Through the comment-only mode: the footer links no run outside this repository's.
    url = f"https://github.com/{fake_github.repository}/actions/runs/1/{escape}"
    path = tmp_path / "artifact" / "ralf_lite_report.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**report.to_json(), "ci": {"final_status": "failed", "stop_reason": "max_iterations",
                                                 "iterations": 1, "run_url": url}}))
    env = ci_env(tmp_path, fake_github, {})
    done = cli("ci", "--comment-from", str(path), cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    bodies = [str(c["body"]) for c in fake_github.comments(7)]
    assert bodies and not any("attacker" in b for b in bodies), bodies


def test_a_normalised_run_url_of_this_repository_is_kept() -> None:
    report = build_report(incidents=[])
    url = "https://github.com/o/r/actions/runs/1/attempts/../"
    info = sanitize_ci_info({"run_url": url}, report)
    assert info.run_url == "https://github.com/o/r/actions/runs/1/"
    assert "[workflow run](https://github.com/o/r/actions/runs/1/)" in comment_footer(info)
