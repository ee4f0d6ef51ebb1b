"""Chunk search shared by the recall nodes and the product confirmation."""
from __future__ import annotations

from services.embeddings import get_embedder
from services.settings import get_settings
from services.vector_store import in_filter, get_vector_store

SEARCH_LIMIT = 10
WEIGHTS = (0.8, 0.2)
OUTPUT = ["chunk_id", "content", "item_name", "title", "parent_title", "file_title", "doc_id", "page_start",
          "page_end", "dense"]


def search_chunks(text: str, item_names: list[str] | None, limit: int = SEARCH_LIMIT,
                  ranker: str = "weighted") -> list[dict]:
    """Hybrid (dense + sparse, weighted 0.8 / 0.2, normalised) search, optionally per product."""
    settings = get_settings()
    store = get_vector_store(settings)
    vec = get_embedder(settings).embed_query(text)
    expr = in_filter("item_name", item_names) if item_names else ""
    hits = store.hybrid_search(store.chunks, vec, text, expr=expr, limit=limit, weights=WEIGHTS, fields=OUTPUT,
                               ranker=ranker)
    for rank, hit in enumerate(hits, 1):
        hit["rank"] = rank
    return hits


def brief(hits: list[dict], n: int = 10) -> list[dict]:
    """What the UI shows of a hit list."""
    return [{"chunk_id": h.get("chunk_id"), "title": h.get("title", ""), "item_name": h.get("item_name", ""),
             "score": round(float(h.get("score", 0.0)), 4)} for h in hits[:n]]
