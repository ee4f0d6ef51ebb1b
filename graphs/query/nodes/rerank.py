"""node_rerank: score the fused local chunks and the web results together, keep those before the cliff."""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.retrieval import merge_sources, rank_and_cut
from graphs.query.state import QueryGraphState, QueryUpdate


@graph_node("query", "node_rerank", "精排")
def node_rerank(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    docs = merge_sources(state.get("rrf_chunks") or [], state.get("web_search_docs") or [])
    kept, info = rank_and_cut(cfg, state["rewritten_query"], docs, state.get("products"))
    detail = [{"title": d.get("title", ""), "product": d.get("product", ""), "source": d["source"],
               "score": round(d["score"], 4)} for d in kept]
    return {"reranked_docs": kept, "rerank_info": info, "_detail": {**info, "kept": detail},
            "_summary": f"{info['scorer']}：{info['total']} 条中保留前 {info['cutoff']} 条"}
