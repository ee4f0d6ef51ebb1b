"""POST /api/upload: safe file names, validation, storage of the originals, background imports."""
from __future__ import annotations

import hashlib
import logging
import re
import shutil
import unicodedata
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from graphs.importing.nodes.entry import validate_file
from graphs.importing.runner import run_import
from services.errors import ImportProcessError
from services.object_store import get_object_store
from services.settings import Settings, get_settings
from services.task_store import get_task_store

log = logging.getLogger("api.uploads")

MAX_FILES = 10
MAX_NAME_BYTES = 200
UNSAFE_CHARS = re.compile(r'[<>:"|?*]')


def upload_body_limit() -> int:
    """Whole multipart body: every file at its maximum, plus room for the form framing."""
    return MAX_FILES * get_settings().max_upload_mb * 1024 * 1024 + 1024 * 1024


def safe_filename(raw: str | None) -> str:
    """A client's file name reduced to one harmless path segment: no directories (`../`, absolute,
    `C:\\`), no NUL or control characters, no leading dots; the extension is kept."""
    name = (raw or "").replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if unicodedata.category(ch)[0] != "C")  # NUL, controls, bidi marks
    name = UNSAFE_CHARS.sub("_", name).strip().lstrip(".").strip()
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    suffix = suffix[:16]
    stem = stem.strip() or "upload"
    while len(stem.encode("utf-8")) + len(suffix) + 1 > MAX_NAME_BYTES:
        stem = stem[:-1]
    return f"{stem}.{suffix}" if suffix else stem


@dataclass
class StagedFile:
    task_id: str
    name: str
    path: Path
    # identity of the document: the same file (name and content) uploaded again, through the API or
    # the chat, replaces itself instead of adding a copy
    doc_key: str = ""


class UploadRejected(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _target(folder: Path, name: str) -> Path:
    target = folder / name
    if target.resolve().parent != folder.resolve():  # belt and braces after safe_filename
        raise UploadRejected(400, f"文件名不合法：{name!r}")
    return target


def stage_uploads(files: list[tuple[str | None, BinaryIO]], settings: Settings) -> list[StagedFile]:
    """Save every file under {DATA_DIR}/uploads/YYYYMMDD/{task_id}/{name}, validate it like a chat
    attachment and store the original; all files are accepted or none (nothing is left behind)."""
    if len(files) > MAX_FILES:
        raise UploadRejected(400, f"一次最多上传 {MAX_FILES} 个文件，本次收到 {len(files)} 个。")
    day = datetime.now().strftime("%Y%m%d")
    staged: list[StagedFile] = []
    try:
        for raw_name, stream in files:
            task_id = uuid.uuid4().hex
            folder = settings.data_dir / "uploads" / day / task_id
            name = safe_filename(raw_name)
            staged.append(StagedFile(task_id, name, _target(folder, name)))
            folder.mkdir(parents=True, exist_ok=False)
            digest = hashlib.sha256()
            with staged[-1].path.open("wb") as out:
                while block := stream.read(1024 * 1024):
                    digest.update(block)
                    out.write(block)
            staged[-1].doc_key = f"upload:{name}:{digest.hexdigest()}"
            try:
                validate_file(staged[-1].path, settings.max_upload_mb)
            except ImportProcessError as exc:
                raise UploadRejected(400, exc.message) from exc
        store = get_object_store(settings)
        for item in staged:
            try:
                store.upload_original(item.path, day)
            except ImportProcessError as exc:
                raise UploadRejected(503, f"原件保存失败，没有开始导入：{exc.message}") from exc
    except BaseException:
        discard(staged)
        raise
    return staged


def discard(staged: list[StagedFile]) -> None:
    """Remove the task folders of files that will not be imported."""
    for item in staged:
        shutil.rmtree(item.path.parent, ignore_errors=True)


class ImportQueue:
    """Background imports, a few at a time (each import is CPU-heavy)."""

    def __init__(self, workers: int = 2):
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="api-import")

    def submit(self, staged: list[StagedFile], product: str | None, by: str) -> list[str]:
        tasks = get_task_store()
        for item in staged:
            tasks.create(item.task_id, item.name, product=product, by=by)
        for item in staged:
            self._pool.submit(self._run, item, product)
        return [item.task_id for item in staged]

    @staticmethod
    def _run(item: StagedFile, product: str | None) -> None:
        try:
            run_import(item.path, product=product, task_id=item.task_id, doc_key=item.doc_key)
        except Exception as exc:  # run_import records its own failures; this covers the task store itself
            log.exception("background import crashed")
            try:
                get_task_store().fail(item.task_id, f"导入失败：{exc}")
            except Exception:
                log.exception("could not record the failure of task %s", item.task_id)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
