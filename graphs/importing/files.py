"""What an import starts from: which files, their identity, their checks, and staged uploads.

The one place that decides whether a file can be imported and what document it is, used by the
entry node, the CLI, the chat and the HTTP API alike.
"""
from __future__ import annotations

import errno
import hashlib
import re
import shutil
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from services.errors import FileProcessingError, ImportProcessError, ValidationError
from services.object_store import get_object_store
from services.settings import Settings

SUPPORTED = {".pdf": "pdf", ".md": "md", ".markdown": "md", ".docx": "docx", ".html": "html", ".htm": "html",
             ".txt": "txt"}
MAX_FILES = 50  # a documentation site's pages arrive together, to be recognised as one set
MAX_NAME_BYTES = 200
UNSAFE_CHARS = re.compile(r'[<>:"|?*]')


def iter_import_files(paths: list[str | Path]) -> list[Path]:
    """Files and folders (recursively) -> the importable files, in a stable order."""
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if is_folder(p):
            found.extend(sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in SUPPORTED))
        else:
            found.append(p)
    return found


def is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # e.g. a name over 255 bytes: reported as this file's failure by validate_file
        return False


def unreadable(path: Path, exc: OSError) -> FileProcessingError:
    reason = "文件名或路径过长" if exc.errno == errno.ENAMETOOLONG else (exc.strerror or type(exc).__name__)
    return FileProcessingError(f"无法读取文件“{path.name[:80]}”：{reason}。")


def doc_identity(path: Path, doc_key: str | None = None) -> tuple[str, str]:
    """(doc_id, doc_key). The id hashes the resolved path (or a caller-given key), so
    `e20c/introduction.md` and `e52c/introduction.md` never replace each other."""
    source = doc_key or str(path.resolve())
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:16]
    stem = re.sub(r"[^\w.-]+", "_", path.stem, flags=re.UNICODE).strip("._")[:60] or "doc"
    return digest, f"{stem}-{digest[:8]}"


def validate_file(path: Path, max_mb: int) -> str:
    """The file's type (a SUPPORTED value), or a ValidationError saying in Chinese what is wrong."""
    try:
        if not path.exists():
            raise FileProcessingError(f"文件不存在：{path}")
        if not path.is_file():
            raise ValidationError(f"“{path}”不是文件（是文件夹？请用命令行导入整个文件夹）。")
        size = path.stat().st_size
    except OSError as exc:
        raise unreadable(path, exc) from exc
    kind = SUPPORTED.get(path.suffix.lower())
    if kind is None:
        raise ValidationError(f"不支持的文件类型“{path.suffix or '无扩展名'}”："
                              "目前只能导入 PDF、Word（.docx）、网页（.html / .htm）、纯文本（.txt）或 Markdown（.md）文件。")
    if size == 0:
        raise ValidationError(f"文件“{path.name}”是空的（0 字节），没有可导入的内容。")
    if size > max_mb * 1024 * 1024:
        raise ValidationError(f"文件“{path.name}”有 {size / 1024 / 1024:.1f} MB，超过了 {max_mb} MB 的上限。")
    return kind


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


def display_filename(raw: str | None, safe: str) -> str:
    """The name the user gave a file, as it is shown: no NUL, control or bidi characters (a
    right-to-left override makes one name look like another); `safe` when nothing else is left."""
    shown = " ".join("".join(ch for ch in (raw or "") if unicodedata.category(ch)[0] != "C").split())
    return shown or safe


@dataclass(frozen=True)
class StagedFile:
    """An uploaded file kept for import. Its identity is its name and content: the same file uploaded
    again, through the API or the chat, replaces itself instead of adding a copy."""
    task_id: str
    name: str            # the safe name it is stored under
    display_name: str    # the name the user gave it
    path: Path           # {DATA_DIR}/uploads/YYYYMMDD/{task_id}/{name}
    doc_key: str         # "upload:{name}:{sha256}"
    content_hash: str
    original_key: str    # where the original is kept in the object store
    folders: tuple[str, ...] = ()  # the folders the client's file name gave (a site export), for recognition

    def as_dict(self) -> dict:
        return {k: list(v) if k == "folders" else str(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: dict) -> "StagedFile":
        return cls(**{**data, "path": Path(data["path"]), "folders": tuple(data.get("folders") or ())})


def client_folders(raw: str | None) -> tuple[str, ...]:
    """The folders of a client's relative file name (`mars/compute-module/boot.md`), each made harmless;
    they only tell recognition which pages belong together and never become a path on disk."""
    parts = (raw or "").replace("\\", "/").split("/")[:-1]
    cleaned = (safe_filename(p) for p in parts if p.strip() not in ("", ".", ".."))
    return tuple(p for p in cleaned if p != "upload")[-8:]


class UploadRejected(Exception):
    """A batch refused before any import started; `status` is the HTTP status that fits."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _target(folder: Path, name: str) -> Path:
    target = folder / name
    if target.resolve().parent != folder.resolve():  # belt and braces after safe_filename
        raise UploadRejected(400, f"文件名不合法：{name!r}")
    return target


def stage_uploads(files: list[tuple[str | None, BinaryIO]], settings: Settings) -> list[StagedFile]:
    """Save every file under {DATA_DIR}/uploads/YYYYMMDD/{task_id}/{name}, check it and store its
    original; all files are accepted or none (nothing is left behind)."""
    if len(files) > MAX_FILES:
        raise UploadRejected(400, f"一次最多上传 {MAX_FILES} 个文件，本次收到 {len(files)} 个。")
    day = datetime.now().strftime("%Y%m%d")
    created: list[Path] = []
    received: list[tuple[str, str, Path, str, tuple[str, ...]]] = []
    try:
        for raw_name, stream in files:
            task_id = uuid.uuid4().hex
            folder = settings.data_dir / "uploads" / day / task_id
            name = safe_filename(raw_name)
            target = _target(folder, name)
            folder.mkdir(parents=True, exist_ok=False)
            created.append(folder)
            digest = hashlib.sha256()
            with target.open("wb") as out:
                while block := stream.read(1024 * 1024):
                    digest.update(block)
                    out.write(block)
            try:
                validate_file(target, settings.max_upload_mb)
            except ImportProcessError as exc:
                raise UploadRejected(400, exc.message) from exc
            received.append((task_id, display_filename(raw_name, name), target, digest.hexdigest(),
                             client_folders(raw_name)))
        store = get_object_store(settings)
        staged = []
        for task_id, display, target, digest, carried in received:
            doc_key = f"upload:{target.name}:{digest}"
            try:
                original = store.upload_original(target, doc_identity(target, doc_key)[1])
            except ImportProcessError as exc:
                raise UploadRejected(503, f"原件保存失败，没有开始导入：{exc.message}") from exc
            staged.append(StagedFile(task_id, target.name, display, target, doc_key, digest, original, carried))
    except BaseException:
        for folder in created:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return staged


def discard(staged: list[StagedFile]) -> None:
    """Remove the task folders of files that will not be imported."""
    for item in staged:
        shutil.rmtree(item.path.parent, ignore_errors=True)
