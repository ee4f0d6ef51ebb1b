"""Lexical product matching: which known product does a question name?

Measured on near-twins: embedding cosines between questions and product names sat within a few
hundredths for twins, so thresholds on them could not decide. Model codes and brand tokens can:
the full model code written out -> confirm; only a family or brand -> ask; a different model
(`Milk-V Mars` when only Duo boards are known) -> no match.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

from graphs.vocabulary import TECH_TERMS

CONFIRM_SCORE = 0.95
BRAND_SCORE = 0.62
CONFIRM_THRESHOLD = 0.85
CANDIDATE_THRESHOLD = 0.60
_SEP_CHAR = r"[\s\-_/·]"
_SEP = _SEP_CHAR + "*"
_SEPS = re.compile(_SEP_CHAR + "+")
_LATIN = re.compile(r"[a-z0-9][a-z0-9.]*")
VERSION_TOKEN = re.compile(r"v\d+(\.\d+)*")
FAMILY = re.compile(r"\s*(系列|全系|家族)")
FAMILY_SCORE = 0.84
# A brand and model the question writes out ("StarFive VisionFive 2", "Raspberry Pi 5"): two
# capitalised words and a short model number (a long code such as "JH7110" is a chip more often).
NAMED_MODEL = re.compile(r"(?<![A-Za-z0-9])([A-Z][A-Za-z]*(?:[ \-][A-Z][A-Za-z0-9]*)+[ \-]?\d[A-Za-z0-9.]*)(?![A-Za-z0-9])")


def normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"(?<=\d)\.0(?![0-9])", "", text)  # V3.0 == V3
    return re.sub(r"[`*\"'“”‘’（）()\[\]【】]", " ", text)


@lru_cache(maxsize=65536)
def _tokens(name: str) -> tuple[str, ...]:
    return tuple(tokens(name))


def tokens(name: str) -> list[str]:
    """Product name -> tokens: Latin/digit words (hyphens dropped) and CJK runs."""
    out = []
    for word in normalize(name).split():
        for part in re.findall(r"[a-z0-9.\-]+|[\u4e00-\u9fff]+", word):
            part = part.replace("-", "").strip(".")
            if part:
                out.append(part)
    return out


# Cached: with ~1,000 products re.compile's own 512-entry cache thrashes (measured 580 -> 26 ms/question).
@lru_cache(maxsize=65536)
def _pattern(run: tuple[str, ...]) -> re.Pattern:
    body = _SEP.join(_SEP.join(re.escape(ch) for ch in tok) if _LATIN.fullmatch(tok) else re.escape(tok)
                     for tok in run)
    return re.compile(rf"(?<![a-z0-9]){body}(?![a-z0-9])")


@dataclass
class ProductMatch:
    name: str
    score: float
    kind: str  # "full" | "partial" | "brand" | "nested" | "other-model" (a known brand, unknown model) | "none"
    span: tuple[int, int] = (0, 0)
    covered: list[str] = field(default_factory=list)


def _next_word(text: str, end: int) -> str:
    m = re.match(r"[\s\-_/·]*([a-z][a-z0-9]*)", text[end:])
    return m.group(1) if m else ""


def _is_latin(tok: str) -> bool:
    return bool(_LATIN.fullmatch(tok))


@dataclass(frozen=True)
class ProductIndex:
    """Name tokens of one product list, built once: which products share a token, and every token."""
    all_tokens: frozenset[str]
    by_token: dict[str, tuple[int, ...]]

    def present(self, q: str) -> set[str]:
        """Tokens a normalised question may hold. A token matched by its pattern is a substring of the
        question once separators are removed, so a token absent here can match nothing."""
        flat = _SEPS.sub("", q)
        return {t for t in self.by_token if t in flat}


@lru_cache(maxsize=8)
def product_index(names: tuple[str, ...]) -> ProductIndex:
    by_token: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        for tok in dict.fromkeys(_tokens(name)):
            by_token.setdefault(tok, []).append(i)
    return ProductIndex(frozenset(by_token), {t: tuple(ix) for t, ix in by_token.items()})


def match_product(question: str, name: str, all_tokens: set[str] | frozenset[str],
                  present: set[str] | None = None) -> ProductMatch:
    """`present`: tokens the question may hold (see ProductIndex.present); runs with a token outside
    it are skipped, since their pattern cannot match."""
    q = normalize(question)
    toks = list(_tokens(name))
    if not toks:
        return ProductMatch(name, 0.0, "none")
    brand = toks[0] if len(toks) > 1 and _is_latin(toks[0]) and not re.search(r"\d", toks[0]) else ""
    model = toks[1:] if brand else toks
    # Category words (模块, 主板) are optional once the name has a model code.
    required = [t for t in model if _is_latin(t)] or model
    covered: set[int] = set()
    spans: list[tuple[int, int]] = []
    latin_ends: list[int] = []
    for size in range(len(toks), 0, -1):  # longest runs first, non-overlapping
        for i in range(len(toks) - size + 1):
            idx = set(range(i, i + size))
            if idx & covered:
                continue
            run = toks[i:i + size]
            if size == 1 and len(run[0]) < 2 and not run[0].isdigit():
                continue  # a lone "s" is no evidence of "Duo S"
            if present is not None and not present.issuperset(run):
                continue
            m = _pattern(tuple(run)).search(q)
            if m and not any(a < m.end() and m.start() < b for a, b in spans):
                covered |= idx
                spans.append(m.span())
                if _is_latin(run[-1]):
                    latin_ends.append(m.end())
    if not spans:
        return ProductMatch(name, 0.0, "none")
    span = (min(a for a, _ in spans), max(b for _, b in spans))
    got = [toks[k] for k in sorted(covered)]
    if all(t in got for t in required):
        if FAMILY.match(q, span[1]):  # "Mars 系列": the family, not one model
            return ProductMatch(name, FAMILY_SCORE, "family", span, got)
        return ProductMatch(name, CONFIRM_SCORE, "full", span, got)
    # Partial or brand only: a different model word right after ("Milk-V Mars") rules it out.
    for end in latin_ends:
        nxt = _next_word(q, end)
        if nxt and nxt not in all_tokens:
            return ProductMatch(name, 0.0, "other-model", span, got)
    # A bare version ("V2") is no evidence of a product on its own.
    chars = sum(len(t) for t in got if t in required and not VERSION_TOKEN.fullmatch(t))
    if chars == 0:
        return ProductMatch(name, BRAND_SCORE if brand in got else 0.0, "brand", span, got)
    total = sum(len(t) for t in required)
    return ProductMatch(name, min(0.84, 0.65 + 0.2 * chars / max(1, total)), "partial", span, got)


def rank_products(question: str, names: list[str]) -> list[ProductMatch]:
    """Matches of every product, best first; a full match nested in a longer one is dropped
    (`Duo` inside `Duo 256M`). Only products sharing a token with the question are matched: with
    ~1,000 products a pattern search of every name took most of a second."""
    index = product_index(tuple(names))
    present = index.present(normalize(question))
    hit = sorted({i for t in present for i in index.by_token[t]})
    matches = [match_product(question, names[i], index.all_tokens, present) for i in hit]
    # a family mention with no other model of that family in the catalogue is that one product
    for m in matches:
        if m.kind == "family" and not any(o is not m and o.kind == "partial" for o in matches):
            m.kind, m.score = "full", CONFIRM_SCORE
    fulls = [m for m in matches if m.kind == "full"]
    for m in fulls:
        for other in fulls:
            inside = other.span[0] <= m.span[0] and m.span[1] <= other.span[1]
            if other is not m and inside and other.span[1] - other.span[0] > m.span[1] - m.span[0]:
                m.kind, m.score = "nested", 0.0
    return sorted((m for m in matches if m.score > 0 or m.kind == "other-model"), key=lambda m: (-m.score, m.name))


def names_unknown_model(question: str, names: list[str]) -> bool:
    """Whether the question writes out a brand and model that no known product has."""
    known = product_index(tuple(names)).all_tokens
    for m in NAMED_MODEL.finditer(unicodedata.normalize("NFKC", question)):
        words = m.group(1).split(" ")
        names_words = [w for w in words if w[:1].isupper() and w.lower() not in TECH_TERMS]
        if len(names_words) >= 2 and len(words[-1]) <= 3 and not set(tokens(m.group(1))) & known:
            return True
    return False
