"""node_rrf: weighted reciprocal rank fusion of the two Milvus recall lists."""
from __future__ import annotations

import logging

from graphs.base import graph_node
from graphs.query.retrieval import brief

log = logging.getLogger("query.node_rrf")

RRF_K = 60
TOP_N = 10


def hit_id(hit) -> str | None:
    """The chunk id whatever shape the client returned (Hit object, nested entity, flat dict)."""
    if not isinstance(hit, dict):
        hit = {"id": getattr(hit, "id", None), "entity": getattr(hit, "entity", None) or {}}
    entity = hit.get("entity") or {}
    for source in (hit, entity):
        for key in ("chunk_id", "pk", "id"):
            if source.get(key) not in (None, ""):
                return str(source[key])
    return None


def rrf_fuse(lists: list[tuple[list, float]], k: int = RRF_K, top_n: int = TOP_N) -> list[dict]:
    """score = sum(weight / (k + rank)); duplicates add up; hits without an id are skipped."""
    scores: dict[str, float] = {}
    docs: dict[str, dict] = {}
    for hits, weight in lists:
        for rank, hit in enumerate(hits, 1):
            cid = hit_id(hit)
            if cid is None:
                log.warning("hit without id skipped: %r", hit)
                continue
            scores[cid] = scores.get(cid, 0.0) + weight / (k + rank)
            if cid not in docs:
                flat = dict(hit.get("entity") or {}) if isinstance(hit, dict) else dict(getattr(hit, "entity", {}) or {})
                if isinstance(hit, dict):
                    flat.update({key: v for key, v in hit.items() if key != "entity"})
                docs[cid] = {**flat, "chunk_id": cid}
    ordered = sorted(scores, key=lambda c: -scores[c])[:top_n]
    return [{**docs[c], "rrf_score": round(scores[c], 6)} for c in ordered]


@graph_node("query", "node_rrf", "RRF 融合")
def node_rrf(state: dict) -> dict:
    fused = rrf_fuse([(state.get("embedding_chunks") or [], 1.0), (state.get("hyde_embedding_chunks") or [], 1.0)])
    shown = [{**b, "score": d["rrf_score"]} for b, d in zip(brief(fused), fused)]
    return {"rrf_chunks": fused, "_summary": f"融合后 {len(fused)} 个切片", "_detail": shown}
