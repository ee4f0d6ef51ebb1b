"""State of the query graph: what the question became, what was found, what was answered.

Lists that several nodes or parallel branches add to have reducers (`warnings`, `node_log`,
`sub_results`); every other key is written by one node at a time and replaced.
"""
from __future__ import annotations

import operator
from typing import Annotated, TypedDict

from graphs.base import NodeLog, StepReport, Warnings
from graphs.query.contracts import (
    Branch, Decision, FirstEvidence, GradeRecord, Hit, Options, Plan, RerankInfo, Rewrite, Source, SubQuestion,
    SubResult, Turn,
)


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
    decision: Decision           # how the product was decided (scores, method)
    history: list[Turn]          # the conversation's newest messages, oldest first
    options: Options             # the user's switches (web search, HyDE)
    embedding_chunks: list[Hit]  # recall of the question
    hyde_embedding_chunks: list[Hit]  # recall of the question with the HyDE passage
    hyde_doc: str
    web_search_docs: list[Hit]   # web results (`source` "web")
    rrf_chunks: list[Hit]        # the recall lists fused
    reranked_docs: list[Hit]     # the evidence the answer is built from, in order
    rerank_info: RerankInfo      # scorer, scores, cut-off position
    plan: Plan                   # complexity, reason, method of the question's planning
    sub_questions: list[SubQuestion]  # the parts of a complex question (empty: simple)
    sub_question: Branch         # the one sub-question a fanned-out branch works on
    sub_results: Annotated[list[SubResult], operator.add]  # per sub-question: docs, grade (parallel writers)
    grade: GradeRecord           # the evidence's grade and route (answer | rewrite | clarify | no_knowledge)
    rewrite: Rewrite             # the one rewrite: method, text, query searched with
    rewrite_count: int
    first_evidence: FirstEvidence  # docs, grade, rerank_info of the try before the rewrite
    prompt: str
    answer: str
    image_urls: list[str]
    sources: list[Source]        # the answer's sources, numbered as its text cites them
    is_stream: bool
    warnings: Warnings           # each node returns only the warnings it adds
    node_log: NodeLog


class QueryUpdate(QueryGraphState, StepReport, total=False):
    """What a node returns: the keys it writes, and its step's report."""
