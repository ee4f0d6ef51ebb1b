"""Long work off the Chainlit handlers.

An action callback is awaited by the browser's HTTP request, and the composer shows a stop button
until it returns: callbacks hand their work to `spawn` and return at once.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

import chainlit as cl

log = logging.getLogger("ui.background")
Emit = Callable[[object], None]
_running: set[asyncio.Task] = set()  # the event loop keeps only weak references to tasks


def spawn(work: Awaitable, failure: str) -> asyncio.Task:
    """Run `work` in the background of this session; a crash ends with a Chinese message, never silence."""
    async def guarded() -> None:
        try:
            await work
        except Exception as exc:
            log.exception("background work failed: %s", failure)
            await cl.Message(content=f"❌ {failure}：{exc}").send()
    task = asyncio.create_task(guarded())
    _running.add(task)
    task.add_done_callback(_running.discard)
    return task


async def in_thread(fn: Callable[[Emit], object], on_event: Callable[[object], Awaitable[None]]):
    """fn(emit) in a worker thread; every emit(event) it makes is awaited here as on_event(event), in order."""
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def emit(event) -> None:  # called in the worker thread
        loop.call_soon_threadsafe(events.put_nowait, event)

    job = asyncio.ensure_future(asyncio.to_thread(fn, emit))
    job.add_done_callback(lambda _: events.put_nowait(None))  # after every event the thread sent
    while (event := await events.get()) is not None:
        await on_event(event)
    return job.result()


def keep_buttons(message: cl.Message) -> None:
    """Remember a sent message's buttons, so that one click can take all of them away."""
    if message.actions:
        kept = cl.user_session.get("message_actions") or {}
        kept[message.id] = list(message.actions)
        cl.user_session.set("message_actions", kept)


async def drop_buttons(action: cl.Action) -> None:
    """Take away every button of the message the clicked one belongs to."""
    kept = cl.user_session.get("message_actions") or {}
    for button in kept.pop(action.forId, None) or [action]:
        await button.remove()
    cl.user_session.set("message_actions", kept)
