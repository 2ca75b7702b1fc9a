"""GitHub REST client (stdlib HTTP) and the sticky PR comment (edge; docs/github.md). The token is
sent only to the origin of ``api_url`` (pagination links and redirects elsewhere are not followed)
and never appears in an exception, a log record or a ``repr``."""

from __future__ import annotations

import ipaddress
import json
import logging
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.client import HTTPException, HTTPMessage
from typing import Any, Optional

from pytest_selfheal.errors import EXIT_IO, SelfhealError
from pytest_selfheal.github.actions_env import closed_fence
from pytest_selfheal.history.records import plausible_repository
from pytest_selfheal.records.ci import IssueComment

log = logging.getLogger(__name__)

MAX_COMMENT_CHARS = 65536  # GitHub's limit for a comment body
#: The author of comments made with the Actions ``GITHUB_TOKEN``.
ACTIONS_BOT_LOGIN = "github-actions[bot]"

API_VERSION = "2022-11-28"
ACCEPT = "application/vnd.github+json"
PER_PAGE = 100
# Bounds far above what GitHub sends for the endpoints used here.
MAX_PAGES = 100
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
_MAX_MESSAGE_CHARS = 300

_MARKER_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_ANY_MARKER = re.compile(r"<!-- pytest-selfheal:report:[A-Za-z0-9._-]{1,64} -->")
_LINK = re.compile(r"<([^>]*)>\s*;\s*rel=\"?([^\";,]*)\"?")


