"""What a product name is made of, and the other names it goes by: both graphs read names this way.

A name such as "BIGTREETECH EBB36 CAN V1.1" is a brand (BIGTREETECH), a model (EBB36: the model
code, the first word that holds a digit, with the family words before it, "Lichee Pi 4A"), a
variant (CAN: words after the code) and a version (V1.1). Siblings differ in the code, the variant
or the version; the brand and family words say which line a product belongs to.

Aliases are other ways of writing a product or its brand: a maker's Chinese name (data file
`data/brand_aliases.json`, each entry with where it comes from), the short forms a name's own words
give ("LPi4A" for "Lichee Pi 4A"), what a document writes beside the name ("LC4A"), and what people add.
"""
from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

from graphs.vocabulary import PRODUCT_NOUNS
from services.documents import AliasEntry

BRAND_ALIASES_FILE = Path(__file__).resolve().parent / "data" / "brand_aliases.json"
VERSION_WORD = re.compile(r"[vV]\d+(?:\.\d+)*")
MAX_ALIAS_CHARS = 60
MAX_ALIASES = 20


class FacetFields(TypedDict):
    """A name's facets as the catalogue shows them."""
    brand: str
    model: str
    variant: str
    version: str


@dataclass(frozen=True)
class Facets:
    brand: str = ""
    family: str = ""   # words between the brand and the model code ("Lichee Pi")
    code: str = ""     # the word that tells the model ("EBB36", "4A"); the first non-brand word when none holds a digit
    variant: str = ""  # words after the code ("CAN", "Pi", "M5")
    version: str = ""  # "V1.1" as written

    @property
    def model(self) -> str:
        return " ".join(w for w in (self.family, self.code) if w)

    def as_dict(self) -> FacetFields:
        return {"brand": self.brand, "model": self.model, "variant": self.variant, "version": self.version}


def version_key(text: str) -> str:
    """"V1.0", "v1", "1.0" -> "1": one key however a version is written."""
    digits = text.strip().lstrip("vV")
    return re.sub(r"(\.0+)+$", "", digits)


@lru_cache(maxsize=1)
def brand_aliases() -> dict[str, tuple[str, ...]]:
    """Brand -> the Chinese names it is written by (the reviewed data file)."""
    data = json.loads(BRAND_ALIASES_FILE.read_text(encoding="utf-8"))
    return {b["brand"]: tuple(b["aliases"]) for b in data["brands"]}


def _words(name: str) -> list[str]:
    """Whitespace words, with "&" joining its neighbours: "Lynk & Co" stays one brand."""
    words: list[str] = []
    for word in name.split():
        if words and (word == "&" or words[-1].endswith("&")):
            words[-1] = f"{words[-1]} {word}"
        else:
            words.append(word)
    return words


@lru_cache(maxsize=65536)
def parse_facets(name: str) -> Facets:
    words = _words(" ".join(name.split()))
    # a category noun ("模块", "主板") says what kind of thing the product is, not which one: it is
    # no facet, so a question writing it tells no sibling apart ("MF1 模块 V2" is model MF1, version V2)
    words = [w for w in words if w not in PRODUCT_NOUNS] or words
    if not words:
        return Facets()
    version = words.pop() if len(words) > 1 and VERSION_WORD.fullmatch(words[-1]) else ""
    brand_words = 0
    for brand in sorted(brand_aliases(), key=len, reverse=True):  # a known brand of several words
        if " ".join(words).lower().startswith(brand.lower() + " "):
            brand_words = len(_words(brand))
            break
    # otherwise the first word when more follow, unless it starts lower case: "myCobot 280" is a line, not a maker
    if not brand_words and len(words) > 1 and words[0][:1].isupper() and not re.search(r"\d", words[0]):
        brand_words = 1
    rest = words[brand_words:]
    at = next((i for i, w in enumerate(rest) if re.search(r"\d", w)), 0 if rest else -1)
    if at < 0:
        return Facets(brand=" ".join(words), version=version)
    return Facets(brand=" ".join(words[:brand_words]), family=" ".join(rest[:at]), code=_without_noun(rest[at]),
                  variant=" ".join(rest[at + 1:]), version=version)


