"""Chunk search and ordering shared by the recall, fusion and rerank nodes, the product confirmation
and the benchmark. Every weight comes from `graphs.query.calibration`."""
from __future__ import annotations

import re

import jieba

from graphs.query.calibration import RRF_K, Calibration, calibration
from graphs.query.contracts import Hit
from services.embeddings import get_embedder
from services.reranker import get_reranker, squashed
from services.settings import get_settings
from services.vector_store import get_vector_store, in_filter

OUTPUT = ["chunk_id", "content", "item_name", "title", "parent_title", "file_title", "doc_id", "page_start",
          "page_end"]
# A chunk with fewer letters and digits than this besides its headings and pictures (a cover page,
# a lone heading, a bare "see chapter X") is never put before one that has text. A link's text and
# a small table count as text.
THIN_CHARS = 12
MD_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)|<[^>\n]+>")
MD_LINK = re.compile(r"\[([^\]\n]*)\]\([^)\n]*\)")
WORD = re.compile(r"[\w\u4e00-\u9fff]")


def without_products(text: str, item_names: list[str] | None) -> str:
    """The question without the words of the confirmed products' names: every candidate of the
    filtered search shares them, so lexically they only add noise."""
    names = [squashed(n) for n in item_names or [] if n.strip()]
    if not names:
        return text
    kept = [t for t in jieba.lcut(text) if not (squashed(t) and all(squashed(t) in n for n in names))]
    rest = "".join(kept).strip()
    return rest if WORD.search(rest) else text


def search_chunks(text: str, item_names: list[str] | None, limit: int | None = None) -> list[Hit]:
    """Dense and sparse recall (optionally per product), fused by weighted reciprocal rank; all of
    both lists unless `limit`."""
    settings = get_settings()
    cal = calibration(settings)
    store = get_vector_store(settings)
    vec = get_embedder(settings).embed_query(text)
    expr = in_filter("item_name", item_names) if item_names else ""
    dense = store.dense_search(store.chunks, vec, expr=expr, limit=cal.recall_limit, fields=OUTPUT)
    lexical = without_products(text, item_names) if cal.strip_products else text
    sparse = store.sparse_search(store.chunks, vec, lexical, expr=expr, limit=cal.recall_limit, fields=OUTPUT)
    hits = rrf_fuse([(sparse, cal.sparse_weight), (dense, cal.dense_weight)], top_n=limit or 2 * cal.recall_limit)
    for rank, hit in enumerate(hits, 1):
        hit["rank"] = rank
    return hits


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


def is_thin(doc: dict) -> bool:
    """Headings, pictures and links only: nothing a question could be answered from."""
    lines = [line for line in (doc.get("content") or "").splitlines() if not line.lstrip().startswith("#")]
    body = MD_LINK.sub(r"\1", MD_IMAGE.sub("", "\n".join(lines)))
    title = (doc.get("title") or "").strip()
    if title:
        body = body.replace(title, "", 1)
    return len(re.sub(r"[\s\W_]+", "", body)) < THIN_CHARS


def rerank_order(query: str, docs: list[dict], item_names: list[str] | None = None,
                 cal: Calibration | None = None) -> tuple[list[tuple[float, dict]], str]:
    """(score, doc) in final order, and the scorer's name: the reranker's order fused with the recall
    order by the calibrated weights; chunks without text go last. A scorer that fails raises."""
    cal = cal or calibration()
    reranker = get_reranker()
    scores = reranker.score(without_products(query, item_names) if cal.strip_products else query, docs)
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


def brief(hits: list[dict], n: int = 10) -> list[dict]:
    """What the UI shows of a hit list."""
    return [{"chunk_id": h.get("chunk_id"), "title": h.get("title", ""), "item_name": h.get("item_name", ""),
             "score": round(float(h.get("score", 0.0)), 4)} for h in hits[:n]]
