"""Persisted import-task state (collection `import_task`), in the same database as the chat history.

Kept in the database rather than in memory so that /status survives a restart, and so that tasks a
dead process left half-done can be marked failed on startup (`mark_interrupted`).
"""
from __future__ import annotations

from functools import lru_cache

from services.errors import StorageError
from services.history_store import DocumentDatabase, get_database, now_ts
from services.settings import Settings, get_settings

TASK_COLLECTION = "import_task"
PENDING, PROCESSING, COMPLETED, FAILED = "pending", "processing", "completed", "failed"
INTERRUPTED_ERROR = "进程中断，导入未完成，请重新导入"


def _public(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "_id"}


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

    def create(self, task_id: str, file_name: str, product: str | None = None, by: str = "") -> dict:
        """Fresh pending task (re-creating an id starts it over); `by` is the user who asked for it."""
        now = now_ts()
        doc = {"task_id": task_id, "status": PENDING, "file_name": file_name, "product": product, "by": by,
               "done_list": [], "running_list": [], "error": "", "result": None, "created": now, "updated": now}
        with self._tasks("创建导入任务") as tasks:
            tasks.replace_one({"task_id": task_id}, doc, upsert=True)
        return _public(doc)

    def start(self, task_id: str) -> None:
        self._update(task_id, {"$set": {"status": PROCESSING}}, "更新导入任务状态")

    def node_started(self, task_id: str, node: str) -> None:
        self._update(task_id, {"$addToSet": {"running_list": node}}, "记录节点开始")

    def node_finished(self, task_id: str, node: str) -> None:
        self._update(task_id, {"$pull": {"running_list": node}, "$addToSet": {"done_list": node}}, "记录节点完成")

    def progress(self, task_id: str, text: str) -> None:
        self._update(task_id, {"$set": {"progress": text}}, "记录任务进度")

    def complete(self, task_id: str, result: dict) -> None:
        self._update(task_id, {"$set": {"status": COMPLETED, "result": result, "running_list": []}},
                     "更新导入任务状态")

    def fail(self, task_id: str, error: str) -> None:
        self._update(task_id, {"$set": {"status": FAILED, "error": error, "running_list": []}}, "更新导入任务状态")

    def get(self, task_id: str) -> dict | None:
        with self._tasks("读取导入任务") as tasks:
            doc = tasks.find_one({"task_id": task_id})
        return _public(doc) if doc else None

    def mark_interrupted(self) -> int:
        """On startup: tasks a dead process left pending/processing become failed; returns how many."""
        update = {"$set": {"status": FAILED, "error": INTERRUPTED_ERROR, "running_list": [], "updated": now_ts()}}
        with self._tasks("标记中断的导入任务") as tasks:
            return tasks.update_many({"status": {"$in": [PENDING, PROCESSING]}}, update).modified_count

    def ping(self) -> bool:
        return self.db.ping()

    def list(self, limit: int = 50) -> list[dict]:
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
