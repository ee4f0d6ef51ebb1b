"""Which product each document of a set is about, from what the documents themselves say.

A set is what arrives together: a folder import or a multi-file upload (a single file is a set of
one). A product name is a name the documents use: a model written in titles and body text, backed by
a folder named after it, a brand written before it, or a product noun after it ("Jupiter 主板",
"Milk-V Mars 是一款…"). Section headings, file stems, generic nouns and hashes never qualify. A page
that names no product inherits from its folder siblings; what stays unclear is said, not invented.
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from graphs.importing.naming import MAX_NAME_CHARS, offline_product
from graphs.products import brand_aliases
from graphs.vocabulary import PRODUCT_NOUNS, TECH_NOUNS, TECH_TERMS
from services.converter_box import markdown_of
from services.settings import get_settings
from services.text_files import read_text

HEX_HASH = re.compile(r"^[0-9a-f]{12,}$", re.IGNORECASE)
VARIANT = re.compile(r"^(?:[A-Z]{1,4}|[A-Za-z]*\d[A-Za-z0-9.]*|Pro|Max|Plus|Lite|Mini|Ultra|SE|Air)$")
TOKEN = r"[A-Za-z0-9][A-Za-z0-9]*(?:[-.+][A-Za-z0-9]+)*"
PHRASE = re.compile(rf"(?<![A-Za-z0-9_\-./]){TOKEN}(?:(?: | ?& ?){TOKEN}){{0,4}}(?![A-Za-z0-9_\-])")
# words joined by "&" are one brand ("Lynk & Co"), never two names
WORD = re.compile(r"[A-Z][A-Za-z0-9]*(?: ?& ?[A-Z][A-Za-z0-9]*)+|[^\s&]+")
FRONT_MATTER = re.compile(r"\A\ufeff?---\s*\n(.*?)\n---\s*\n", re.DOTALL)
ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)
SETEXT = re.compile(r"^(?P<title>[^\n#>\-=*|][^\n]*)\n(?P<rule>=+|-+)[ \t]*$", re.MULTILINE)
NOISE = re.compile(r"```.*?```|~~~.*?~~~|`[^`\n]*`|!\[[^\]]*\]\([^)]*\)|\]\([^)]*\)|<[^>]+>|https?://\S+", re.DOTALL)


@dataclass
class Page:
    """One document of the set, reduced to what recognition reads."""
    key: str                        # how the caller names it (a path)
    folders: tuple[str, ...]        # folders inside the set, outermost first (empty: no folder information)
    titles: list[str]               # front matter title / sidebar_label, level-1 and setext headings
    text: str                       # the body without code, links' targets, images and tags


@dataclass
class Recognised:
    product: str                    # "" when nothing in the set names one
    how: str                        # "named" | "folder" | "set" | "weak" | "none"
    evidence: str                   # said to the person, in Chinese
    backed: bool = False            # the page's title / front matter, or a folder named after it, says so


@dataclass
class _Candidate:
    alias: str                      # the model as written without the brand, lower case
    forms: Counter = field(default_factory=Counter)
    brands: Counter = field(default_factory=Counter)
    title_pages: set = field(default_factory=set)
    pages: Counter = field(default_factory=Counter)
    product_nouns: int = 0
    tech_nouns: int = 0
    folders: set = field(default_factory=set)   # folder paths whose name is this model


def _fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def _compact(text: str) -> str:
    return re.sub(r"[\s\-_.]+", "", _fold(text))


def read_page(key: str, text: str, folders: tuple[str, ...] = ()) -> Page:
    """Split a Markdown document into the titles and body that recognition reads."""
    titles: list[str] = []
    m = FRONT_MATTER.match(text)
    if m:
        for line in m.group(1).splitlines():
            k, _, v = line.partition(":")
            if k.strip() in ("title", "sidebar_label") and v.strip():
                titles.append(v.strip().strip("'\""))
        text = text[m.end():]
    titles += [h.group(2) for h in ATX.finditer(text) if len(h.group(1)) == 1]
    titles += [s.group("title") for s in SETEXT.finditer(text) if s.group("rule").startswith("=")]
    if not titles:  # no level-1 heading: the document's first heading is its title
        first = ATX.search(text)
        if first:
            titles.append(first.group(2))
    body = NOISE.sub(" ", text)
    body = re.sub(r"[*_`#>|]+", " ", body)
    return Page(key, folders, [re.sub(r"[*_`#]+", " ", t).strip() for t in titles], body)


def _is_model_token(tok: str) -> bool:
    low = tok.lower()
    if low in TECH_TERMS or HEX_HASH.match(tok) or len(tok) < 2 and not tok.isdigit():
        return False
    return bool(re.search(r"[A-Za-z]", tok))


def _phrases(text: str):
    """(start, end, tokens) of every run of Latin words, split at words no product name holds."""
    for m in PHRASE.finditer(text):
        words = [(m.start() + w.start(), w.group(0)) for w in WORD.finditer(m.group(0))]
        toks = [w for _, w in words]
        run: list[tuple[int, str]] = []
        for n, (pos, tok) in enumerate(words + [(0, None)]):
            # a number opens a run only before a model word: "280 M5" is a model, "450 mm" is not
            opens = tok is not None and tok.isdigit() and n + 1 < len(toks) and _is_model_token(toks[n + 1])
            if tok is not None and (_is_model_token(tok) or opens or run and VARIANT.match(tok)):
                run.append((pos, tok))
            elif run:
                yield run[0][0], run[-1][0] + len(run[-1][1]), [t for _, t in run]
                run = []


def _folder_keys(folders: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Compact forms a folder path gives a model, each with the folder it names: `mars/compute-module`
    -> mars (mars), computemodule, cm, marscm, marscomputemodule (mars/compute-module)."""
    keys: dict[str, tuple[str, ...]] = {}
    parts = [re.split(r"[-_ ]+", f) for f in folders]
    for i, words in enumerate(parts):
        whole = "".join(words).lower()
        initials = "".join(w[:1] for w in words if w).lower() if len(words) > 1 else ""
        forms = {whole} | ({initials} if initials else set())
        for prev in parts[:i]:
            p = "".join(prev).lower()
            forms |= {p + whole} | ({p + initials} if initials else set())
        # the words that tell a model from its siblings: a folder `kite-450-m5` is named after "450 M5"
        # and "M5" as well as "Kite 450 M5"
        forms |= {"".join(words[k:]).lower() for k in range(1, len(words))
                  if any(re.search(r"\d", w) for w in words) and re.search(r"[a-z]", "".join(words[k:]).lower())}
        keys.update({k: folders[:i + 1] for k in forms if len(k) >= 2})
    return keys


