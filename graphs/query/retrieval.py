"""Chunk search and ordering shared by the recall, fusion and rerank nodes, the product confirmation
and the benchmark. Every weight comes from `graphs.query.calibration`."""
from __future__ import annotations

import logging
import re

import jieba

from typing import TYPE_CHECKING

from graphs.query.calibration import RRF_K, Calibration
from graphs.query.contracts import Hit, HitBrief, RerankInfo
from services.reranker import Reranker, expanded_query, squashed
from services.vector_store import in_filter

if TYPE_CHECKING:
    from graphs.query.configuration import QueryConfiguration

log = logging.getLogger("query.retrieval")

OUTPUT = ["chunk_id", "content", "product", "title", "parent_title", "file_title", "doc_id", "page_start",
          "page_end"]
# A chunk with fewer letters and digits than this besides its headings and pictures (a cover page,
# a lone heading, a bare "see chapter X") is never put before one that has text. A link's text and
# a small table count as text.
THIN_CHARS = 12
MD_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)|<[^>\n]+>")
MD_LINK = re.compile(r"\[([^\]\n]*)\]\([^)\n]*\)")
WORD = re.compile(r"[\w\u4e00-\u9fff]")


def without_products(text: str, products: list[str] | None) -> str:
    """The question without the words of the confirmed products' names: every candidate of the
    filtered search shares them, so lexically they only add noise."""
    names = [squashed(n) for n in products or [] if n.strip()]
    if not names:
        return text
    kept = [t for t in jieba.lcut(text) if not (squashed(t) and all(squashed(t) in n for n in names))]
    rest = "".join(kept).strip()
    return rest if WORD.search(rest) else text


def search_chunks(cfg: QueryConfiguration, text: str, products: list[str] | None,
                  limit: int | None = None) -> list[Hit]:
    """Dense and sparse recall (optionally per product), fused by weighted reciprocal rank; all of
    both lists unless `limit`. BM25 also looks for the synonyms of the question's words: it
    matches words, and the manual may use its own for what the customer asks."""
    cal = cfg.calibration()
    store = cfg.vector_store
    vec = cfg.embedder.embed_query(text)
    expr = in_filter("product", products) if products else ""
    dense = store.dense_search(store.chunks, vec, expr=expr, limit=cal.recall_limit, fields=OUTPUT)
    lexical = expanded_query(without_products(text, products) if cal.strip_products else text)
    sparse = store.sparse_search(store.chunks, vec, lexical, expr=expr, limit=cal.recall_limit, fields=OUTPUT)
    hits = rrf_fuse([(sparse, cal.sparse_weight), (dense, cal.dense_weight)], top_n=limit or 2 * cal.recall_limit)
    return [{**hit, "rank": rank} for rank, hit in enumerate(hits, 1)]


def merge_sources(local: list[Hit], web: list[Hit]) -> list[Hit]:
    """The manual's fused chunks, then the web results, as one list for the reranker."""
    docs: list[Hit] = [{**d, "source": "local"} for d in local]
    docs += [{"source": "web", "url": w.get("url", ""), "title": w.get("title", ""), "content": w.get("snippet") or w.get("content", "")}
             for w in web if (w.get("snippet") or w.get("content"))]
    return docs


def rrf_fuse(lists: list[tuple[list[Hit], float]], k: int = RRF_K, top_n: int = 10) -> list[Hit]:
    """score = sum(weight / (k + rank)); duplicates add up; ties keep the order first met (so a
    list of weight 0 only appends its new chunks)."""
    scores: dict[str, float] = {}
    docs: dict[str, Hit] = {}
    for hits, weight in lists:
        for rank, hit in enumerate(hits, 1):
            cid = hit["chunk_id"]
            scores[cid] = scores.get(cid, 0.0) + weight / (k + rank)
            docs.setdefault(cid, hit)
    ordered = sorted(scores, key=lambda c: -scores[c])[:top_n]
    return [{**docs[c], "rrf_score": round(scores[c], 6)} for c in ordered]


