"""node_synthesis: the sub-questions' evidence merged for one answer that covers every part.

Every sub-question with relevant evidence contributes, answerable or not: a comparison must cover
each product the user named, and a weakly supported part is said so in a warning. Sub-questions
without relevant evidence are left out; with none left the answer is "not known". Passages are
taken in turns from each sub-question (deduplicated, higher score kept), so the context budget
cannot be filled by one product while another loses all its sources.
"""
from __future__ import annotations

from itertools import zip_longest

from graphs.base import graph_node
from graphs.query.evidence import no_knowledge_text
from graphs.query.state import QueryGraphState


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
def node_synthesis(state: QueryGraphState) -> dict:
    results = sorted(state.get("sub_results") or [], key=lambda r: r["index"])
    used = [r for r in results if r["docs"] and r["grade"]["relevant"]]
    answered = [r for r in used if r["grade"]["route"] == "answer"]
    docs = interleave([r["docs"] for r in used])
    warnings = []
    for r in results:
        if r not in used:
            warnings.append(f"子问题“{r['question']}”在说明书中没有找到相关资料，回答没有覆盖这一部分。")
        elif r not in answered:
            warnings.append(f"子问题“{r['question']}”的资料相关度较低（{r['grade']['confidence']:.2f}），"
                            "这一部分请对照来源核实。")
    scorer = next((r["rerank_info"]["scorer"] for r in results), "")
    grade = {"route": "answer" if used else "no_knowledge", "method": "synthesis",
             "confidence": min((r["grade"]["confidence"] for r in used), default=0.0),
             "answered": len(answered), "used": len(used), "sub_questions": len(results)}
    out = {"reranked_docs": docs, "grade": grade, "warnings": warnings,
           "rerank_info": {"scorer": scorer, "cutoff": len(docs), "total": len(docs),
                           "scores": [round(d["score"], 4) for d in docs]}}
    if not used:
        out["answer"] = no_knowledge_text(state.get("item_names") or [])
    out["_summary"] = (f"{len(used)}/{len(results)} 个子问题有相关资料（{len(answered)} 个足以回答），"
                       f"合并 {len(docs)} 个切片")
    out["_detail"] = [{"index": r["index"], "question": r["question"], "route": r["grade"]["route"],
                       "kept": len(r["docs"])} for r in results]
    return out
