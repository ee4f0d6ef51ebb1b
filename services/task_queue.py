"""The task queue (Huey): over Redis when settings.redis_url is set, else over an SQLite file under
{data_dir}/queue, which needs no server. The same registered functions run on both.

Huey removes a message when a worker takes it, so a worker killed mid-task loses its message: the
task store's leases decide when such a task runs again, and the caller re-sends it.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from huey import RedisHuey, SqliteHuey
from huey.consumer import Consumer
from huey.exceptions import RetryTask

from services.errors import StorageError
from services.settings import Settings, get_settings

log = logging.getLogger("services.task_queue")

QUEUE_NAME = "zgzk-tasks"
POLL_MAX_S = 0.5  # the SQLite queue is polled; an idle worker looks at least this often

__all__ = ["RetryTask", "TaskQueue", "get_task_queue"]


class _InProcessConsumer(Consumer):
    """A consumer inside another program (the web app): its signals stay the program's."""

    def _set_signal_handlers(self) -> None:
        return None


class TaskQueue:
    def __init__(self, settings: Settings):
        self.backend = "redis" if settings.redis_url else "sqlite"
        if settings.redis_url:
            self.huey = RedisHuey(QUEUE_NAME, url=settings.redis_url, results=False)
            self._where = "Redis"
        else:
            folder = settings.data_dir / "queue"
            folder.mkdir(parents=True, exist_ok=True)
            self.huey = SqliteHuey(QUEUE_NAME, filename=str(folder / "tasks.db"), results=False, timeout=30)
            self._where = f"本地队列 {folder}"
        self._tasks: dict[str, object] = {}
        self._lock = threading.Lock()

    def describe(self) -> str:
        return self._where

    def register(self, name: str, func: Callable) -> None:
        """`func(*args)` runs on a worker whenever `send(name, *args)` is called (once per name)."""
        with self._lock:
            if name not in self._tasks:
                self._tasks[name] = self.huey.task(name=name)(func)

    def send(self, name: str, *args, delay: float | None = None) -> None:
        try:
            task = self._tasks[name]
            if delay:
                task.schedule(args, delay=delay)
            else:
                task(*args)
        except KeyError:
            raise StorageError(f"任务类型未注册：{name}") from None
        except Exception as exc:  # redis / sqlite errors alike: nothing was queued
            raise StorageError(f"任务无法加入队列（{self.describe()}不可用）：{exc}", cause=exc) from exc

    def ping(self) -> bool:
        """True when the queue answers; StorageError saying why otherwise."""
        try:
            self.huey.pending_count()
        except Exception as exc:
            raise StorageError(f"{self.describe()}不可用：{exc}", cause=exc) from exc
        return True

    def consumer(self, workers: int, *, in_process: bool) -> Consumer:
        """`workers` threads taking messages; start() it (in_process) or run() it (a worker program)."""
        kind = _InProcessConsumer if in_process else Consumer
        return kind(self.huey, workers=workers, worker_type="thread", periodic=False,
                    initial_delay=0.05, max_delay=POLL_MAX_S, check_worker_health=True)


_queues: dict[str, TaskQueue] = {}
_queues_lock = threading.Lock()


def get_task_queue(settings: Settings | None = None) -> TaskQueue:
    """One queue per distinct configuration."""
    settings = settings or get_settings()
    key = settings.redis_url or str(settings.data_dir)
    with _queues_lock:
        if key not in _queues:
            _queues[key] = TaskQueue(settings)
        return _queues[key]
