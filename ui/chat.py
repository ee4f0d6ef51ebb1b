"""Answering in the chat: query-graph events become Chainlit steps, a streamed reply and its elements."""
from __future__ import annotations

import asyncio
import logging
import uuid

import chainlit as cl
from chainlit.context import context
from chainlit.input_widget import Switch
from chainlit.utils import utc_now

from graphs.query import FinalEvent, answer_of, astream_query, cited, rank_products
from services.errors import StorageError
from services.history_store import get_history_store
from services.settings import get_settings
from ui.auth import chat_user
from ui.background import drop_buttons, keep_buttons
from ui.format import STEP_TYPES, sources_line, step_output, sub_question_output
from ui.sources import chip_payloads, source_actions

log = logging.getLogger("ui.chat")

CHOOSE_PRODUCT = "choose_product"
MAX_PRODUCT_BUTTONS = 8
DEFAULT_SETTINGS = {"web_search": True, "hyde": True, "show_sources": True}
# Why a switch cannot be on: its backend is not configured.
UNAVAILABLE = {"web_search": "未配置联网搜索服务（MCP_DASHSCOPE_BASE_URL），无法开启",
               "hyde": "未配置大模型（OPENAI_API_KEY），无法使用 HyDE"}


def session_id() -> str:
    """The query graph's session id: the Chainlit thread id, so a resumed thread keeps its history."""
    return cl.user_session.get("session_id") or context.session.thread_id


async def bind_conversation() -> None:
    """Make this chat session's thread id the user's conversation before anything is written under
    it: the first use claims it; an id someone else owns (a thread id the browser chose, naming
    another user's API session) gets a fresh conversation instead, with a new unguessable id (the
    first question claims that one)."""
    session, user = context.session, chat_user().name
    thread_id = session.thread_id
    try:
        owned = await asyncio.to_thread(get_history_store().claim, thread_id, user)
    except StorageError as exc:  # unprovable: a fresh random id belongs to nobody else
        log.warning("could not bind conversation %s to %r: %s", thread_id, user, exc)
        owned = False
    if not owned:
        log.warning("conversation %s is not %r's: a new conversation is started", thread_id, user)
        session.thread_id, session.thread_id_to_resume = str(uuid.uuid4()), None
    cl.user_session.set("session_id", session.thread_id)


def available() -> dict[str, bool]:
    """Which switches can be on: their backend is configured."""
    settings = get_settings()
    return {"web_search": settings.web_search_enabled, "hyde": settings.llm_enabled, "show_sources": True}


def chat_settings() -> dict:
    """The switches as they take effect: the user's choice, off wherever the backend is absent."""
    can = available()
    values = {**DEFAULT_SETTINGS, **(cl.user_session.get("chat_settings") or {})}
    return {k: bool(v) and can.get(k, True) for k, v in values.items()}


def settings_widgets(values: dict) -> cl.ChatSettings:
    can = available()

    def switch(key: str, label: str, description: str) -> Switch:
        return Switch(id=key, label=label, initial=bool(values[key]) and can[key], disabled=not can[key],
                      description=description if can[key] else UNAVAILABLE[key])

    return cl.ChatSettings([
        switch("web_search", "联网搜索", "同时检索网页（MCP 联网搜索服务）"),
        switch("hyde", "HyDE 检索", "先让大模型写一段假设答案再检索"),
        switch("show_sources", "显示来源", "在回答下方列出引用的说明书片段，点击可查看原文"),
    ])


def product_actions(products: list[str], question: str) -> list[cl.Action]:
    return [cl.Action(name=CHOOSE_PRODUCT, payload={"product": p, "question": question}, label=p,
                      tooltip=f"按“{p}”回答：{question}", icon="package")
            for p in products[:MAX_PRODUCT_BUTTONS]]


def typed_choice(text: str) -> tuple[str, str] | None:
    """After a clarification, a reply that names exactly one candidate answers the original question."""
    pending = cl.user_session.get("pending_choice")
    cl.user_session.set("pending_choice", None)
    if not isinstance(pending, dict) or not pending.get("candidates"):
        return None
    full = [m.name for m in rank_products(text, list(pending["candidates"])) if m.kind == "full"]
    return (full[0], pending["question"]) if len(full) == 1 else None


