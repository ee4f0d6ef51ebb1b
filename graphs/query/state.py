"""State of the query graph: what the question became, what was found, what was answered.

Lists that several nodes or parallel branches add to have reducers (`warnings`, `node_log`,
`sub_results`); every other key is written by one node at a time and replaced.
"""
from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from graphs.base import NodeLog, Warnings


class QueryGraphState(TypedDict, total=False):
    session_id: str
    owner: str                   # who asks: the session must be theirs (empty: a local caller, the CLI)
    message_id: str
    original_query: str
    rewritten_query: str
    pinned_product: str          # chosen by the user (candidate button): skips extraction
    products: list[str]
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
    plan: dict                   # complexity, reason, method of the question's planning
    sub_questions: list[dict]    # [{question, products}] of a complex question (empty: simple)
    sub_question: dict           # the one sub-question a fanned-out branch works on
    sub_results: Annotated[list[dict], operator.add]  # per sub-question: docs, grade (parallel writers)
    grade: dict                  # the evidence's grade and route (answer | rewrite | clarify | no_knowledge)
    rewrite: dict                # the one rewrite: method, text, query searched with
    rewrite_count: int
    first_evidence: dict         # docs, grade, rerank_info of the try before the rewrite
    prompt: str
    answer: str
    image_urls: list[str]
    sources: list[dict]
    is_stream: bool
    warnings: Warnings           # each node returns only the warnings it adds
    node_log: NodeLog
