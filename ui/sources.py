"""Source chips under an answer. Nothing opens by itself: a click shows the source in the side panel,
a PDF source as its original at the cited page, a Markdown source as its section's text.

The PDF goes out as a session file of this chat: Chainlit serves those only to the session's own
logged-in user, and removes them when the session ends.
"""
from __future__ import annotations

import asyncio
import logging

import chainlit as cl

from services.documents import get_document_registry
from services.object_store import get_object_store
from services.vector_store import get_vector_store
from ui.format import source_label, source_text

log = logging.getLogger("ui.sources")

OPEN_SOURCE = "open_source"
# What a chip carries (and a resumed thread keeps in the answer's metadata): never the text itself.
CHIP_FIELDS = ("index", "chunk_id", "doc_id", "file_title", "title", "product", "page_start", "page_end")


def chip_payloads(sources: list[dict]) -> list[dict]:
    return [{k: s.get(k) for k in CHIP_FIELDS} for s in sources if s.get("source") != "web"]


def source_actions(payloads: list[dict]) -> list[cl.Action]:
    return [cl.Action(name=OPEN_SOURCE, payload=p, label=source_label(p), tooltip="在侧边栏查看原文",
                      icon="file-text") for p in payloads]


async def restore_source_actions(thread: dict) -> None:
    """Chainlit keeps no buttons with a thread: the chips of its earlier answers are sent again."""
    for step in thread.get("steps") or []:
        for action in source_actions((step.get("metadata") or {}).get("sources") or []):
            await action.send(for_id=step["id"])


def chunk_content(chunk_id: str) -> str | None:
    if not str(chunk_id).isdigit():
        return None
    store = get_vector_store()
    rows = store.query(store.chunks, f"chunk_id == {int(chunk_id)}", ["content"])
    return rows[0]["content"] if rows else None


async def pdf_element(source: dict, label: str) -> cl.Pdf:
    """The document's original, opened at the source's first page."""
    record = await asyncio.to_thread(get_document_registry().get, source.get("doc_id") or "")
    if not record or not record.get("original_key"):
        raise LookupError("知识库中没有这份说明书的原件记录（可能已被删除）")
    data = await asyncio.to_thread(get_object_store().open_original, record["original_key"])
    return cl.Pdf(name=label, content=data, page=int(source.get("page_start") or 1), display="page",
                  mime="application/pdf")


def missing_pictures_note(doc_id: str) -> str:
    """A document imported without some of its pictures says so where its text is read (an answer
    never shows the broken reference)."""
    try:
        record = get_document_registry().get(doc_id) if doc_id else None
    except Exception as exc:  # the passage is still worth showing without the note
        log.warning("document record of %s not readable: %s", doc_id, exc)
        return ""
    missing = int((record or {}).get("images_missing") or 0)
    return f"这份文档有 {missing} 张图片没有随文件提供，原文中的这些图片无法显示。" if missing else ""


async def text_element(source: dict, label: str, note: str = "") -> cl.Text:
    content = await asyncio.to_thread(chunk_content, str(source.get("chunk_id") or ""))
    if content is None:
        content = "这段内容已不在知识库中（说明书可能已重新导入或被删除），请重新提问。"
    notes = [n for n in (note, await asyncio.to_thread(missing_pictures_note, str(source.get("doc_id") or ""))) if n]
    body = source_text(source, content)
    return cl.Text(name=label, content="".join(f"> ⚠️ {n}\n\n" for n in notes) + body, display="page")


async def open_source(action: cl.Action) -> None:
    """A chip was clicked: show that source alone in the side panel ("page" display: Chainlit opens
    the panel by itself for every "side" element it receives)."""
    source = dict(action.payload)
    label = source_label(source)
    element: cl.Element
    if int(source.get("page_start") or 0) > 0:
        try:
            element = await pdf_element(source, label)
        except Exception as exc:  # the passage itself is still worth showing
            log.warning("original PDF of %s not available: %s", source.get("doc_id"), exc)
            element = await text_element(source, label, f"原始 PDF 无法打开：{exc}。以下是引用的原文段落。")
    else:
        element = await text_element(source, label)
    await cl.ElementSidebar.set_elements([element], key=str(source.get("chunk_id")))
    await cl.ElementSidebar.set_title(label)
