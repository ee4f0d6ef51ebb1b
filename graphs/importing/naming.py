"""How a document gets its product name: the rules for one name, and the order in which the sources
of a name win.

Sources, strongest first (`ORDER`): the person now (a name typed with the upload, a rename button) >
the person before (a rename, move or merge of this very file, remembered in its document record) >
the set it arrived with (recognised across the set's pages) > a product the knowledge base already
holds that a page whose title names none mentions (a page uploaded alone joins its siblings) > the
chat model > the document's own title block > what its text names > a held product the page
mentions only once (rather than a file stem). A proposal the documents do not back (a file stem, a
section heading, words the document never writes) is passed over; names decided already
(`DECIDED`) are not.

A name is confirmed silently only where a title, front matter or a folder named after the product
backs it; anything else is said with its evidence and asked (`Naming.confirm`).
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from graphs.importing.state import Chunk
from graphs.vocabulary import PRODUCT_NOUNS
from services.documents import DocumentRecord

MAX_NAME_CHARS = 100
ORDER = ("user", "remembered", "set", "known", "llm", "offline", "page", "known_once")
# names decided before this document's own words are read: a person's, the set's (weighed across its
# pages; one page may not write them whole) and the catalogue's
DECIDED = ("user", "remembered", "set", "known", "known_once")
SOURCE_NAMES = {"user": "用户指定", "remembered": "沿用用户此前的决定", "set": "按整组文档识别",
                "known": "归入知识库已有产品", "known_once": "归入知识库已有产品", "llm": "大模型识别", "offline": "离线规则识别", "page": "按正文识别"}
# record sources that are a person's decision (a rename, move or merge, a typed name, one carried on)
USER_SOURCES = ("user", "remembered")

GENERIC_WORDS = re.compile(
    r"(产品)?(简明)?(用户|使用|操作|安装|车主)?(手册|说明书|说明|指南|教程)|快速上手|快速入门|入门|上手|简介|介绍|"
    r"\b(user\s*manual|owner'?s\s*manual|manual|guide|getting\s*started|get\s*started|quick\s*start|introduction|overview|readme)\b",
    re.IGNORECASE,
)
GENERIC_TITLES = {"", "index", "readme", "introduction", "intro", "overview", "quick-start", "quickstart",
                  "getting-started", "get-started", "无标题", "目录"}
VERSION = re.compile(r"(?<![A-Za-z0-9])(v\d+(?:\.\d+)?|\d+(?:\.\d+)?[mg]b?)(?![A-Za-z0-9])", re.IGNORECASE)
MODEL_CODE = re.compile(r"[A-Za-z]+-?\d|\d+[A-Za-z]")
# a brand before the title's model: one word, or words joined by "&", "-", "." or a space ("Lynk & Co")
BRAND_BEFORE = r"([A-Z][A-Za-z0-9]*(?:(?:\s?&\s?|[-.])[A-Z][A-Za-z0-9]*|-[A-Za-z0-9]+)*)[\s\u3000]*{name}"
TOP_K = 3


@dataclass
class Proposal:
    """One source's name for a document, with what backs it."""
    source: str                  # what the document record keeps as its product_source (a key of ORDER, mostly)
    product: str
    how: str                     # as the summary says it: user | remembered | named | folder | set | weak | known | file
    evidence: str = ""           # said to the person, in Chinese
    backed: bool = False         # a title, front matter or a folder named after the product says so


@dataclass
class Naming:
    product: str
    source: str
    how: str
    evidence: str
    confirm: bool                # the summary asks the person to confirm it


def one_line(text: str) -> str:
    """Milvus filters cannot match CR/LF/tab (they are turned into spaces there): store names so."""
    return re.sub(r"\s+", " ", text).strip()


def clean_name(text: str) -> str:
    text = re.sub(r"[`*_#>\[\]]", "", text)
    text = GENERIC_WORDS.sub(" ", text)
    text = re.sub(r"[（(]\s*[)）]", " ", text)
    text = re.sub(r"[\s\u3000:：,，。.!！-]+$", "", re.sub(r"\s+", " ", text)).strip()
    return text.strip(" -_:：")


