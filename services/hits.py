"""Hit: one chunk as search, fusion and rerank pass it on, defined where it is made.

`services.vector_store.hit_to_dict` makes every client shape into this, the reranker scores a list
of them, and the query graph passes them on (re-exported as `graphs.query.Hit`), so nothing
downstream guesses a key. A web result is a Hit too (`source` "web", its `url` and `snippet`).
"""
from __future__ import annotations

from typing import Literal, TypedDict


class Hit(TypedDict, total=False):
    chunk_id: str                # always present for a chunk (a product row: its pk)
    content: str
    title: str                   # heading path
    parent_title: str
    file_title: str
    product: str
    doc_id: str
    part: int                    # 1-based piece of its section (a long section is cut into parts)
    page_start: int              # PDF pages the chunk spans (0: not from a PDF)
    page_end: int
    score: float                 # the search's own score (cosine, BM25) or, after rerank, the reranker's
    rank: int                    # 1-based position in its recall list
    rrf_score: float             # after fusion
    source: Literal["local", "web"]
    url: str                     # web results
    snippet: str                 # web results: the page's text as the search returned it