def _after(text: str, end: int) -> str:
    return text[end:end + 8].lstrip(" ")


class SetRecogniser:
    """Recognition over one set of pages (see the module docstring)."""

    def __init__(self, pages: list[Page]):
        self.pages = pages
        self.candidates: dict[str, _Candidate] = {}
        self.alias_of: dict[str, str] = {}
        self._collect()
        self.sibling_groups = self._sibling_groups()
        self.products = self._products()
        self.patterns = self._patterns()

    def _cand(self, alias: str) -> _Candidate:
        return self.candidates.setdefault(_compact(alias), _Candidate(alias))

    def _collect(self) -> None:
        for page in self.pages:
            keys = _folder_keys(page.folders)
            for source, text in [("title", t) for t in page.titles] + [("body", page.text)]:
                for start, end, toks in _phrases(text):
                    # every sub-run that starts at a model word is a candidate model, the word before it
                    # a possible brand ("Milk-V Mars CM" -> "mars cm" by Milk-V, "mars", "cm"...)
                    for i in range(len(toks)):
                        numeric = toks[i].isdigit()
                        if not (numeric or re.match(r"[A-Z0-9]|[a-z]+[A-Z]", toks[i]) and _is_model_token(toks[i])):
                            continue  # product names are written capitalised ("myCobot" too); "to remove" is prose
                        for j in range(i + 1 + numeric, len(toks) + 1):
                            alias = _fold(" ".join(toks[i:j]))
                            if j - i == 1 and VARIANT.match(toks[i]) and not re.search(r"\d", toks[i]):
                                continue  # a lone "CM" or "Pro" is no model
                            c = self._cand(alias)
                            c.forms[" ".join(toks[i:j])] += 1
                            c.pages[page.key] += 1
                            if i > 0 and re.match(r"[A-Z]", toks[i - 1]):
                                c.brands[toks[i - 1]] += 1
                            if source == "title":
                                c.title_pages.add(page.key)
                            if j == len(toks):
                                nxt = _after(text, end)
                                c.product_nouns += nxt.startswith(PRODUCT_NOUNS)
                                c.tech_nouns += nxt.startswith(TECH_NOUNS)
                            if _compact(alias) in keys:
                                c.folders.add(keys[_compact(alias)])

    def _sibling_groups(self) -> list[set[str]]:
        """The pages of each sibling folder at the first level where the set's folders part (`a/x`,
        `a/y`, `a/z` under one `a`); none when the set has no folders or a single one."""
        depth = 0
        while True:
            deeper = [p for p in self.pages if len(p.folders) > depth]
            parts = {p.folders[:depth + 1] for p in deeper}
            if len(parts) != 1 or not deeper:
                break
            depth += 1
        groups: dict[tuple, set[str]] = defaultdict(set)
        for page in self.pages:
            if len(page.folders) > depth:
                groups[page.folders[:depth + 1]].add(page.key)
        return list(groups.values()) if len(groups) >= 2 else []

    def _shared_by_siblings(self, c: _Candidate) -> bool:
        """Written alike in every sibling folder (a language, a system, an app every variant's pages
        use) and named after none of them: what the siblings share cannot tell one from another."""
        return bool(self.sibling_groups) and not c.folders and all(g & set(c.pages) for g in self.sibling_groups)

    def _is_product(self, c: _Candidate) -> bool:
        if re.fullmatch(r"[\d.]+|v[\d.]+", c.alias) or HEX_HASH.match(c.alias.replace(" ", "")):
            return False
        if self._shared_by_siblings(c):
            return False
        named = bool(c.title_pages) or sum(c.pages.values()) >= 3
        branded = any(self._is_brand(b) for b in c.brands)
        if not (c.folders or re.search(r"\d", c.alias) or any(self._brand_of_several(b) for b in c.brands)
                or c.title_pages and any(self._brand_of_others(b, c) for b in c.brands)):
            # no model code, no folder, no brand of a product line, no page titled by it that writes it
            # after a brand the set writes before another name too: a section, a feature ("Record Audio")
            return False
        # a brand's model is named by a title, or by its model code written again and again
        return bool(c.folders) or named and (c.product_nouns > c.tech_nouns
                                             or branded and (bool(c.title_pages) or bool(re.search(r"\d", c.alias))))

    def _family_only(self, c: _Candidate) -> bool:
        """Every time the words are written, one of two or more model words follows them."""
        after = Counter()
        for d in self.candidates.values():
            if d.alias.startswith(c.alias + " ") and " " not in d.alias[len(c.alias) + 1:]:
                # only the forms written with the family's words apart ("Duo S", not "DuoS")
                after[d.alias] = sum(n for f, n in d.forms.items() if _fold(f).startswith(c.alias + " "))
        return len(+after) >= 2 and sum(after.values()) >= sum(c.forms.values())

    def _brand_of_others(self, token: str, c: _Candidate) -> bool:
        """A brand that also stands before another name of the set ("Milk-V" before "Duo" and "Duo 256M")."""
        return self._is_brand(token) and any(d is not c and d.brands.get(token) for d in self.candidates.values())

    def _brand_of_several(self, token: str) -> bool:
        """A brand that also stands before another model of the set (a product line's name)."""
        return self._is_brand(token) and sum(1 for c in self.candidates.values()
                                             if c.brands.get(token) and " " not in c.alias) >= 2

    def _is_brand(self, token: str) -> bool:
        """A word written before two or more different models, or before a model that is a product by
        other evidence, and never a model of its own with a product noun."""
        low = _fold(token)
        if low in TECH_TERMS or not re.search(r"[A-Za-z]", token):
            return False
        if "&" in token:  # "Lynk & Co": a company's name by its very form
            return True
        if not re.match(r"[A-Z]", token) or token[:1].isdigit():
            return False
        own = self.candidates.get(_compact(token))
        if own is not None and (own.folders or own.product_nouns > own.tech_nouns
                                or any(b != token for b in own.brands)):
            return False  # a model of its own ("Mars" before "CM"), or itself after a brand
        followers = [c for c in self.candidates.values() if c.brands.get(token) and " " not in c.alias]
        return len(followers) >= 2 and any(c.title_pages for c in followers) \
            or any(c.brands.get(token) and (c.folders or c.product_nouns) for c in self.candidates.values())

    def _products(self) -> dict[str, str]:
        """compact alias -> display name of every product the set names."""
        chosen = [c for c in self.candidates.values() if self._is_product(c)]
        chosen = [c for c in chosen if not self._is_brand(c.forms.most_common(1)[0][0])]
        # a folder named after a family whose pages only ever write one model of it ("orbit/" with
        # "Orbit S2" throughout) holds that model, not a product of the family's name
        chosen = [c for c in chosen if not c.folders or not any(
            d is not c and _compact(d.alias).startswith(_compact(c.alias)) and " " in d.alias
            and sum(d.pages.values()) >= sum(c.pages.values()) for d in chosen)]
        # a family's words always followed by one of two or more model codes ("myKite 450" Pi / M5 /
        # Uno) do not tell the siblings apart: the family is no product
        chosen = [c for c in chosen if not self._family_only(c)]
        compacts = {_compact(c.alias) for c in chosen}
        kept = []
        for c in chosen:
            toks = c.forms.most_common(1)[0][0].split(" ")
            # "Milk-V Mars" is the brand and the model "Mars": it names that product, not another
            if len(toks) > 1 and self._is_brand(toks[0]) and _compact(" ".join(toks[1:])) in compacts:
                continue
            # a longer run over a shorter model is another product only when its extra words are
            # variant codes ("Mars CM", "Duo S") and a title or a folder names it
            shorter = [k for k in range(1, len(toks)) if _compact(" ".join(toks[:k])) in compacts]
            if shorter and not (all(VARIANT.match(t) for t in toks[shorter[-1]:])
                                and (c.title_pages or c.folders or len(c.pages) >= 2)):
                continue
            kept.append(c)
        # two names of one folder are one product ("Mars CM" and "Mars Compute Module")
        by_folder: dict[tuple, _Candidate] = {}
        # a folder that spells a model code names it whole ("myKite 450 M5" for `mykite-450-m5`), over
        # the short forms its pages use; otherwise the form written most
        def spelled(c: _Candidate) -> bool:
            return any(_compact(c.alias) == _compact(f[-1]) and re.search(r"\d", f[-1]) for f in c.folders)

        for c in sorted(kept, key=lambda c: (not spelled(c), -sum(c.pages.values()))):
            deepest = max(c.folders, key=len) if c.folders else None
            if deepest is not None and deepest in by_folder:
                self.alias_of[_compact(c.alias)] = _compact(by_folder[deepest].alias)
                continue
            if deepest is not None:
                by_folder[deepest] = c
            self.alias_of[_compact(c.alias)] = _compact(c.alias)
        names = {_compact(c.alias): self._display(c, kept) for c in kept}
        return {alias: names[target] for alias, target in self.alias_of.items()}

    def _display(self, c: _Candidate, kept: list[_Candidate]) -> str:
        # the form a title writes ("Duo S") over the body's shorthand ("DuoS")
        titled = Counter({f: n for f, n in c.forms.items()
                          if any(f in t for p in self.pages if p.key in c.title_pages for t in p.titles)})
        form = (titled or c.forms).most_common(1)[0][0]
        brands = Counter({b: n for b, n in c.brands.items() if self._is_brand(b)})
        if not brands:  # a variant takes the brand of the model it extends ("Mars CM" -> Milk-V)
            for other in kept:
                if other is not c and _compact(c.alias).startswith(_compact(other.alias)):
                    brands = Counter({b: n for b, n in other.brands.items() if self._is_brand(b)})
        brand = brands.most_common(1)[0][0] if brands else ""
        return f"{brand} {form}"[:MAX_NAME_CHARS] if brand else form[:MAX_NAME_CHARS]

    def _patterns(self) -> list[tuple[re.Pattern, str]]:
        """A pattern per written form of every product (brand + model, model alone), longest first."""
        forms: dict[str, str] = {}
        for key, name in self.products.items():
            c = self.candidates[key]
            for form in list(c.forms) + [name]:
                forms[_fold(form)] = name
        return [(_name_pattern(form), forms[form]) for form in sorted(forms, key=len, reverse=True)]

    def mentions(self, text: str) -> Counter:
        """Product -> how often `text` names it (the longest name wins where names overlap)."""
        counts: Counter = Counter()
        low = _fold(text)
        taken: list[tuple[int, int]] = []
        for pattern, name in self.patterns:
            for m in pattern.finditer(low):
                if not any(a < m.end() and m.start() < b for a, b in taken):
                    taken.append(m.span())
                    counts[name] += 1
        return counts

    def folder_product(self, page: Page) -> tuple[str, str] | None:
        """(product, folder) of the deepest folder on the page's path that is named after a product."""
        keys = _folder_keys(page.folders)
        best: tuple[int, str, str] | None = None
        for key, folder in keys.items():
            name = self.products.get(key)
            if name and (best is None or len(folder) > best[0]):
                best = (len(folder), name, "/".join(folder))
        return (best[1], best[2]) if best else None

    def assign(self) -> dict[str, Recognised]:
        """Per page: a product its title names > the product its folder is named after (unless the
        body is plainly about another) > the product its body names > its folder siblings' > the
        set's only product > asked."""
        out: dict[str, Recognised] = {}
        for page in self.pages:
            title = self.mentions(" \n ".join(page.titles))
            body = self.mentions(page.text)
            folder = self.folder_product(page)
            top = body.most_common(1)[0] if body else ("", 0)
            if title:
                name = max(title, key=lambda n: (title[n], body[n]))
                # a title may give only the family: the body then names the variant ("Mars" -> "Mars CM")
                variants = [v for v in body if v != name and _compact(v).startswith(_compact(name))
                            and body[v] >= 2 and body[v] > body[name]]
                titled = name
                if variants:
                    name = max(variants, key=lambda v: body[v])
                backed = name == titled or bool(folder) and folder[0] == name
                evidence = f"标题写明“{name}”" if name == titled else f"标题写明“{titled}”，正文多次写“{name}”"
                out[page.key] = Recognised(name, "named", evidence, backed)
            elif folder and not (top[1] >= 3 and top[1] > 2 * body[folder[0]] and top[0] != folder[0]):
                out[page.key] = Recognised(folder[0], "folder", f"所在文件夹 {folder[1]} 即“{folder[0]}”", True)
            elif top[1] >= 2 or len(body) == 1:
                out[page.key] = Recognised(top[0], "named", f"文中提到“{top[0]}” {top[1]} 次")
        self._inherit(out)
        return out

    def _inherit(self, out: dict[str, Recognised]) -> None:
        votes: dict[tuple, Counter] = defaultdict(Counter)
        for page in self.pages:
            if page.key in out:
                for depth in range(1, len(page.folders) + 1):
                    votes[page.folders[:depth]][out[page.key].product] += 1
        products = {r.product for r in out.values()}
        for page in self.pages:
            if page.key in out:
                continue
            for depth in range(len(page.folders), 0, -1):
                counts = votes.get(page.folders[:depth])
                if counts:
                    name = counts.most_common(1)[0][0]
                    out[page.key] = Recognised(name, "folder", f"本页未写产品名，按同一文件夹（{'/'.join(page.folders[:depth])}）的其他页面归入")
                    break
            else:
                if len(products) == 1:
                    only = next(iter(products))
                    out[page.key] = Recognised(only, "set", "本页未写产品名，同一批文档只涉及这一个产品")
                elif products:  # a provisional product, said to be one: the person is asked
                    body = self.mentions(page.text)
                    share = Counter(r.product for r in out.values() if r.how != "weak")
                    guess = (body or share).most_common(1)[0][0]
                    out[page.key] = Recognised(guess, "weak", f"本页没有写明是哪个产品，暂归入“{guess}”，请确认")


