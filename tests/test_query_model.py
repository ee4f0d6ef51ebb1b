"""The query graph with a model (scripted OpenAI-compatible server) and web search (FastMCP server).

The real langchain-openai client and the real openai-agents MCP client talk to servers on
127.0.0.1; Milvus Lite holds the sample corpus.
"""
from __future__ import annotations

import asyncio
import json
import re
import socket
import uuid
from datetime import datetime

import pytest

from graphs.query.graph import build_query_graph
from graphs.query.runner import astream_query, initial_state, run_query
from query_fixtures import (  # noqa: F401  (fixtures)
    ANSWER_TEXT, HYDE_PASSAGE, asked, deltas, model, node_entry, products, user_text, web,
)
from services.history_store import get_history_store

DUOS_Q = "Duo S 的以太网口支持 PoE 吗？"
DUOS_REWRITTEN = "Milk-V Duo S 的以太网口是否支持 PoE 供电？"


def ask(question: str, **kwargs) -> dict:
    result = run_query(question, **kwargs)
    assert result["type"] == "final", result
    return result


def rewrite_duos(model, product_of) -> None:
    model.on_rewrite(DUOS_Q, {"products": [product_of["duos"]], "rewritten_query": DUOS_REWRITTEN})


def test_all_three_calls_and_their_request_shape(model, product_of):
    rewrite_duos(model, product_of)
    result = ask(DUOS_Q, options={"web_search": False})
    assert (result["branch"], result["products"]) == ("confirmed", [product_of["duos"]])
    assert result["rewritten_query"] == DUOS_REWRITTEN and result["decision"]["method"] == "llm+lexical"
    (rewrite,), (hyde,), (answer,) = model.requests("rewrite"), model.requests("hyde"), model.requests("answer")
    assert all(body["enable_thinking"] is False for body in model.server.requests)
    assert rewrite["response_format"] == {"type": "json_object"} and not rewrite.get("stream")
    assert "response_format" not in hyde and "response_format" not in answer
    assert asked(rewrite) == DUOS_Q
    assert DUOS_REWRITTEN in user_text(hyde) and product_of["duos"] in user_text(hyde)
    assert answer["stream"] is True
    prompt = user_text(answer)
    assert f"【用户问题】{DUOS_REWRITTEN}" in prompt and "[1][source=local][chunk_id=" in prompt
    assert node_entry(result, "node_search_embedding_hyde")["status"] == "ok"
    assert node_entry(result, "node_search_embedding_hyde")["summary"].startswith(f"假设文档 {len(HYDE_PASSAGE)} 字")
    # the answer is streamed in pieces and the pieces are the answer
    pieces = [e["delta"] for e in result["events"] if e["type"] == "delta"]
    assert len(pieces) > 3 and "".join(pieces) == result["answer"] == ANSWER_TEXT


def test_hyde_node_returns_its_passage_and_hits_only(model, product_of):
    rewrite_duos(model, product_of)
    updates = {}
    for chunk in build_query_graph().stream(initial_state(DUOS_Q, options={"web_search": False}),
                                            stream_mode="updates"):
        updates.update(chunk)
    assert set(updates["node_search_embedding_hyde"]) == {"hyde_doc", "hyde_embedding_chunks", "node_log"}
    assert updates["node_search_embedding_hyde"]["hyde_doc"] == HYDE_PASSAGE
    assert updates["node_search_embedding_hyde"]["hyde_embedding_chunks"]
    assert set(updates["node_search_embedding"]) == {"embedding_chunks", "node_log"}
    assert set(updates["node_web_search_mcp"]) == {"web_search_docs", "node_log"}


def test_history_dates_are_readable_in_the_rewrite_prompt(model, product_of):
    session = uuid.uuid4().hex
    rewrite_duos(model, product_of)
    ask(DUOS_Q, session_id=session, options={"web_search": False, "hyde": False})
    model.on_rewrite("它的内存有多大？", {"products": [product_of["duos"]], "rewritten_query": "Milk-V Duo S 的内存有多大？"})
    follow = ask("它的内存有多大？", session_id=session, options={"web_search": False, "hyde": False})
    assert (follow["branch"], follow["products"]) == ("confirmed", [product_of["duos"]])
    assert follow["rewritten_query"] == "Milk-V Duo S 的内存有多大？"
    prompt = user_text(model.requests("rewrite")[-1])
    first = get_history_store().recent(session)[0]
    when = datetime.fromtimestamp(first["ts"]).strftime("%Y-%m-%d %H:%M")
    assert f"[{when}] 用户：{DUOS_Q}（关联商品：{product_of['duos']}）" in prompt
    assert f"助手：{ANSWER_TEXT}" in prompt
    assert not re.search(r"\d{9,}\.\d+", prompt) and str(first["ts"]) not in prompt


