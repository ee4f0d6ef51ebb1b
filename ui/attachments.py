"""Manuals attached to chat messages: imported in the background, one progress message per file."""
from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import chainlit as cl
from chainlit.server import UserParam, upload_file
from fastapi import FastAPI, HTTPException, UploadFile
from fastapi.routing import APIRoute

from graphs.importing import StagedFile, UploadRejected, run_import, stage_uploads
from services.errors import ImportProcessError
from services.settings import get_settings
from ui.auth import chat_user
from ui.chat import answer
from ui.format import ImportProgress

log = logging.getLogger("ui.attachments")

RENAME_PRODUCT = "rename_product"
RENAME_TIMEOUT_S = 300


async def upload_attachment(current_user: UserParam, session_id: str, file: UploadFile,
                            ask_parent_id: str | None = None):
    """Chainlit's own upload route, except that a 0-byte file (which it fails on with a bare 500)
    is refused with what is wrong; the browser shows the message next to the file name."""
    if file.size == 0:
        raise HTTPException(400, f"文件“{file.filename}”是空的（0 字节），没有可导入的内容。")
    return await upload_file(current_user, session_id, file, ask_parent_id)


def refuse_empty_attachments(app: FastAPI) -> None:
    """Put upload_attachment in front of Chainlit's route for the same path."""
    app.router.routes.insert(0, APIRoute("/project/file", upload_attachment, methods=["POST"], include_in_schema=False))


async def may_change_knowledge_base() -> bool:
    """Readers ask questions; importing and renaming are for admins and editors."""
    user = chat_user()
    if user.can_edit:
        return True
    await cl.Message(content=f"❌ 账号“{user.name}”是只读角色，不能导入或修改说明书；请联系管理员。").send()
    return False


def attached_files(message: cl.Message) -> list:
    """The uploaded files of a message (elements with a path on disk)."""
    return [e for e in message.elements or [] if getattr(e, "path", None)]


def stage_attachment(src: Path, name: str) -> StagedFile:
    """Keep a chat attachment the way the HTTP API keeps uploads (UploadRejected when it cannot be)."""
    with open(src, "rb") as stream:
        return stage_uploads([(name, stream)], get_settings())[0]


def remember(staged: StagedFile) -> str:
    """Keep the staged file in this session; the button carries only an opaque id, never a path."""
    uploads = cl.user_session.get("uploads") or {}
    upload_id = uuid.uuid4().hex
    uploads[upload_id] = staged.as_dict()
    cl.user_session.set("uploads", uploads)
    return upload_id


async def run_with_progress(staged: StagedFile, task_id: str, product: str | None,
                            progress: ImportProgress, message: cl.Message):
    """run_import in a worker thread; its events come back to this loop and update the message."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def on_event(event: dict) -> None:  # called in the worker thread
        loop.call_soon_threadsafe(events.put_nowait, event)

    job = asyncio.ensure_future(asyncio.to_thread(
        run_import, staged.path, product=product, staged=staged, task_id=task_id, on_event=on_event,
        updated_by=chat_user().name))
    job.add_done_callback(lambda _: events.put_nowait(None))  # after every event the thread sent
    while (event := await events.get()) is not None:
        if event["type"] in ("node_start", "node_end", "node_error"):  # one update per node, not per picture
            progress.apply(event)
            message.content = progress.render_running()
            await message.update()
    return job.result()


async def import_file(name: str, src: Path | None = None, *, staged: StagedFile | None = None,
                      product: str | None = None) -> None:
    """Import one uploaded file, keeping its progress message up to date."""
    progress = ImportProgress(name)
    message = cl.Message(content=f"⏳ 正在导入《{name}》……")
    await message.send()
    try:
        if staged is None:
            staged = await asyncio.to_thread(stage_attachment, src, name)
            task_id = staged.task_id
        else:  # importing the same file again (another product name): a task of its own
            task_id = uuid.uuid4().hex
        result = await run_with_progress(staged, task_id, product, progress, message)
    except (UploadRejected, ImportProcessError) as exc:  # refused before the graph ran: type, size, empty
        message.content = f"❌ 《{name}》无法导入：{exc.message}"
        await message.update()
        return
    except Exception as exc:  # a disk or library failure must still end the progress message
        log.exception("import of %s crashed", name)
        message.content = progress.render_failed(f"导入出错：{exc}")
        await message.update()
        return
    if result.status != "completed":
        message.content = progress.render_failed(result.error)
        await message.update()
        return
    message.content = progress.render_done(result.to_dict())
    message.actions = [cl.Action(name=RENAME_PRODUCT, payload={"upload": remember(staged)}, label="修改商品名",
                                 tooltip="商品名识别错了？输入正确的名称后重新导入", icon="pencil")]
    await message.update()


def start_imports(files: list) -> list[asyncio.Task]:
    """One background task per file, so the chat stays usable while they import."""
    return [asyncio.create_task(import_file(f.name, Path(f.path))) for f in files]


async def answer_after_imports(imports: list[asyncio.Task], question: str) -> None:
    await asyncio.gather(*imports, return_exceptions=True)
    await answer(question)


async def rename_product(action: cl.Action) -> None:
    """Ask for the right product name, then import the same file again under it (replacing itself)."""
    if not await may_change_knowledge_base():
        return
    info = (cl.user_session.get("uploads") or {}).get(str(action.payload.get("upload") or ""))
    if not isinstance(info, dict):
        await cl.Message(content="找不到这次上传的文件（会话可能已过期），请重新上传说明书。").send()
        return
    reply = await cl.AskUserMessage(content=f"请输入《{info['display_name']}》的正确商品名：", timeout=RENAME_TIMEOUT_S).send()
    product = " ".join(str((reply or {}).get("output") or "").split())
    if not product:
        await cl.Message(content="没有收到新的商品名，保持原样。").send()
        return
    await action.remove()
    await import_file(info["display_name"], staged=StagedFile.from_dict(info), product=product)
