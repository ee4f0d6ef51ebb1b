"""掌柜智库 web UI: Chainlit events in, the import and query graphs do the work.

Run with `chainlit run app.py` (scripts/start.sh). Per-session state lives in cl.user_session only.
"""
from __future__ import annotations

import asyncio
import logging
import os

import chainlit as cl
from chainlit.config import config
from chainlit.data import get_data_layer
from chainlit.server import app as chainlit_app
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware

from api import HeadAsGet, SameOrigin, mount_api
from graphs.importing import (
    MAX_FILES, accepted_labels, catalog, picker_accept, start_in_app_worker, stop_in_app_workers,
)
from services.settings import get_settings
from ui import access, attachments, chat, knowledge, sources
from ui.auth import LoginAddress, announce_admin_password, check_login, ensure_auth_secret, login_address
from ui.data_layer import HistoryDataLayer
from ui.format import import_help
from ui.translations import mount_translations

log = logging.getLogger("app")

IMPORT_QUESTION = "怎么把产品说明书导入知识库？"
EXAMPLE_QUESTIONS = [
    ("怎么导入说明书", IMPORT_QUESTION),
    ("开发板烧录", "Milk-V Duo 怎么烧录系统镜像？"),
    ("主板接线", "SKR MINI E3 V3.0 的风扇接口在哪里？"),
]
MAX_STARTERS = 4

settings = get_settings()
# uvicorn reads this after loading this module; unset, it trusts loopback as a proxy, so anyone on
# this host could name any client address in X-Forwarded-For (and so escape the login lock)
os.environ["FORWARDED_ALLOW_IPS"] = settings.forwarded_allow_ips
ensure_auth_secret(settings.data_dir)  # before Chainlit checks for it, right after loading this module
announce_admin_password(settings)
# The upload caps follow MAX_UPLOAD_MB and the import's set size, in the browser and on the server.
config.features.spontaneous_file_upload.max_size_mb = settings.max_upload_mb
config.features.spontaneous_file_upload.max_files = MAX_FILES  # a documentation site's pages, as one set
config.features.spontaneous_file_upload.accept = picker_accept()  # the one list of accepted types

# ahead of Chainlit's catch-all GET route: the API, and the pictures of documents (for signed-in users)
mount_api(chainlit_app)
attachments.refuse_empty_attachments(chainlit_app)
# Chainlit allows every origin, with credentials: only the origins set in CORS_ORIGINS may call from other sites.
chainlit_app.user_middleware[:] = [
    Middleware(CORSMiddleware, **{**m.kwargs, "allow_origins": list(settings.cors_origins),
                                   "allow_credentials": bool(settings.cors_origins)})
    if m.cls is CORSMiddleware else m for m in chainlit_app.user_middleware]
chainlit_app.add_middleware(LoginAddress)
chainlit_app.add_middleware(SameOrigin)  # the chat socket and cookie-authenticated changes: this origin only
chainlit_app.add_middleware(HeadAsGet)
mount_translations(chainlit_app)


@cl.on_app_startup
def start_background_work() -> None:
    # tasks whose worker died are handed on when their lease runs out (by whichever consumer sees it
    # first), never because this process started
    if get_settings().import_in_app:
        try:
            start_in_app_worker()
        except Exception as exc:  # the chat works without the queue
            log.warning("无法启动导入队列：%s", exc)
    try:  # registry and vector store must agree: only writes pending for over a minute are resolved
        catalog.repair()
    except Exception as exc:
        log.warning("无法检查知识库的一致性：%s", exc)


@cl.on_app_shutdown
def stop_background_work() -> None:
    stop_in_app_workers()


@cl.data_layer
def data_layer() -> HistoryDataLayer:
    return HistoryDataLayer()


@cl.password_auth_callback
async def login(username: str, password: str) -> cl.User | None:
    identity = await check_login(get_settings(), username, password, login_address.get())
    if identity is None:
        return None
    return cl.User(identifier=identity.name, metadata={"provider": "credentials", "role": identity.role})


@cl.set_starters
async def starters(user: cl.User | None = None) -> list[cl.Starter]:
    try:
        # read at every request: a product imported a moment ago is offered without a restart
        products = [p["product"] for p in await asyncio.to_thread(catalog.products)]
    except Exception as exc:  # an unreachable store must not block the welcome screen
        log.warning("读取商品列表失败：%s", exc)
        products = []
    if products:
        return [cl.Starter(label=f"{p} 快速上手", message=f"{p} 怎么开始使用？需要准备什么？")
                for p in products[:MAX_STARTERS]]
    return [cl.Starter(label=label, message=message) for label, message in EXAMPLE_QUESTIONS]


@cl.on_chat_start
async def start() -> None:
    await chat.bind_conversation()
    await chat.settings_widgets(chat.chat_settings()).send()
    await cl.context.emitter.set_commands(knowledge.COMMANDS)


@cl.on_chat_resume
async def resume(thread: dict) -> None:
    # the thread id is the query graph's session id: follow-ups ("它") see this conversation's history
    await chat.bind_conversation()
    await chat.settings_widgets(chat.chat_settings()).send()
    await cl.context.emitter.set_commands(knowledge.COMMANDS)
    await sources.restore_source_actions(thread)


@cl.on_message
async def on_message(message: cl.Message) -> None:
    files = attachments.attached_files(message)
    text = (message.content or "").strip()
    if message.command == knowledge.COMMAND or text == f"/{knowledge.COMMAND}":
        await knowledge.show_overview()
        return
    if files:
        if not await access.may_change_knowledge_base():
            return
        imports = attachments.start_imports(files)
        if text:
            asyncio.create_task(attachments.answer_after_imports(imports, text))
        elif len(cl.chat_context.get()) == 1 and (layer := get_data_layer()):
            # a thread opened by files alone would have no name in the sidebar; the event refreshes it
            name = "导入：" + "、".join(f.name for f in files)
            await layer.update_thread(cl.context.session.thread_id, name=name)
            await cl.context.emitter.emit("first_interaction",
                                          {"interaction": name, "thread_id": cl.context.session.thread_id})
        return
    if not text:
        return
    if text == IMPORT_QUESTION:  # the empty knowledge base's first question: answered at once, not searched
        await cl.Message(content=import_help(accepted_labels(), get_settings().max_upload_mb, MAX_FILES,
                                             access.can_edit())).send()
        return
    choice = chat.typed_choice(text)
    if choice:
        await chat.answer(choice[1], product=choice[0])
    else:
        await chat.answer(text)


@cl.action_callback(chat.CHOOSE_PRODUCT)
async def on_choose_product(action: cl.Action) -> None:
    await chat.choose_product(action)


@cl.action_callback(sources.OPEN_SOURCE)
async def on_open_source(action: cl.Action) -> None:
    await sources.open_source(action)


@cl.action_callback(attachments.RENAME_PRODUCT)
async def on_rename_product(action: cl.Action) -> None:
    await attachments.rename_product(action)


for _name in knowledge.ACTIONS:  # the knowledge-base buttons: each starts its work and returns at once
    cl.action_callback(_name)(knowledge.callback(_name))