def title_lines(md_text: str) -> str:
    """The headings that open the document, e.g. `# BIGTREETECH` / `## SKR MINI E3 V2.0` /
    `### 主板使用说明书`, joined; decorations (levels 5-6) are skipped. Once a model code is in, a
    following heading joins only if it names the kind of product (主板): `## 复位` is a section."""
    found: list[str] = []
    for line in md_text.splitlines():
        stripped = line.strip()
        m = re.match(r"^(#{1,6})\s+(.+)$", stripped)
        if m:
            if len(m.group(1)) <= 4:
                if any(MODEL_CODE.search(f) for f in found) and clean_name(m.group(2)) not in PRODUCT_NOUNS:
                    break
                found.append(m.group(2))
            if len(found) == 3:
                break
        elif found and stripped and not stripped.startswith(("![", "<")):
            break  # body text: the title block is over
    return " ".join(found)


def offline_product(md_text: str, chunks: list[Chunk], file_title: str, source: Path) -> str:
    """Opening title lines, plus the brand written before them and a version the file name carries."""
    text = md_text[:20000] or "\n".join(c["content"] for c in chunks[:TOP_K])
    stem_name = clean_name(file_title.replace("_", " "))
    base = clean_name(title_lines(md_text))
    if not re.search(r"[A-Za-z]+\d|\d+[A-Za-z]|[A-Za-z]{2,}", base):
        # A title with no model-like token ("产品说明书") says less than the file name.
        base = stem_name or base
    if base.lower().replace(" ", "-") in GENERIC_TITLES:
        base = clean_name(source.parent.name.replace("-", " ").replace("_", " ")) or file_title
    compact = base.lower().replace(" ", "")
    head = re.match(r"[A-Za-z]+", base)
    if head and re.fullmatch(r"[A-Z]{3,}", base.split(" ")[0]):
        head = None  # an all-caps first word (BIGTREETECH) is the brand already
    brands = Counter(
        m.group(1) for m in re.finditer(BRAND_BEFORE.format(name=re.escape(head.group(0))), text)
        if re.sub(r"\s", "", m.group(1)).lower() not in compact and len(m.group(1)) > 1
    ) if head else Counter()
    name = base
    if brands:
        name = f"{brands.most_common(1)[0][0]} {base}"
    # Versions in the file name that the title lacks ("m01_mf1_v1_get_started" -> V1).
    for m in VERSION.finditer(file_title.replace("_", " ")):
        token = m.group(1)
        if token.lower() not in name.lower().replace(" ", ""):
            name = f"{name} {token.upper()}"
    # A title line can be any length; a name must fit the name field.
    return re.sub(r"\s+", " ", name).strip()[:MAX_NAME_CHARS] or file_title[:MAX_NAME_CHARS]


def tidy_model_answer(name: str) -> str:
    """A chat model's answer as a name: unquoted, on one line (a Chinese name without blanks), or ""."""
    name = name.strip().strip("“”\"'`")
    name = re.sub(r"\s+", "", name) if re.search(r"[\u4e00-\u9fff]", name) else one_line(name)
    return "" if name in {"", '""', "空字符串"} else name[:MAX_NAME_CHARS]


def remembered(records: Iterable[DocumentRecord | None]) -> Proposal | None:
    """A person's earlier decision about this file (a rename, a move, a merge, a typed name), from the
    record of the same document, or of another upload with the same content."""
    for record in records:
        if record and record.get("product") and record.get("product_source") in USER_SOURCES:
            return Proposal("remembered", record["product"], "remembered",
                            f"沿用此前的决定：这份文件曾被改为“{record['product']}”", backed=True)
    return None


def decide(proposals: dict[str, Callable[[], Proposal | None]], accept: Callable[[str], bool]) -> Naming:
    """The first proposal in ORDER that is there and that the document's words back (a decided one
    always is). Sources are asked lazily: the chat model is not called when a person already named the file."""
    for source in ORDER:
        make = proposals.get(source)
        proposal = make() if make else None
        if proposal is None or not one_line(proposal.product):
            continue
        name = one_line(proposal.product)[:MAX_NAME_CHARS]
        if source in DECIDED or accept(name):
            backed = proposal.backed or source in ("user", "remembered")
            return Naming(name, proposal.source, proposal.how, proposal.evidence or SOURCE_NAMES.get(proposal.source, ""),
                          not backed)
    return Naming("", "none", "file", "未能从文档中确定产品名，请确认或修改", True)
