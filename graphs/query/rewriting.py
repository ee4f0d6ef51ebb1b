"""The one second try of a weakly answered question: a new retrieval query.

With a model: step-back (a broader question) or HyDE (a manual-like passage), the model picks; the
HyDE text only goes into retrieval, never into the answer. Offline: pseudo-relevance feedback in the
spirit of RM3 - the question keeps its words and gains the strongest terms and heading words of the
best passages of the first try.
"""
from __future__ import annotations

import logging
import re
from collections import defaultdict
from typing import TYPE_CHECKING, Literal

import jieba

from graphs.query.contracts import Hit, Rewrite
from services.chat_model import invoke_text, parse_json_reply
from services.prompts import load_prompt
from services.reranker import STOPWORDS, idf, query_terms

if TYPE_CHECKING:  # the chat client is loaded only when a chat model is configured
    from langchain_openai import ChatOpenAI

log = logging.getLogger("query.rewriting")

FEEDBACK_DOCS = 3
FEEDBACK_TERMS = 6
HEADING_WEIGHT = 2.0   # heading words name what a section is about: worth more than body words
MAX_AID_CHARS = 300
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-.]+|[\u4e00-\u9fff]{2,}|\d+[A-Za-z]+[A-Za-z0-9]*")


def words(text: str) -> list[str]:
    return [w.lower() for w in jieba.cut(text) if WORD.fullmatch(w.strip()) and w.lower() not in STOPWORDS]


def feedback_terms(question: str, docs: list[Hit], n: int = FEEDBACK_TERMS) -> list[str]:
    """Terms of the best passages weighted by passage score x term frequency share x IDF; heading
    words (the section path) weigh double. Words of the question itself and of the product or file name are left out."""
    known = set(query_terms(question)) | {w for w in words(question)}
    weights: dict[str, float] = defaultdict(float)
    for doc in docs[:FEEDBACK_DOCS]:
        score = max(float(doc.get("score") or 0.0), 0.01)
        product = set(words(f"{doc.get('product', '')} {doc.get('file_title', '')}"))
        for text, boost in ((doc.get("content") or "", 1.0),
                            (f"{doc.get('title', '')} {doc.get('parent_title', '')}", HEADING_WEIGHT)):
            found = [w for w in words(text) if w not in known and w not in product]
            for w in set(found):
                weights[w] += boost * score * (found.count(w) / len(found)) * idf(w)
    return sorted(weights, key=lambda w: (-weights[w], w))[:n]


def model_plan(llm: ChatOpenAI, question: str, products: list[str],
               docs: list[Hit]) -> tuple[Literal["step_back", "hyde"], str] | None:
    """(method, text) from one JSON-mode call; None when the reply is unusable."""
    titles = "\n".join(f"- {d.get('title', '')}" for d in docs[:FEEDBACK_DOCS]) or "（无）"
    user = load_prompt("rewrite_plan_user", products="、".join(products), question=question, titles=titles)
    try:
        data = parse_json_reply(invoke_text(llm, load_prompt("rewrite_plan_system"), user))
    except Exception as exc:
        log.warning("rewrite plan failed, using feedback terms: %s", exc)
        return None
    method = data.get("method")
    field = {"step_back": "step_back_question", "hyde": "hyde_passage"}.get(method)
    text = str(data.get(field) or "").strip() if field else ""
    if not text:  # the chosen method's own text is required; the other one is ignored
        log.warning("rewrite plan invalid: %r", data)
        return None
    return method, text[:MAX_AID_CHARS]


def plan_rewrite(question: str, products: list[str], docs: list[Hit], llm: ChatOpenAI | None = None) -> Rewrite:
    """The rewrite: `query` is what the second retrieval searches with. With a JSON-mode chat model
    the model picks step-back or HyDE; offline, pseudo-relevance feedback terms."""
    chosen = model_plan(llm, question, products, docs) if llm is not None else None
    if chosen is None:
        terms = feedback_terms(question, docs)
        plan: Rewrite = {"method": "prf", "text": " ".join(terms), "terms": terms, "query": ""}
    else:
        plan = {"method": chosen[0], "text": chosen[1], "query": ""}
    plan["query"] = f"{question} {plan['text']}".strip()
    return plan
