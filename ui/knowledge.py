"""The knowledge base in the chat: the `/知识库` view (products, documents, chunks) and every change
made from it or from an upload's summary: accept, rename / merge, move, re-import, delete, reindex.

Every button returns at once (the browser waits on it) and its work goes on in the background;
changes are for admins and editors (`ui.access`).
"""
from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

import chainlit as cl

from graphs.importing import catalog, enqueue_reimport, enqueue_reindex
from services.errors import ImportProcessError, StorageError
from services.task_store import COMPLETED, PENDING, get_task_store
from ui.access import can_edit, is_admin, may_change_knowledge_base, user_name
from ui.background import drop_buttons, in_thread, keep_buttons, spawn
from ui.format import (
    CHUNK_PAGE, NO_PRODUCT, by_product, chunk_page, file_label, kb_overview, product_view, queue_hint, set_summary,
    unsure,
)
from ui.progress import QUEUE_SAMPLE, QUEUED_NOTICE_S, FileView, Follower, follow_tasks

COMMAND = "知识库"
COMMANDS = [{"id": COMMAND, "icon": "library", "description": "查看和管理知识库：产品、文档、切片",
             "button": True, "persistent": False}]
NAME_TIMEOUT_S = 300
MAX_MOVE_TARGETS = 8
MAX_MOVE_BUTTONS = 10
MAX_PICTURES = 6

OPEN, PRODUCT, DOC = "kb_open", "kb_product", "kb_doc"
ACCEPT, RENAME, MOVE, MOVE_TO, MOVE_OTHER = "kb_accept", "kb_rename", "kb_move", "kb_move_to", "kb_move_other"
REIMPORT, DELETE_DOC, DELETE_PRODUCT, REINDEX = "kb_reimport", "kb_delete_doc", "kb_delete_product", "kb_reindex"
CONFIRM, CANCEL = "kb_confirm", "kb_cancel"
READ_ONLY = {OPEN, PRODUCT, DOC, CANCEL}


def button(name: str, label: str, icon: str = "", **payload) -> cl.Action:
    return cl.Action(name=name, payload=payload, label=label, icon=icon or None)


async def say(content: str, actions: list[cl.Action] | None = None, parent_id: str | None = None) -> cl.Message:
    message = cl.Message(content=content, actions=actions or [], parent_id=parent_id)
    await message.send()
    keep_buttons(message)
    return message


def again() -> list[cl.Action]:
    return [button(OPEN, "查看知识库", "library")]


async def ask_name(prompt: str, action: cl.Action) -> str:
    """A name typed by the person; the question sits under the message whose button was clicked."""
    ask = cl.AskUserMessage(content=prompt, timeout=NAME_TIMEOUT_S)
    ask.parent_id = action.forId or None
    reply = await ask.send()
    # Chainlit marks the session busy after every answer, for the handler that asked; this work goes
    # on in the background, so the composer is handed back (else it stays a stop button)
    await cl.context.emitter.task_end()
    return " ".join(str((reply or {}).get("output") or "").split())


async def in_progress(first: str, fn: Callable[[Callable[[str], None]], object]):
    """fn(progress) in a worker thread, its progress lines shown in one message; returns (result, message)."""
    message = await say(f"⏳ {first}")

    async def show(line: str) -> None:
        message.content = f"⏳ {first}\n\n{line}"
        await message.update()
    try:
        result = await in_thread(fn, show)
    except ImportProcessError as exc:
        await finish(message, f"❌ {exc.message}")
        raise _Reported() from exc
    return result, message


class _Reported(Exception):
    """The failure is already in the progress message."""


async def finish(message: cl.Message, content: str) -> None:
    message.content = content
    message.actions = again()
    await message.update()
    keep_buttons(message)


# -- the view -------------------------------------------------------------------------------
def stuck_imports() -> tuple[int, float]:
    """(pending tasks that no process has started for QUEUED_NOTICE_S, the longest wait in seconds)."""
    now = time.time()
    waits = [now - t["created"] for t in get_task_store().list(QUEUE_SAMPLE)
             if t["status"] == PENDING and not t.get("steps") and now - t["created"] > QUEUED_NOTICE_S]
    return len(waits), max(waits, default=0.0)


