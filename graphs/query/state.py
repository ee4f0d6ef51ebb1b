"""State of the query graph (the seed's QueryGraphState plus candidates and a node log)."""
from __future__ import annotations

from typing import TypedDict

from graphs.base import NodeLog


class QueryGraphState(TypedDict, total=False):
    session_id: str
    message_id: str
    original_query: str
    rewritten_query: str
    pinned_product: str          # chosen by the user (candidate button): skips extraction
    item_names: list[str]
    candidates: list[str]        # clarification options (branch B) or what the KB covers (branch C)
    branch: str                  # "confirmed" | "ask" | "refuse"
    decision: dict               # how the product was decided (scores, method)
    history: list[dict]
    options: dict                # {"web_search": bool, "hyde": bool}
    embedding_chunks: list[dict]
    hyde_embedding_chunks: list[dict]
    hyde_doc: str
    web_search_docs: list[dict]
    rrf_chunks: list[dict]
    reranked_docs: list[dict]
    rerank_info: dict            # scorer, scores, cut-off position
    prompt: str
    answer: str
    image_urls: list[str]
    sources: list[dict]
    is_stream: bool
    warnings: list[str]
    node_log: NodeLog
