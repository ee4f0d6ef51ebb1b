"""node_synthesis: the sub-questions' evidence merged for one answer that covers every part.

Every branch with relevant evidence contributes, answerable or not: a comparison must cover each
product the user named, and a weakly supported part is said so in a warning. Branches without
relevant evidence are left out; with none left the answer is "not known". A question split into
parts of itself keeps its own retrieval first (`merge_evidence`); the sub-questions' passages are
taken in turns, so the context budget cannot be filled by one product while another loses all its
sources.
"""
from __future__ import annotations

from graphs.base import graph_node
from graphs.query.evidence import merge_evidence, no_knowledge_text
from graphs.query.state import QueryGraphState, QueryUpdate


@graph_node("query", "node_synthesis", "汇总子问题")
def node_synthesis(state: QueryGraphState) -> QueryUpdate:
    results = sorted(state.get("sub_results") or [], key=lambda r: r["index"])
    used = [r for r in results if r["docs"] and r["grade"]["relevant"]]
    parts = [r for r in results if not r.get("whole")]
    answered = [r for r in parts if r in used and r["grade"]["route"] == "answer"]
    docs = merge_evidence(used)
    warnings = []
    for r in parts:
        if r not in used:
            warnings.append(f"子问题“{r['question']}”在说明书中没有找到相关资料，回答没有覆盖这一部分。")
        elif r not in answered:
            warnings.append(f"子问题“{r['question']}”的资料相关度较低（{r['grade']['confidence']:.2f}），"
                            "这一部分请对照来源核实。")
    scorer = next((r["rerank_info"]["scorer"] for r in results), "")
    grade = {"route": "answer" if used else "no_knowledge", "method": "synthesis",
             "confidence": min((r["grade"]["confidence"] for r in used), default=0.0),
             "answered": len(answered), "used": sum(r in used for r in parts), "sub_questions": len(parts)}
    out = {"reranked_docs": docs, "grade": grade, "warnings": warnings,
           "rerank_info": {"scorer": scorer, "cutoff": len(docs), "total": len(docs),
                           "scores": [round(d["score"], 4) for d in docs]}}
    if not used:
        out["answer"] = no_knowledge_text(state.get("products") or [])
    whole = "连同原问题的检索结果，" if any(r.get("whole") for r in used) else ""
    out["_summary"] = (f"{grade['used']}/{len(parts)} 个子问题有相关资料（{len(answered)} 个足以回答），"
                       f"{whole}合并 {len(docs)} 个切片")
    out["_detail"] = [{"index": r["index"], "question": r["question"], "route": r["grade"]["route"],
                       "kept": len(r["docs"])} for r in results]
    return out
