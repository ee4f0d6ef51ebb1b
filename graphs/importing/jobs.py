"""Imports and reindexing on the task queue: the same code whether the queue is the embedded SQLite
file or Redis, whether it runs inside the app or in `scripts/worker.sh`.

Senders take the import graph's configuration (`config`); a worker runs with its own process's, since a
queue message crosses processes. A message carries only a task id; what to run is the task's `job` in the task store, so a task handed
on after its worker died runs again exactly as first asked. Claiming decides who runs it: a message
delivered twice finds its task finished, or leased by a live worker, and does nothing. The import
itself replaces a document by its identity, so running a task again never adds a copy.
"""
from __future__ import annotations

import logging
import shutil
import threading
import uuid
from typing import Literal, TypedDict

from langchain_core.runnables import RunnableConfig

from graphs.importing import catalog
from graphs.importing.files import StagedFields, StagedFile
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.runner import ImportResult, decide_products, discard_failed, run_import
from services.errors import StorageError, is_transient
from services.settings import Settings, get_settings
from services.task_queue import RetryTask, TaskQueue
from services.task_store import FAILED, GIVE_UP, RETRY, TaskRecord

log = logging.getLogger("import.jobs")

RUN_TASK = "zgzk.run_task"
IMPORT, REIMPORT, REINDEX = "import", "reimport", "reindex"
REINDEX_NAME = "重建索引"


class Job(TypedDict, total=False):
    """What a task runs, kept with it in the task store (`TaskRecord.job`)."""
    kind: Literal["import", "reimport", "reindex"]
    updated_by: str
    staged: StagedFields       # import: the upload
    set_id: str                # import: the files that arrived with it
    product: str | None        # import: what the set's recognition decided (runner.PlannedProduct)
    product_source: str
    product_evidence: str
    how: str
    backed: bool
    doc_id: str                # reimport: the document


# --- sending ------------------------------------------------------------------------------------------

def enqueue_set(staged: list[StagedFile], product: str | None = None, products: dict[str, str] | None = None,
                updated_by: str = "", config: RunnableConfig | None = None) -> list[str]:
    """Queue the import of files that arrived together: one task each, their products decided across
    the set now. Returns the task ids; StorageError when the tasks could not be created or queued
    (the files are then not imported, and the tasks say so), `NotQueued` naming those that were
    queued when the queue failed part way."""
    decisions = decide_products([item.path for item in staged], product=product, products=products, staged=staged)
    cfg = ImportConfiguration.from_runnable_config(config)
    tasks, set_id = cfg.task_store, uuid.uuid4().hex
    for item, decided in zip(staged, decisions):
        job: Job = {"kind": IMPORT, "staged": item.as_dict(), "set_id": set_id, "updated_by": updated_by, **decided}
        tasks.create(item.task_id, item.name, product=decided["product"], job=job, by=updated_by)
    _send(cfg, [item.task_id for item in staged])
    return [item.task_id for item in staged]


def enqueue_reimport(doc_id: str, updated_by: str = "", config: RunnableConfig | None = None) -> str:
    """Queue one document's import again from its stored original; returns its task id.
    ValidationError at once when there is no such document or it kept no original."""
    cfg = ImportConfiguration.from_runnable_config(config)
    record = catalog.reimportable(doc_id, config=config)
    task_id = uuid.uuid4().hex
    cfg.task_store.create(task_id, record.get("file_name") or doc_id, product=record.get("product"),
                          job={"kind": REIMPORT, "doc_id": doc_id, "updated_by": updated_by}, by=updated_by)
    _send(cfg, [task_id])
    return task_id


def enqueue_reindex(updated_by: str = "", config: RunnableConfig | None = None) -> str:
    """Queue a reindex of every document; returns its task id."""
    cfg = ImportConfiguration.from_runnable_config(config)
    task_id = uuid.uuid4().hex
    cfg.task_store.create(task_id, REINDEX_NAME, job={"kind": REINDEX, "updated_by": updated_by}, by=updated_by)
    _send(cfg, [task_id])
    return task_id


class NotQueued(StorageError):
    """Tasks that could not be queued, which are marked failed; `queued` are those that were (a set
    can break off part way) and go on."""

    def __init__(self, cause: StorageError, queued: list[str]):
        super().__init__(cause.message, cause=cause)
        self.queued = queued


