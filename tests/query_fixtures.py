"""Shared parts of the query-graph tests: the scripted model, the fake web search, QA questions.

Import the fixtures into a test module with `from query_fixtures import model, web  # noqa: F401`.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fakes.mcp_server import FakeWebSearchMCP
from fakes.openai_server import ScriptedOpenAI

ROOT = Path(__file__).resolve().parent.parent
QA_FILE = ROOT / "bench" / "data" / "qa_corpus.jsonl"
QUESTION_LINE = re.compile(r"当前用户问题：(.*)")
HYDE_PASSAGE = "该产品的说明书说明了接口、供电与固件烧录步骤，按照说明书操作即可。"
GRADE_ANSWER = {"relevant": True, "answerable": True, "ambiguous": False, "confidence": 0.9, "route": "answer",
                "reason": "资料给出了答案", "missing": "", "follow_up": ""}
STEP_BACK = "产品接口与参数说明"
ANSWER_TEXT = "根据说明书，答案如下 [1]。"
MCP_KEY = "mcp-key"


def qa_questions() -> list[dict]:
    return [json.loads(line) for line in QA_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]


def qa(qid: str) -> dict:
    return next(q for q in qa_questions() if q["id"] == qid)


def system_text(body: dict) -> str:
    return "\n".join(str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "system")


def user_text(body: dict) -> str:
    return "\n".join(str(m.get("content")) for m in body.get("messages") or [] if m.get("role") == "user")


def kind_of(body: dict) -> str:
    """Which of the query graph's model calls a request is."""
    if "只输出 JSON" in system_text(body):
        return "rewrite"
    for marker, kind in (("证据评估员", "grade"), ("查询改写助手", "rewrite_plan"), ("问题规划助手", "plan")):
        if marker in system_text(body):
            return kind
    if "掌柜智库" in system_text(body):
        return "answer"
    if "不超过300字" in user_text(body):
        return "hyde"
    return "other"


def asked(body: dict) -> str:
    """The current question inside a rewrite prompt."""
    m = QUESTION_LINE.search(user_text(body))
    return m.group(1).strip() if m else ""


class Model:
    """The scripted OpenAI-compatible server, with helpers for the three calls of the query graph."""

    def __init__(self, server: ScriptedOpenAI):
        self.server = server
        server.set_default(self._default)

    @staticmethod
    def _default(body: dict) -> str:
        """Rules added by a test win; otherwise the rewrite names nothing and keeps the question,
        the grader says answer, a second try steps back, the planner says simple, HyDE and the
        answer reply fixed texts."""
        kind = kind_of(body)
        if kind == "rewrite":
            return json.dumps({"products": [], "rewritten_query": asked(body)}, ensure_ascii=False)
        if kind in ("grade", "rewrite_plan", "plan"):
            reply = {"grade": GRADE_ANSWER, "plan": {"complexity": "simple", "reason": "单一问题", "sub_questions": []},
                     "rewrite_plan": {"method": "step_back", "step_back_question": STEP_BACK, "hyde_passage": ""}}[kind]
            return json.dumps(reply, ensure_ascii=False)
        return HYDE_PASSAGE if kind == "hyde" else ANSWER_TEXT

    def on_rewrite(self, question: str, reply: str | dict, **behaviour) -> None:
        text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        self.server.add_rule(lambda t: "只输出 JSON" in t and f"当前用户问题：{question}" in t, text, **behaviour)

    def on_answer(self, question: str, reply, **behaviour) -> None:
        """Answer (streamed) for a question whose prompt contains `question`."""
        self.server.add_rule(lambda t: "掌柜智库" in t and f"【用户问题】{question}" in t, reply, **behaviour)

    def on_grade(self, question: str, reply: str | dict, **behaviour) -> None:
        """The grader's reply for a question (as graded: the rewritten question)."""
        text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        self.server.add_rule(lambda t: "证据评估员" in t and f"【问题】{question}\n" in t, text, **behaviour)

    def on_kind(self, marker: str, reply: str | dict, **behaviour) -> None:
        """Reply to every call whose system prompt carries `marker` (e.g. 查询改写助手, 问题规划助手)."""
        text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        self.server.add_rule(lambda t: marker in t, text, **behaviour)

    def requests(self, kind: str) -> list[dict]:
        return [b for b in self.server.requests if kind_of(b) == kind]


@pytest.fixture(scope="session")
def products(product_of) -> list[str]:
    """Every product of the sample corpus, sorted as the knowledge base lists them."""
    return sorted(set(product_of.values()))


@pytest.fixture
def model(env):
    """A scripted model on 127.0.0.1 that the real langchain-openai client talks to."""
    with ScriptedOpenAI(chunk_chars=3) as server:
        env(OPENAI_API_KEY="sk-test", OPENAI_API_BASE=server.base_url)
        yield Model(server)


@pytest.fixture
def web(env):
    """A real FastMCP server exposing `bailian_web_search`, configured for the query graph."""
    with FakeWebSearchMCP(api_key=MCP_KEY) as server:
        env(MCP_DASHSCOPE_BASE_URL=server.url, MCP_API_KEY=MCP_KEY)
        yield server


def deltas(events: list[dict]) -> str:
    return "".join(e["delta"] for e in events if e["type"] == "delta")


def node_entry(result: dict, node: str) -> dict:
    return next(e for e in result["node_log"] if e["node"] == node)
