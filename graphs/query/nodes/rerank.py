"""node_rerank: score local and web results against the question, cut at the first cliff."""
from __future__ import annotations

import logging

from graphs.base import graph_node
from services.reranker import get_reranker

log = logging.getLogger("query.node_rerank")

MIN_TOPK = 3
MAX_TOPK = 10
ABS_GAP = 0.5
REL_GAP = 0.25


def cliff_cutoff(scores: list[float], min_k: int = MIN_TOPK, max_k: int = MAX_TOPK,
                 abs_gap: float = ABS_GAP, rel_gap: float = REL_GAP) -> int:
    """How many to keep: cut after i+1 at the first big drop between positions min_k-1..max_k-2."""
    n = min(len(scores), max_k)
    for i in range(min_k - 1, n - 1):
        gap = scores[i] - scores[i + 1]
        if gap >= abs_gap or (scores[i] != 0 and gap / abs(scores[i]) >= rel_gap):
            return i + 1
    return n


def merge_sources(local: list[dict], web: list[dict]) -> list[dict]:
    docs = [{**d, "source": "local"} for d in local]
    docs += [{"source": "web", "url": w.get("url", ""), "title": w.get("title", ""), "content": w.get("snippet") or w.get("content", "")}
             for w in web if (w.get("snippet") or w.get("content"))]
    return docs


def scored_text(doc: dict) -> dict:
    """A local chunk as scored: its product's name counts as part of it, as in its embedded text,
    so a question naming the product favours no chunk for happening to repeat the name."""
    if doc["source"] != "local":
        return doc
    return {**doc, "content": f"{doc.get('item_name') or ''}\n{doc.get('content') or ''}"}


@graph_node("query", "node_rerank", "精排")
def node_rerank(state: dict) -> dict:
    docs = merge_sources(state.get("rrf_chunks") or [], state.get("web_search_docs") or [])
    scorer = "reranker"
    try:  # loading the model is part of scoring: a bad model folder fails here too
        reranker = get_reranker()
        scorer = reranker.name
        scores = reranker.score(state["rewritten_query"], [scored_text(d) for d in docs])
        ranked = sorted(zip(scores, docs), key=lambda p: -p[0])
    except Exception as exc:  # a broken scorer degrades to the fused order, never to no answer
        log.warning("reranker failed, keeping RRF order: %s", exc)
        scorer = f"{scorer}（失败，保留 RRF 顺序：{exc}）"
        ranked = [(0.0, d) for d in docs]
    keep = cliff_cutoff([s for s, _ in ranked])
    kept = [{**{k: v for k, v in d.items() if k != "dense"}, "score": float(s)} for s, d in ranked[:keep]]
    info = {"scorer": scorer, "cutoff": keep, "total": len(ranked),
            "scores": [round(float(s), 4) for s, _ in ranked]}
    detail = [{"title": d.get("title", ""), "item_name": d.get("item_name", ""), "source": d["source"],
               "score": round(d["score"], 4)} for d in kept]
    return {"reranked_docs": kept, "rerank_info": info, "_detail": {**info, "kept": detail},
            "_summary": f"{scorer}：{len(ranked)} 条中保留前 {keep} 条"}