async def show_overview(_: cl.Action | None = None) -> None:
    docs = await asyncio.to_thread(catalog.documents)
    actions = [button(PRODUCT, f"管理：{p}", "package", product=p) for p in by_product(docs)]
    if docs and can_edit():
        actions.append(button(REINDEX, "重建索引", "refresh-cw"))
    text = kb_overview(docs)
    if is_admin():  # which process to start is for whoever runs the server, never for readers
        try:
            stuck, waited_s = await asyncio.to_thread(stuck_imports)
        except StorageError:
            stuck, waited_s = 0, 0.0
        if stuck:
            text += "\n\n" + queue_hint(stuck, waited_s)
    await say(text, actions)


async def show_product(action: cl.Action) -> None:
    product = str(action.payload.get("product") or "")
    docs = by_product(await asyncio.to_thread(catalog.documents)).get(product)
    if not docs:
        await say(f"❌ 产品不存在：{product}", again())
        return
    actions = [button(DOC, file_label(d, docs), "file-text", doc=d["doc_id"]) for d in docs]
    if can_edit() and product != NO_PRODUCT:
        actions += [button(RENAME, "改名", "pencil", product=product),
                    button(DELETE_PRODUCT, "删除产品", "trash-2", product=product)]
    await say(product_view(product, docs), actions)


async def show_document(action: cl.Action) -> None:
    doc_id, start = str(action.payload.get("doc") or ""), max(0, int(action.payload.get("start") or 0))
    record = await asyncio.to_thread(catalog.document, doc_id)
    chunks = await asyncio.to_thread(catalog.document_chunks, doc_id)
    shown = chunks[start:start + CHUNK_PAGE]
    pictures = [url for c in shown for url in c["images"]][:MAX_PICTURES]
    actions = []
    if start + CHUNK_PAGE < len(chunks):
        actions.append(button(DOC, "下一页", "chevron-right", doc=doc_id, start=start + CHUNK_PAGE))
    if can_edit():
        actions += [button(MOVE, "移到别的产品", "folder-input", doc=doc_id),
                    button(REIMPORT, "重新导入", "rotate-cw", doc=doc_id),
                    button(DELETE_DOC, "删除", "trash-2", doc=doc_id)]
    message = cl.Message(content=chunk_page(record, chunks, start), actions=actions,
                         elements=[cl.Image(url=u, name=f"插图 {i}", display="inline", size="small")
                                   for i, u in enumerate(pictures, 1)])
    await message.send()
    keep_buttons(message)


async def send_set_summary(items: list[dict]) -> None:
    """After an upload: what was recognised, with accept / rename a product / move a file."""
    products = list(dict.fromkeys(i["product"] for i in items))
    actions = [button(ACCEPT, "接受", "check")]
    actions += [button(RENAME, f"改名：{p}", "pencil", product=p) for p in products]
    # a big set offers only its unsure files here; every file can be moved from the knowledge-base view
    movable = items if len(items) <= MAX_MOVE_BUTTONS else [i for i in items if unsure(i)]
    actions += [button(MOVE, f"移动《{i['file']}》（{i['product']}）", "folder-input", doc=i["doc_id"], products=products)
                for i in movable]
    await say(set_summary(items), actions)


# -- changes --------------------------------------------------------------------------------
async def accept(action: cl.Action) -> None:
    await drop_buttons(action)
    await say("好的，已按识别结果保存。", again())


async def cancel(action: cl.Action) -> None:
    await drop_buttons(action)
    await say("已取消，知识库没有变化。")


async def rename(action: cl.Action) -> None:
    old = str(action.payload.get("product") or "")
    known = {p["product"] for p in await asyncio.to_thread(catalog.products)}
    if old not in known:  # a button of a product renamed or deleted since
        await say(f"❌ 产品不存在：{old}", again())
        return
    new = await ask_name(f"请输入“{old}”的新产品名：", action)
    if not new:
        await say("没有收到新的产品名，保持原样。")
        return
    if new == old:
        await say("产品名没有变化。")
        return
    if new in known:  # never merged by accident: the person says so
        await say(f"产品“{new}”已经存在。要把“{old}”的全部文档并入“{new}”吗？合并后它们作为同一个产品回答问题。",
                  [button(CONFIRM, f"合并到“{new}”", "merge", op="merge", product=old, into=new),
                   button(CANCEL, "取消", "x")])
        return
    await rename_now(old, new, merge=False)


