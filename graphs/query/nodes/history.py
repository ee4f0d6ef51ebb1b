"""node_load_history / node_save_history: the conversation, read before the product is decided and
written after the answer, so that deciding and answering never touch the history store."""
from __future__ import annotations

import logging

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.state import QueryGraphState, QueryUpdate
from services.errors import StateFieldError

log = logging.getLogger("query.history")

HISTORY_LIMIT = 10
MAX_QUERY_CHARS = 2000


@graph_node("query", "node_load_history", "读取对话历史")
def node_load_history(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    session_id = (state.get("session_id") or "").strip()
    query = (state.get("original_query") or "").strip()
    if not session_id:
        raise StateFieldError("缺少会话 ID。")
    if not query:
        raise StateFieldError("问题不能为空。")
    warnings = []
    if len(query) > MAX_QUERY_CHARS:
        query = query[:MAX_QUERY_CHARS]
        warnings.append(f"问题过长，只使用了前 {MAX_QUERY_CHARS} 个字。")
    history, message_id, owner, owned = [], "", state.get("owner") or "", True
    try:
        owned = not owner or cfg.history_store.claim(session_id, owner)  # the first use binds it
        if owned:
            history = cfg.history_store.recent(session_id, HISTORY_LIMIT)
            message_id = cfg.history_store.add_message(session_id, "user", state["original_query"])
    except Exception as exc:  # history is a convenience; the answer must still come
        log.warning("history unavailable: %s", exc)
        warnings.append("对话历史暂时不可用，本次回答不会结合上文，也不会被保存。")
    if not owned:
        raise StateFieldError("这个会话属于其他用户：没有读取或写入它的对话历史。")
    summary = f"上文 {len(history)} 条消息" if message_id else "对话历史不可用"
    return {"original_query": query, "history": history, "message_id": message_id, "warnings": warnings,
            "_summary": summary, "_status": "ok" if message_id else "skipped"}


@graph_node("query", "node_save_history", "保存对话")
def node_save_history(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    store = cfg.history_store
    products = state.get("products") or []
    if state.get("message_id"):
        try:  # the question's record learns what it was understood as
            store.update_message(state["message_id"], rewritten_query=state.get("rewritten_query", ""),
                                 products=products)
            store.backfill_products(state["session_id"], products)
        except Exception as exc:
            log.warning("history update failed: %s", exc)
    try:
        store.add_message(state["session_id"], "assistant", state.get("answer") or "",
                          rewritten_query=state.get("rewritten_query", ""), products=products,
                          image_urls=state.get("image_urls") or [])
    except Exception as exc:  # the answer is already with the user; losing the log is not fatal
        log.warning("saving the answer failed: %s", exc)
        return {"warnings": ["回答未能保存到对话历史。"], "_status": "skipped", "_summary": "回答未能保存"}
    return {"_summary": "问题与回答已保存"}