def refine(name: str, own: str) -> str:
    """A page's own offline name where it is the set's product made more specific by variant codes
    or a brand ("MF1" -> "Sipeed MF1 V1"), else the set's name."""
    mine = re.findall(TOKEN, own)
    model = [_fold(t) for t in re.findall(TOKEN, name)]
    folded = [_fold(t) for t in mine]
    if not model or not own or own == name:
        return name
    for k in range(len(folded) - len(model) + 1):
        if folded[k:k + len(model)] == model:
            extra = mine[:k] + mine[k + len(model):]
            if extra and all(VARIANT.match(t) or re.match(r"[A-Z]", t) and k > 0 and t in mine[:k] for t in extra):
                return own[:MAX_NAME_CHARS]
    return name


def is_valid_name(name: str, pages: list[Page], file_stems: set[str] = frozenset()) -> bool:
    """Whether a proposed name (a person's excepted) is one the documents use: not a file stem, a
    hash or a generic noun, and its model words written in the documents."""
    compact = _compact(name)
    if not compact or compact in {_compact(s) for s in file_stems} or HEX_HASH.match(compact):
        return False
    words = [w for w in re.findall(TOKEN, name) if _is_model_token(w)]
    if not words:
        return False
    text = _fold(" ".join([*(t for p in pages for t in p.titles), *(p.text for p in pages)]))
    # a version the file name carries ("m01_mf1_v1_get_started" -> V1) counts, other stem words do not
    stem_words = {_fold(w) for s in file_stems for w in re.split(r"[\s_\-]+", s)}
    return all(_fold(w) in text or re.fullmatch(r"v\d+(\.\d+)*", _fold(w)) and _fold(w) in stem_words
               for w in words) and any(_fold(w) in text for w in words)


