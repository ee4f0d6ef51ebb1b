"""One file's import as a chat message, updated at every node of the import graph."""
from __future__ import annotations

import chainlit as cl

from ui.format import ImportProgress

NODE_EVENTS = ("node_start", "node_end", "node_error")


class FileView:
    def __init__(self, name: str, done_actions=None):
        self.name = name
        self.progress = ImportProgress(name)
        self.message = cl.Message(content=f"⏳ 正在导入《{name}》……")
        self.done_actions = done_actions  # () -> the buttons under a finished import
        self.finished = False

    async def show(self) -> None:
        await self.message.send()

    async def on_event(self, event: dict) -> None:
        kind = event.get("type")
        if kind in NODE_EVENTS:  # one update per node, not per picture
            self.progress.apply(event)
            self.message.content = self.progress.render_running()
            await self.message.update()
        elif kind == "import_done":
            await self.done(event["result"])
        elif kind == "import_failed":
            await self.fail(self.progress.render_failed(event.get("error", "")))

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
