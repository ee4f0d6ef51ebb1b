"""The API served for real: uvicorn on 127.0.0.1 in a background thread, spoken to with httpx.

Import the fixtures into a test module (`from api_fixtures import api, api_server`).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from fastapi import FastAPI

from api import create_app
from bench.load import sse_messages
from conftest import auth_header
from fakes._http import UvicornThread
from fakes.openai_server import ScriptedOpenAI

# How the query graph's model calls are told apart (their prompts).
REWRITE, HYDE, ANSWER, GRADE = "只输出 JSON", "不超过300字", "掌柜智库", "证据评估员"
GRADE_ANSWER = ('{"relevant": true, "answerable": true, "ambiguous": false, "confidence": 0.9, "route": "answer", '
                '"reason": "资料给出了答案", "missing": "", "follow_up": ""}')
QUESTION_MARK = "【用户问题】"


class ApiServer:
    """An app (by default create_app()) behind a real uvicorn server on a free loopback port."""

    def __init__(self, app: FastAPI | None = None) -> None:
        self.app = app or create_app()
        self._server = UvicornThread(self.app, "api-server")
        self.base_url = ""

    def start(self) -> str:
        self.base_url = f"http://127.0.0.1:{self._server.start()}"
        return self.base_url

    def stop(self) -> None:
        self._server.stop()

    def __enter__(self) -> "ApiServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="module")
def api_server() -> Iterator[ApiServer]:
    with ApiServer() as server:
        yield server


def api_client(base_url: str, user: str = "tester", timeout: float = 120) -> httpx.Client:
    """A client speaking as one of the suite's API users (conftest.API_USERS)."""
    return httpx.Client(base_url=base_url, headers=auth_header(user), timeout=timeout)


@pytest.fixture()
def api(api_server) -> Iterator[httpx.Client]:
    with api_client(api_server.base_url) as client:
        yield client


def question_of(body: dict) -> str:
    """The question inside the answer prompt the model received."""
    user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
    return user.split(QUESTION_MARK, 1)[1].strip()


@pytest.fixture()
def model(env):
    """model(answer, **rule) -> a ScriptedOpenAI the app now uses: the rewrite keeps the question,
    HyDE writes a fixed passage, the grader says answer, the answer is `answer` (text or callable(body)) with `rule`
    behaviour (delay_s, drop_after_chars, ...)."""
    servers: list[ScriptedOpenAI] = []

    def start(answer="根据说明书，答案如下。[1]", *, chunk_chars: int = 2, **rule) -> ScriptedOpenAI:
        llm = ScriptedOpenAI(chunk_chars=chunk_chars)
        llm.start()
        servers.append(llm)
        llm.add_rule(REWRITE, '{"products": [], "rewritten_query": ""}')
        llm.add_rule(HYDE, "这是一段假设的说明书内容，用于检索。")
        llm.add_rule(GRADE, GRADE_ANSWER)
        llm.add_rule(ANSWER, answer, **rule)
        env(OPENAI_API_KEY="test-key", OPENAI_API_BASE=llm.base_url)
        return llm

    yield start
    for llm in servers:
        llm.stop()


@dataclass
class SseEvent:
    name: str
    data: dict
    at: float  # time.perf_counter() when the event's last line arrived


def iter_sse(client: httpx.Client, session_id: str, timeout: float = 120) -> Iterator[SseEvent]:
    """Read GET /api/stream/{session_id} incrementally, one parsed event at a time."""
    deadline = time.monotonic() + timeout
    with client.stream("GET", f"/api/stream/{session_id}", timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for _, name, data in sse_messages(response):
            if time.monotonic() > deadline:
                raise TimeoutError(f"SSE stream of {session_id} did not finish in {timeout}s")
            yield SseEvent(name, data, time.perf_counter())


def read_sse(client: httpx.Client, session_id: str, timeout: float = 120) -> list[SseEvent]:
    return list(iter_sse(client, session_id, timeout))


def ask_stream(client: httpx.Client, query: str, **fields) -> tuple[str, list[SseEvent]]:
    """POST a streaming question, then read its whole event stream."""
    reply = client.post("/api/query", json={"query": query, "is_stream": True, **fields})
    assert reply.status_code == 200, reply.text
    session_id = reply.json()["session_id"]
    return session_id, read_sse(client, session_id)


def raw_multipart(*items: tuple[str, bytes]) -> tuple[bytes, dict]:
    """A multipart body with the file names exactly as given (httpx would percent-escape a NUL)."""
    boundary = b"zgzk-test-boundary"
    body = b"".join(b"--" + boundary + b'\r\nContent-Disposition: form-data; name="files"; filename="'
                    + name.encode("utf-8") + b'"\r\nContent-Type: text/markdown\r\n\r\n' + data + b"\r\n"
                    for name, data in items)
    return body + b"--" + boundary + b"--\r\n", {"Content-Type": f"multipart/form-data; boundary={boundary.decode()}"}


def wait_task(client: httpx.Client, task_id: str, timeout: float = 180) -> dict:
    """Poll GET /api/status/{task_id} until the import ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get(f"/api/status/{task_id}").json()
        if status["status"] in ("completed", "failed"):
            return status
        time.sleep(0.2)
    raise TimeoutError(f"import task {task_id} did not finish in {timeout}s")


def files_under(folder: Path) -> list[Path]:
    """The files under `folder` now; os.walk skips a folder the server removes while it is read."""
    return sorted(Path(top) / name for top, _, names in os.walk(folder) for name in names)


def task_folders_under(uploads: Path) -> list[Path]:
    """Folders below the day folders of `uploads` (one per upload while it is staged)."""
    return sorted(Path(top) / name for top, names, _ in os.walk(uploads)
                  if Path(top) != uploads for name in names)
