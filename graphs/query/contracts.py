"""The shapes that cross the query graph's boundaries, defined once.

Hit: one chunk as recall, fusion and rerank pass it on (`services.vector_store.hit_to_dict` makes
every client shape into this, so nothing downstream guesses). Source: one cited source of an answer.
Events: what `astream_query` / `run_query` yield. Answer: the final answer as the app, the HTTP API
and the CLI show it, made from the final event by `answer_of`.
"""
from __future__ import annotations

from typing import Literal, TypedDict


class Hit(TypedDict, total=False):
    chunk_id: str                # always present
    content: str
    title: str                   # heading path
    parent_title: str
    file_title: str
    product: str
    doc_id: str
    page_start: int              # PDF pages the chunk spans (0: not from a PDF)
    page_end: int
    score: float                 # the search's own score (cosine, BM25) or, after rerank, the reranker's
    rank: int                    # 1-based position in its recall list
    rrf_score: float             # after fusion
    source: Literal["local", "web"]
    url: str                     # web results


class Source(TypedDict):
    index: int                   # the [n] the answer cites
    source: Literal["local", "web"]
    chunk_id: str
    doc_id: str                  # the document whose original can be opened
    title: str
    file_title: str
    product: str
    url: str
    page_start: int              # 0: not from a PDF
    page_end: int
    score: float
    content: str


class NodeEvent(TypedDict, total=False):
    type: Literal["node_start", "node_end", "node_error", "node_progress"]
    node: str
    label: str
    status: str                  # node_end: "ok" | "skipped"
    summary: str
    detail: object
    seconds: float
    error: str
    text: str                    # node_progress


class DeltaEvent(TypedDict):
    type: Literal["delta"]
    delta: str


class ErrorEvent(TypedDict):
    type: Literal["error"]
    error: str
    node: str
    session_id: str


class FinalEvent(TypedDict, total=False):
    type: Literal["final"]
    status: Literal["completed"]
    session_id: str
    original_query: str
    rewritten_query: str
    branch: str                  # "confirmed" | "ask" | "refuse"
    products: list[str]
    candidates: list[str]
    decision: dict
    answer: str
    image_urls: list[str]
    sources: list[Source]
    rerank_info: dict
    warnings: list[str]
    node_log: list[dict]
    done_list: list[str]
    seconds: float
    rrf: list[dict]
    plan: dict                   # how the planner read the question
    sub_questions: list[dict]    # the parts of a complex question (empty: simple)
    grade: dict                  # the evidence grade the answer followed
    rewrite: dict                # the one rewrite, when grading asked for it


Event = NodeEvent | DeltaEvent | ErrorEvent | FinalEvent


class Answer(TypedDict):
    session_id: str
    status: Literal["completed"]
    original_query: str
    answer: str
    branch: str | None
    products: list[str]
    candidates: list[str]
    image_urls: list[str]
    sources: list[Source]
    done_list: list[str]
    warnings: list[str]
    seconds: float


def answer_of(final: FinalEvent) -> Answer:
    """The final event as every consumer shows it: lists never None, the answer never None."""
    return Answer(
        session_id=final.get("session_id") or "", status="completed",
        original_query=final.get("original_query") or "", answer=final.get("answer") or "",
        branch=final.get("branch"), products=list(final.get("products") or []),
        candidates=list(final.get("candidates") or []), image_urls=list(final.get("image_urls") or []),
        sources=list(final.get("sources") or []), done_list=list(final.get("done_list") or []),
        warnings=list(final.get("warnings") or []), seconds=float(final.get("seconds") or 0.0),
    )
