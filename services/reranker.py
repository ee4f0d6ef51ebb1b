"""Relevance scores in 0..1 for (query, passage) pairs.

A rerank server when `RERANK_URL` is set (TEI / Infinity-style `POST /rerank`), else in process
`FlagReranker(BGE_RERANKER_LARGE)` (query first). No package ships cross-encoder
weights, so offline the scorer is lexical: the mean of how much of the question's vocabulary
(IDF-weighted, distinct words) the passage covers, how much its best sentence covers (the words
close together), and BM25 among the candidates. The dense cosine of USE-m3 made its order worse on
held-out questions and is left out. `name` says which scorer ran.

A question word counts as present when the passage has it or one of its synonyms from the reviewed
vocabulary in `resources/manual_synonyms.json` (a customer's 主控 is a manual's 微处理器). When the
question asks for a value (什么 / 多少 / 哪 ...), a sentence that states one under a name the
question uses ("微处理器：STM32…", a table row) scores a little more than one that only mentions
the word.
"""
from __future__ import annotations

import json
import math
import re
import threading
from functools import lru_cache
from pathlib import Path

import jieba

from services.embeddings import post_json, validate_model_dir
from services.errors import ConfigurationError, RerankError
from services.hits import Hit
from services.settings import Settings, get_settings

jieba.setLogLevel(60)
STOPWORDS = set("的 了 吗 呢 吧 啊 是 在 和 与 或 及 有 没有 怎么 怎样 如何 什么 哪个 哪些 哪 多少 几 个 能 能否 可以 要 需要 "
                "用 把 被 对 这 那 这个 那个 它 我 你 请问 一下 时 中 上 下 为什么 是否 吗？ 呢？ "
                # how a question asks, not what about: "哪款" is no word a passage should hold
                "哪款 哪种 哪一个 哪几个 哪里 哪儿 几个 多大 多久".split())
# A sentence ends at Chinese or ASCII end punctuation or a line break (table rows, list items).
SENTENCE_END = re.compile(r"(?<=[。！？；!?;\n])")
WORD = re.compile(r"[\w\u4e00-\u9fff]")
LETTER = re.compile(r"[^\W_]")  # a letter, digit or CJK character
BM25_K1 = 1.2
BM25_B = 0.75
SYNONYMS_FILE = Path(__file__).parent / "resources" / "manual_synonyms.json"
# Questions that ask for a value: the answer is a sentence that names the thing and gives its value.
VALUE_ASKED = re.compile(r"什么|多少|几|哪|多大|多重|多高|多长|多宽|多厚|型号|参数|规格|\b(what|which|how (many|much|big|large|heavy))\b",
                         re.IGNORECASE)
# `名称：值` (a list item's marker allowed): the name is short, the value is not empty.
LABELLED = re.compile(r"^\s*(?:[-*+•]\s*)?(?P<label>[^：:|\n]{1,24}?)\s*[：:]\s*(?P<value>\S.*)$")
# Share of a value question's weight that a sentence stating the value under a question word adds
# (choosing the sentence to quote).
VALUE_SHARE = 0.25
# What a passage that states an asked value under a question word adds to its score: a tie-breaker
# against a passage that only mentions the word, small enough that every other score, and so the
# thresholds chosen on them, stays as it was.
VALUE_BONUS = 0.05


@lru_cache(maxsize=1)
def synonym_index() -> dict[str, tuple[str, ...]]:
    """Word -> the other words of its groups, all lower case without spaces inside CJK text."""
    index: dict[str, tuple[str, ...]] = {}
    for group in json.loads(SYNONYMS_FILE.read_text(encoding="utf-8"))["groups"]:
        words = list(dict.fromkeys(w.lower().strip() for w in group["terms"] if w.strip()))
        for w in words:
            index[w] = tuple(dict.fromkeys([*index.get(w, ()), *(o for o in words if o != w)]))
    return index


def synonyms(word: str) -> tuple[str, ...]:
    return synonym_index().get(word, ())


def mentions(text: str, word: str) -> bool:
    """`word` in `text` (lower case): CJK as a substring, ASCII as a whole word, so that a synonym
    such as "ram" does not match inside "program"."""
    if word.isascii():  # an identifier's part is no word ("pin" inside BUTTON_PIN_BITMASK)
        return re.search(rf"(?<![a-z0-9_]){re.escape(word)}(?![a-z0-9_])", text) is not None
    return word in squashed(text)


def query_terms(query: str) -> list[str]:
    tokens = [tok.strip() for tok in jieba.cut(query.lower())]
    index = synonym_index()
    # Two neighbouring words that make a word of the vocabulary ("主控" + "芯片") are that word too,
    # so that its synonyms ("微处理器") stand for both.
    joined = [a + b for a, b in zip(tokens, tokens[1:]) if a and b and a + b in index]
    terms = []
    for tok in [*(t.strip() for t in jieba.cut_for_search(query.lower())), *joined]:
        if not tok or tok in STOPWORDS or not LETTER.search(tok):  # "_" of "kflash_gui" is no word
            continue
        if len(tok) == 1 and not tok.isdigit() and re.match(r"[\u4e00-\u9fff]", tok):
            continue  # single CJK characters match almost any passage
        terms.append(tok)
    return list(dict.fromkeys(terms))


def expanded_query(query: str) -> str:
    """The question with the synonyms of its words appended, for a lexical search that matches
    words, not meanings."""
    lowered = query.lower()
    extra = [s for t in query_terms(query) for s in synonyms(t.replace(" ", "")) if not mentions(lowered, s)]
    return " ".join([query, *dict.fromkeys(extra)])


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


