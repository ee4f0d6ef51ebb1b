"""A scripted OpenAI-compatible chat server on 127.0.0.1 for tests.

Speaks the real wire protocol (JSON and SSE over HTTP/1.1 chunked encoding) so that the
real `openai` / `langchain_openai` clients can be pointed at it.

    with ScriptedOpenAI() as llm:
        llm.add_rule("改写", "改写后的问题")
        llm.add_rule(lambda text: "JSON" in text, '{"ok": true}')
        chat = ChatOpenAI(base_url=llm.base_url, api_key="x", model="qwen-flash")
"""
from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from fakes._http import QuietHandler, ThreadedServer

Reply = str | Callable[[dict], str]
Match = str | Callable[[str], bool]


@dataclass
class _Rule:
    match: Match | None  # None: the default rule
    reply: Reply
    delay_s: float = 0.0
    drop_after_chars: int | None = None
    status: int | None = None
    times: int | None = None  # None: unlimited

    def matches(self, text: str) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.match is None:
            return True
        return self.match(text) if callable(self.match) else self.match in text


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal parts: keep the text ones
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def message_text(body: dict) -> str:
    """The text rules are matched against: last user message first, then every message."""
    messages = body.get("messages") or []
    users = [m for m in messages if m.get("role") == "user"]
    parts = [_content_text(users[-1].get("content"))] if users else []
    parts += [_content_text(m.get("content")) for m in messages]
    return "\n".join(parts)


class ScriptedOpenAI(ThreadedServer):
    """OpenAI-compatible server whose replies come from a script of rules."""

    def __init__(self, models: tuple[str, ...] = ("qwen-flash", "qwen3-vl-flash"), api_key: str | None = None,
                 chunk_chars: int = 4):
        self.models = models
        self.api_key = api_key  # when set, requests without `Bearer <api_key>` get 401
        self.chunk_chars = chunk_chars  # characters per streamed delta
        self.requests: list[dict] = []
        self._rules: list[_Rule] = []
        self._default = _Rule(None, "好的。")
        self._lock = threading.Lock()
        self.base_url = ""

    # --- scripting -------------------------------------------------------------------------
    def add_rule(self, match: Match, reply: Reply, *, delay_s: float = 0.0, drop_after_chars: int | None = None,
                 status: int | None = None, times: int | None = None) -> None:
        """First matching rule wins. `match`: substring of the message text, or predicate(text).

        delay_s: wait before answering; drop_after_chars: on a stream, close the connection after
        that many content characters; status: answer with this HTTP error; times: use the rule
        only that many times.
        """
        self._rules.append(_Rule(match, reply, delay_s, drop_after_chars, status, times))

    def set_default(self, reply: Reply, **behaviour: Any) -> None:
        self._default = _Rule(None, reply, **behaviour)

    def _pick(self, body: dict) -> _Rule:
        text = message_text(body)
        with self._lock:
            self.requests.append(body)
            rule = next((r for r in self._rules if r.matches(text)), self._default)
            if rule.times is not None:
                rule.times -= 1
        return rule

    def _handler_class(self) -> type[QuietHandler]:
        return _make_handler(self)

    def _on_started(self, port: int) -> str:
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url


def _make_handler(server: ScriptedOpenAI) -> type[QuietHandler]:
    class Handler(QuietHandler):
        def _authorized(self) -> bool:
            if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                self.send_json(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})
                return False
            return True

        def do_GET(self) -> None:
            if not self._authorized():
                return
            if self.path.rstrip("/") != "/v1/models":
                self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            self.send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in server.models]})

        def do_POST(self) -> None:
            body = json.loads(self.read_body() or b"{}")
            if not self._authorized():
                return
            if self.path.rstrip("/") != "/v1/chat/completions":
                self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            rule = server._pick(body)
            time.sleep(rule.delay_s)
            if rule.status:
                self.send_json(rule.status, {"error": {"message": f"scripted status {rule.status}",
                                                   "type": "server_error", "code": str(rule.status)}})
                return
            text = rule.reply(body) if callable(rule.reply) else rule.reply
            model = body.get("model", server.models[0])
            if body.get("stream"):
                self._stream(body, model, text, rule.drop_after_chars)
            else:
                self.send_json(200, _completion(model, text, body))

        def _stream(self, body: dict, model: str, text: str, drop_after: int | None) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"

            def send(payload: dict | str) -> None:
                data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
                frame = f"data: {data}\n\n".encode()
                self.wfile.write(f"{len(frame):X}\r\n".encode() + frame + b"\r\n")
                self.wfile.flush()

            def chunk(delta: dict, finish: str | None = None) -> dict:
                return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

            send(chunk({"role": "assistant", "content": ""}))
            step = max(1, server.chunk_chars)
            for start in range(0, len(text), step):
                if drop_after is not None and start >= drop_after:
                    break
                send(chunk({"content": text[start:start + step]}))
            if drop_after is not None:
                # no terminating zero-length chunk: the client sees a truncated body
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            send(chunk({}, "stop"))
            if (body.get("stream_options") or {}).get("include_usage"):
                send({"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                      "choices": [], "usage": _usage(body, text)})
            send("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _usage(body: dict, text: str) -> dict:
    prompt = sum(len(_content_text(m.get("content"))) for m in body.get("messages") or [])
    return {"prompt_tokens": prompt, "completion_tokens": len(text), "total_tokens": prompt + len(text)}


def _completion(model: str, text: str, body: dict) -> dict:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": _usage(body, text),
    }
