"""A loopback HTTP server imitating the GitHub REST endpoints pytest-selfheal uses.

Real HTTP (no mocks of the HTTP layer), 127.0.0.1 only, port 0, threaded, stopped at
fixture teardown. Imitated:

- ``GET /user``: 200 ``{"login": ...}`` for a token registered with ``user_visible=True``,
  else 403 "Resource not accessible by integration" (the Actions ``GITHUB_TOKEN``);
- ``GET /repos/{o}/{r}/issues/{n}/comments`` with ``per_page`` / ``page`` and a correct
  ``Link`` header (``rel="next"``, ``rel="last"``, ``prev``, ``first``);
- ``POST`` same: 201, assigns ids, the author is the token's login;
- ``PATCH /repos/{o}/{r}/issues/comments/{id}``: 200; 404 unknown; 403 someone else's;
- token modes: ``"write"``; ``"read-only"`` (POST/PATCH -> 403 "Resource not accessible by
  integration"); unknown token -> 401 "Bad credentials"; no token -> 401 on writes;
- body over 65,536 characters -> 422 "Validation Failed" with GitHub's error detail;
- ``Accept: application/vnd.github+json`` required (else 415);
- every request recorded (method, path, query, headers, body) in ``.requests``.

Use the ``fake_github`` fixture (tests/conftest.py imports it), or ``FakeGitHub`` directly::

    def test_x(fake_github):
        fake_github.add_comment(7, "hello", "someone")
        client = GitHubClient(fake_github.url, fake_github.token, fake_github.repository)
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

import pytest

MAX_BODY = 65536
ACCEPT = "application/vnd.github+json"
NOT_ACCESSIBLE = "Resource not accessible by integration"
DEFAULT_TOKEN = "ghs_fakeActionsToken0123456789abcdefABCDEF"
DEFAULT_LOGIN = "github-actions[bot]"
DEFAULT_REPOSITORY = "octo-org/hello-world"


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: str

    def header(self, name: str) -> Optional[str]:
        """Header value by case-insensitive name."""
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


@dataclass
class _Token:
    login: str
    mode: str  # "write" | "read-only"
    user_visible: bool


@dataclass
class FakeGitHub:
    """State and control of the fake server. Thread-safe; start with :meth:`start`."""

    repository: str = DEFAULT_REPOSITORY
    #: Forces a smaller page size than the client asks for (exercise pagination).
    max_per_page: int = 100
    #: When set, Link URLs are built on this base instead of the server's own (to test that
    #: a client never follows a link to another host).
    link_base: Optional[str] = None
    #: Count the 65,536 body limit in UTF-8 bytes instead of characters (a stricter server:
    #: exercises the client's retry after a 422).
    limit_in_bytes: bool = False
    requests: list[Recorded] = field(default_factory=list)
    _tokens: dict[str, _Token] = field(default_factory=dict)
    _comments: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    _next_id: int = 1000
    _failures: list[tuple[str, str, int, Any, dict[str, str]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: Optional[ThreadingHTTPServer] = None
    _thread: Optional[threading.Thread] = None

    # -- control

    def __post_init__(self) -> None:
        self.set_token(DEFAULT_TOKEN, DEFAULT_LOGIN, "write", user_visible=False)

    @property
    def token(self) -> str:
        """The default token: writes, authored by github-actions[bot], /user -> 403."""
        return DEFAULT_TOKEN

    @property
    def url(self) -> str:
        """Base URL (use as GITHUB_API_URL)."""
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_port}"

    def set_token(self, token: str, login: str, mode: str = "write", *, user_visible: bool = True) -> None:
        """Register ``token`` for ``login``; mode "write" or "read-only". ``user_visible``:
        whether ``GET /user`` answers (a PAT) or 403s (the Actions token)."""
        if mode not in ("write", "read-only"):
            raise ValueError(mode)
        with self._lock:
            self._tokens[token] = _Token(login, mode, user_visible)

    def add_comment(self, number: int, body: str, login: str) -> int:
        """Seed a comment by ``login`` on issue/PR ``number``; returns its id."""
        with self._lock:
            return self._add(number, body, login)["id"]  # type: ignore[no-any-return]

    def comments(self, number: int) -> list[dict[str, Any]]:
        """A copy of the comments on ``number``, oldest first."""
        with self._lock:
            return [json.loads(json.dumps(c)) for c in self._comments.get(number, [])]

    def fail_next(self, method: str, path_contains: str, status: int, message: str = "Server Error") -> None:
        """Make the next ``method`` request whose path contains ``path_contains`` fail with
        ``status`` and GitHub's error shape ``{"message": message}``."""
        self.respond_next(method, path_contains, status, {"message": message})

    def respond_next(
        self,
        method: str,
        path_contains: str,
        status: int,
        payload: Any = None,
        headers: Optional[dict[str, str]] = None,
    ) -> None:
        """Answer the next matching request with exactly this (e.g. a 301 to elsewhere)."""
        with self._lock:
            self._failures.append((method.upper(), path_contains, status, payload, dict(headers or {})))

    def requests_to(self, method: str, path_contains: str = "") -> list[Recorded]:
        """Recorded requests filtered by method and a path fragment."""
        with self._lock:
            return [r for r in self.requests if r.method == method.upper() and path_contains in r.path]

    # -- lifecycle

    def start(self) -> FakeGitHub:
        """Listen on 127.0.0.1, a free port, in a daemon thread."""
        fake = self

        class Handler(_Handler):
            state = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and wait (bounded) for the thread."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    # -- internals (called with the lock held)

    def _add(self, number: int, body: str, login: str) -> dict[str, Any]:
        self._next_id += 1
        cid = self._next_id
        comment = {
            "id": cid,
            "node_id": f"IC_{cid}",
            "body": body,
            "user": {"login": login, "type": "Bot" if login.endswith("[bot]") else "User"},
            "html_url": f"https://github.com/{self.repository}/pull/{number}#issuecomment-{cid}",
            "issue_url": f"{self.url}/repos/{self.repository}/issues/{number}",
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
        }
        self._comments.setdefault(number, []).append(comment)
        return comment

    def _find(self, cid: int) -> Optional[dict[str, Any]]:
        for comments in self._comments.values():
            for comment in comments:
                if comment["id"] == cid:
                    return comment
        return None

    def _take_failure(self, method: str, path: str) -> Optional[tuple[int, Any, dict[str, str]]]:
        for i, (m, fragment, status, payload, headers) in enumerate(self._failures):
            if m == method and fragment in path:
                del self._failures[i]
                return status, payload, headers
        return None


