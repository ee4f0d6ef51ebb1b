"""node_synthesis: the sub-questions' evidence merged for one answer that covers every part.

Passages are taken in turns from each answered sub-question (deduplicated, higher score kept), so
the context budget cannot be filled by one product while another loses all its sources.
"""
from __future__ import annotations

from itertools import zip_longest

from graphs.base import graph_node
from graphs.query.evidence import no_knowledge_text


def interleave(lists: list[list[dict]]) -> list[dict]:
    merged: dict[str, dict] = {}
    for row in zip_longest(*lists):
        for doc in row:
            if doc is None:
                continue
            key = doc.get("chunk_id") or doc.get("url") or doc.get("content", "")
            seen = merged.get(key)
            merged[key] = doc if seen is None else {**seen, "score": max(seen["score"], doc["score"])}
    return list(merged.values())


@graph_node("query", "node_synthesis", "汇总子问题")
def node_synthesis(state: dict) -> dict:
    results = sorted(state.get("sub_results") or [], key=lambda r: r["index"])
    answered = [r for r in results if r["grade"]["route"] == "answer"]
    docs = interleave([r["docs"] for r in answered])
    warnings = list(state.get("warnings") or [])
    warnings += [f"子问题“{r['question']}”在说明书中没有找到足够的资料，回答没有覆盖这一部分。"
                 for r in results if r not in answered]
    scorer = next((r["rerank_info"]["scorer"] for r in results), "")
    grade = {"route": "answer" if answered else "no_knowledge", "method": "synthesis",
             "confidence": min((r["grade"]["confidence"] for r in answered), default=0.0),
             "answered": len(answered), "sub_questions": len(results)}
    out = {"reranked_docs": docs, "grade": grade, "warnings": warnings,
           "rerank_info": {"scorer": scorer, "cutoff": len(docs), "total": len(docs),
                           "scores": [round(d["score"], 4) for d in docs]}}
    if not answered:
        out["answer"] = no_knowledge_text(state.get("item_names") or [])
    out["_summary"] = f"{len(answered)}/{len(results)} 个子问题找到资料，合并 {len(docs)} 个切片"
    out["_detail"] = [{"index": r["index"], "question": r["question"], "route": r["grade"]["route"],
                       "kept": len(r["docs"])} for r in results]
    return out
