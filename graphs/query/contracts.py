"""The shapes that cross the query graph's boundaries and its state's keys, defined once.

Hit: one chunk as recall, fusion and rerank pass it on (defined in `services.hits`, where the vector
store and the reranker make and read it; re-exported here), like Turn, a message of the conversation
(`services.history_store`). Source: one cited source of an answer.
Events: what `astream_query` / `run_query` yield. Answer: the final answer as the app, the HTTP API
and the CLI show it, made from the final event by `answer_of`. The rest are the values the state
holds between nodes (the decision, the plan, the grade, ...), which the final event also carries.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Literal, NotRequired, TypedDict

from graphs.base import NodeEventFields, NodeLogEntry
from services.history_store import Turn
from services.hits import Hit


Scores = dict[str, float]        # product -> the score that decided it


class Options(TypedDict, total=False):
    web_search: bool             # search the web beside the manuals (when a search backend is set)
    hyde: bool                   # also search with a model-written answer-like passage (HyDE)


class ProductScore(TypedDict):
    """A chunk match's product and its score (a question naming no product)."""
    product: str
    score: float
    words: NotRequired[list[str]]  # the question's words the passage holds: what tells tied products apart


class Decision(TypedDict):
    """How the product was decided, as the state and the final event keep it."""
    method: str                  # "pinned" | "lexical" | "llm+lexical" | "history" | "evidence"
    scores: Scores               # rounded to 4 places
    evidence: NotRequired[list[ProductScore]]  # the chunk matches read, best first (when they were)


@dataclass
class ProductDecision:
    """What the product confirmation decided: branch A (`confirmed`), B (`ask`) or C (`refuse`)."""
    branch: Literal["confirmed", "ask", "refuse"]
    rewritten_query: str         # the question as retrieval will ask it (standalone, after the rewrite)
    method: str                  # see `Decision.method`
    scores: Scores               # unrounded
    products: list[str] = field(default_factory=list)    # branch A: the products asked about
    candidates: list[str] = field(default_factory=list)  # branch B: the buttons to choose from
    held: list[str] = field(default_factory=list)        # branch C, an unknown model: its family's products held
    why: str = ""                # what decided it, in words for the step's summary ("" when plain)
    evidence: list[ProductScore] = field(default_factory=list)  # the chunk matches read, best first

    def as_decision(self) -> Decision:
        """The part the state and the final event keep."""
        out: Decision = {"method": self.method, "scores": {k: round(v, 4) for k, v in self.scores.items()}}
        if self.evidence:
            out["evidence"] = [{"product": e["product"], "score": round(e["score"], 4)} for e in self.evidence]
        return out


class SubQuestion(TypedDict):
    question: str
    products: list[str]          # the products it is retrieved within


class Branch(SubQuestion):
    """One fanned-out retrieval: a sub-question, or the whole question beside its parts."""
    index: int                   # 1..n for the sub-questions, 0 for the whole question
    whole: NotRequired[bool]     # the whole question (its retrieval leads the merged evidence)


class Plan(TypedDict):
    """How the planner read the question."""
    complexity: Literal["simple", "complex"]
    reason: str                  # why, in words for the step's summary
    method: Literal["rules", "model"]


class QuestionPlan(Plan):
    """The planner's whole answer: the plan, its sub-questions and the products they name."""
    sub_questions: list[SubQuestion]  # empty: simple
    products: NotRequired[list[str]]  # the confirmed products plus siblings named by a bare version


class RerankInfo(TypedDict):
    scorer: str                  # the scorer's name (a failed one says so, and the fused order was kept)
    cutoff: int                  # how many were kept (cut at the first cliff of the scores)
    total: int                   # how many were scored
    scores: list[float]          # every candidate's score, in the final order


Route = Literal["answer", "rewrite", "clarify", "no_knowledge"]