def _name_pattern(form: str) -> re.Pattern:
    body = r"[\s\-_]*".join(re.escape(t) for t in re.split(r"[\s\-_]+", _fold(form)) if t)
    return re.compile(rf"(?<![a-z0-9]){body}(?![a-z0-9])")


def titled(name: str, titles: list[str]) -> bool:
    """Whether a title (front matter, the headings that open the document) writes the name (its
    brand may be left out)."""
    titles = _fold(" \n ".join(titles))
    words = re.findall(TOKEN, name)
    return bool(words) and any(_name_pattern(" ".join(words[k:])).search(titles)
                               for k in range(min(2, len(words))) if _is_model_token(words[k]))


def known_product(page: Page, known: list[str], least: int = 2) -> Recognised | None:
    """A product the knowledge base already holds that this page names: a page uploaded on its own
    joins its siblings. The name as the catalogue writes it, or its words from the model code on,
    counts; the longest name wins where names overlap ("450 Pi" over "450"). It needs the title, or
    `least` mentions and no rival named as often."""
    forms: list[tuple[str, str]] = []
    for name in known:
        words = re.findall(TOKEN, name)
        forms.append((name, name))
        # its short forms, down to the words from its model code on ("myKite 450 M5", "450 M5" of
        # "Veltro myKite 450 M5"); never a version alone ("V1" of "MF1 V1")
        code = next((i for i, w in enumerate(words) if re.search(r"\d", w)), 0)
        forms += [(" ".join(words[k:]), name) for k in range(1, code + 1)]
    forms.sort(key=lambda f: -len(f[0]))
    scores: Counter = Counter()
    in_title: set[str] = set()
    for part, text in (("title", " \n ".join(page.titles)), ("body", page.text)):
        low, taken = _fold(text), []
        for form, name in forms:
            for m in _name_pattern(form).finditer(low):
                if not any(a < m.end() and m.start() < b for a, b in taken):
                    taken.append(m.span())
                    scores[name] += 1
                    if part == "title":
                        in_title.add(name)
    if not scores:
        return None
    ranked = scores.most_common(2)
    name, n = ranked[0]
    rival = ranked[1][1] if len(ranked) > 1 else 0
    if name in in_title and not in_title - {name}:
        return Recognised(name, "known", f"标题写明知识库已有的“{name}”", True)
    if n >= least and n > rival:
        return Recognised(name, "known", f"文中提到知识库已有的“{name}” {n} 次", False)
    return None