def is_thin(doc: Hit) -> bool:
    """Headings, pictures and links only: nothing a question could be answered from."""
    lines = [line for line in (doc.get("content") or "").splitlines() if not line.lstrip().startswith("#")]
    body = MD_LINK.sub(r"\1", MD_IMAGE.sub("", "\n".join(lines)))
    title = (doc.get("title") or "").strip()
    if title:
        body = body.replace(title, "", 1)
    return len(re.sub(r"[\s\W_]+", "", body)) < THIN_CHARS


def rerank_order(reranker: Reranker, query: str, docs: list[Hit], products: list[str] | None,
                 cal: Calibration) -> tuple[list[tuple[float, Hit]], str]:
    """(score, doc) in final order, and the scorer's name: the reranker's order fused with the recall
    order by the calibrated weights; chunks without text go last. A scorer that fails raises."""
    scores = reranker.score(without_products(query, products) if cal.strip_products else query, docs)
    fused = {i: 0.0 for i in range(len(docs))}
    # The recall order of each source (manual chunks, web results) is its own list, as in RRF.
    for source in dict.fromkeys(d.get("source", "local") for d in docs):
        mine = [i for i, d in enumerate(docs) if d.get("source", "local") == source]
        for rank, i in enumerate(mine, 1):
            fused[i] += cal.input_weight / (RRF_K + rank)
    for rank, i in enumerate(sorted(range(len(docs)), key=lambda i: -scores[i]), 1):
        fused[i] += cal.rerank_weight / (RRF_K + rank)
    order = sorted(range(len(docs)), key=lambda i: (is_thin(docs[i]), -fused[i]))
    return [(scores[i], docs[i]) for i in order], reranker.name


def cliff_cutoff(scores: list[float], min_k: int = 3, max_k: int = 10, abs_gap: float = 0.5,
                 rel_gap: float = 0.25) -> int:
    """How many to keep: cut after i+1 at the first big drop between positions min_k-1..max_k-2."""
    n = min(len(scores), max_k)
    for i in range(min_k - 1, n - 1):
        gap = scores[i] - scores[i + 1]
        if gap >= abs_gap or (scores[i] != 0 and gap / abs(scores[i]) >= rel_gap):
            return i + 1
    return n


def scorer_name(cfg: QueryConfiguration) -> str:
    """Which scorer failed, where it can still be told (a model that failed to load cannot)."""
    try:
        return cfg.reranker.name
    except Exception:
        return "reranker"


def rank_and_cut(cfg: QueryConfiguration, question: str, docs: list[Hit],
                 products: list[str] | None) -> tuple[list[Hit], RerankInfo]:
    """Docs in rerank order (scorer fused with the recall order), cut at the first cliff, and what
    the step shows of it. A broken scorer degrades to the fused order, never to no answer."""
    cal = cfg.calibration()
    try:  # loading the model is part of scoring: a bad model folder fails here too
        ranked, scorer = rerank_order(cfg.reranker, question, docs, products, cal)
        # How many are relevant comes from the scores; which ones, from the fused order.
        keep = cliff_cutoff(sorted((s for s, _ in ranked), reverse=True), *cal.cliff)
    except Exception as exc:
        log.warning("reranker failed, keeping RRF order: %s", exc)
        scorer = f"{scorer_name(cfg)}（失败，保留 RRF 顺序：{exc}）"
        ranked = [(0.0, d) for d in docs]
        keep = min(len(docs), cal.cliff[1])
    kept: list[Hit] = [{**d, "score": float(s)} for s, d in ranked[:keep]]
    return kept, {"scorer": scorer, "cutoff": keep, "total": len(ranked),
                  "scores": [round(float(s), 4) for s, _ in ranked]}


def brief(hits: list[Hit], n: int = 10) -> list[HitBrief]:
    """What the UI shows of a hit list."""
    return [{"chunk_id": h.get("chunk_id"), "title": h.get("title", ""), "product": h.get("product", ""),
             "score": round(float(h.get("score", 0.0)), 4)} for h in hits[:n]]
