"""The GitHub client and the sticky PR comment, end to end against a loopback fake GitHub."""

from __future__ import annotations

import logging
import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_selfheal.github.client import (
    ACTIONS_BOT_LOGIN,
    MAX_COMMENT_CHARS,
    GitHubClient,
    GitHubError,
    fit_comment,
    marker,
    upsert_sticky_comment,
)

try:  # tests/ is a rootdir-less directory (on sys.path) or a package
    from fake_github import DEFAULT_TOKEN, FakeGitHub, fake_github, make_fake_github
except ImportError:  # pragma: no cover
    from tests.fake_github import DEFAULT_TOKEN, FakeGitHub, fake_github, make_fake_github  # type: ignore[no-redef,import-untyped]  # noqa: F401

PR = 7
PAT = "ghp_personalAccessToken0123456789abcdefXYZ"
READ_ONLY = "ghs_readOnlyForkToken0123456789abcdefXYZ"


def client_for(fake: FakeGitHub, token: str = DEFAULT_TOKEN) -> GitHubClient:
    return GitHubClient(fake.url, token, fake.repository, timeout=5.0)


def ours(fake: FakeGitHub, login: str = ACTIONS_BOT_LOGIN, name: str = "default") -> list[dict[str, Any]]:
    return [c for c in fake.comments(PR) if marker(name) in c["body"] and c["user"]["login"] == login]


@pytest.fixture
def evil() -> Iterator[FakeGitHub]:
    """A second server standing for "another host": it must never see a request."""
    other = make_fake_github()
    try:
        yield other
    finally:
        other.stop()


# --- plain client ---------------------------------------------------------------------------


def test_requests_carry_the_github_headers(fake_github: FakeGitHub) -> None:
    client = client_for(fake_github)
    client.create_issue_comment(PR, "hello")
    (req,) = fake_github.requests_to("POST")
    assert req.header("Accept") == "application/vnd.github+json"
    assert req.header("X-GitHub-Api-Version") == "2022-11-28"
    assert req.header("Authorization") == f"Bearer {DEFAULT_TOKEN}"
    assert req.header("User-Agent") == "pytest-selfheal"
    assert req.path == f"/repos/{fake_github.repository}/issues/{PR}/comments"


