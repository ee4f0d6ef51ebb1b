"""Vision model for image captions, with a sliding-window rate limit.

The limiter is shared by the process but waits with `asyncio`-free sleeps only in the caller's
own thread, so other sessions' work is never blocked by it.
"""
from __future__ import annotations

import base64
import mimetypes
import threading
import time
from collections import deque
from functools import lru_cache
from pathlib import Path

from langchain_core.messages import HumanMessage

from services.chat_model import get_chat_model
from services.errors import LLMError
from services.settings import Settings, get_settings


class SlidingWindowLimiter:
    """At most `max_requests` starts within any `window_s` seconds."""

    def __init__(self, max_requests: int, window_s: float, clock=time.monotonic, sleep=time.sleep):
        self.max_requests, self.window_s = max(1, max_requests), window_s
        self._clock, self._sleep = clock, sleep
        self._starts: deque[float] = deque()
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Book the next slot; return how long the caller must wait before using it."""
        with self._lock:
            now = self._clock()
            while self._starts and now - self._starts[0] >= self.window_s:
                self._starts.popleft()
            if len(self._starts) < self.max_requests:
                start = now
            else:
                start = max(now, self._starts[-self.max_requests] + self.window_s)
            self._starts.append(start)
            return start - now

    def acquire(self) -> float:
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
        return wait


@lru_cache(maxsize=4)
def get_limiter(max_requests: int, window_s: float) -> SlidingWindowLimiter:
    return SlidingWindowLimiter(max_requests, window_s)


def image_data_url(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def caption_image(path: Path, prompt: str, settings: Settings | None = None) -> str | None:
    """A short Chinese caption, or None when no vision model is configured."""
    s = settings or get_settings()
    llm = get_chat_model(s, model=s.vl_model)
    if llm is None:
        return None
    get_limiter(s.vl_max_requests, s.vl_window_s).acquire()
    message = HumanMessage(content=[
        {"type": "image_url", "image_url": {"url": image_data_url(path)}},
        {"type": "text", "text": prompt},
    ])
    try:
        text = str(llm.invoke([message]).content).strip()
    except Exception as exc:
        raise LLMError(f"图片描述模型调用失败：{exc}", cause=exc) from exc
    return text.strip("“”\"' \n")[:80] or None
