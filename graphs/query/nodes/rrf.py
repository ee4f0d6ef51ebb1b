"""node_rrf: weighted reciprocal rank fusion of the question's and the HyDE passage's recall lists."""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.retrieval import brief, rrf_fuse
from graphs.query.state import QueryGraphState, QueryUpdate


@graph_node("query", "node_rrf", "RRF 融合")
def node_rrf(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cal = QueryConfiguration.from_runnable_config(config).calibration()
    question = state.get("embedding_chunks") or []
    hyde = state.get("hyde_embedding_chunks") or []
    fused = rrf_fuse([(question, 1.0), (hyde, cal.hyde_weight)], top_n=len(question) + len(hyde))
    shown = [{**b, "score": d["rrf_score"]} for b, d in zip(brief(fused), fused)]
    return {"rrf_chunks": fused, "_summary": f"融合后 {len(fused)} 个切片", "_detail": shown}
