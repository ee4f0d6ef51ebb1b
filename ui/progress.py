"""Queue tasks followed in the chat: each poll of the task store replays what a task recorded since
(node steps, progress lines), whichever process runs it, and ends with the task's outcome."""
from __future__ import annotations

import asyncio
import logging
import time

import chainlit as cl

from services.errors import StorageError
from services.task_store import COMPLETED, FAILED, PENDING, PROCESSING, get_task_store
from ui.format import ImportProgress, queued_text

log = logging.getLogger("ui.progress")

NODE_EVENTS = ("node_start", "node_end", "node_error")
POLL_S = 0.3      # while the tasks change; doubled while they do not, up to POLL_MAX_S
POLL_MAX_S = 1.5  # (on the embedded database every read scans the task collection)
LOST_AFTER_S = 60.0  # the task store unreadable this long: stop following (the task itself goes on)
QUEUED_NOTICE_S = 20.0  # a task not started this long: say why it may wait
QUEUE_SAMPLE = 200  # recent tasks read for the queue's length and a typical import's duration
ENDED = (COMPLETED, FAILED)


def queue_outlook(task: dict) -> tuple[int, float]:
    """(tasks queued before this one, typical seconds per import lately) from the task store."""
    recent = get_task_store().list(QUEUE_SAMPLE)
    ahead = sum(1 for t in recent if t["status"] in (PENDING, PROCESSING) and t["created"] < task.get("created", 0))
    took = sorted(float((t.get("result") or {}).get("seconds") or 0) for t in recent if t["status"] == COMPLETED)
    return ahead, took[len(took) // 2] if took else 0.0


class Follower:
    """One task's view; follow_tasks feeds it."""

    def __init__(self) -> None:
        self.attempt = 0  # the attempt whose steps are shown
        self.seen = 0     # how many of them

    def restart(self) -> None:
        """Another attempt started the task over."""

    async def on_step(self, step: dict) -> None:
        """A step the task recorded, in order."""

    async def on_task(self, task: dict) -> None:
        """The task as it is after its new steps (its outcome once it has ended)."""

    async def lost(self, error: StorageError) -> None:
        """The task store stopped answering before the task ended."""

    async def unchanged(self, task: dict) -> None:
        """A poll found the task as it was."""


async def follow_tasks(followers: dict[str, Follower]) -> dict[str, dict]:
    """Poll the tasks until each has ended; returns them by id. A task that disappeared counts as failed."""
    store, ended = get_task_store(), {}
    answered_at, updated, interval = time.monotonic(), {}, POLL_S
    while len(ended) < len(followers):
        waiting = [task_id for task_id in followers if task_id not in ended]
        try:
            found = await asyncio.to_thread(store.get_many, waiting)
        except StorageError as exc:
            if time.monotonic() - answered_at < LOST_AFTER_S:
                log.warning("could not read tasks, trying again: %s", exc)
                await asyncio.sleep(POLL_S)
                continue
            for task_id in waiting:
                await followers[task_id].lost(exc)
            return ended
        answered_at, changed = time.monotonic(), False
        for task_id in waiting:
            task = found.get(task_id) or {"task_id": task_id, "status": FAILED, "steps": [], "updated": None,
                                          "error": f"导入任务不存在：{task_id}"}
            if task_id in updated and updated[task_id] == task.get("updated"):
                await followers[task_id].unchanged(task)
                continue
            updated[task_id], changed = task.get("updated"), True
            await _replay(followers[task_id], task)
            if task["status"] in ENDED:
                ended[task_id] = task
        if len(ended) < len(followers):
            interval = POLL_S if changed else min(interval * 2, POLL_MAX_S)
            await asyncio.sleep(interval)
    return ended


async def _replay(follower: Follower, task: dict) -> None:
    steps, attempt = task.get("steps") or [], int(task.get("attempts") or 0)
    if attempt != follower.attempt:  # a claim starts the steps over
        if follower.seen:
            follower.restart()
        follower.attempt, follower.seen = attempt, 0
    for step in steps[follower.seen:]:
        await follower.on_step(step)
    follower.seen = len(steps)
    await follower.on_task(task)


class FileView(Follower):
    """One file's import as a chat message, updated at every node of the import graph."""

    def __init__(self, name: str, done_actions=None):
        super().__init__()
        self.name = name
        self.progress = ImportProgress(name)
        self.message = cl.Message(content=f"⏳ 正在导入《{name}》……")
        self.done_actions = done_actions  # () -> the buttons under a finished import
        self.finished = False
        self.shown_at = time.monotonic()
        self.told_queued = False

    async def show(self) -> None:
        await self.message.send()

    def restart(self) -> None:
        self.progress = ImportProgress(self.name)

    async def on_step(self, step: dict) -> None:
        if step.get("type") in NODE_EVENTS:  # one update per node, not per picture
            self.progress.apply(step)
            self.message.content = self.progress.render_running()
            await self.message.update()

    async def on_task(self, task: dict) -> None:
        status = task.get("status")
        if status == COMPLETED:
            await self.done(task.get("result") or {})
        elif status == FAILED:
            await self.fail(self.progress.render_failed(task.get("error") or "导入失败"))
        elif status == PENDING and task.get("error"):  # a transient fault: waiting for the next attempt
            self.message.content = f"{self.progress.render_running()}\n\n🔁 {task['error']}"
            await self.message.update()

    async def unchanged(self, task: dict) -> None:
        waited = time.monotonic() - self.shown_at
        if task.get("status") == PENDING and not task.get("steps") and waited > QUEUED_NOTICE_S and not self.told_queued:
            self.told_queued = True
            try:
                ahead, typical_s = await asyncio.to_thread(queue_outlook, task)
            except StorageError:  # the notice still says what is happening, without the numbers
                ahead, typical_s = 0, 0.0
            self.message.content = queued_text(self.name, ahead, typical_s)
            await self.message.update()

    async def lost(self, error: StorageError) -> None:
        await self.fail(f"⚠️ 《{self.name}》的导入进度无法读取：{error.message}\n\n"
                        "导入可能仍在后台进行，稍后可在“知识库”中查看结果。")

    async def done(self, result: dict) -> None:
        self.message.content = self.progress.render_done(result, rename_hint=self.done_actions is not None)
        self.message.actions = self.done_actions() if self.done_actions else []
        await self.message.update()
        self.finished = True

    async def fail(self, text: str) -> None:
        self.message.content = text
        await self.message.update()
        self.finished = True

    async def crashed(self, exc: Exception) -> None:
        """A disk or library failure must still end the progress message."""
        if not self.finished:
            await self.fail(self.progress.render_failed(f"导入出错：{exc}"))
