"""node_search_embedding_hyde: search with a model-written answer-like passage (HyDE)."""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.retrieval import brief, search_chunks
from graphs.query.state import QueryGraphState, QueryUpdate
from services.chat_model import invoke_text
from services.prompts import load_prompt

HYDE_MAX_CHARS = 300


@graph_node("query", "node_search_embedding_hyde", "HyDE 检索")
def node_search_embedding_hyde(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    llm = cfg.chat_model()
    if llm is None:  # the reason even when the switch is off too (it cannot be turned on)
        return {"hyde_embedding_chunks": [], "_status": "skipped", "_summary": "未配置大模型，跳过 HyDE"}
    if not (state.get("options") or {}).get("hyde", True):
        return {"hyde_embedding_chunks": [], "_status": "skipped", "_summary": "已在设置中关闭 HyDE"}
    question = state["rewritten_query"]
    try:
        doc = invoke_text(llm, "", load_prompt("hyde", products="、".join(state["products"]), question=question))
    except Exception as exc:  # one recall branch failing must not fail the answer
        return {"hyde_embedding_chunks": [], "_status": "skipped", "_summary": f"HyDE 生成失败：{exc}"}
    doc = doc[:HYDE_MAX_CHARS]
    hits = search_chunks(cfg, f"{question} {doc}", state["products"])
    return {"hyde_doc": doc, "hyde_embedding_chunks": hits,
            "_summary": f"假设文档 {len(doc)} 字，召回 {len(hits)} 个切片", "_detail": brief(hits)}
