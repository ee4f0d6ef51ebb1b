"""Persisted import-task state (collection `import_task`), in the same database as the chat history.

Kept in the database rather than in memory so that /status survives a restart and every process
(app replicas, queue workers) sees the same tasks. A running task holds a lease that its process
renews; a task whose lease ran out belongs to a process that died, and only then is it handed on
(`expired` / `hand_on`): never because some other process started.

A task's `steps` list what happened in its current attempt (node start / end / error, progress
lines), so that a viewer in any process (the chat) can replay its progress from the store alone.
"""
from __future__ import annotations

import os
import socket
import threading
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterator, TypedDict

from services.errors import StorageError
from services.history_store import DocumentDatabase, get_database, now_ts
from services.settings import Settings, get_settings

TASK_COLLECTION = "import_task"
PENDING, PROCESSING, COMPLETED, FAILED = "pending", "processing", "completed", "failed"
INTERRUPTED_ERROR = "进程中断，导入未完成，请重新导入"
RETRY, GIVE_UP = "retry", "give_up"


def worker_id() -> str:
    """Who holds a lease (the `worker` of a running task): this host, process and thread."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


class TaskRecord(TypedDict):
    """An import task as the store returns it (without the database's `_id`)."""
    task_id: str
    status: str                  # "pending" | "processing" | "completed" | "failed"
    file_name: str
    requested_product: str | None
    by: str                      # who asked for it
    done_list: list[str]         # nodes finished in the current attempt
    running_list: list[str]
    steps: list[dict]            # node start / end / error and progress lines, in order
    error: str
    result: dict | None          # a completed import's result (graphs.importing.runner.ImportResult)
    created: float
    updated: float
    job: dict | None             # what a queue worker runs (graphs.importing.jobs); None: cannot be retried
    attempts: int
    worker: str                  # who holds the lease
    lease_until: float | None


def _public(doc: dict) -> TaskRecord:
    return {k: v for k, v in doc.items() if k != "_id"}  # type: ignore[return-value]  # the stored fields


class TaskStore:
    def __init__(self, settings: Settings | None = None, db: DocumentDatabase | None = None):
        self.db = db or DocumentDatabase(settings or get_settings())
        self.backend = self.db.backend

    def _tasks(self, action: str):
        return self.db.collection(TASK_COLLECTION, action, indexes=[[("task_id", 1)], [("created", -1)]])

    def _update(self, task_id: str, update: dict, action: str) -> None:
        update.setdefault("$set", {})["updated"] = now_ts()
        with self._tasks(action) as tasks:
            matched = tasks.update_one({"task_id": task_id}, update).matched_count
        if not matched:
            raise StorageError(f"{action}失败：导入任务不存在：{task_id}")

    def create(self, task_id: str, file_name: str, product: str | None = None, job: dict | None = None,
               by: str = "") -> TaskRecord:
        """Fresh pending task (re-creating an id starts it over); `by` is the user who asked for it.
        `job` is what a queue worker needs to run it again from scratch; without one it cannot be retried."""
        now = now_ts()
        doc = {"task_id": task_id, "status": PENDING, "file_name": file_name, "requested_product": product, "by": by,
               "done_list": [], "running_list": [], "steps": [], "error": "", "result": None,
               "created": now, "updated": now, "job": job, "attempts": 0, "worker": "", "lease_until": None}
        with self._tasks("创建导入任务") as tasks:
            tasks.replace_one({"task_id": task_id}, doc, upsert=True)
        return _public(doc)

    def start(self, task_id: str, lease_s: float) -> None:
        """Processing under this thread's lease (kept when a queue worker already claimed the task)."""
        self._update(task_id, {"$set": {"status": PROCESSING, "worker": worker_id(),
                                        "lease_until": now_ts() + lease_s}}, "更新导入任务状态")

    def claim(self, task_id: str, lease_s: float) -> TaskRecord | None:
        """Take a task to run: a pending one, or one whose holder's lease ran out. None when it is
        finished, or running under a live lease (a message delivered twice): the caller skips it."""
        now = now_ts()
        query = {"task_id": task_id, "$or": [{"status": PENDING},
                                             {"status": PROCESSING, "lease_until": {"$lt": now}}]}
        update = {"$set": {"status": PROCESSING, "worker": worker_id(), "lease_until": now + lease_s, "updated": now,
                           "done_list": [], "running_list": [], "steps": [], "error": ""}, "$inc": {"attempts": 1}}
        with self._tasks("领取导入任务") as tasks:
            if not tasks.update_one(query, update).matched_count:
                return None
            return _public(tasks.find_one({"task_id": task_id}))

    def renew(self, task_id: str, worker: str, lease_s: float) -> bool:
        """Extend `worker`'s lease; False when the task is no longer its to run."""
        with self._tasks("续租导入任务") as tasks:
            return tasks.update_one({"task_id": task_id, "status": PROCESSING, "worker": worker},
                                    {"$set": {"lease_until": now_ts() + lease_s}}).matched_count == 1

    @contextmanager
    def leased(self, task_id: str, lease_s: float) -> Iterator[None]:
        """Renew the lease in the background while the body runs (a dead process stops renewing)."""
        worker, stop = worker_id(), threading.Event()

        def renew() -> None:
            while not stop.wait(lease_s / 3):
                try:
                    if not self.renew(task_id, worker, lease_s):
                        return  # finished, or handed on after a stall: nothing left to hold
                except StorageError:  # the database was unreachable this round; the next one tries again
                    continue

        thread = threading.Thread(target=renew, name=f"lease-{task_id[:8]}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def retry_later(self, task_id: str, error: str) -> None:
        """A transient failure: waiting for the queue to run it again."""
        self._update(task_id, {"$set": {"status": PENDING, "error": error, "running_list": [], "worker": "",
                                        "lease_until": None}}, "更新导入任务状态")

    def expired(self) -> list[TaskRecord]:
        """Running tasks whose holder stopped renewing."""
        with self._tasks("读取过期的导入任务") as tasks:
            return [_public(d) for d in tasks.find({"status": PROCESSING, "lease_until": {"$lt": now_ts()}})]

    def hand_on(self, task_id: str, max_attempts: int) -> str | None:
        """An expired task goes back to pending (RETRY: the caller enqueues it again) or, with no job
        to rerun or no attempts left, fails (GIVE_UP). None when its lease was renewed meanwhile or
        another process handed it on first."""
        now = now_ts()
        expired = {"task_id": task_id, "status": PROCESSING, "lease_until": {"$lt": now}}
        with self._tasks("转交过期的导入任务") as tasks:
            doc = tasks.find_one(expired)
            if doc is None:
                return None
            attempts = int(doc.get("attempts") or 0)
            if doc.get("job") and attempts < max_attempts:
                outcome, update = RETRY, {"status": PENDING, "worker": "", "lease_until": None, "running_list": [],
                                          "error": f"处理进程意外退出，正在重试（已尝试 {attempts} 次）"}
            else:
                outcome, update = GIVE_UP, {"status": FAILED, "running_list": [], "lease_until": None,
                                            "error": INTERRUPTED_ERROR if not doc.get("job") else
                                            f"处理进程意外退出，已尝试 {attempts} 次仍未完成，请重新导入"}
            # conditional again: on MongoDB another process may have claimed or handed it on meanwhile
            changed = tasks.update_one({**expired, "attempts": attempts}, {"$set": {**update, "updated": now}})
            return outcome if changed.matched_count else None

    def node_started(self, task_id: str, node: str, label: str = "") -> None:
        self._update(task_id, {"$addToSet": {"running_list": node},
                               "$push": {"steps": {"type": "node_start", "node": node, "label": label or node}}},
                     "记录节点开始")

    def node_finished(self, task_id: str, node: str, label: str = "", summary: str = "", seconds: float = 0.0) -> None:
        step = {"type": "node_end", "node": node, "label": label or node, "summary": summary, "seconds": seconds}
        self._update(task_id, {"$pull": {"running_list": node}, "$addToSet": {"done_list": node},
                               "$push": {"steps": step}}, "记录节点完成")

    def node_failed(self, task_id: str, node: str, label: str = "", error: str = "") -> None:
        step = {"type": "node_error", "node": node, "label": label or node, "error": error}
        self._update(task_id, {"$pull": {"running_list": node}, "$push": {"steps": step}}, "记录节点失败")

    def progress(self, task_id: str, text: str) -> None:
        self._update(task_id, {"$set": {"progress": text}, "$push": {"steps": {"type": "progress", "text": text}}},
                     "记录任务进度")

    def complete(self, task_id: str, result: dict) -> None:
        self._update(task_id, {"$set": {"status": COMPLETED, "result": result, "running_list": [],
                                        "lease_until": None, "error": ""}}, "更新导入任务状态")

    def fail(self, task_id: str, error: str) -> None:
        self._update(task_id, {"$set": {"status": FAILED, "error": error, "running_list": [], "lease_until": None}},
                     "更新导入任务状态")

    def get(self, task_id: str) -> TaskRecord | None:
        with self._tasks("读取导入任务") as tasks:
            doc = tasks.find_one({"task_id": task_id})
        return _public(doc) if doc else None

    def get_many(self, task_ids: list[str]) -> dict[str, TaskRecord]:
        """The tasks of these ids that exist, by id (one read, for a viewer following several)."""
        with self._tasks("读取导入任务") as tasks:
            return {doc["task_id"]: _public(doc) for doc in tasks.find({"task_id": {"$in": list(task_ids)}})}

    def ping(self) -> bool:
        return self.db.ping()

    def list(self, limit: int = 50) -> list[TaskRecord]:
        """Newest tasks first."""
        if limit <= 0:
            return []
        with self._tasks("读取导入任务列表") as tasks:
            return [_public(doc) for doc in tasks.find({}).sort([("created", -1)]).limit(limit)]


def get_task_store(settings: Settings | None = None) -> TaskStore:
    return _task_store_for(get_database(settings))


@lru_cache(maxsize=None)
def _task_store_for(db: DocumentDatabase) -> TaskStore:
    return TaskStore(db=db)
