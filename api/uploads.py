"""POST /api/upload: the body limit and the background imports (staging is the import package's)."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from graphs.importing import MAX_FILES, StagedFile, run_import
from services.settings import get_settings
from services.task_store import get_task_store

log = logging.getLogger("api.uploads")

def upload_body_limit() -> int:
    """Whole multipart body: every file at its maximum, plus room for the form framing."""
    return MAX_FILES * get_settings().max_upload_mb * 1024 * 1024 + 1024 * 1024


class ImportQueue:
    """Background imports, a few at a time (each import is CPU-heavy)."""

    def __init__(self, workers: int = 2):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="api-import")

    def submit(self, staged: list[StagedFile], product: str | None) -> list[str]:
        tasks = get_task_store()
        for item in staged:
            tasks.create(item.task_id, item.name, product=product)
        for item in staged:
            self._pool.submit(self._run, item, product)
        return [item.task_id for item in staged]

    @staticmethod
    def _run(item: StagedFile, product: str | None) -> None:
        try:
            run_import(item.path, product=product, task_id=item.task_id, staged=item)
        except Exception as exc:  # run_import records its own failures; this covers the task store itself
            log.exception("background import crashed")
            try:
                get_task_store().fail(item.task_id, f"导入失败：{exc}")
            except Exception:
                log.exception("could not record the failure of task %s", item.task_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