def page_of(path: Path, root: Path | None, text: str) -> Page:
    folders = tuple(path.resolve().parent.relative_to(root.resolve()).parts) if root else ()
    return read_page(str(path), text, folders)


def page_text(path: Path) -> str | None:
    """A page's Markdown (a web page converted), or None for a whole manual or a file that cannot be
    read (the import itself reports it)."""
    kind = path.suffix.lower()
    try:
        if kind in (".md", ".markdown"):
            return read_text(path)
        max_bytes = get_settings().max_upload_mb * 1024 * 1024
        if kind in (".html", ".htm") and path.stat().st_size <= max_bytes:
            return markdown_of(path, "html", max_bytes=max_bytes)
    except Exception:
        return None
    return None


@dataclass
class PlannedFile:
    path: Path
    product: str       # "" where the set says nothing (the file's own recognition decides)
    how: str           # as Recognised.how, or "file" (left to the file's own recognition)
    evidence: str
    backed: bool = False


def with_maker(names: set[str]) -> dict[str, str]:
    """Names of a set that are another of its names without the maker's words before them ("XIAO
    ESP32C3" beside "Seeed Studio XIAO ESP32C3": a folder's name and a title's): one product, under
    the longer name. Maker's words are a reviewed brand, or words the set writes before two or more
    of its names; a model's words ("Mars" of "Mars CM") are neither."""
    folded = {n: " ".join(_fold(n).split()) for n in names}
    makers = {_fold(b) for b in brand_aliases()}

    def maker(words: str) -> bool:
        return words in makers or sum(f.startswith(words + " ") for f in folded.values()) >= 2

    out = {}
    for name, short in folded.items():
        longer = [m for m, f in folded.items() if m != name and f.endswith(" " + short)
                  and maker(f[:-len(short) - 1])]
        if len(longer) == 1:
            out[name] = longer[0]
    return out


