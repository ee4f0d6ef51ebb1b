"""node_rewrite_query: the one rewrite of a weakly answered question (step-back / HyDE / feedback terms)."""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.rewriting import plan_rewrite
from graphs.query.state import QueryGraphState, QueryUpdate

METHOD_NAMES = {"step_back": "退一步提问", "hyde": "假设文档（只用于检索）", "prf": "伪相关反馈（补充高权重词和标题词）"}


@graph_node("query", "node_rewrite_query", "改写问题")
def node_rewrite_query(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    docs = state.get("reranked_docs") or []
    plan = plan_rewrite(state["rewritten_query"], state.get("products") or [], docs, cfg.chat_model(json_mode=True))
    first = {"docs": docs, "grade": state.get("grade") or {}, "rerank_info": state.get("rerank_info") or {}}
    return {"rewrite": plan, "rewrite_count": int(state.get("rewrite_count") or 0) + 1, "first_evidence": first,
            "_summary": f"{METHOD_NAMES[plan['method']]}：{plan['query']}", "_detail": plan}
