"""A scripted Anthropic Messages API on 127.0.0.1, for driving the real Claude Code CLI.

Real HTTP, port 0, threaded. ``POST /v1/messages`` (any query) answers as the API streams
(``stream: true``): ``message_start``, per content block ``content_block_start`` /
``content_block_delta`` (``text_delta`` or ``input_json_delta``) / ``content_block_stop``,
``message_delta`` with the ``stop_reason``, ``message_stop``; without ``stream``, the whole
message as JSON. A request that offers no tools (Claude Code's side calls: titles, topic
checks) gets a short text. The agent's requests (they offer tools) are answered by
``script(request)``, which returns the content blocks of the reply: :func:`text` and
:func:`tool_use`. ``count_tokens`` answers a small count; anything else is 404.
Every agent request is kept in ``.requests`` (its JSON body).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Block = dict[str, Any]
Script = Callable[[dict[str, Any]], list[Block]]


def text(words: str) -> Block:
    """A text block of the reply."""
    return {"type": "text", "text": words}


def tool_use(name: str, arguments: dict[str, Any], call_id: str) -> Block:
    """A tool call of the reply (the reply's stop reason becomes ``tool_use``)."""
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def said_to_the_model(request: dict[str, Any]) -> str:
    """Every text the model was sent in ``request``'s messages: user text, tool results and
    hook feedback, as one string."""
    parts: list[str] = []

    def walk(content: Any) -> None:
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for block in content:
                if isinstance(block, dict):
                    walk(block.get("text"))
                    walk(block.get("content"))

    for message in request.get("messages", []):
        if message.get("role") == "user":
            walk(message.get("content"))
    return "\n".join(parts)


def last_user_text(request: dict[str, Any]) -> str:
    """The texts of the last user message of ``request`` (a tool result, hook feedback)."""
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    return said_to_the_model({"messages": users[-1:]})


def _events(blocks: list[Block], model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    usage = {"input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    yield "message_start", {"type": "message_start", "message": {
        "id": "msg_scripted", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": usage}}
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": {"type": "text_delta", "text": block["text"]}}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(block["input"])}}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 5}}
    yield "message_stop", {"type": "message_stop"}


class ScriptedModel:
    """The server; use as a context manager (``url`` for ``ANTHROPIC_BASE_URL``)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, request: dict[str, Any]) -> list[Block]:
        if not request.get("tools"):
            return [text("Scripted session")]
        with self.lock:
            self.requests.append(request)
            return self.script(request)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?", 1)[0]
                if path.endswith("/count_tokens"):
                    self._json(200, {"input_tokens": 10})
                    return
                if not path.endswith("/v1/messages"):
                    self.do_GET()
                    return
                blocks = model.answer(body)
                name = str(body.get("model", "claude-scripted"))
                if not body.get("stream"):
                    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
                    self._json(200, {"id": "msg_scripted", "type": "message", "role": "assistant", "model": name,
                                     "content": blocks, "stop_reason": stop, "stop_sequence": None,
                                     "usage": {"input_tokens": 10, "output_tokens": 5}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                for event, data in _events(blocks, name):
                    self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                self.close_connection = True

        return Handler