def present(word: str, text: str, lowered: str) -> str | None:
    """What stands for `word` in a passage (squashed and lower-cased): the word, else a synonym."""
    if word in text:
        return word
    return next((s for s in synonyms(word) if mentions(lowered, s)), None)


def coverage(terms: list[str], passage: str) -> float:
    """Share of the question's distinct words, IDF-weighted, that the passage contains (the word or
    a synonym); a word only partly there (one of its parts) counts as much as that part, at most
    the word."""
    groups = word_groups(terms)
    if not groups:
        return 0.0
    text, lowered = squashed(passage), passage.lower()
    total = sum(idf(w) for w, _ in groups)
    found = 0.0
    for word, parts in groups:
        if present(word, text, lowered):
            found += idf(word)
        else:
            found += min(idf(word), max((idf(p) for p in parts if p in text), default=0.0))
    return found / total


def words_held(query: str, passages: list[str]) -> list[list[str]]:
    """For each passage, the question's distinct words (see `word_groups`) it holds, itself or a synonym."""
    words = [w for w, _ in word_groups(query_terms(query))]
    return [[w for w in words if present(w, squashed(p), p.lower())] for p in passages]


def sentences(text: str) -> list[str]:
    return [s for s in SENTENCE_END.split(text) if s.strip()]


def value_asked(question: str) -> bool:
    return VALUE_ASKED.search(question) is not None


def states_value(terms: list[str], text: str, header: str = "") -> bool:
    """A line of the text gives a value under a name the question uses: `名称：值` with a question
    word (or its synonym) in the name, or a table row with one in a cell or in its table's header
    and a value in another cell."""
    words = [w for w, _ in word_groups(terms)]

    def named(part: str) -> bool:
        return any(present(w, squashed(part), part.lower()) for w in words)

    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            cells = [c for c in (c.strip() for c in line.strip().strip("|").split("|")) if WORD.search(c)]
            if len(cells) >= 2 and (named(header) or any(named(c) for c in cells)):
                return True
            continue
        m = LABELLED.match(line)
        if m and WORD.search(m["value"]) and named(m["label"]):
            return True
    return False


def sentence_coverage(terms: list[str], sentence: str, value: bool, header: str = "", heading: str = "") -> float:
    """A sentence's coverage (with the heading above it, if any); for a value question, stating the
    value under a question word is part of what covers it."""
    score = coverage(terms, f"{heading}\n{sentence}" if heading else sentence)
    if not value:
        return score
    return (score + VALUE_SHARE * states_value(terms, sentence, header)) / (1 + VALUE_SHARE)


def best_sentence_coverage(terms: list[str], passage: str) -> float:
    return max((coverage(terms, s) for s in sentences(passage)), default=0.0)


def pool_bm25(terms: list[str], passages: list[str]) -> list[float]:
    """BM25 of each passage among the given ones (substring word counts, jieba IDF), as a share of
    the most any passage could score (every term infinitely often): 0..1 whatever the pool, so a
    weak best candidate stays weak."""
    texts = [squashed(p) for p in passages]
    lowered = [p.lower() for p in passages]
    average = sum(map(len, texts)) / max(1, len(texts)) or 1.0
    groups = word_groups(terms)
    ceiling = sum(idf(w) for w, _ in groups) * (BM25_K1 + 1)
    out = []
    for text, lower in zip(texts, lowered):
        norm = BM25_K1 * (1 - BM25_B + BM25_B * len(text) / average)
        score = 0.0
        for word, parts in groups:  # the word or a synonym, else its best part present (as in `coverage`)
            stand_in = present(word, text, lower)
            if stand_in:
                tf = max(1, text.count(squashed(stand_in)))
                score += idf(word) * tf * (BM25_K1 + 1) / (tf + norm)
                continue
            for term in [t for t in sorted(parts, key=idf, reverse=True) if t in text][:1]:
                tf = text.count(term)
                score += min(idf(term), idf(word)) * tf * (BM25_K1 + 1) / (tf + norm)
        out.append(score / ceiling if ceiling else 0.0)
    return out


def scored_content(doc: Hit) -> str:
    """What a scorer reads of a chunk: its product's name counts as part of it, as in its embedded
    text, so a chunk does not lose the words of a question naming its product because its heading
    path omits them. Web results are scored as they are."""
    if doc.get("source", "local") != "local":
        return doc["content"]
    return "\n".join(part for part in (doc.get("product") or "", doc["content"]) if part)


class Reranker:
    name: str

    def score(self, query: str, docs: list[Hit]) -> list[float]:
        raise NotImplementedError


class OfflineReranker(Reranker):
    name = "offline:lexical"

    def __init__(self, settings: Settings):
        self._settings = settings

    def score(self, query: str, docs: list[Hit]) -> list[float]:
        if not docs:
            return []
        terms, value = query_terms(query), value_asked(query)
        contents = [scored_content(d) for d in docs]
        bm25 = pool_bm25(terms, contents)
        return [round(min(1.0, (coverage(terms, c) + best_sentence_coverage(terms, c) + b) / 3
                          + (VALUE_BONUS if value and states_value(terms, c) else 0.0)), 4)
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

    def score(self, query: str, docs: list[Hit]) -> list[float]:
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

    def score(self, query: str, docs: list[Hit]) -> list[float]:
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