def queued_part(exc: StorageError) -> list[str]:
    """The tasks of a set that were queued before queueing failed (none for any other error)."""
    return list(exc.queued) if isinstance(exc, NotQueued) else []


def _send(cfg: ImportConfiguration, task_ids: list[str]) -> None:
    settings = cfg.settings
    queue = _registered(cfg.task_queue)
    if settings.import_in_app:
        start_in_app_worker()
    queued: list[str] = []
    try:
        for task_id in task_ids:
            queue.send(RUN_TASK, task_id)
            queued.append(task_id)
    except StorageError as exc:
        for task_id in task_ids[len(queued):]:
            cfg.task_store.fail(task_id, f"导入任务没有排上队：{exc.message}")
        raise NotQueued(exc, queued) from exc


def _queue(settings: Settings | None = None) -> TaskQueue:
    return _registered(ImportConfiguration(settings).task_queue)


def _registered(queue: TaskQueue) -> TaskQueue:
    queue.register(RUN_TASK, run_task)
    return queue


# --- running ------------------------------------------------------------------------------------------

def run_task(task_id: str) -> None:
    """One delivery of a task: claim it, run its job, and on a transient failure let the queue run it
    again after a growing delay (attempts are counted in the task store, across workers)."""
    cfg = ImportConfiguration()
    settings, tasks = cfg.settings, cfg.task_store
    task = tasks.claim(task_id, settings.task_lease_s)
    if task is None:
        log.info("task %s is finished or running elsewhere: this delivery does nothing", task_id)
        return
    job, attempts = task.get("job") or {}, int(task["attempts"])
    may_retry = attempts <= settings.import_retries
    run = {REINDEX: _run_reindex, REIMPORT: _run_reimport}.get(job.get("kind"), _run_import)
    try:
        error = run(cfg, task_id, job, may_retry)
    except Exception as exc:  # the import records its own failures; this is the task store or the queue
        log.exception("task %s crashed", task_id)
        if not (may_retry and is_transient(exc)):
            tasks.fail(task_id, f"导入失败：{exc}")
            return
        error = f"导入失败：{exc}"
    if error is None:
        return
    delay = settings.import_retry_delay_s * 2 ** (attempts - 1)
    tasks.retry_later(task_id, f"{error}（第 {attempts} 次尝试，{delay:g} 秒后重试）")
    raise RetryTask(delay=delay)


def _run_import(cfg: ImportConfiguration, task_id: str, job: Job, may_retry: bool) -> str | None:
    staged = StagedFile.from_dict(job["staged"])
    if not staged.path.is_file():  # a worker on another machine: the original is in the object store
        staged.path.parent.mkdir(parents=True, exist_ok=True)
        staged.path.write_bytes(cfg.object_store.open_original(staged.original_key))
    result = run_import(staged.path, product=job.get("product"), product_source=job.get("product_source", "user"),
                        product_evidence=job.get("product_evidence", ""), product_how=job.get("how", ""),
                        product_backed=bool(job.get("backed")), staged=staged, task_id=task_id,
                        set_id=job.get("set_id", ""), updated_by=job.get("updated_by", ""), may_retry=may_retry,
                        config={"configurable": {"settings": cfg.settings}})
    return _worth_retrying(result, may_retry)


def _run_reimport(cfg: ImportConfiguration, task_id: str, job: Job, may_retry: bool) -> str | None:
    result = catalog.reimport_document(job["doc_id"], updated_by=job.get("updated_by", ""), task_id=task_id,
                                       may_retry=may_retry, config={"configurable": {"settings": cfg.settings}})
    return _worth_retrying(result, may_retry)


def _worth_retrying(result: ImportResult, may_retry: bool) -> str | None:
    """None when done (completed, or failed for good); the error when worth another attempt."""
    return result.error if result.status == "failed" and may_retry and result.transient else None


def _run_reindex(cfg: ImportConfiguration, task_id: str, job: Job, may_retry: bool) -> str | None:
    tasks, lease_s = cfg.task_store, cfg.settings.task_lease_s
    try:
        with tasks.leased(task_id, lease_s):
            result = catalog.reindex_all(updated_by=job.get("updated_by", ""),
                                         progress=lambda text: tasks.progress(task_id, text),
                                         config={"configurable": {"settings": cfg.settings}})
    except Exception as exc:
        log.exception("reindex failed")
        tasks.fail(task_id, f"重建索引失败：{exc}")
        return None
    tasks.complete(task_id, result)
    return None


