"""Lexical product matching: which known product does a question name?

Measured on near-twins: embedding cosines between questions and product names sat within a few
hundredths for twins, so thresholds on them could not decide. Model codes and brand tokens can:
the full model code written out -> confirm; only a family or brand -> ask; a different model
(`Milk-V Mars` when only Duo boards are known) -> no match.

`resolve` then reads the question by facets (graphs.products): aliases are written back to the names
they stand for, a product whose code is named and whose version and variant the question does not
contradict is selected, siblings the question cannot tell apart are asked between, and a model code
the catalogue lacks beside a line it holds is refused with what that line holds.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache

from graphs.products import EDITION, ProductAliases, code_tails, parse_facets, version_key
from graphs.query.contracts import ProductScore
from graphs.vocabulary import TECH_TERMS, VARIANT_WORDS

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


def squashed_name(text: str) -> str:
    """Normalised with separators removed: "Mars CM-Lite" and "mars cm lite" are one name."""
    return _SEPS.sub("", normalize(text))


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
    longer: str = ""  # other-model: the longer model the question writes this full name inside ("mars pro")


def _next_word(text: str, end: int, numbers: bool) -> str:
    """The word after a match; with `numbers`, one starting with a digit too ("myCobot 320"), unless
    it is a version or a measure written with a point ("1.1 版", "2.5G")."""
    m = re.match(r"[\s\-_/·]*([a-z0-9][a-z0-9.]*)(\s*版)?", text[end:])
    if not m or (m.group(1)[0].isdigit() and (not numbers or m.group(2) or "." in m.group(1))):
        return ""
    return m.group(1).split(".")[0]


def _extension(text: str, end: int, all_tokens: set[str] | frozenset[str]) -> int:
    """Where a full name written as the start of a longer model ends (0: it is not): a code glued on
    by a hyphen ("ESP32-C3-DevKitM-1") or a variant word ("Mars Pro"). A version ("-V2") is read by
    the version rules, a held word ("Duo S" beside "Duo") by the longer name."""
    m = re.match(r"(-|\s+)([a-z][a-z0-9]*|\d+[a-z][a-z0-9]*)(?:-[a-z0-9]+)*(?![a-z0-9.])", text[end:])
    if not m or m.group(2) in all_tokens or VERSION_TOKEN.fullmatch(m.group(2)):
        return 0
    return end + m.end() if m.group(1) == "-" or m.group(2) in VARIANT_WORDS else 0


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


@lru_cache(maxsize=65536)
def _brand_tokens(name: str, toks: tuple[str, ...]) -> tuple[str, ...]:
    """The name's brand words ("Seeed Studio" whole); else a first Latin word without a digit."""
    brand = tuple(tokens(parse_facets(name).brand))
    if brand and toks[:len(brand)] == brand and len(toks) > len(brand):
        return brand
    return toks[:1] if len(toks) > 1 and _is_latin(toks[0]) and not re.search(r"\d", toks[0]) else ()


def match_product(question: str, name: str, all_tokens: set[str] | frozenset[str],
                  present: set[str] | None = None) -> ProductMatch:
    """`present`: tokens the question may hold (see ProductIndex.present); runs with a token outside
    it are skipped, since their pattern cannot match."""
    q = normalize(question)
    toks = list(_tokens(name))
    if not toks:
        return ProductMatch(name, 0.0, "none")
    brand = _brand_tokens(name, tuple(toks))
    model = toks[len(brand):]
    # Category words (模块, 主板) are optional once the name has a model code.
    required = [t for t in model if _is_latin(t)] or model
    covered: set[int] = set()
    spans: list[tuple[int, int]] = []
    latin_ends: list[tuple[int, bool]] = []  # (end, whether the run ends on a word without a digit)
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
                    latin_ends.append((m.end(), not re.search(r"\d", run[-1])))
    if not spans:
        return ProductMatch(name, 0.0, "none")
    span = (min(a for a, _ in spans), max(b for _, b in spans))
    got = [toks[k] for k in sorted(covered)]
    if all(t in got for t in required):
        if FAMILY.match(q, span[1]):  # "Mars 系列": the family, not one model
            return ProductMatch(name, FAMILY_SCORE, "family", span, got)
        longer = _extension(q, span[1], all_tokens)
        if longer:
            return ProductMatch(name, 0.0, "other-model", span, got, longer=q[span[0]:longer])
        return ProductMatch(name, CONFIRM_SCORE, "full", span, got)
    # Partial or brand only: a different model word right after ("Milk-V Mars") rules it out.
    # After a line word ("myCobot", "Pi") a number is a model too; after a code it is a count or a size.
    for end, line_word in latin_ends:
        nxt = _next_word(q, end, numbers=line_word)
        # a word that begins a held code names that family ("ESP32" of "ESP32C3"), not another model
        if nxt and nxt not in all_tokens and not (len(nxt) >= 3 and any(t.startswith(nxt) for t in all_tokens)):
            return ProductMatch(name, 0.0, "other-model", span, got)
    # A bare version ("V2") is no evidence of a product on its own.
    chars = sum(len(t) for t in got if t in required and not VERSION_TOKEN.fullmatch(t))
    if chars == 0:
        return ProductMatch(name, BRAND_SCORE if set(brand) & set(got) else 0.0, "brand", span, got)
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


