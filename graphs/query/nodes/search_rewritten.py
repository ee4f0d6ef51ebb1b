"""node_search_rewritten: the second retrieval, with the rewritten query, within the confirmed products.

Its hits are scored against the question itself, as the first retrieval's were, so the two evidence
sets can be compared.
"""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.retrieval import brief, rank_and_cut, search_chunks
from graphs.query.state import QueryGraphState, QueryUpdate


@graph_node("query", "node_search_rewritten", "改写后检索")
def node_search_rewritten(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    hits = search_chunks(cfg, state["rewrite"]["query"], state.get("products") or [])
    kept, info = rank_and_cut(cfg, state["rewritten_query"], hits, state.get("products") or [])
    return {"reranked_docs": kept, "rerank_info": info,
            "_summary": f"召回 {len(hits)} 个切片，保留前 {len(kept)} 个", "_detail": brief(kept)}