def plan_set(paths: list[Path], root: Path | None = None,
             folders: dict[str, tuple[str, ...]] | None = None) -> list[PlannedFile]:
    """Products of a set of files before any is imported. Markdown and web pages are read together
    (`root` gives their folders, or `folders` per path for uploads that carried them; flat uploads
    have none); a PDF or a Word file is a whole manual and is left to its own recognition, as is a
    set of one."""
    pages, own = [], {}
    for path in paths:
        text = page_text(path) if len(paths) > 1 else None
        if text is None:
            continue
        pages.append(read_page(str(path), text, folders[str(path)]) if folders and str(path) in folders
                     else page_of(path, root, text))
        own[str(path)] = offline_product(text, [], path.stem, path)
    # one page beside whole manuals is no set: it is named on its own, as a single file is
    found = SetRecogniser(pages).assign() if len(pages) > 1 else {}
    out = []
    for path in paths:
        r = found.get(str(path))
        if r is None or not r.product:
            out.append(PlannedFile(path, "", "file" if r is None else r.how, r.evidence if r else ""))
        else:
            out.append(PlannedFile(path, refine(r.product, own.get(str(path), "")), r.how, r.evidence, r.backed))
    same = with_maker({f.product for f in out if f.product})
    return [replace(f, product=same[f.product], evidence=f"{f.evidence}；同一批文档里写作“{same[f.product]}”")
            if f.product in same else f for f in out]
