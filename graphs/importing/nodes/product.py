"""node_product_recognition: which product is this document about?

Each source of a name proposes one; graphs/importing/naming.py says which wins and whether the
person is asked to confirm it.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.naming import (
    SOURCE_NAMES, Proposal, clean_name, decide, offline_product, one_line, remembered, tidy_model_answer,
    title_lines,
)
from graphs.importing.recognition import SetRecogniser, is_valid_name, known_product, read_page, titled
from graphs.importing.state import Chunk, ImportGraphState, ImportUpdate
from services.chat_model import invoke_text
from services.documents import DocumentRecord, DocumentRegistry
from services.prompts import load_prompt

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

log = logging.getLogger("import.node_product_recognition")

TOP_K = 3
CONTEXT_LIMIT = 2500


def model_product(llm: ChatOpenAI, chunks: list[Chunk], file_title: str) -> str:
    context = "\n\n".join(f"【片段{i}】\n{c['content']}" for i, c in enumerate(chunks[:TOP_K], 1))
    user = load_prompt("product_user", file_title=file_title, context=context[:CONTEXT_LIMIT])
    try:
        return tidy_model_answer(invoke_text(llm, load_prompt("product_system"), user))
    except Exception as exc:  # the offline sources take over
        log.warning("LLM product name failed: %s", exc)
        return ""


def earlier_records(registry: DocumentRegistry, state: ImportGraphState) -> list[DocumentRecord | None]:
    """This document's record, then those of other documents with the same content (the same file
    uploaded under another name)."""
    mine = registry.get(state["doc_id"]) if state.get("doc_id") else None
    digest = state.get("content_hash")
    same = [r for r in registry.list() if digest and r.get("content_hash") == digest and r["doc_id"] != state.get("doc_id")]
    return [mine, *sorted(same, key=lambda r: -float(r.get("imported_at") or 0))]


@graph_node("import", "node_product_recognition", "商品名识别")
def node_product_recognition(state: ImportGraphState, config: RunnableConfig) -> ImportUpdate:
    cfg = ImportConfiguration.from_runnable_config(config)
    chunks, text = state["chunks"], state.get("md_content", "")
    page = read_page(state["import_file_path"], text)
    stems = {state["file_title"], Path(state["import_file_path"]).stem}
    given, source = one_line(state.get("requested_product") or ""), state.get("product_source") or "user"
    given_evidence = state.get("product_evidence", "")
    llm = cfg.chat_model()

    titles = [*page.titles, title_lines(text)]

    def from_title(source_name: str, name: str, otherwise: str) -> Proposal:
        backed = titled(name, titles)
        return Proposal(source_name, name, "file", f"标题写明“{name}”" if backed else otherwise, backed)

    def from_page() -> Proposal | None:
        found = SetRecogniser([page]).assign().get(page.key)
        return Proposal("page", found.product, found.how, found.evidence, found.backed) if found and found.product else None

    offline = from_title("offline", offline_product(text, chunks, state["file_title"], Path(state["import_file_path"])),
                         "按标题、文件名或文件夹推测")
    accept = lambda name: is_valid_name(name, [page], stems)  # noqa: E731
    # a document whose own title block writes a model is that product, whatever siblings the catalogue holds
    title_block = clean_name(title_lines(text))
    own_title = accept(offline.product) and (offline.backed or bool(re.search(r"[A-Za-z]", title_block)
                                                                    and re.search(r"\d", title_block)))

    def from_known(least: int) -> Proposal | None:
        if own_title:
            return None
        found = known_product(page, [p["product"] for p in cfg.registry.products()], least)
        return Proposal("known", found.product, found.how, found.evidence, found.backed) if found else None

    naming = decide({
        "user": lambda: Proposal("user", given, "user", given_evidence or SOURCE_NAMES["user"], True)
        if given and source == "user" else None,
        "remembered": lambda: remembered(earlier_records(cfg.registry, state)),
        # a name the set chose (or a stored document's, reindexed) is kept as it was decided
        "set": lambda: Proposal(source, given, state.get("product_how") or "set", given_evidence,
                                bool(state.get("product_backed"))) if given and source != "user" else None,
        "known": lambda: from_known(2),
        "llm": lambda: from_title("llm", model_product(llm, chunks, state["file_title"]), "大模型根据正文识别") if llm else None,
        "offline": lambda: offline,
        "page": from_page,
        "known_once": lambda: from_known(1),
    }, accept=accept)
    name = naming.product or one_line(state["file_title"])
    named_chunks = [{**chunk, "product": name} for chunk in chunks]
    return {"chunks": named_chunks, "product": name, "product_source": naming.source,
            "product_evidence": naming.evidence, "product_how": naming.how, "product_confirm": naming.confirm,
            "_summary": f"{name}（{SOURCE_NAMES.get(naming.source, '未能识别')}）：{naming.evidence}"
                        + ("，请确认" if naming.confirm and "请确认" not in naming.evidence else "")}
