"""node_grade: judge the kept passages and decide: answer, one rewrite, ask back, or say it is not known.

After the one rewrite the better of the two evidence sets leads (both are scored against the same
question; the rewritten one only when it supports a better decision, and then the first set's
passages stay beside it). Still weak offline is answered with a caution (with OFFLINE_REFUSAL, under
the calibrated refusal floor it is "not known"); a model's grade that finds no answer says so.
"""
from __future__ import annotations

from dataclasses import replace

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.query.configuration import QueryConfiguration
from graphs.query.contracts import Grade
from graphs.query.evidence import (
    clarify_text, grade_evidence, keep_found, no_knowledge_text, resolve_route, strength, weak_warning,
)
from graphs.query.state import QueryGraphState, QueryUpdate

MAX_REWRITES = 1
ROUTE_NAMES = {"answer": "可以回答", "rewrite": "证据不足，改写后再检索一次", "clarify": "需要用户补充条件",
               "no_knowledge": "说明书中没有答案"}


@graph_node("query", "node_grade", "证据评估")
def node_grade(state: QueryGraphState, config: RunnableConfig) -> QueryUpdate:
    cfg = QueryConfiguration.from_runnable_config(config)
    docs = state.get("reranked_docs") or []
    products = state.get("products") or []
    done = int(state.get("rewrite_count") or 0)
    grade = grade_evidence(cfg, state["rewritten_query"], products, docs, rewrites_left=MAX_REWRITES - done)
    out: QueryUpdate = {}
    first = state.get("first_evidence")
    if first:
        kept = Grade.of(first["grade"])
        if strength(kept) >= strength(grade):  # the rewrite decided nothing better: keep the first
            route = resolve_route(kept, bool(first["docs"]), sub_question=False, rewrites_left=0)
            grade = replace(kept, route=route, evidence="first",
                            corrected_from=kept.route if route != kept.route else kept.corrected_from)
            out.update(reranked_docs=first["docs"], rerank_info=first["rerank_info"])
        else:
            grade = replace(grade, evidence="rewritten")
            out["reranked_docs"] = keep_found(docs, first["docs"])
    out["grade"] = grade.as_dict()
    caution = weak_warning(grade)
    if caution:
        out["warnings"] = [caution]
    if grade.route == "no_knowledge":
        out["answer"] = no_knowledge_text(products)
    elif grade.route == "clarify":
        out["answer"] = clarify_text(grade)
    used = {"first": "，沿用第一次检索的资料", "rewritten": "，采用改写后检索的资料"}.get(grade.evidence or "", "")
    out["_summary"] = f"{ROUTE_NAMES[grade.route]}（置信度 {grade.confidence:.2f}{used}）"
    out["_detail"] = out["grade"]
    return out