def test_fake_requires_the_accept_header(fake_github: FakeGitHub) -> None:
    req = urllib.request.Request(f"{fake_github.url}/user", headers={"Accept": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=5)
    assert info.value.code == 415


@pytest.mark.parametrize("per_page", [100, 7, 1])
def test_list_follows_pagination(fake_github: FakeGitHub, per_page: int) -> None:
    fake_github.max_per_page = per_page
    ids = [fake_github.add_comment(PR, f"c{i}", "someone") for i in range(23)]
    listed = list(client_for(fake_github).list_issue_comments(PR))
    assert [c.id for c in listed] == ids
    gets = fake_github.requests_to("GET", "/comments")
    assert len(gets) == -(-23 // per_page)
    assert gets[0].query["per_page"] == ["100"]


def test_authenticated_login(fake_github: FakeGitHub) -> None:
    fake_github.set_token(PAT, "alice", "write", user_visible=True)
    assert client_for(fake_github, PAT).get_authenticated_login() == "alice"
    # The Actions token: 403 "Resource not accessible by integration".
    assert client_for(fake_github).get_authenticated_login() is None
    assert GitHubClient(fake_github.url, None, fake_github.repository).get_authenticated_login() is None


def test_invalid_construction() -> None:
    with pytest.raises(ValueError, match="repository"):
        GitHubClient("https://api.github.com", "t", "not-a-repo")
    with pytest.raises(ValueError, match="repository"):
        GitHubClient("https://api.github.com", "t", "../x")
    with pytest.raises(ValueError, match="API URL"):
        GitHubClient("ftp://api.github.com", "t", "o/r")


# --- the sticky comment ---------------------------------------------------------------------


@pytest.mark.parametrize("per_page", [100, 30, 7])
def test_two_upserts_after_35_comments_leave_exactly_one(fake_github: FakeGitHub, per_page: int) -> None:
    fake_github.max_per_page = per_page
    for i in range(35):
        # Some other users quote our marker (copy-pasting the report, or trying to hijack it).
        body = f"{marker()}\nquoted by {i}" if i % 5 == 0 else f"review comment {i}"
        fake_github.add_comment(PR, body, f"user{i % 4}")
    client = client_for(fake_github)

    first = upsert_sticky_comment(client, PR, "Stop reason: max_iterations\nrun 1")
    second = upsert_sticky_comment(client, PR, "Stop reason: success\nrun 2")

    assert first.action == "created" and first.warning is None
    assert second.action == "updated" and second.comment_id == first.comment_id
    mine = ours(fake_github)
    assert len(mine) == 1
    assert mine[0]["body"].startswith(marker()) and "run 2" in mine[0]["body"] and "run 1" not in mine[0]["body"]
    assert len(fake_github.comments(PR)) == 36
    assert all(c["body"].endswith(str(i)) for i, c in enumerate(fake_github.comments(PR)[:35]))
    assert len(fake_github.requests_to("POST")) == 1
    assert len(fake_github.requests_to("PATCH")) == 1
    # The first upsert reads every page of the 35; the second finds ours, the 36th, on its
    # last page (page 1 with 100 per page, page 2 with 30, page 6 with 7).
    gets = fake_github.requests_to("GET", "/comments")
    assert len(gets) == -(-35 // per_page) + -(-36 // per_page)
    assert gets[-1].query.get("page", ["1"]) == [str(-(-36 // per_page))]


def test_found_on_the_first_page_when_it_came_first(fake_github: FakeGitHub) -> None:
    fake_github.max_per_page = 10
    client = client_for(fake_github)
    first = upsert_sticky_comment(client, PR, "run 1")
    for i in range(35):
        fake_github.add_comment(PR, f"later {i}", "bob")
    second = upsert_sticky_comment(client, PR, "run 2")
    assert second.action == "updated" and second.comment_id == first.comment_id
    # Stops listing as soon as it is found: one GET for the first upsert, one for the second.
    assert len(fake_github.requests_to("GET", "/comments")) == 2


def test_someone_elses_marker_is_never_edited(fake_github: FakeGitHub) -> None:
    hijack = fake_github.add_comment(PR, f"{marker()}\nI am not the bot", "mallory")
    result = upsert_sticky_comment(client_for(fake_github), PR, "report")
    assert result.action == "created" and result.comment_id != hijack
    assert fake_github.comments(PR)[0]["body"].endswith("I am not the bot")
    assert not fake_github.requests_to("PATCH")


def test_author_is_the_token_user_when_visible(fake_github: FakeGitHub) -> None:
    fake_github.set_token(PAT, "alice", "write", user_visible=True)
    bot_comment = fake_github.add_comment(PR, f"{marker()}\nold bot report", ACTIONS_BOT_LOGIN)
    client = client_for(fake_github, PAT)
    first = upsert_sticky_comment(client, PR, "alice run 1")
    second = upsert_sticky_comment(client, PR, "alice run 2")
    assert first.action == "created" and first.comment_id != bot_comment
    assert second.action == "updated" and second.comment_id == first.comment_id
    assert len(ours(fake_github, "alice")) == 1
    # Explicit author wins over /user.
    third = upsert_sticky_comment(client, PR, "again", author="alice")
    assert third.comment_id == first.comment_id


def test_report_names_keep_separate_comments(fake_github: FakeGitHub) -> None:
    client = client_for(fake_github)
    a = upsert_sticky_comment(client, PR, "job A", name="py3.9")
    b = upsert_sticky_comment(client, PR, "job B", name="py3.12")
    a2 = upsert_sticky_comment(client, PR, "job A again", name="py3.9")
    assert a.comment_id != b.comment_id and a2.comment_id == a.comment_id
    assert len(fake_github.comments(PR)) == 2


def test_read_only_token_is_skipped_with_a_warning(fake_github: FakeGitHub) -> None:
    fake_github.set_token(READ_ONLY, ACTIONS_BOT_LOGIN, "read-only", user_visible=False)
    result = upsert_sticky_comment(client_for(fake_github, READ_ONLY), PR, "report")
    assert result.action == "skipped" and result.comment_id is None
    assert result.warning is not None and "HTTP 403" in result.warning
    assert "Resource not accessible by integration" in result.warning and "job summary" in result.warning
    assert fake_github.comments(PR) == []


def test_read_only_token_with_an_existing_comment(fake_github: FakeGitHub) -> None:
    existing = fake_github.add_comment(PR, f"{marker()}\nold", ACTIONS_BOT_LOGIN)
    fake_github.set_token(READ_ONLY, ACTIONS_BOT_LOGIN, "read-only", user_visible=False)
    result = upsert_sticky_comment(client_for(fake_github, READ_ONLY), PR, "new")
    assert result.action == "skipped" and result.comment_id == existing and result.warning
    assert fake_github.comments(PR)[0]["body"].endswith("old")


def test_no_access_to_the_comments_is_skipped(fake_github: FakeGitHub) -> None:
    fake_github.fail_next("GET", "/comments", 404, "Not Found")
    result = upsert_sticky_comment(client_for(fake_github), PR, "report")
    assert result.action == "skipped" and result.warning and "HTTP 404" in result.warning


def test_oversized_body_is_truncated_and_keeps_the_marker(fake_github: FakeGitHub) -> None:
    body = "Stop reason: repeated_fingerprint\n" + "".join(f"| test_{i} | failed |\n" for i in range(10_000))
    assert len(body) > MAX_COMMENT_CHARS
    result = upsert_sticky_comment(client_for(fake_github), PR, body)
    assert result.action == "created"
    (comment,) = fake_github.comments(PR)
    text = comment["body"]
    assert len(text) <= MAX_COMMENT_CHARS
    assert text.startswith(marker() + "\nStop reason: repeated_fingerprint\n")
    assert "report truncated (" in text and "over GitHub's 65,536 limit" in text


def test_422_is_retried_once_with_a_harder_truncation(fake_github: FakeGitHub) -> None:
    fake_github.limit_in_bytes = True  # a server counting bytes: 60,000 "€" are 180,000 bytes
    result = upsert_sticky_comment(client_for(fake_github), PR, "Stop reason: success\n" + "€" * 60_000)
    assert result.action == "created", result.warning
    posts = fake_github.requests_to("POST")
    assert len(posts) == 2  # the 422, then the retry
    (comment,) = fake_github.comments(PR)
    assert len(comment["body"].encode("utf-8")) <= MAX_COMMENT_CHARS
    assert comment["body"].startswith(marker())


def test_422_twice_is_skipped_with_a_warning(fake_github: FakeGitHub) -> None:
    fake_github.fail_next("POST", "/comments", 422, "Validation Failed")
    fake_github.fail_next("POST", "/comments", 422, "Validation Failed")
    result = upsert_sticky_comment(client_for(fake_github), PR, "x" * 70_000)
    assert result.action == "skipped" and result.warning and "HTTP 422" in result.warning
    # A short body that GitHub refuses is not retried (nothing to cut).
    fake_github.fail_next("POST", "/comments", 422, "Validation Failed")
    short = upsert_sticky_comment(client_for(fake_github), PR, "short")
    assert short.action == "skipped"
    assert len(fake_github.requests_to("POST")) == 3


def test_update_of_a_deleted_comment_posts_a_new_one(fake_github: FakeGitHub) -> None:
    client = client_for(fake_github)
    upsert_sticky_comment(client, PR, "run 1")
    fake_github.fail_next("PATCH", "/issues/comments/", 404, "Not Found")
    result = upsert_sticky_comment(client, PR, "run 2")
    assert result.action == "created"


def test_server_errors_raise(fake_github: FakeGitHub) -> None:
    fake_github.fail_next("GET", "/comments", 502, "Bad Gateway")
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client_for(fake_github), PR, "report")
    assert info.value.status == 502 and "Bad Gateway" in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_token_raises_without_echoing_it(fake_github: FakeGitHub) -> None:
    bad = "ghp_thisTokenIsNotKnown0123456789abcdefAB"
    with pytest.raises(GitHubError) as info:
        upsert_sticky_comment(client_for(fake_github, bad), PR, "report")
    assert info.value.status == 401 and "Bad credentials" in str(info.value)
    assert bad not in str(info.value) and bad not in repr(info.value)


# --- the token stays home -------------------------------------------------------------------


def test_pagination_link_to_another_host_is_not_followed(fake_github: FakeGitHub, evil: FakeGitHub) -> None:
    fake_github.max_per_page = 5
    fake_github.link_base = evil.url  # rel="next" points at another port
    for i in range(12):
        fake_github.add_comment(PR, f"c{i}", "someone")
    listed = list(client_for(fake_github).list_issue_comments(PR))
    assert len(listed) == 5
    result = upsert_sticky_comment(client_for(fake_github), PR, "report")
    assert result.action == "created"
    assert evil.requests == []


def test_redirect_to_another_host_is_not_followed(fake_github: FakeGitHub, evil: FakeGitHub) -> None:
    fake_github.respond_next("GET", "/comments", 301, {"message": "Moved"}, {"Location": f"{evil.url}/x"})
    with pytest.raises(GitHubError) as info:
        list(client_for(fake_github).list_issue_comments(PR))
    assert info.value.status == 301
    assert evil.requests == []


def test_absolute_url_elsewhere_is_refused(fake_github: FakeGitHub, evil: FakeGitHub) -> None:
    with pytest.raises(GitHubError, match="another host"):
        client_for(fake_github).request("GET", f"{evil.url}/user")
    assert evil.requests == []


def test_token_never_in_errors_or_logs(fake_github: FakeGitHub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = client_for(fake_github)
    errors = []
    # A server that echoes the token back in its error message.
    fake_github.fail_next("POST", "/comments", 500, f"boom Bearer {DEFAULT_TOKEN}")
    with pytest.raises(GitHubError) as info:
        client.create_issue_comment(PR, "x")
    errors.append(info.value)
    # A connection error (nothing listens on a just-closed port).
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(GitHubError) as info:
        GitHubClient(f"http://127.0.0.1:{port}", DEFAULT_TOKEN, "o/r", timeout=2).create_issue_comment(1, "x")
    assert info.value.status == 0
    errors.append(info.value)
    upsert_sticky_comment(client, PR, "fine")
    for error in errors:
        assert DEFAULT_TOKEN not in str(error) and DEFAULT_TOKEN not in repr(error)
        assert DEFAULT_TOKEN not in error.api_message
    assert "[REDACTED]" in str(errors[0])
    assert DEFAULT_TOKEN not in caplog.text
    assert DEFAULT_TOKEN not in repr(client)


# --- pure helpers ---------------------------------------------------------------------------


def test_marker_is_sanitised() -> None:
    assert marker() == "<!-- pytest-selfheal:report:default -->"
    assert marker("py3.12 / ubuntu") == "<!-- pytest-selfheal:report:py3.12-ubuntu -->"
    assert "-->" not in marker("x --> <script>")[:-4]
    assert marker("") == marker("!!!") == marker()
    assert len(marker("a" * 500)) < 100


def test_fit_comment_leaves_short_bodies_alone() -> None:
    assert fit_comment("short") == "short"
    exact = "x" * MAX_COMMENT_CHARS
    assert fit_comment(exact) == exact


def test_fit_comment_truncates_with_note_and_marker() -> None:
    body = marker("job") + "\n# Report\n" + "".join(f"line {i}\n" for i in range(20_000))
    text = fit_comment(body)
    assert len(text) <= MAX_COMMENT_CHARS
    assert text.startswith(marker("job") + "\n# Report\nline 0\n")
    over = len(body) - MAX_COMMENT_CHARS
    assert text.endswith(
        f"> …report truncated ({over:,} characters over GitHub's 65,536 limit); "
        "full report in the job summary / artifact\n"
    )
    kept = text.split("\n\n> …report truncated")[0]
    assert kept.endswith("\n") or kept.split("\n")[-1].startswith("line ")


def test_fit_comment_readds_a_marker_that_would_be_cut() -> None:
    body = "x" * 70_000 + "\n" + marker("late")
    text = fit_comment(body)
    assert len(text) <= MAX_COMMENT_CHARS and text.startswith(marker("late") + "\n")


def test_fit_comment_closes_code_fences_and_details() -> None:
    body = "<details><summary>log</summary>\n\n```\n" + "log line\n" * 20_000 + "```\n</details>\n"
    text = fit_comment(body, 10_000)
    assert len(text) <= 10_000
    head = text.split("\n\n> …report truncated")[0]
    assert head.endswith("```\n</details>\n")
    assert "the 10,000-character budget" in text