@pytest.mark.parametrize("reply, names, rewritten, method", [
    ('```json\n{"products": ["Milk-V Duo S"], "rewritten_query": "Milk-V Duo S 的以太网口是否支持 PoE 供电？"}\n```',
     ["Milk-V Duo S"], DUOS_REWRITTEN, "llm+lexical"),
    ('{"products": "Milk-V Duo S"}', ["Milk-V Duo S"], DUOS_Q, "llm+lexical"),  # a bare name; no rewrite
    ('{"rewritten_query": "Milk-V Duo S 的以太网口是否支持 PoE 供电？"}', ["Milk-V Duo S"], DUOS_REWRITTEN, "llm+lexical"),
    ("{}", ["Milk-V Duo S"], DUOS_Q, "llm+lexical"),
    ("抱歉，我无法回答。", ["Milk-V Duo S"], DUOS_Q, "lexical"),  # garbage: the offline decision stands in
])
def test_rewrite_reply_validation(model, product_of, reply, names, rewritten, method):
    assert names == [product_of["duos"]]
    model.on_rewrite(DUOS_Q, reply)
    result = ask(DUOS_Q, options={"web_search": False, "hyde": False})
    assert (result["branch"], result["products"], result["rewritten_query"]) == ("confirmed", names, rewritten)
    assert result["decision"]["method"] == method
    assert result["answer"] == ANSWER_TEXT


def test_rewrite_call_failing_falls_back_to_the_offline_decision(model, product_of):
    model.on_rewrite(DUOS_Q, "", status=500)
    result = ask(DUOS_Q, options={"web_search": False, "hyde": False})
    assert (result["products"], result["decision"]["method"]) == ([product_of["duos"]], "lexical")
    assert result["answer"] == ANSWER_TEXT


def test_model_naming_an_unknown_product_is_refused(model, products):
    question = "树莓派 5 的 GPIO 引脚图在哪里看？"  # offline this one is mistaken for a Duo question
    model.on_rewrite(question, {"products": ["树莓派 5"], "rewritten_query": question})
    result = ask(question, options={"web_search": False, "hyde": False})
    assert result["branch"] == "refuse" and result["candidates"] == products
    assert model.requests("answer") == [] and model.requests("hyde") == []


def test_model_naming_a_family_asks(model, product_of):
    question = "SKR mini E3 怎么刷固件？"
    model.on_rewrite(question, {"products": ["SKR MINI E3"], "rewritten_query": "SKR MINI E3 主板怎么刷固件？"})
    result = ask(question, options={"web_search": False, "hyde": False})
    assert result["branch"] == "ask"
    assert set(result["candidates"]) == {product_of["BTT SKR MINI E3 V2.0使用手册"],
                                         product_of["BTT SKR MINI E3 V3.0使用手册"]}
    assert model.requests("answer") == []


def test_pinned_product_makes_no_rewrite_request(model, product_of):
    result = ask("板载 LED 对应哪个 GPIO？", product=product_of["duo"], options={"web_search": False})
    assert (result["products"], result["decision"]["method"]) == ([product_of["duo"]], "pinned")
    assert model.requests("rewrite") == []
    assert len(model.requests("hyde")) == len(model.requests("answer")) == 1


def test_user_message_is_saved_before_the_model_is_asked_then_updated(model, product_of):
    session = uuid.uuid4().hex
    seen: list[list[dict]] = []

    def rewrite(body: dict) -> str:
        seen.append(get_history_store().recent(session))
        return json.dumps({"products": [product_of["duos"]], "rewritten_query": DUOS_REWRITTEN}, ensure_ascii=False)

    model.server.add_rule(lambda t: "只输出 JSON" in t, rewrite)
    ask(DUOS_Q, session_id=session, options={"web_search": False, "hyde": False})
    (before,) = seen
    assert [(m["role"], m["text"], m["products"], m["rewritten_query"]) for m in before] == [
        ("user", DUOS_Q, [], "")]
    after = get_history_store().recent(session)
    assert after[0]["id"] == before[0]["id"]
    assert (after[0]["rewritten_query"], after[0]["products"]) == (DUOS_REWRITTEN, [product_of["duos"]])
    assert (after[1]["role"], after[1]["text"]) == ("assistant", ANSWER_TEXT)