class GitHubError(SelfhealError):
    """A GitHub API call failed: HTTP ``status`` (0: no connection), one line, never the token."""

    exit_code = EXIT_IO

    def __init__(self, status: int, message: str, *, api_message: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.api_message = api_message  # GitHub's own ``message`` ("Resource not accessible by integration")


_Origin = tuple[str, str, int]


def _origin(url: str) -> Optional[_Origin]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.scheme, parts.hostname.lower(), port)


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only within the API's origin: urllib would otherwise resend the
    ``Authorization`` header to whatever host the redirect names."""

    def __init__(self, origin: _Origin) -> None:
        super().__init__()
        self._origin = origin

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: HTTPMessage,
                         newurl: str) -> Optional[urllib.request.Request]:
        if _origin(newurl) != self._origin:
            log.warning("GitHub API: not following a redirect to another host")
            return None  # urllib then raises HTTPError with the 3xx status
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _next_link(header: Optional[str]) -> Optional[str]:
    return next((m.group(1) for m in _LINK.finditer(header or "") if "next" in m.group(2).split()), None)


class GitHubClient:
    """A small GitHub REST client for ``repository`` (``owner/name``); ``GitHubError`` on failure."""

    def __init__(self, api_url: str, token: Optional[str], repository: str, *, timeout: float = 20.0) -> None:
        base = (api_url or "").rstrip("/")
        origin = _origin(base)
        if origin is None:
            raise ValueError(f"invalid GitHub API URL {api_url!r}: expected http(s)://host[/path]")
        if not plausible_repository(repository or "") or ".." in repository:
            raise ValueError(f"invalid repository {repository!r}: expected owner/name")
        self.api_url = base
        self.repository = repository
        self.timeout = timeout
        self._token = token or None
        self._origin = origin
        self._base_path = urllib.parse.urlsplit(base).path
        # Proxies from the environment apply, except for loopback (tests, local GHES tunnels).
        proxies = urllib.request.ProxyHandler({}) if _is_loopback(origin[1]) else urllib.request.ProxyHandler()
        self._opener = urllib.request.build_opener(proxies, _SameOriginRedirects(origin))

    def __repr__(self) -> str:
        return f"GitHubClient({self.api_url!r}, {self.repository!r}, {'token set' if self._token else 'no token'})"

    def _repo_path(self) -> str:
        owner, name = self.repository.split("/", 1)
        return f"/repos/{urllib.parse.quote(owner, safe='')}/{urllib.parse.quote(name, safe='')}"

    def same_origin(self, url: str) -> bool:
        """Whether ``url`` is under the API's origin and base path: the only place the token goes."""
        if _origin(url) != self._origin:
            return False
        path = urllib.parse.urlsplit(url).path
        return not self._base_path or path == self._base_path or path.startswith(self._base_path + "/")

    def _scrub(self, text: str) -> str:
        text = " ".join(text.split())  # one line
        if self._token and self._token in text:
            text = text.replace(self._token, "[REDACTED]")
        return text[:_MAX_MESSAGE_CHARS]

    def _error(self, method: str, shown: str, status: int, raw: bytes) -> GitHubError:
        try:
            payload = json.loads(raw.decode("utf-8", errors="replace")) if raw else None
        except ValueError:
            payload = None
        payload = payload if isinstance(payload, dict) else {}
        api_message = str(payload.get("message") or "")
        details = [str(item.get("message") or item.get("code") or "") if isinstance(item, dict) else item
                   for item in payload.get("errors") or [] if isinstance(item, (dict, str))]
        text = (api_message or "no message") + (" (" + "; ".join(d for d in details if d) + ")" if any(details) else "")
        return GitHubError(status, self._scrub(f"GitHub API {method} {shown} failed: HTTP {status}: {text}"),
                           api_message=self._scrub(api_message))

    def request(self, method: str, path: str, body: Optional[Mapping[str, str]] = None) -> tuple[int, HTTPMessage, Any]:
        """One API call (``path`` relative to ``api_url``, or a same-origin URL): ``(status,
        headers, JSON or None)``; GitHubError on an error status, no connection or no JSON."""
        url = path if "://" in path else self.api_url + path
        if not self.same_origin(url):
            # Last line of defence: the token is never sent anywhere else.
            raise GitHubError(0, "GitHub API: refusing to send the token to another host")
        parts = urllib.parse.urlsplit(url)
        shown = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = {"Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION, "User-Agent": "pytest-selfheal",
                   **({"Authorization": f"Bearer {self._token}"} if self._token else {}),
                   **({"Content-Type": "application/json; charset=utf-8"} if body is not None else {})}
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read(MAX_RESPONSE_BYTES + 1)
                status = int(resp.status)
                resp_headers: HTTPMessage = resp.headers
        except urllib.error.HTTPError as exc:
            try:
                raw = exc.read(64 * 1024)
            except (OSError, HTTPException):
                raw = b""
            log.debug("GitHub API %s %s -> %s", method, shown, exc.code)
            raise self._error(method, shown, int(exc.code), raw) from None
        except (TimeoutError, urllib.error.URLError, OSError, HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            log.debug("GitHub API %s %s -> connection error", method, shown)
            raise GitHubError(0, self._scrub(f"GitHub API {method} {shown} failed: {reason}")) from None
        log.debug("GitHub API %s %s -> %s", method, shown, status)
        if len(raw) > MAX_RESPONSE_BYTES:
            raise GitHubError(status, f"GitHub API {method} {shown}: response too large")
        try:
            return status, resp_headers, json.loads(raw.decode("utf-8")) if raw.strip() else None
        except (UnicodeDecodeError, ValueError):
            raise GitHubError(status, f"GitHub API {method} {shown}: the response is not JSON") from None

    def get_authenticated_login(self) -> Optional[str]:
        """The login of the token's user, or None when the token cannot say (the Actions
        ``GITHUB_TOKEN`` gets 403 here: its comments are by ``github-actions[bot]``)."""
        if not self._token:
            return None
        try:
            _, _, data = self.request("GET", "/user")
        except GitHubError as exc:
            if exc.status in (401, 403, 404):
                return None
            raise
        login = data.get("login") if isinstance(data, dict) else None
        return login if isinstance(login, str) and login else None

    def pull_request_head_sha(self, number: int) -> Optional[str]:
        _, _, data = self.request("GET", f"{self._repo_path()}/pulls/{int(number)}")
        head = data.get("head") if isinstance(data, dict) else None
        sha = head.get("sha") if isinstance(head, dict) else None
        return sha if isinstance(sha, str) else None

    def list_issue_comments(self, number: int) -> Iterator[IssueComment]:
        """Every comment of issue/PR ``number``, oldest first, across at most MAX_PAGES pages,
        following ``rel="next"`` only within the API's origin and never to the same URL twice."""
        url: Optional[str] = f"{self.api_url}{self._repo_path()}/issues/{int(number)}/comments?per_page={PER_PAGE}"
        seen: set[str] = set()
        while url is not None and url not in seen and len(seen) < MAX_PAGES:
            seen.add(url)
            status, headers, data = self.request("GET", url)
            if not isinstance(data, list):
                raise GitHubError(status, "GitHub API: the comment list is not a JSON array")
            yield from (IssueComment.from_json(item) for item in data if isinstance(item, dict))
            url = _next_link(headers.get("Link"))
            if url is not None and not self.same_origin(url):
                log.warning("GitHub API: ignoring a pagination link to another host")
                url = None

    def create_issue_comment(self, number: int, body: str) -> IssueComment:
        _, _, data = self.request("POST", f"{self._repo_path()}/issues/{int(number)}/comments", {"body": body})
        return IssueComment.from_json(data)

    def update_issue_comment(self, comment_id: int, body: str) -> IssueComment:
        _, _, data = self.request("PATCH", f"{self._repo_path()}/issues/comments/{int(comment_id)}", {"body": body})
        return IssueComment.from_json(data)


def marker(name: str = "default") -> str:
    """The hidden HTML comment that marks our report comment, one per report ``name``, which is
    reduced to ``[A-Za-z0-9._-]`` so it cannot close the HTML comment."""
    clean = _MARKER_NAME_BAD.sub("-", name or "").strip("-.")[:64] or "default"
    return f"<!-- pytest-selfheal:report:{clean} -->"


def fit_comment(body: str, limit: int = MAX_COMMENT_CHARS) -> str:
    """``body`` cut at a line boundary to at most ``limit`` characters, keeping the marker and
    closing an open code fence or ``<details>`` so the truncation note renders as text."""
    if len(body) <= limit:
        return body
    where = "GitHub's 65,536 limit" if limit == MAX_COMMENT_CHARS else f"the {limit:,}-character budget"
    note = (f"\n\n> …report truncated ({len(body) - limit:,} characters over {where}); full report in the job "
            "summary / artifact\n")
    found = _ANY_MARKER.search(body)
    tag = found.group(0) if found else ""
    slack = 64  # room for the closers below
    budget = limit - len(note) - (len(tag) + 1 if tag else 0) - slack
    if budget <= 0:
        return ((tag + "\n") if tag else "") + note.strip()[: max(limit - len(tag) - 1, 0)]
    kept = body[:budget]
    newline = kept.rfind("\n")
    if newline >= budget // 2:
        kept = kept[: newline + 1]
    open_details = kept.count("<details") - kept.count("</details>")
    prefix = f"{tag}\n" if tag and tag not in kept else ""
    return prefix + closed_fence(kept) + "</details>\n" * max(0, min(open_details, 4)) + note


def _fit_in_bytes(body: str) -> str:
    """A body that fits even if GitHub counts bytes, not characters (after a 422)."""
    budget = MAX_COMMENT_CHARS - 2048
    while True:
        text = fit_comment(body, budget)
        if len(text.encode("utf-8")) <= MAX_COMMENT_CHARS - 1024 or budget <= 1024:
            return text
        budget = max(1024, int(budget * 0.75))


@dataclass(frozen=True)
class CommentResult:
    action: str  # created | updated | skipped
    comment_id: Optional[int] = None
    warning: Optional[str] = None
    url: Optional[str] = None


def _http_reason(exc: GitHubError) -> str:
    return f"HTTP {exc.status}: {exc.api_message or 'no message'}"


def _send(call: Callable[[str], IssueComment], text: str, original: str) -> IssueComment:
    """``call(text)``; on 422 (body too long) once more with a harder-truncated body."""
    try:
        return call(text)
    except GitHubError as exc:
        if exc.status != 422:
            raise
        harder = _fit_in_bytes(original)
        if harder == text:
            raise
        log.info("GitHub refused the comment body (422); retrying with a shorter one")
        return call(harder)


def upsert_sticky_comment(client: GitHubClient, number: int, body: str, *, name: str = "default",
                          author: Optional[str] = None, create: bool = True) -> CommentResult:
    """Create (unless not ``create``) or update the one report comment on PR ``number``, found by its
    :func:`marker` **and** its author (``author``, else the token's login, else ``github-actions[bot]``).
    403/404 (a fork PR's read-only token) and a body still refused after one harder truncation give
    ``"skipped"`` with a warning; other errors raise GitHubError."""
    tag = marker(name)
    if tag not in body:
        body = f"{tag}\n{body}"
    text = fit_comment(body)
    author = author or client.get_authenticated_login() or ACTIONS_BOT_LOGIN
    where = f"PR #{int(number)}"
    tail = "; the report is still in the job summary."
    try:
        # The oldest comment holding the marker *and* written by us: nobody can make us edit a
        # comment that is not ours by quoting the marker.
        existing = next((c for c in client.list_issue_comments(number) if c.body is not None and tag in c.body
                         and c.author.lower() == author.lower() and c.id is not None), None)
    except GitHubError as exc:
        if exc.status in (403, 404):
            return CommentResult("skipped", warning=f"Could not read the comments of {where} ({_http_reason(exc)}){tail}")
        raise
    if existing is None and not create:
        return CommentResult("skipped")

    def refused(verb: str, exc: GitHubError) -> CommentResult:
        why = (f"GitHub refused the report comment on {where} even after truncating it ({_http_reason(exc)})"
               if exc.status == 422 else
               f"Could not {verb} the report comment on {where} ({_http_reason(exc)}): the token cannot write to "
               "pull requests (a fork PR's read-only token, or `pull-requests: write` missing from the workflow's "
               "permissions)")
        return CommentResult("skipped", existing.id if existing else None, why + tail)

    if existing is not None and existing.id is not None:
        comment_id = existing.id
        try:
            comment = _send(lambda b: client.update_issue_comment(comment_id, b), text, body)
            return CommentResult("updated", comment.id, None, comment.html_url)
        except GitHubError as exc:
            if exc.status not in (403, 404, 422):
                raise
            if exc.status != 404:
                return refused("update", exc)
            existing = None  # deleted meanwhile: post a new one below
    try:
        comment = _send(lambda b: client.create_issue_comment(number, b), text, body)
        return CommentResult("created", comment.id, None, comment.html_url)
    except GitHubError as exc:
        if exc.status in (403, 404, 422):
            return refused("create", exc)
        raise
