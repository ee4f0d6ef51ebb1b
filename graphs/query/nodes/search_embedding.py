"""node_search_embedding: hybrid search of the rewritten question within the confirmed products."""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.retrieval import brief, search_chunks
from graphs.query.state import QueryGraphState, QueryUpdate


@graph_node("query", "node_search_embedding", "向量检索")
def node_search_embedding(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    hits = search_chunks(cfg, state["rewritten_query"], state["products"])
    return {"embedding_chunks": hits, "_summary": f"召回 {len(hits)} 个切片", "_detail": brief(hits)}
