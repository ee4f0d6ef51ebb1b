"""node_sub_question: one sub-question (one per `Send`), retrieved within its own product and graded;
the whole question of a split that keeps its products runs here too (`whole`).

A sub-question never rewrites. Its own start and end travel as `sub_question` events, so the chat
shows it as a step nested under the fan-out's step.
"""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import emit, graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.contracts import SubResult
from graphs.query.evidence import grade_evidence
from graphs.query.retrieval import brief, rank_and_cut, search_chunks
from graphs.query.state import QueryGraphState, QueryUpdate


@graph_node("query", "node_sub_question", "子问题检索")
def node_sub_question(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    sub = state["sub_question"]
    event = {"type": "sub_question", "index": sub["index"], "question": sub["question"],
             "products": sub["products"], "whole": bool(sub.get("whole"))}
    emit({**event, "phase": "start"})
    hits = search_chunks(cfg, sub["question"], sub["products"])
    kept, info = rank_and_cut(cfg, sub["question"], hits, sub["products"])
    judged = grade_evidence(cfg, sub["question"], sub["products"], kept, sub_question=True)
    grade = judged.as_dict()
    found = judged.route == "answer"
    summary = (f"{'找到资料' if found else '资料不足'}：保留 {len(kept)} 个切片，置信度 {judged.confidence:.2f}")
    emit({**event, "phase": "end", "summary": summary, "grade": grade, "hits": brief(kept)})
    result: SubResult = {**sub, "docs": kept, "grade": grade, "rerank_info": info}
    label = "原问题" if sub.get("whole") else f"子问题 {sub['index']}"
    return {"sub_results": [result], "_summary": f"{label}：{summary}",
            "_detail": {"question": sub["question"], "grade": grade, "hits": brief(kept)}}