def hand_on_expired(settings: Settings | None = None) -> int:
    """Tasks whose worker stopped renewing its lease: queued again, or failed after their attempts.
    Any number of processes may run this at once; each task is handed on once."""
    cfg = ImportConfiguration(settings)
    settings, tasks, queue = cfg.settings, cfg.task_store, _registered(cfg.task_queue)
    handed = 0
    for task in tasks.expired():
        outcome = tasks.hand_on(task["task_id"], 1 + settings.import_retries)
        if outcome == RETRY:
            log.warning("task %s: its worker died, queued again", task["task_id"])
            queue.send(RUN_TASK, task["task_id"])
        elif outcome == GIVE_UP:
            discard_files_of(task)
        handed += outcome is not None
    return handed


def discard_files_of(task: TaskRecord) -> None:
    """What a failed upload's task wrote and nothing refers to: its staged copy, and its original and
    work folder unless an earlier version of the document uses them."""
    job = task.get("job") or {}
    if job.get("kind") != IMPORT:
        return
    staged = StagedFile.from_dict(job["staged"])
    discard_failed(ImportResult(task_id=task["task_id"], file=str(staged.path), status="failed"), staged,
                   ImportConfiguration.from_runnable_config(None))


def discard_failed_uploads(settings: Settings | None = None) -> int:
    """At start-up: the files of upload tasks that failed while no clean-up could run (their process
    died). Returns how many upload folders went."""
    cfg = ImportConfiguration(settings)
    settings, tasks, removed = cfg.settings, cfg.task_store, 0
    for folder in sorted((settings.data_dir / "uploads").glob("*/*")):
        task = tasks.get(folder.name) if folder.is_dir() else None
        if task is not None and task["status"] == FAILED:
            discard_files_of(task)
            shutil.rmtree(folder, ignore_errors=True)  # a folder the job did not name (an older layout)
            removed += 1
    return removed


# --- workers ------------------------------------------------------------------------------------------

class Worker:
    """IMPORT_WORKERS threads taking tasks from the queue, and a watcher handing on expired leases."""

    def __init__(self, settings: Settings, *, in_process: bool):
        self.settings = settings
        self.consumer = _queue(settings).consumer(settings.import_workers, in_process=in_process)
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="lease-watcher", daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(self.settings.task_lease_s / 3):
            try:
                hand_on_expired(self.settings)
            except StorageError as exc:  # a store out of reach this round; the next round tries again
                log.warning("could not check task leases: %s", exc)

    def _start_watching(self) -> None:
        try:
            removed = discard_failed_uploads(self.settings)
            if removed:
                log.warning("removed the files of %d failed upload(s) left by a process that died", removed)
        except StorageError as exc:  # the task store out of reach: the next start tries again
            log.warning("could not look for files of failed uploads: %s", exc)
        self._watcher.start()

    def start(self) -> None:
        self._start_watching()
        self.consumer.start()

    def run(self) -> None:
        """Until SIGINT / SIGTERM (a worker program)."""
        self._start_watching()
        try:
            self.consumer.run()
        finally:
            self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        self.consumer.stop(graceful=False)


_in_app: dict[str, Worker] = {}
_in_app_lock = threading.Lock()


def start_in_app_worker() -> Worker:
    """The app's own consumer (so a fresh machine needs nothing else); one per configuration."""
    settings = get_settings()
    key = settings.redis_url or str(settings.data_dir)
    with _in_app_lock:
        if key not in _in_app:
            worker = _in_app[key] = Worker(settings, in_process=True)
            worker.start()
        return _in_app[key]


def stop_in_app_workers() -> None:
    with _in_app_lock:
        workers = list(_in_app.values())
        _in_app.clear()
    for worker in workers:
        worker.stop()


def run_worker() -> None:
    """The body of scripts/worker.sh."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = get_settings()
    queue = _queue(settings)
    log.info("worker: %d threads on %s", settings.import_workers, queue.describe())
    Worker(settings, in_process=False).run()