# A version the question writes: "V1.1", "v 2", "1.1 版" (the normalised text has ".0" dropped).
QUESTION_VERSION = re.compile(r"(?<![a-z0-9])v\s?(\d+(?:\.\d+)*)|(?<![a-z0-9.])(\d+(?:\.\d+)?)\s*版")


@dataclass
class Resolution:
    kind: str  # "confirm" | "ask" | "unknown-model" | "none" (the question names no product of the catalogue)
    products: list[str] = field(default_factory=list)  # confirmed, or the candidates to ask between
    held: list[str] = field(default_factory=list)  # unknown-model: what the catalogue holds of the line named
    # unknown-model: longer models the question writes a held name inside; the held products' own
    # documents may still describe them (a variant inside its base model's manual)
    longer: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    why: str = ""  # how it was decided, for the step's text


@lru_cache(maxsize=8)
def _alias_pattern(pairs: tuple[tuple[str, str], ...], tails: tuple[tuple[str, str, str], ...]):
    lookup = {unicodedata.normalize("NFKC", a).lower(): target for a, target in pairs}
    after = {tail: prefix for tail, _, prefix in tails}
    for tail, target, _ in tails:  # a tail two lines share stands for both
        lookup[tail] = f"{lookup[tail]} / {target}" if tail in lookup and target not in lookup[tail] else target
    if not lookup:
        return None, {}, {}
    body = "|".join(re.escape(a) for a in sorted(lookup, key=len, reverse=True))
    # not glued to the word before by a hyphen or a point: "ESP32-C3" is written out, not the tail "C3"
    return re.compile(rf"(?<![a-z0-9\-_./])(?:{body})(?![a-z0-9])"), lookup, after


def expand_aliases(question: str, names: list[str], aliases: ProductAliases | None = None) -> str:
    """The question with every alias written as what it stands for ("领克 01" -> "Lynk & Co 01"),
    in one pass, so a replacement is never read as an alias again. A code's tail written after the
    code's beginning ("Duo 256M") is the name written out, and stays."""
    aliases = aliases or ProductAliases()
    pattern, lookup, after = _alias_pattern(tuple(aliases.expansions(names)), tuple(code_tails(names)))
    text = unicodedata.normalize("NFKC", question)
    if pattern is None:
        return text
    low = text.lower()

    def replace(m: re.Match) -> str:
        prefix = after.get(m.group(0))
        if prefix and _SEPS.sub("", low[:m.start()]).endswith(prefix):
            return m.group(0)
        return f" {lookup[m.group(0)]} "
    return pattern.sub(replace, low)


def _code_tokens(name: str) -> tuple[str, ...]:
    return tuple(tokens(parse_facets(name).code))