def _without_noun(code: str) -> str:
    """A code with a category noun glued on ("MF1模块") is the code."""
    noun = next((n for n in PRODUCT_NOUNS if code.endswith(n) and len(code) > len(n)), "")
    return code[:len(code) - len(noun)] if noun else code


def short_forms(name: str) -> list[str]:
    """Short forms a name's own words give: each family word by its initial or whole, glued to the
    code ("Lichee Pi 4A" -> "LPi4A", "LP4A"). Only with two family words or more and a code holding a
    digit: one initial before a number ("m280") is too short to stand for one product."""
    f = parse_facets(name)
    if len(f.family.split()) < 2 or not re.search(r"\d", f.code):
        return []
    family = f.family.split()
    forms = {"".join(parts) + f.code for parts in itertools.product(*[(w[0], w) for w in family])}
    forms.discard("".join(family) + f.code)  # the name itself written without spaces
    return sorted(forms)


def code_tails(names: list[str]) -> list[tuple[str, str, str]]:
    """Siblings whose codes share a long beginning are told apart by the rest, and people write the
    rest alone ("C6" for "ESP32C6" beside "ESP32C3"): (tail, the model it ends, the shared beginning).
    A tail must hold a letter and a digit, so a bare number ("36" of "EBB36") never stands for a product."""
    lines: dict[tuple[str, str], list[Facets]] = {}
    for name in names:
        f = parse_facets(name)
        if f.code:
            lines.setdefault((f.brand, f.family), []).append(f)
    tails: list[tuple[str, str, str]] = []
    for line in lines.values():
        codes = {re.sub(r"[\W_]", "", f.code).lower(): f for f in line}
        if len(codes) < 2:
            continue
        start = len(os.path.commonprefix(list(codes)))
        # the tail starts where letters and digits meet: "ESP32" + "C3", not "ESP32C" + "3"
        def splits(at: int) -> bool:
            return all(len(c) > at and c[at - 1].isdigit() != c[at].isdigit() and re.search(r"[a-z]", c[at:])
                       and re.search(r"\d", c[at:]) for c in codes)
        while start > 3 and not splits(start):
            start -= 1
        for code, f in codes.items():
            tail = code[start:]
            if start >= 3 and len(tail) >= 2 and re.search(r"[a-z]", tail) and re.search(r"\d", tail):
                tails.append((tail, " ".join(w for w in (f.brand, f.model) if w), code[:start]))
    return tails


PRODUCT, BRAND, EDITION_OF = "product", "brand", "edition"
# What a manual says of itself when a newer one replaced it ("旧版文档 待更新"), and what a question
# writes to ask for that manual ("按旧版用户手册"): the same words, so the two meet.
_EDITION = r"[旧老]版(?:本)?的?(?:用户|使用|简明|中文)?(?:文档|手册|说明书|资料)"
EDITION = re.compile(_EDITION)
# The manual says it of itself, at its top: a notice line ("！！！ 旧版文档 待更新") or "本文为旧版说明书";
# "旧版说明书里的接线图已作废" speaks of another manual.
SELF_EDITION = re.compile(rf"^[\s!！>*：:\-]*(?:注意|提示|说明|警告)?[\s：:]*{_EDITION}[\s,，。!！]*"
                          r"(?:待更新|不再维护|已停止维护|仅供参考)?[\s。!！]*$"
                          rf"|(?:本|此|该)(?:文档|文|手册|说明书|页面|页)(?:为|是|属于)?{_EDITION}", re.MULTILINE)
OLD_EDITION = "旧版"
EDITION_HEAD_CHARS = 300


