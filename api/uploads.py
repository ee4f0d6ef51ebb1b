"""POST /api/upload: the body limit and the background imports (staging is the import package's)."""
from __future__ import annotations

import logging
import uuid
from concurrent.futures import ThreadPoolExecutor

from graphs.importing import MAX_FILES, StagedFile, catalog, import_set
from services.settings import get_settings
from services.task_store import get_task_store

log = logging.getLogger("api.uploads")


def upload_body_limit() -> int:
    """Whole multipart body: every file at its maximum, plus room for the form framing."""
    return MAX_FILES * get_settings().max_upload_mb * 1024 * 1024 + 1024 * 1024


def upload_part_limit() -> int:
    """One file: cut off at MAX_UPLOAD_MB while it arrives (validation afterwards gives the exact size)."""
    return get_settings().max_upload_mb * 1024 * 1024


class ImportQueue:
    """Background imports, a few at a time (each import is CPU-heavy)."""

    def __init__(self, workers: int = 2):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="api-import")

    def submit(self, staged: list[StagedFile], product: str | None,
               products: dict[str, str] | None = None, *, by: str) -> list[str]:
        """One job for the batch: its files are one set, their products recognised together.
        `by`: the user who uploaded them (kept with each task and document)."""
        tasks = get_task_store()
        for item in staged:
            tasks.create(item.task_id, item.name, product=product or (products or {}).get(item.name), by=by)
        self._pool.submit(self._run, staged, product, products, by)
        return [item.task_id for item in staged]

    @staticmethod
    def _run(staged: list[StagedFile], product: str | None, products: dict[str, str] | None, by: str) -> None:
        try:
            import_set([item.path for item in staged], staged=staged, product=product, products=products,
                       updated_by=by)
        except Exception as exc:  # run_import records its own failures; this covers the task store itself
            log.exception("background import crashed")
            for item in staged:
                try:
                    if (get_task_store().get(item.task_id) or {}).get("status") != "completed":
                        get_task_store().fail(item.task_id, f"导入失败：{exc}")
                except Exception:
                    log.exception("could not record the failure of task %s", item.task_id)

    def submit_reindex(self, by: str) -> str:
        task_id = uuid.uuid4().hex
        get_task_store().create(task_id, "重建索引", by=by)
        self._pool.submit(self._reindex, task_id, by)
        return task_id

    @staticmethod
    def _reindex(task_id: str, by: str) -> None:
        tasks = get_task_store()
        try:
            tasks.start(task_id)
            result = catalog.reindex_all(updated_by=by, progress=lambda text: tasks.progress(task_id, text))
            tasks.complete(task_id, result)
        except Exception as exc:
            log.exception("reindex failed")
            tasks.fail(task_id, f"重建索引失败：{exc}")

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
