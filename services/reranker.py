"""Cross-encoder relevance scores in 0..1 for (query, passage) pairs.

A rerank server when `RERANK_URL` is set (TEI / Infinity-style `POST /rerank`), else in process
`FlagReranker(BGE_RERANKER_LARGE)` (query first, pitfall 9). No package ships
cross-encoder weights, so offline the scorer fuses the dense cosine of the whole passage with how
much of the question's vocabulary the passage covers; `name` says which scorer ran.
"""
from __future__ import annotations

import math
import re
import threading
from functools import lru_cache

import jieba
import numpy as np

from services.embeddings import get_embedder, post_json, validate_model_dir
from services.errors import ConfigurationError, RerankError
from services.settings import Settings, get_settings

jieba.setLogLevel(60)
STOPWORDS = set("的 了 吗 呢 吧 啊 是 在 和 与 或 及 有 没有 怎么 怎样 如何 什么 哪个 哪些 哪 多少 几 个 能 能否 可以 要 需要 "
                "用 把 被 对 这 那 这个 那个 它 我 你 请问 一下 时 中 上 下 为什么 是否 吗？ 呢？".split())


def query_terms(query: str) -> list[str]:
    terms = []
    for tok in jieba.cut_for_search(query.lower()):
        tok = tok.strip()
        if not tok or tok in STOPWORDS or not re.search(r"[\w\u4e00-\u9fff]", tok):
            continue
        if len(tok) == 1 and not tok.isdigit() and re.match(r"[\u4e00-\u9fff]", tok):
            continue  # single CJK characters match almost any passage
        terms.append(tok)
    return list(dict.fromkeys(terms))


@lru_cache(maxsize=1)
def _idf() -> tuple[dict, float]:
    import jieba.analyse

    table = jieba.analyse.default_tfidf
    return table.idf_freq, table.median_idf


def idf(term: str) -> float:
    """jieba's general-Chinese IDF; unknown words (model codes, English terms) are rare, so high."""
    table, median = _idf()
    return table.get(term, median)


def coverage(terms: list[str], passage: str) -> float:
    """Share of the question's vocabulary, IDF-weighted, that the passage contains."""
    if not terms:
        return 0.0
    text = re.sub(r"\s+", "", passage.lower())
    total = sum(idf(t) for t in terms)
    return sum(idf(t) for t in terms if t.replace(" ", "") in text) / total


class Reranker:
    name: str

    def score(self, query: str, docs: list[dict]) -> list[float]:
        raise NotImplementedError


class OfflineReranker(Reranker):
    name = "offline:use-m3+lexical"

    def __init__(self, settings: Settings):
        self._settings = settings

    def score(self, query: str, docs: list[dict]) -> list[float]:
        if not docs:
            return []
        embedder = get_embedder(self._settings)
        qv = np.asarray(embedder.embed_query(query)["dense"], dtype=np.float32)
        missing = [i for i, d in enumerate(docs) if not d.get("dense")]
        fresh = embedder.embed([docs[i]["content"] for i in missing]) if missing else []
        vectors = {i: v["dense"] for i, v in zip(missing, fresh)}
        terms = query_terms(query)
        scores = []
        for i, doc in enumerate(docs):
            dv = np.asarray(vectors.get(i, doc.get("dense")), dtype=np.float32)
            cos = float(dv @ qv)
            semantic = min(1.0, max(0.0, (cos - 0.15) / 0.5))
            # The product name counts as part of every chunk, as in the embedded text: a chunk does
            # not lose terms of a question naming its product because its heading path omits it.
            text = f"{doc.get('item_name') or ''}\n{doc['content']}"
            scores.append(round(0.4 * semantic + 0.6 * coverage(terms, text), 4))
        return scores


class FlagRerankerScorer(Reranker):
    name = "bge-reranker"

    def __init__(self, path: str, fp16: bool, device: str):
        folder = validate_model_dir(path, "bge-reranker")
        try:
            from FlagEmbedding import FlagReranker

            self._model = FlagReranker(str(folder), use_fp16=fp16, devices=device)
        except Exception as exc:
            raise ConfigurationError(f"精排模型加载失败：{exc}", cause=exc) from exc
        self._lock = threading.Lock()

    def score(self, query: str, docs: list[dict]) -> list[float]:
        if not docs:
            return []
        pairs = [[query, d["content"]] for d in docs]  # query first: reversed pairs score wrong
        with self._lock:
            raw = self._model.compute_score(pairs, normalize=False)
        raw = [raw] if isinstance(raw, (int, float)) else list(raw)
        return [round(1 / (1 + math.exp(-float(x))), 4) for x in raw]


class HttpReranker(Reranker):
    """Scores from a rerank server. The body carries the passages as `texts` (TEI) and `documents`
    (Infinity, Cohere-style); both reply shapes are read: TEI's `[{index, score}]` and
    `{results: [{index, relevance_score}]}`. Scores are the server's normalised 0..1 ones."""

    def __init__(self, settings: Settings):
        self._url = f"{settings.rerank_url}/rerank"
        self._model, self._key, self._timeout = settings.rerank_model, settings.rerank_api_key, settings.rerank_timeout_s
        self.name = f"rerank-server:{self._model}"

    def score(self, query: str, docs: list[dict]) -> list[float]:
        if not docs:
            return []
        texts = [d["content"] for d in docs]
        data = post_json(self._url, {"model": self._model, "query": query, "texts": texts, "documents": texts,
                                     "raw_scores": False, "truncate": True, "return_documents": False},
                         what="精排服务", setting="RERANK_TIMEOUT_S", timeout_s=self._timeout, api_key=self._key,
                         error=RerankError)
        rows = data.get("results", data) if isinstance(data, dict) else data
        try:
            scores = {int(r["index"]): float(r["score"] if "score" in r else r["relevance_score"]) for r in rows}
        except (KeyError, TypeError, ValueError) as exc:
            raise RerankError(f"精排服务（{self._url}）的回复格式无法识别：{str(data)[:200]}", cause=exc) from exc
        if sorted(scores) != list(range(len(docs))):
            raise RerankError(f"精排服务（{self._url}）为 {len(docs)} 段文本返回了 {len(scores)} 个分数。")
        return [round(scores[i], 4) for i in range(len(docs))]


@lru_cache(maxsize=4)
def _build(settings: Settings) -> Reranker:
    if settings.rerank_url:
        return HttpReranker(settings)
    if settings.bge_reranker_large:
        return FlagRerankerScorer(settings.bge_reranker_large, settings.bge_fp16, settings.bge_device)
    return OfflineReranker(settings)


def get_reranker(settings: Settings | None = None) -> Reranker:
    return _build(settings or get_settings())