async def rename_now(old: str, new: str, *, merge: bool) -> None:
    by = user_name()
    verb = "并入" if merge else "改名为"
    result, message = await in_progress(f"正在把“{old}”{verb}“{new}”……", lambda emit: catalog.rename_product(
        old, new, merge=merge, updated_by=by, progress=emit))
    await finish(message, f"✅ 已把“{old}”{verb}“{result['product']}”：{result['documents']} 份文档、"
                          f"{result['chunks']} 个切片已更新。")


async def move(action: cl.Action) -> None:
    doc_id = str(action.payload.get("doc") or "")
    record = await asyncio.to_thread(catalog.document, doc_id)
    known = [p["product"] for p in await asyncio.to_thread(catalog.products)]
    # the set's own products first, then the rest of the knowledge base
    targets = [p for p in dict.fromkeys([*(action.payload.get("products") or []), *known])
               if p in known and p != record.get("product")][:MAX_MOVE_TARGETS]
    await say(f"把《{record.get('file_name')}》（现属“{record.get('product') or '未归类'}”）移到哪个产品？",
              [button(MOVE_TO, p, "package", doc=doc_id, product=p) for p in targets]
              + [button(MOVE_OTHER, "其他…", "pencil", doc=doc_id)], parent_id=action.forId or None)


async def move_to(action: cl.Action) -> None:
    await drop_buttons(action)
    await move_now(str(action.payload.get("doc") or ""), str(action.payload.get("product") or ""))


async def move_other(action: cl.Action) -> None:
    doc_id = str(action.payload.get("doc") or "")
    record = await asyncio.to_thread(catalog.document, doc_id)
    product = await ask_name(f"请输入《{record.get('file_name')}》要归入的产品名：", action)
    if not product:
        await say("没有收到产品名，保持原样。")
        return
    await drop_buttons(action)
    await move_now(doc_id, product)


async def move_now(doc_id: str, product: str) -> None:
    record = await asyncio.to_thread(catalog.document, doc_id)
    by = user_name()
    result, message = await in_progress(f"正在把《{record.get('file_name')}》移到“{product}”……",
                                        lambda emit: catalog.move_document(doc_id, product, updated_by=by))
    await finish(message, f"✅ 已把《{record.get('file_name')}》移到“{result['product']}”（{result['chunks']} 个切片）。")


async def reimport(action: cl.Action) -> None:
    doc_id = str(action.payload.get("doc") or "")
    record = await asyncio.to_thread(catalog.document, doc_id)
    view = FileView(record.get("file_name") or doc_id)
    await view.show()
    try:
        task_id = await asyncio.to_thread(enqueue_reimport, doc_id, user_name())
    except ImportProcessError as exc:  # no original to import from, or the queue refused
        await view.fail(f"❌ 《{view.name}》无法重新导入：{exc.message}")
        return
    except Exception as exc:
        await view.crashed(exc)
        raise
    await follow_tasks({task_id: view})


async def ask_delete_document(action: cl.Action) -> None:
    record = await asyncio.to_thread(catalog.document, str(action.payload.get("doc") or ""))
    await say(f"确定删除《{record.get('file_name')}》吗？它的切片、图片和原件都会删除，其他文档不受影响。",
              [button(CONFIRM, "确认删除", "trash-2", op="delete_doc", doc=record["doc_id"]),
               button(CANCEL, "取消", "x")])


async def ask_delete_product(action: cl.Action) -> None:
    product = str(action.payload.get("product") or "")
    docs = await asyncio.to_thread(catalog.documents, product)
    if not docs:
        await say(f"❌ 产品不存在：{product}", again())
        return
    await say(f"确定删除产品“{product}”的全部 {len(docs)} 份文档吗？此操作不可撤销。",
              [button(CONFIRM, "确认删除", "trash-2", op="delete_product", product=product),
               button(CANCEL, "取消", "x")])


