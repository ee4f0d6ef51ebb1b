"""node_product_recognition: which product is this document about?

Order: the name the user gave > the chat model > an offline guess that beats the bare file title
(documentation sites export pages named `introduction.md`).
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path

from langchain_core.runnables import RunnableConfig
from langchain_openai import ChatOpenAI

from graphs.base import graph_node
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.recognition import MAX_NAME_CHARS, SetRecogniser, is_valid_name, read_page
from graphs.importing.state import ImportGraphState
from graphs.vocabulary import PRODUCT_NOUNS
from services.chat_model import invoke_text
from services.prompts import load_prompt

log = logging.getLogger("import.node_product_recognition")

TOP_K = 3
CONTEXT_LIMIT = 2500
GENERIC_WORDS = re.compile(
    r"(产品)?(简明)?(用户|使用|操作|安装)?(手册|说明书|说明|指南|教程)|快速上手|快速入门|入门|上手|简介|介绍|"
    r"\b(user\s*manual|manual|guide|getting\s*started|get\s*started|quick\s*start|introduction|overview|readme)\b",
    re.IGNORECASE,
)
GENERIC_TITLES = {"", "index", "readme", "introduction", "intro", "overview", "quick-start", "quickstart",
                  "getting-started", "get-started", "无标题", "目录"}
VERSION = re.compile(r"(?<![A-Za-z0-9])(v\d+(?:\.\d+)?|\d+(?:\.\d+)?[mg]b?)(?![A-Za-z0-9])", re.IGNORECASE)
MODEL_CODE = re.compile(r"[A-Za-z]+-?\d|\d+[A-Za-z]")
BRAND_BEFORE = r"([A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)?)[\s\u3000]*{name}"


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


def offline_product(md_text: str, chunks: list[dict], file_title: str, source: Path) -> str:
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
        if m.group(1).lower() not in compact and len(m.group(1)) > 1
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


def model_product(llm: ChatOpenAI, chunks: list[dict], file_title: str) -> str:
    context = "\n\n".join(f"【片段{i}】\n{c['content']}" for i, c in enumerate(chunks[:TOP_K], 1))
    user = load_prompt("product_user", file_title=file_title, context=context[:CONTEXT_LIMIT])
    try:
        name = invoke_text(llm, load_prompt("product_system"), user)
    except Exception as exc:  # the offline guess takes over
        log.warning("LLM item name failed: %s", exc)
        return ""
    name = name.strip().strip("“”\"'`")
    # The seed strips every blank from a Chinese name; any name must stay on one line for filters.
    name = re.sub(r"\s+", "", name) if re.search(r"[\u4e00-\u9fff]", name) else one_line(name)
    return "" if name in {"", '""', "空字符串"} else name[:MAX_NAME_CHARS]


@graph_node("import", "node_product_recognition", "商品名识别")
def node_product_recognition(state: ImportGraphState, config: RunnableConfig) -> dict:
    llm = ImportConfiguration.from_runnable_config(config).chat_model()
    chunks = state["chunks"]
    given = one_line(state.get("requested_product") or "")
    evidence = state.get("product_evidence", "")
    if given:
        name, source = given, state.get("product_source") or "user"
    else:
        text = state.get("md_content", "")
        page = read_page(state["import_file_path"], text)
        stems = {state["file_title"], Path(state["import_file_path"]).stem}
        # the model proposes; a name the document does not use (or a stem, a heading) is refused
        name, source = (model_product(llm, chunks, state["file_title"]) if llm else ""), "llm"
        if not is_valid_name(name, [page], stems):
            name, source = offline_product(text, chunks, state["file_title"], Path(state["import_file_path"])), "offline"
        if not is_valid_name(name, [page], stems):
            named = SetRecogniser([page]).assign().get(page.key)
            if named and named.product:
                name, evidence = named.product, named.evidence
            else:
                evidence = "未能从文档中确定产品名，请确认或修改"
    named_chunks = [{**chunk, "product": name} for chunk in chunks]
    how = {"user": "用户指定", "set": "按整组文档识别", "llm": "大模型识别", "offline": "离线规则识别"}[source]
    return {"chunks": named_chunks, "product": name, "product_source": source, "product_evidence": evidence,
            "_summary": f"{name}（{how}）" + (f"：{evidence}" if evidence else "")}
