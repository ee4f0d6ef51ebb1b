"""node_plan: a simple question goes to retrieval; a comparison or multi-part one is split."""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.planning import plan_question
from graphs.query.state import QueryGraphState, QueryUpdate


@graph_node("query", "node_plan", "问题分析")
def node_plan(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    plan = plan_question(state["rewritten_query"], state.get("products") or [],
                         cfg.vector_store.product_names(), cfg.chat_model(json_mode=True))
    subs = plan["sub_questions"]
    out = {"plan": {k: plan[k] for k in ("complexity", "reason", "method")}, "sub_questions": subs,
           "_detail": {**plan}}
    if subs:
        out["products"] = plan["products"]
        out["_summary"] = f"复杂问题（{plan['reason']}），拆成 {len(subs)} 个子问题"
    else:
        out["_summary"] = f"简单问题（{plan['reason']}）"
    return out