async def ask_reindex(_: cl.Action) -> None:
    docs = await asyncio.to_thread(catalog.documents)
    await say(f"重建索引会按原件重新导入全部 {len(docs)} 份文档（更换向量模型后需要），可能需要几分钟。开始吗？",
              [button(CONFIRM, "开始重建", "refresh-cw", op="reindex"), button(CANCEL, "取消", "x")])


async def confirmed(action: cl.Action) -> None:
    await drop_buttons(action)
    p = action.payload
    op = p.get("op")
    if op == "merge":
        await rename_now(str(p.get("product") or ""), str(p.get("into") or ""), merge=True)
    elif op == "delete_doc":
        result = await asyncio.to_thread(catalog.delete_document, str(p.get("doc") or ""))
        await say(f"🗑️ 已删除《{result['file_name']}》（{result['chunks']} 个切片）。", again())
    elif op == "delete_product":
        result = await asyncio.to_thread(catalog.delete_product, str(p.get("product") or ""))
        await say(f"🗑️ 已删除产品“{result['product']}”（{len(result['documents'])} 份文档）。", again())
    elif op == "reindex":
        await reindex()
    else:
        await say("❌ 无法识别的操作。")


class ProgressLines(Follower):
    """A long task's progress lines, the newest under the message's first line."""

    def __init__(self, message: cl.Message, first: str):
        super().__init__()
        self.message, self.first = message, first

    async def on_step(self, step: dict) -> None:
        if step.get("type") == "progress":
            self.message.content = f"⏳ {self.first}\n\n{step['text']}"
            await self.message.update()


async def reindex() -> None:
    """On the task queue, as every import is; its progress and outcome come from the task store."""
    first = "正在重建索引……"
    message = await say(f"⏳ {first}")
    try:
        task_id = await asyncio.to_thread(enqueue_reindex, user_name())
    except StorageError as exc:
        await finish(message, f"❌ 重建索引没有开始：{exc.message}")
        return
    task = (await follow_tasks({task_id: ProgressLines(message, first)})).get(task_id)
    if task is None:  # the task store stopped answering
        await finish(message, "⚠️ 重建索引的进度无法读取，它可能仍在后台进行，稍后请查看知识库。")
    elif task["status"] != COMPLETED:
        await finish(message, f"❌ {task.get('error') or '重建索引失败'}")
    else:
        result = task["result"]
        failed = "".join(f"\n- 《{f['file_name']}》：{f['error']}" for f in result["failed"])
        await finish(message, f"✅ 重建索引完成：共 {result['documents']} 份文档，成功 {result['completed']} 份"
                              + (f"，失败 {len(result['failed'])} 份：{failed}" if failed else "。"))


ACTIONS: dict[str, Callable[[cl.Action], Awaitable[None]]] = {
    OPEN: show_overview, PRODUCT: show_product, DOC: show_document,
    ACCEPT: accept, RENAME: rename, MOVE: move, MOVE_TO: move_to, MOVE_OTHER: move_other,
    REIMPORT: reimport, DELETE_DOC: ask_delete_document, DELETE_PRODUCT: ask_delete_product, REINDEX: ask_reindex,
    CONFIRM: confirmed, CANCEL: cancel,
}


async def run(action: cl.Action) -> None:
    try:
        await ACTIONS[action.name](action)
    except _Reported:
        return
    except ImportProcessError as exc:  # refused (unknown, exists, bad name) or a storage fault
        await say(f"❌ {exc.message}", again())


def callback(name: str) -> Callable[[cl.Action], Awaitable[None]]:
    """The action callback for `name`: starts the work and returns at once."""
    async def on_action(action: cl.Action) -> None:
        # checked at every click, not only when the button was shown: a payload can be forged
        if name in READ_ONLY or await may_change_knowledge_base():
            spawn(run(action), "知识库操作失败")
    on_action.__name__ = f"on_{name}"
    return on_action