def test_invented_images_are_never_shown_chunk_images_are(model, product_of):
    rewrite_duos(model, product_of)

    def answer(body: dict) -> str:
        real = re.findall(r"!\[[^\]]*\]\((/kb-files/[^)\s]+)\)", user_text(body))
        assert real, "the sources given to the model carry pictures"
        return ("Duo S 支持 PoE [1]，需要另购 PoE 模块。\n见 ![示意](https://invented.example/poe.png)，"
                "或 https://invented.example/board.jpg 。\n\n【图片】\nhttps://invented.example/block.png\n" + real[0])

    model.on_answer(DUOS_REWRITTEN, answer)
    result = ask(DUOS_Q, options={"web_search": False, "hyde": False})
    shown = deltas(result["events"])
    assert shown == result["answer"]
    assert result["answer"] == "Duo S 支持 PoE [1]，需要另购 PoE 模块。\n见 ，或  。"
    assert "invented" not in shown and "【" not in shown and "/kb-files/" not in shown
    prompt = user_text(model.requests("answer")[0])
    assert result["image_urls"] and all(u in prompt and "invented" not in u for u in result["image_urls"])
    cited = "".join(s["content"] for s in result["sources"])
    assert all(u in cited for u in result["image_urls"])
    saved = get_history_store().recent(result["session_id"])[-1]
    assert (saved["text"], saved["image_urls"]) == (result["answer"], result["image_urls"])


def test_long_history_is_cut_before_any_source(model, product_of):
    session = uuid.uuid4().hex
    store = get_history_store()
    for i in range(4):
        store.add_message(session, "user" if i % 2 == 0 else "assistant", f"«旧{i}»" + "话" * 4000 + f"«/旧{i}»",
                          products=[product_of["duos"]])
    rewrite_duos(model, product_of)
    result = ask(DUOS_Q, session_id=session, options={"web_search": False, "hyde": False})
    prompt = user_text(model.requests("answer")[0])
    context = prompt.split("【参考内容】")[1].split("【历史对话】")[0]
    history = prompt.split("【历史对话】")[1].split("【相关商品】")[0]
    assert result["sources"] and all(s["content"] in context for s in result["sources"])
    kept = [i for i in range(4) if f"«旧{i}»" in history]
    assert all(f"«/旧{i}»" in history for i in kept)  # whole turns only
    assert kept == list(range(4 - len(kept), 4)) and len(kept) < 4  # the oldest go first
    assert len(context.strip()) + len(history.strip()) <= 12000


def test_hyde_failing_is_skipped_and_the_answer_comes(model, product_of):
    rewrite_duos(model, product_of)
    model.server.add_rule("不超过300字", "", status=500)
    result = ask(DUOS_Q, options={"web_search": False})
    hyde = node_entry(result, "node_search_embedding_hyde")
    assert hyde["status"] == "skipped" and hyde["summary"].startswith("HyDE 生成失败")
    assert result["answer"] == ANSWER_TEXT and result["sources"]


