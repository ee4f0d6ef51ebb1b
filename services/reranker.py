"""Relevance scores in 0..1 for (query, passage) pairs.

A rerank server when `RERANK_URL` is set (TEI / Infinity-style `POST /rerank`), else in process
`FlagReranker(BGE_RERANKER_LARGE)` (query first, pitfall 9). No package ships cross-encoder
weights, so offline the scorer is lexical: the mean of how much of the question's vocabulary
(IDF-weighted, distinct words) the passage covers, how much its best sentence covers (the words
close together), and BM25 among the candidates. The dense cosine of USE-m3 made its order worse on
held-out questions and is left out. `name` says which scorer ran.
"""
from __future__ import annotations

import math
import re
import threading
from functools import lru_cache

import jieba

from services.embeddings import post_json, validate_model_dir
from services.errors import ConfigurationError, RerankError
from services.settings import Settings, get_settings

jieba.setLogLevel(60)
STOPWORDS = set("的 了 吗 呢 吧 啊 是 在 和 与 或 及 有 没有 怎么 怎样 如何 什么 哪个 哪些 哪 多少 几 个 能 能否 可以 要 需要 "
                "用 把 被 对 这 那 这个 那个 它 我 你 请问 一下 时 中 上 下 为什么 是否 吗？ 呢？".split())
# A sentence ends at Chinese or ASCII end punctuation or a line break (table rows, list items).
SENTENCE_END = re.compile(r"(?<=[。！？；!?;\n])")
BM25_K1 = 1.2
BM25_B = 0.75


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


def squashed(text: str) -> str:
    return re.sub(r"\s+", "", text.lower())


def word_groups(terms: list[str]) -> list[tuple[str, list[str]]]:
    """Each distinct word of the question with the parts jieba also cut it into ("以太网": "以太"),
    so that a word is counted once, not once per part."""
    keys = [t.replace(" ", "") for t in terms]
    words = [k for k in keys if not any(k != o and k in o for o in keys)]
    return [(w, [k for k in keys if k != w and k in w]) for w in dict.fromkeys(words)]


def coverage(terms: list[str], passage: str) -> float:
    """Share of the question's distinct words, IDF-weighted, that the passage contains; a word
    only partly there (one of its parts) counts as much as that part, at most the word."""
    groups = word_groups(terms)
    if not groups:
        return 0.0
    text = squashed(passage)
    total = sum(idf(w) for w, _ in groups)
    found = 0.0
    for word, parts in groups:
        if word in text:
            found += idf(word)
        else:
            found += min(idf(word), max((idf(p) for p in parts if p in text), default=0.0))
    return found / total


def sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_END.split(text) if s.strip()]


def best_sentence_coverage(terms: list[str], passage: str) -> float:
    return max((coverage(terms, s) for s in sentences(passage)), default=0.0)


def pool_bm25(terms: list[str], passages: list[str]) -> list[float]:
    """BM25 of each passage among the given ones (substring word counts, jieba IDF), as a share of
    the most any passage could score (every term infinitely often): 0..1 whatever the pool, so a
    weak best candidate stays weak."""
    texts = [squashed(p) for p in passages]
    average = sum(map(len, texts)) / max(1, len(texts)) or 1.0
    groups = word_groups(terms)
    ceiling = sum(idf(w) for w, _ in groups) * (BM25_K1 + 1)
    out = []
    for text in texts:
        norm = BM25_K1 * (1 - BM25_B + BM25_B * len(text) / average)
        score = 0.0
        for word, parts in groups:  # the word, else its best part present (as in `coverage`)
            present = [t for t in [word, *sorted(parts, key=idf, reverse=True)] if t in text][:1]
            for term in present:
                tf = text.count(term)
                score += min(idf(term), idf(word)) * tf * (BM25_K1 + 1) / (tf + norm)
        out.append(score / ceiling if ceiling else 0.0)
    return out


def scored_content(doc: dict) -> str:
    """What a scorer reads of a chunk: its product's name counts as part of it, as in its embedded
    text, so a chunk does not lose the words of a question naming its product because its heading
    path omits them. Web results are scored as they are."""
    if doc.get("source", "local") != "local":
        return doc["content"]
    return "\n".join(part for part in (doc.get("product") or "", doc["content"]) if part)


class Reranker:
    name: str

    def score(self, query: str, docs: list[dict]) -> list[float]:
        raise NotImplementedError


class OfflineReranker(Reranker):
    name = "offline:lexical"

    def __init__(self, settings: Settings):
        self._settings = settings

    def score(self, query: str, docs: list[dict]) -> list[float]:
        if not docs:
            return []
        terms = query_terms(query)
        contents = [scored_content(d) for d in docs]
        bm25 = pool_bm25(terms, contents)
        return [round((coverage(terms, c) + best_sentence_coverage(terms, c) + b) / 3, 4)
                for c, b in zip(contents, bm25)]


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
        pairs = [[query, scored_content(d)] for d in docs]  # query first: reversed pairs score wrong
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
        texts = [scored_content(d) for d in docs]
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
