"""node_rerank: score local and web results against the question, cut at the first cliff."""
from __future__ import annotations

import logging

from graphs.base import graph_node
from graphs.query.calibration import calibration
from graphs.query.contracts import Hit
from graphs.query.retrieval import rerank_order

log = logging.getLogger("query.node_rerank")


def cliff_cutoff(scores: list[float], min_k: int = 3, max_k: int = 10, abs_gap: float = 0.5,
                 rel_gap: float = 0.25) -> int:
    """How many to keep: cut after i+1 at the first big drop between positions min_k-1..max_k-2."""
    n = min(len(scores), max_k)
    for i in range(min_k - 1, n - 1):
        gap = scores[i] - scores[i + 1]
        if gap >= abs_gap or (scores[i] != 0 and gap / abs(scores[i]) >= rel_gap):
            return i + 1
    return n


def merge_sources(local: list[Hit], web: list[dict]) -> list[Hit]:
    docs: list[Hit] = [{**d, "source": "local"} for d in local]
    docs += [{"source": "web", "url": w.get("url", ""), "title": w.get("title", ""), "content": w.get("snippet") or w.get("content", "")}
             for w in web if (w.get("snippet") or w.get("content"))]
    return docs


@graph_node("query", "node_rerank", "精排")
def node_rerank(state: dict) -> dict:
    cal = calibration()
    docs = merge_sources(state.get("rrf_chunks") or [], state.get("web_search_docs") or [])
    try:  # loading the model is part of scoring: a bad model folder fails here too
        ranked, scorer = rerank_order(state["rewritten_query"], docs, state.get("item_names"), cal)
        # How many are relevant comes from the scores; which ones, from the fused order.
        keep = cliff_cutoff(sorted((s for s, _ in ranked), reverse=True), *cal.cliff)
    except Exception as exc:  # a broken scorer degrades to the fused order, never to no answer
        log.warning("reranker failed, keeping RRF order: %s", exc)
        scorer = f"reranker（失败，保留 RRF 顺序：{exc}）"
        ranked = [(0.0, d) for d in docs]
        keep = min(len(docs), cal.cliff[1])
    kept = [{**d, "score": float(s)} for s, d in ranked[:keep]]
    info = {"scorer": scorer, "cutoff": keep, "total": len(ranked),
            "scores": [round(float(s), 4) for s, _ in ranked]}
    detail = [{"title": d.get("title", ""), "item_name": d.get("item_name", ""), "source": d["source"],
               "score": round(d["score"], 4)} for d in kept]
    return {"reranked_docs": kept, "rerank_info": info, "_detail": {**info, "kept": detail},
            "_summary": f"{scorer}：{len(ranked)} 条中保留前 {keep} 条"}