class GradeRecord(TypedDict, total=False):
    """A grade as the state, the events and the final event keep it (`Grade.as_dict`); a split
    question's synthesis writes its own summary grade (`answered`, `used`, `sub_questions`)."""
    relevant: bool               # the passages are about what is asked
    answerable: bool             # they hold the answer
    ambiguous: bool              # the question could mean several things (a clarification helps)
    confidence: float            # 0..1: the best passage's score offline, the model's own with a model
    route: Route
    reason: str
    missing: str                 # what the passages lack (asked for when clarifying)
    follow_up: str               # the model's own clarifying question
    method: str                  # "offline" | "model" | "unscored" | "no_evidence" | "fallback（…）" | "synthesis"
    weak: bool                   # offline: under the answer threshold but above the refusal floor
    corrected_from: str          # the judged route, when the deterministic corrections changed it
    top_score: float             # the best passage's score against the question without its products
    evidence: Literal["first", "rewritten"]  # after the rewrite: which evidence set the answer uses
    answered: int                # synthesis: sub-questions with evidence enough to answer
    used: int                    # synthesis: sub-questions with relevant evidence
    sub_questions: int           # synthesis: how many parts the question had


@dataclass(kw_only=True)
class Grade:
    """One evidence set's grade as `graphs.query.evidence` builds and checks it (the fields are
    those of `GradeRecord`); the state, the events and the final event hold `as_dict()`."""
    relevant: bool
    answerable: bool
    ambiguous: bool
    confidence: float
    route: Route
    reason: str
    missing: str = ""
    follow_up: str = ""
    method: str
    weak: bool | None = None             # set by the offline rule only
    corrected_from: str | None = None
    top_score: float | None = None
    evidence: Literal["first", "rewritten"] | None = None

    def as_dict(self) -> GradeRecord:
        """The record: what was never set (None) is left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}  # type: ignore[return-value]

    @classmethod
    def of(cls, record: GradeRecord) -> Grade:
        """A grade kept in the state, back as a grade."""
        return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})  # type: ignore[literal-required]


class SubResult(Branch):
    """What one fanned-out branch found (the synthesis merges them)."""
    docs: list[Hit]
    grade: GradeRecord
    rerank_info: RerankInfo


class Rewrite(TypedDict):
    """The one rewrite of a weakly answered question."""
    method: Literal["step_back", "hyde", "prf"]
    text: str                    # the step-back question, the HyDE passage or the feedback terms
    query: str                   # what the second retrieval searches with
    terms: NotRequired[list[str]]  # prf: the feedback terms


class FirstEvidence(TypedDict):
    """The try before the rewrite, kept so the better of the two evidence sets can lead."""
    docs: list[Hit]
    grade: GradeRecord
    rerank_info: RerankInfo


class HitBrief(TypedDict, total=False):
    """What the steps and the final event show of a hit."""
    chunk_id: str
    title: str
    product: str
    score: float


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


class NodeEvent(NodeEventFields, total=False):
    type: Literal["node_start", "node_end", "node_error", "node_progress"]


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
    decision: Decision
    answer: str
    image_urls: list[str]
    sources: list[Source]
    rerank_info: RerankInfo
    warnings: list[str]
    node_log: list[NodeLogEntry]
    done_list: list[str]
    seconds: float
    rrf: list[HitBrief]          # the fused list (score: its RRF score)
    plan: Plan                   # how the planner read the question
    sub_questions: list[SubQuestion]  # the parts of a complex question (empty: simple)
    grade: GradeRecord           # the evidence grade the answer followed
    rewrite: Rewrite             # the one rewrite, when grading asked for it


Event = NodeEvent | DeltaEvent | ErrorEvent | FinalEvent


class RunEvents(TypedDict):
    events: list[Event]          # what the run yielded before its end, in order


class FinalRun(FinalEvent, RunEvents):
    pass


class ErrorRun(ErrorEvent, RunEvents):
    pass


QueryRun = FinalRun | ErrorRun   # what `run_query` returns: its last event with every event before it


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
