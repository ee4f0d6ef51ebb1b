"""Manuals attached to a chat message: one set, imported by the task queue (in this process or by a
worker elsewhere) with a progress message per file, then one summary for the set (products recognised
across it) with buttons to correct it."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from pathlib import Path

import chainlit as cl
from chainlit.server import UserParam, upload_file
from fastapi import FastAPI, HTTPException, UploadFile
from fastapi.routing import APIRoute

from graphs.importing import (
    StagedBatch, StagedFile, UploadRejected, discard, display_filename, enqueue_set, queued_part, stage_uploads,
)
from services.errors import ImportProcessError, StorageError
from services.settings import get_settings
from services.task_store import COMPLETED
from ui import knowledge
from ui.access import may_change_knowledge_base, user_name
from ui.background import spawn
from ui.chat import answer
from ui.progress import FileView, follow_tasks

log = logging.getLogger("ui.attachments")

RENAME_PRODUCT = "rename_product"
RENAME_TIMEOUT_S = 300


async def upload_attachment(current_user: UserParam, session_id: str, file: UploadFile,
                            ask_parent_id: str | None = None):
    """Chainlit's own upload route, except that a 0-byte file (which it fails on with a bare 500)
    is refused with what is wrong; the browser shows the message next to the file name."""
    if file.size == 0:  # the browser's toast names the file already
        raise HTTPException(400, "文件是空的（0 字节），没有可导入的内容。")
    return await upload_file(current_user, session_id, file, ask_parent_id)


def refuse_empty_attachments(app: FastAPI) -> None:
    """Put upload_attachment in front of Chainlit's route for the same path."""
    app.router.routes.insert(0, APIRoute("/project/file", upload_attachment, methods=["POST"], include_in_schema=False))


def attached_files(message: cl.Message) -> list:
    """The uploaded files of a message (elements with a path on disk)."""
    return [e for e in message.elements or [] if getattr(e, "path", None)]


def stage_attachment(src: Path, name: str) -> StagedBatch:
    """Keep a chat attachment the way the HTTP API keeps uploads (UploadRejected when it cannot be);
    an archive stands for the documents in it."""
    with open(src, "rb") as stream:
        return stage_uploads([(name, stream)], get_settings())


def remember(staged: StagedFile) -> str:
    """Keep the staged file in this session; the button carries only an opaque id, never a path."""
    uploads = cl.user_session.get("uploads") or {}
    upload_id = uuid.uuid4().hex
    uploads[upload_id] = staged.as_dict()
    cl.user_session.set("uploads", uploads)
    return upload_id


def rename_button(staged: StagedFile):
    """The "修改商品名" button of an imported upload, made once its import has finished."""
    return lambda: [cl.Action(name=RENAME_PRODUCT, payload={"upload": remember(staged)}, label="修改商品名",
                              tooltip="商品名识别错了？输入正确的名称后重新导入", icon="pencil")]


async def stage_all(files: list) -> tuple[list[StagedFile], dict[str, FileView]]:
    """Each file staged on its own: a refused one says why and the others still import."""
    staged, views = [], {}
    for f in files:
        view = FileView(display_filename(f.name))
        await view.show()
        try:
            batch = await asyncio.to_thread(stage_attachment, Path(f.path), f.name)
        except (UploadRejected, ImportProcessError) as exc:  # type, size, empty: refused before the graph ran
            await view.fail(f"❌ 《{view.name}》无法导入：{exc.message}")
            continue
        except Exception as exc:
            log.exception("staging %s crashed", f.name)
            await view.crashed(exc)
            continue
        if batch.notes:  # an archive: its message says what was in it, each document gets its own
            view.message.content = "\n".join(batch.notes)
            await view.message.update()
        for item in batch:
            if batch.notes:
                view = FileView(item.display_name)
                await view.show()
            view.done_actions = rename_button(item)
            staged.append(item)
            views[item.task_id] = view
    return staged, views


def not_queued(name: str, exc: StorageError) -> str:
    return f"❌ 《{name}》的导入任务无法创建，没有开始导入：{exc.message}"


async def import_attachments(files: list) -> None:
    """The files of one message as one set (the caller has checked that this user may import)."""
    staged, views = await stage_all(files)
    if not staged:
        return
    try:
        task_ids = await asyncio.to_thread(enqueue_set, staged, updated_by=user_name())
    except StorageError as exc:
        task_ids = queued_part(exc)  # a set that broke off part way: the queued files go on
        refused = [item for item in staged if item.task_id not in task_ids]
        discard(refused)  # as the HTTP API does: nothing refers to them, no button offers them again
        for item in refused:
            await views[item.task_id].fail(not_queued(item.display_name, exc))
        if not task_ids:
            return
    except Exception as exc:
        log.exception("queueing a set crashed")
        discard(staged)
        for view in views.values():
            await view.crashed(exc)
        return
    ended = await follow_tasks({task_id: views[task_id] for task_id in task_ids})
    imported = [(item, ended[item.task_id]) for item in staged if ended.get(item.task_id, {}).get("status") == COMPLETED]
    items = [{"file": item.display_name, "product": task["result"]["product"],
              "how": task["result"].get("product_how") or task["job"].get("how", ""),
              "confirm": bool(task["result"].get("product_confirm")), "evidence": task["result"].get("product_evidence", ""),
              "doc_id": task["result"]["doc_id"]} for item, task in imported]
    if items:
        await knowledge.send_set_summary(items)


def start_imports(files: list) -> asyncio.Task:
    """The import runs in the background, so the chat stays usable while it does."""
    return spawn(import_attachments(files), "导入出错")


async def answer_after_imports(imports: asyncio.Task, question: str) -> None:
    await asyncio.gather(imports, return_exceptions=True)
    await answer(question)


async def rename_product(action: cl.Action) -> None:
    """The button returns at once; asking and importing go on in the background."""
    if await may_change_knowledge_base():
        spawn(ask_and_reimport(action), "修改商品名失败")


async def ask_and_reimport(action: cl.Action) -> None:
    """Ask for the right product name, then import the same file again under it (replacing itself)."""
    info = (cl.user_session.get("uploads") or {}).get(str(action.payload.get("upload") or ""))
    if not isinstance(info, dict):
        await cl.Message(content="找不到这次上传的文件（会话可能已过期），请重新上传说明书。").send()
        return
    product = await knowledge.ask_name(f"请输入《{info['display_name']}》的正确商品名：", action)
    if not product:
        await cl.Message(content="没有收到新的商品名，保持原样。").send()
        return
    # the same file again under another name: a task of its own
    staged = dataclasses.replace(StagedFile.from_dict(info), task_id=uuid.uuid4().hex)
    view = FileView(info["display_name"], done_actions=rename_button(staged))
    await view.show()
    try:
        task_ids = await asyncio.to_thread(enqueue_set, [staged], product, updated_by=user_name())
    except StorageError as exc:  # the button stays: the staged file still belongs to the imported document
        await view.fail(not_queued(info["display_name"], exc))
        return
    except Exception as exc:
        log.exception("re-import of %s crashed", staged.name)
        await view.crashed(exc)
        return
    await action.remove()
    await follow_tasks({task_ids[0]: view})