@dataclass
class ProductAliases:
    """A catalogue's aliases: product -> [{"alias", "of": "product" | "brand", "source", "by"}].
    An alias "of" the brand stands for the brand of every product that has it (a maker's Chinese
    name a document writes); one "of" the product for that product alone."""
    products: dict[str, list[AliasEntry]] = field(default_factory=dict)

    def editions(self) -> set[str]:
        """The products whose documents call themselves an old edition."""
        return {name for name, entries in self.products.items() if any(e.get("of") == EDITION_OF for e in entries)}

    def expansions(self, names: list[str]) -> list[tuple[str, str]]:
        """(alias, what it stands for) over the given catalogue, longest alias first."""
        pairs: dict[str, str] = {}
        brands = {parse_facets(n).brand for n in names}
        for brand, aliases in brand_aliases().items():
            if brand in brands:
                pairs.update({a: brand for a in aliases})
        for name in names:
            # a short form stands for the model it abbreviates: the variants then decide as when written out
            model = " ".join(w for w in (parse_facets(name).brand, parse_facets(name).model) if w)
            pairs.update({a: model for a in short_forms(name)})
            for entry in (e for e in self.products.get(name, []) if e.get("of") != EDITION_OF):  # no name
                brand = parse_facets(name).brand
                pairs[entry["alias"]] = brand if entry.get("of") == BRAND and brand else name
        return sorted(pairs.items(), key=lambda p: -len(p[0]))


def clean_alias(text: str) -> str:
    return " ".join(str(text or "").split())[:MAX_ALIAS_CHARS]


# A product's other name needs the document to say so ("以下简称“LC4A”", "（简称 LPi4A）"): a bare
# bracket after a product's name holds a chip, a version or a variant as often ("Duo（CV1800B）").
# A brand's needs only the maker's name in the other script beside it: "Sipeed（矽速）", "矽速（Sipeed）".
_CALLED = (r"[（(]?\s*(?:以下简称|简称为?|又称|亦称|或称)\s*[“\"]?"
           r"([A-Za-z0-9\u4e00-\u9fff][A-Za-z0-9\-\u4e00-\u9fff]{0,19})")
_CJK_BESIDE = r"[（(]\s*([\u4e00-\u9fff]{2,8})\s*[)）]"
_LEADING = "是由的为和与在将把从"  # a one-character word that runs into a Chinese name before a bracket


def document_aliases(name: str, text: str) -> list[AliasEntry]:
    """Other names a document writes right beside its product's name ("简称 X" after it) or its brand
    (the maker's Chinese name in brackets after it, or it in brackets after that), and the edition it
    says it is at its top ("旧版文档"); [{"alias", "of"}]."""
    f = parse_facets(name)
    found: list[tuple[str, str]] = []
    unbranded = " ".join(w for w in (f.model, f.variant, f.version) if w)
    targets = [(t, of) for t, of in ((name, PRODUCT), (unbranded, PRODUCT), (f.model, PRODUCT), (f.brand, BRAND))
               if len(t) >= 2]
    for target, of in dict.fromkeys(targets):
        escaped = re.escape(target).replace(r"\ ", r"\s*")
        after = _CJK_BESIDE if of == BRAND else r"，?\s*" + _CALLED
        found += [(m.group(1), of) for m in re.finditer(escaped + r"\s*" + after, text, flags=re.IGNORECASE)]
        if of == BRAND:
            found += [(m.group(1).lstrip(_LEADING), of) for m in
                      re.finditer(r"([\u4e00-\u9fff]{2,8})\s*[（(]\s*" + escaped + r"\s*[)）]", text, flags=re.IGNORECASE)]
    own = {w.lower() for w in _words(name)} | {t.lower() for t, _ in targets}
    out: dict[str, AliasEntry] = {}
    for alias, of in found:
        alias = clean_alias(alias)
        if alias and alias.lower() not in own and alias not in out:
            out[alias] = {"alias": alias, "of": of}
    entries = list(out.values())[:MAX_ALIASES]
    if SELF_EDITION.search(text[:EDITION_HEAD_CHARS]):
        entries.append({"alias": OLD_EDITION, "of": EDITION_OF})
    return entries