class AnswerView:
    """One question's rendering: a step per node (siblings under the current run), a streamed reply.

    A node fanned out in parallel (one run per sub-question) is one step; each sub-question is a
    step nested in it."""

    def __init__(self, show_sources: bool):
        self.show_sources = show_sources
        current = context.current_step
        self.parent_id = current.id if current else None
        self.steps: dict[str, cl.Step] = {}
        self.running: dict[str, int] = {}     # parallel runs of a node still going
        self.outputs: dict[str, list[str]] = {}
        self.sub_steps: dict[int, cl.Step] = {}
        self.message: cl.Message | None = None
        self.sent = False  # streamed tokens end with send(), a sent message changes with update()

    async def show(self, message: cl.Message) -> None:
        if self.sent:
            await message.update()
        else:
            await message.send()
            self.sent = True

    async def on_event(self, event: dict) -> None:
        kind = event["type"]
        if kind == "node_start":
            node = event["node"]
            if self.running.get(node):
                self.running[node] += 1
                return
            self.running[node], self.outputs[node] = 1, []
            step = cl.Step(name=event["label"], type=STEP_TYPES.get(node, "tool"),
                           parent_id=self.parent_id, show_input=False)
            step.start = utc_now()
            self.steps[node] = step
            await step.send()
        elif kind in ("node_end", "node_error"):
            node = event["node"]
            step = self.steps.get(node)
            if step is None:
                return
            if event.get("status") == "skipped":  # the header says so, not only the output
                step.name = f"{event.get('label') or step.name}（已跳过：{event.get('summary') or '未运行'}）"
            self.running[node] = max(0, self.running.get(node, 1) - 1)
            self.outputs.setdefault(node, []).append(step_output(event))
            step.output = "\n\n".join(self.outputs[node])
            step.is_error = step.is_error or kind == "node_error"
            if not self.running[node]:
                step.end = utc_now()
            await step.update()
        elif kind == "sub_question":
            await self.on_sub_question(event)
        elif kind == "delta":
            self.message = self.message or cl.Message(content="", parent_id=self.parent_id)
            await self.message.stream_token(event["delta"])
        elif kind == "final":
            await self.finish(event)
        elif kind == "error":
            message = self.message = self.message or cl.Message(content="", parent_id=self.parent_id)
            message.content = f"❌ 抱歉，这次没能回答：{event.get('error', '')}\n\n请稍后重试，或换个问法。"
            await self.show(message)

    async def on_sub_question(self, event: dict) -> None:
        if event["phase"] == "start":
            parent = self.steps.get("node_sub_question")
            label = "原问题" if event.get("whole") else f"子问题 {event['index']}"
            step = cl.Step(name=f"{label}：{event['question']}", type="retrieval",
                           parent_id=parent.id if parent else self.parent_id, show_input=False)
            step.start = utc_now()
            self.sub_steps[event["index"]] = step
            await step.send()
            return
        step = self.sub_steps.get(event["index"])
        if step is not None:
            step.output = sub_question_output(event)
            step.end = utc_now()
            await step.update()

    async def finish(self, event: FinalEvent) -> None:
        final = answer_of(event)
        message = self.message = self.message or cl.Message(content="", parent_id=self.parent_id)
        parts = [final.get("answer") or ""]
        elements: list = []
        if final.get("branch") in ("ask", "refuse"):
            message.actions = product_actions(final.get("candidates") or [], final.get("original_query") or "")
            if final.get("branch") == "ask":
                cl.user_session.set("pending_choice", {"question": final.get("original_query") or "",
                                                       "candidates": list(final.get("candidates") or [])})
        else:
            elements += [cl.Image(url=url, name=f"插图 {i}", display="inline", size="large")
                         for i, url in enumerate(final.get("image_urls") or [], 1)]
            sources = cited(final.get("answer") or "", final.get("sources") or [])
            if self.show_sources and sources:
                parts.append(sources_line(sources))
                # chips, not side elements: Chainlit opens its side panel for every side element sent
                chips = chip_payloads(sources)
                message.actions = source_actions(chips)
                message.metadata = {**(message.metadata or {}), "sources": chips}
        parts += [f"> ⚠️ {w}" for w in final.get("warnings") or []]
        message.content = "\n\n".join(p for p in parts if p)
        message.elements = elements
        await self.show(message)
        if final.get("branch") in ("ask", "refuse"):  # the product buttons go together; source chips stay
            keep_buttons(message)


async def answer(question: str, product: str | None = None) -> None:
    """Run the query graph for one question of this session, showing it as it runs."""
    settings = chat_settings()
    view = AnswerView(bool(settings["show_sources"]))
    async for event in astream_query(question, session_id=session_id(), product=product, owner=chat_user().name,
                                     options={"web_search": bool(settings["web_search"]),
                                              "hyde": bool(settings["hyde"])}):
        await view.on_event(event)


async def choose_product(action: cl.Action) -> None:
    """A candidate button: drop every button of that message, then answer the original question pinned."""
    await drop_buttons(action)
    cl.user_session.set("pending_choice", None)
    product = str(action.payload.get("product") or "")
    question = str(action.payload.get("question") or "")
    await cl.Message(content=f"好的，按“{product}”回答：{question}").send()
    await answer(question, product=product)