def test_web_results_are_merged_into_rerank(model, web, product_of):
    rewrite_duos(model, product_of)
    web.set_pages({"PoE": [
        {"title": "Duo S PoE 模块", "url": "https://web.example/duos-poe.png",
         "snippet": "Milk-V Duo S 以太网口支持 PoE 供电，需要加装 PoE 模块。"},
        {"title": "空摘要", "url": "https://web.example/empty", "snippet": ""},
    ]})
    result = ask(DUOS_Q)
    assert web.calls == [{"query": DUOS_REWRITTEN, "count": 5}]
    assert node_entry(result, "node_web_search_mcp")["summary"] == "1 条网页结果"
    web_sources = [s for s in result["sources"] if s["source"] == "web"]
    assert [(s["title"], s["url"], s["chunk_id"]) for s in web_sources] == [
        ("Duo S PoE 模块", "https://web.example/duos-poe.png", "")]
    assert result["rerank_info"]["total"] == len(result["rrf"]) + 1
    prompt = user_text(model.requests("answer")[0])
    assert "[source=web][chunk_id=][url=https://web.example/duos-poe.png][title=Duo S PoE 模块]" in prompt
    assert "https://web.example/duos-poe.png" not in result["image_urls"]  # pictures come from manuals only


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_web_search_down_is_skipped_with_the_reason(model, env, closed_port, product_of):
    env(MCP_DASHSCOPE_BASE_URL=f"http://127.0.0.1:{closed_port}/mcp", MCP_API_KEY="k")
    rewrite_duos(model, product_of)
    result = ask(DUOS_Q)
    node = node_entry(result, "node_web_search_mcp")
    assert node["status"] == "skipped" and node["summary"].startswith("联网搜索服务不可用")
    assert result["answer"] == ANSWER_TEXT and all(s["source"] == "local" for s in result["sources"])


def test_web_search_tool_error_is_skipped_with_the_reason(model, web, product_of):
    rewrite_duos(model, product_of)
    web.set_error("配额不足")
    result = ask(DUOS_Q)
    node = node_entry(result, "node_web_search_mcp")
    assert node["status"] == "skipped" and "配额不足" in node["summary"]
    assert result["answer"] == ANSWER_TEXT


def test_web_search_not_configured_or_switched_off(model, web, product_of):
    rewrite_duos(model, product_of)
    off = ask(DUOS_Q, options={"web_search": False})
    assert node_entry(off, "node_web_search_mcp")["summary"] == "已在设置中关闭联网搜索" and web.calls == []
    off = ask(DUOS_Q, options={"hyde": False})
    assert node_entry(off, "node_search_embedding_hyde")["summary"] == "已在设置中关闭 HyDE"


def test_web_search_not_configured(model, product_of):
    rewrite_duos(model, product_of)
    result = ask(DUOS_Q)
    node = node_entry(result, "node_web_search_mcp")
    assert (node["status"], node["summary"]) == ("skipped", "未配置联网搜索")


async def collect(question: str, session_id: str) -> list[dict]:
    return [event async for event in astream_query(question, session_id=session_id,
                                                   options={"web_search": False, "hyde": False})]


async def test_one_session_failing_does_not_leak_into_another(model, product_of):
    bad_q = "SKR MINI E3 V3.0 的 MCU 是什么型号？"
    model.on_answer(bad_q, "", status=500)
    model.on_answer(DUOS_Q, "Duo S 的以太网口支持 PoE [1]。" * 5, delay_s=0.3)
    good_id, bad_id = uuid.uuid4().hex, uuid.uuid4().hex
    good, bad = await asyncio.gather(collect(DUOS_Q, good_id), collect(bad_q, bad_id))
    assert good[-1]["type"] == "final" and good[-1]["session_id"] == good_id
    assert good[-1]["products"] == [product_of["duos"]]
    assert deltas(good) == good[-1]["answer"] == "Duo S 的以太网口支持 PoE [1]。" * 5
    assert not any(e["type"] == "error" for e in good)
    assert bad[-1] == {"type": "error", "error": bad[-1]["error"], "node": "node_answer_output",
                       "session_id": bad_id}
    assert bad[-1]["error"].startswith("回答生成中断") and "500" in bad[-1]["error"]
    assert not any(e["type"] == "final" for e in bad) and deltas(bad) == ""
    history = get_history_store()
    assert [m["role"] for m in history.recent(bad_id)] == ["user"]
    assert [m["role"] for m in history.recent(good_id)] == ["user", "assistant"]


def test_answer_stream_cut_off_is_an_error_after_the_shown_part(model, product_of):
    rewrite_duos(model, product_of)
    model.on_answer(DUOS_REWRITTEN, "Duo S 支持 PoE 供电，" * 10, drop_after_chars=12)
    result = run_query(DUOS_Q, options={"web_search": False, "hyde": False})
    assert (result["type"], result["node"]) == ("error", "node_answer_output")
    assert result["error"].startswith("回答生成中断")
    shown = deltas(result["events"])
    assert shown and ("Duo S 支持 PoE 供电，" * 10).startswith(shown) and len(shown) <= 12