class _Handler(BaseHTTPRequestHandler):
    state: FakeGitHub
    server_version = "FakeGitHub/1.0"
    timeout = 10  # a stuck client cannot hold a server thread forever

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet

    # -- responses

    def _send(self, status: int, payload: Any, headers: Optional[dict[str, str]] = None) -> None:
        data = b"" if payload is None else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if data:
            self.wfile.write(data)

    def _error(self, status: int, message: str, **extra: Any) -> None:
        self._send(status, {"message": message, "documentation_url": "https://docs.github.com/rest", **extra})

    # -- dispatch

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def _handle(self, method: str) -> None:
        fake = self.state
        parts = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body_text = raw.decode("utf-8", errors="replace")
        with fake._lock:
            fake.requests.append(
                Recorded(method, parts.path, urllib.parse.parse_qs(parts.query), dict(self.headers.items()), body_text)
            )
            failure = fake._take_failure(method, parts.path)
        if failure is not None:
            self._send(*failure)
            return
        if self.headers.get("Accept") != ACCEPT:
            self._error(415, f"Unsupported 'Accept' header: {self.headers.get('Accept')!r}")
            return
        token = self._token()
        if token is False:
            self._error(401, "Bad credentials")
            return
        segments = [urllib.parse.unquote(s) for s in parts.path.strip("/").split("/")]
        if method == "GET" and segments == ["user"]:
            self._user(token)
            return
        repo = "/".join(segments[1:3]) if len(segments) >= 3 and segments[0] == "repos" else None
        if repo != fake.repository:
            self._error(404, "Not Found")
            return
        rest = segments[3:]
        if len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments" and rest[1].isdigit():
            number = int(rest[1])
            if method == "GET":
                self._list(number, parts.query)
            elif method == "POST":
                self._create(number, token, raw)
            else:
                self._error(404, "Not Found")
            return
        if len(rest) == 3 and rest[:2] == ["issues", "comments"] and rest[2].isdigit() and method == "PATCH":
            self._update(int(rest[2]), token, raw)
            return
        self._error(404, "Not Found")

    def _token(self) -> Any:
        """The caller's _Token, None when anonymous, False when the token is unknown."""
        header = self.headers.get("Authorization")
        if not header:
            return None
        scheme, _, value = header.partition(" ")
        if scheme.lower() not in ("bearer", "token"):
            return False
        with self.state._lock:
            return self.state._tokens.get(value.strip(), False)

    def _user(self, token: Optional[_Token]) -> None:
        if token is None:
            self._error(401, "Requires authentication")
        elif not token.user_visible:
            self._error(403, NOT_ACCESSIBLE)
        else:
            self._send(200, {"login": token.login, "id": 1, "type": "User"})

    def _list(self, number: int, query: str) -> None:
        fake = self.state
        params = urllib.parse.parse_qs(query)
        try:
            per_page = int(params.get("per_page", ["30"])[0])
            page = int(params.get("page", ["1"])[0])
        except ValueError:
            self._error(422, "Invalid pagination")
            return
        per_page = max(1, min(per_page, 100, fake.max_per_page))
        page = max(page, 1)
        with fake._lock:
            comments = [json.loads(json.dumps(c)) for c in fake._comments.get(number, [])]
        last = max(1, -(-len(comments) // per_page))
        items = comments[(page - 1) * per_page : page * per_page]
        base = (fake.link_base or fake.url) + f"/repos/{fake.repository}/issues/{number}/comments"

        def link(p: int) -> str:
            return f"<{base}?per_page={per_page}&page={p}>"

        links = []
        if page < last:
            links += [f'{link(page + 1)}; rel="next"', f'{link(last)}; rel="last"']
        if page > 1:
            links += [f'{link(1)}; rel="first"', f'{link(page - 1)}; rel="prev"']
        self._send(200, items, {"Link": ", ".join(links)} if links else None)

    def _body(self, raw: bytes) -> Optional[str]:
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self._error(400, "Problems parsing JSON")
            return None
        body = payload.get("body") if isinstance(payload, dict) else None
        if not isinstance(body, str):
            self._error(422, "Invalid request.", errors=["body is missing"])
            return None
        size = len(body.encode("utf-8")) if self.state.limit_in_bytes else len(body)
        if size > MAX_BODY:
            self._error(
                422,
                "Validation Failed",
                errors=[
                    {
                        "resource": "IssueComment",
                        "code": "custom",
                        "field": "body",
                        "message": "body is too long (maximum is 65536 characters)",
                    }
                ],
            )
            return None
        return body

    def _create(self, number: int, token: Optional[_Token], raw: bytes) -> None:
        if token is None:
            self._error(401, "Requires authentication")
            return
        if token.mode != "write":
            self._error(403, NOT_ACCESSIBLE)
            return
        body = self._body(raw)
        if body is None:
            return
        fake = self.state
        with fake._lock:
            comment = json.loads(json.dumps(fake._add(number, body, token.login)))
        self._send(201, comment, {"Location": f"{fake.url}/repos/{fake.repository}/issues/comments/{comment['id']}"})

    def _update(self, cid: int, token: Optional[_Token], raw: bytes) -> None:
        if token is None:
            self._error(401, "Requires authentication")
            return
        fake = self.state
        with fake._lock:
            comment = fake._find(cid)
            snapshot = json.loads(json.dumps(comment)) if comment else None
        if snapshot is None:
            self._error(404, "Not Found")
            return
        if token.mode != "write" or snapshot["user"]["login"] != token.login:
            self._error(403, NOT_ACCESSIBLE)
            return
        body = self._body(raw)
        if body is None:
            return
        with fake._lock:
            comment = fake._find(cid)
            if comment is None:
                updated = None
            else:
                comment["body"] = body
                comment["updated_at"] = "2024-01-02T00:00:00Z"
                updated = json.loads(json.dumps(comment))
        if updated is None:
            self._error(404, "Not Found")
        else:
            self._send(200, updated)


def make_fake_github(**kwargs: Any) -> FakeGitHub:
    """A started FakeGitHub (call ``.stop()`` when done; the fixture does it for you)."""
    return FakeGitHub(**kwargs).start()


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    """A running fake GitHub API on 127.0.0.1; stopped at teardown."""
    fake = make_fake_github()
    try:
        yield fake
    finally:
        fake.stop()
