"""node_web_search_mcp: web results through an MCP server; never fails the graph."""
from __future__ import annotations

import asyncio

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.state import QueryGraphState, QueryUpdate
from services.web_search import web_search

WEB_COUNT = 5


@graph_node("query", "node_web_search_mcp", "联网搜索")
def node_web_search_mcp(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    settings = QueryConfiguration.from_runnable_config(config).settings
    # An absent backend is the reason even when the switch is off too (it cannot be turned on).
    if not settings.web_search_enabled:
        return {"web_search_docs": [], "_status": "skipped", "_summary": "未配置联网搜索"}
    if not (state.get("options") or {}).get("web_search", True):
        return {"web_search_docs": [], "_status": "skipped", "_summary": "已在设置中关闭联网搜索"}
    # The node runs in a worker thread of the graph, so it owns a fresh event loop here.
    result = asyncio.run(web_search(state["rewritten_query"], WEB_COUNT, settings))
    if result.status != "ok":
        return {"web_search_docs": [], "_status": "skipped", "_summary": result.reason}
    docs = [{**p, "content": p["snippet"], "source": "web"} for p in result.pages]
    return {"web_search_docs": docs, "_summary": f"{len(docs)} 条网页结果",
            "_detail": [{"title": d["title"], "url": d["url"]} for d in docs]}