def resolve(question: str, names: list[str], aliases: ProductAliases | None = None) -> Resolution:
    aliases = aliases or ProductAliases()
    q = expand_aliases(question, names, aliases)
    matches = [m for m in rank_products(q, names) if m.kind != "nested"]
    if not matches:
        return Resolution("none")
    versions = {version_key(a or b) for a, b in QUESTION_VERSION.findall(normalize(q))}
    written = {m.name: set(m.covered) for m in matches}

    def variants(name: str) -> set[str]:
        return set(tokens(parse_facets(name).variant))

    def code_hit(m: ProductMatch) -> bool:
        code = _code_tokens(m.name)
        return bool(code) and set(code) <= written[m.name]

    def consistent(m: ProductMatch) -> bool:
        """The question contradicts none of its facets: no other version, no sibling's variant."""
        version = version_key(parse_facets(m.name).version)
        if versions and version and version not in versions:
            return False
        siblings = [o for o in matches if o is not m and _code_tokens(o.name) == _code_tokens(m.name)]
        theirs = set().union(*[variants(o.name) & written[o.name] for o in siblings])
        return not (theirs - variants(m.name))

    kept = [m for m in matches if m.kind != "other-model" and consistent(m)]
    fulls = [m for m in kept if m.kind == "full"]
    # a code inside a name written out in full is that product's ("Duo" of "Duo 256M"), no sibling's;
    # but a name without a version beside versions of itself ("MF1" beside "MF1 V1", "MF1 V2") names
    # the line, so the versions the question does not rule out stay in play
    full_words = set().union(*[set(_tokens(m.name)) for m in fulls])
    unversioned = {(_code_tokens(m.name), frozenset(variants(m.name))) for m in fulls
                   if not parse_facets(m.name).version}

    def sibling_in_play(m: ProductMatch) -> bool:
        if not set(_code_tokens(m.name)) <= full_words:
            return True
        return bool(parse_facets(m.name).version) and (_code_tokens(m.name), frozenset(variants(m.name))) in unversioned
    selected = fulls + [m for m in kept if m.kind != "full" and code_hit(m) and sibling_in_play(m)]
    # a question asking for the old edition's manual ("按旧版手册") means the product whose own
    # documents call themselves that edition
    if EDITION.search(q):
        editions = aliases.editions()
        old = [m for m in selected if m.name in editions]
        selected = old or selected
    scores = {m.name: m.score for m in matches}
    if selected:
        def projection(m: ProductMatch) -> tuple:
            version = version_key(parse_facets(m.name).version)
            return (_code_tokens(m.name), version if version in versions else "",
                    frozenset(variants(m.name) & written[m.name]))
        chosen = [m.name for m in selected]
        seen: dict[tuple, list[ProductMatch]] = {}
        for m in selected:
            seen.setdefault(projection(m), []).append(m)
        # siblings the question cannot tell apart, one of them not written out in full ("EBB36" of two versions);
        # two names the question writes out in full are both meant
        if any(len(group) > 1 and any(m.kind != "full" for m in group) for group in seen.values()):
            return Resolution("ask", chosen, scores={n: min(scores[n], FAMILY_SCORE) for n in chosen},
                              why="问题没有写明版本或型号，同型号的几款都符合")
        return Resolution("confirm", chosen, scores={**scores, **{n: CONFIRM_SCORE for n in chosen}},
                          why="问题写明的型号" + ("和版本" if versions else "") + "只对应这些产品")
    named_codes = [m for m in matches if code_hit(m)]  # a held code, but a version the catalogue lacks
    if named_codes or any(m.kind == "other-model" for m in matches):
        # the line named is the products whose name the question starts writing ("myCobot 320")
        line = named_codes or [m for m in matches if m.kind == "other-model" and _tokens(m.name)[0] in m.covered]
        return Resolution("unknown-model", held=sorted({m.name for m in line}), scores=scores,
                          longer=sorted({m.longer for m in matches if m.longer}),
                          why="问题写的型号或版本不在知识库里")
    candidates = sorted((m for m in kept if m.score >= CANDIDATE_THRESHOLD), key=lambda m: (-m.score, m.name))
    if len(candidates) == 1:
        return Resolution("confirm", [candidates[0].name], scores={candidates[0].name: CONFIRM_SCORE},
                          why="知识库里只有这一款产品与问题相符")
    if candidates:
        return Resolution("ask", [m.name for m in candidates], scores=scores, why="问题只写了品牌或系列")
    return Resolution("none", scores=scores)


def evidence_products(ranking: list[ProductScore], threshold: float, margin: float) -> list[str]:
    """A question naming no product: the products of its strong chunk matches (`ranking`, best
    first). None when the best is under `threshold`; else each product whose best chunk is within
    `margin` of the top one (one: that product; several: ask between them, unless their passages
    tell them apart)."""
    if not ranking or ranking[0]["score"] < threshold:
        return []
    top = ranking[0]["score"]
    tied = list(dict.fromkeys(e["product"] for e in ranking if e["score"] >= top - margin))
    return told_apart(ranking, tied)


def told_apart(ranking: list[ProductScore], tied: list[str]) -> list[str]:
    """Tied products by the question's words their passages hold: the words every one of them holds
    ("3D 打印机主板" in every board's introduction) tell nothing; one whose passages hold all the words
    the others' do and more ("整机散热") is the one the question is about. Otherwise all stay tied."""
    if len(tied) < 2:
        return tied
    held = {p: set().union(*[set(e.get("words") or ()) for e in ranking if e["product"] == p]) for p in tied}
    ahead = [p for p in tied if all(held[o] < held[p] for o in tied if o != p)]
    return ahead or tied
