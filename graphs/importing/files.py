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
from typing import BinaryIO, TypedDict

from graphs.importing.archives import is_archive, unpack
from graphs.importing.filetypes import DOCUMENT_KINDS, refusal
from services.errors import FileProcessingError, ImportProcessError, ValidationError
from services.object_store import get_object_store
from services.settings import Settings

SUPPORTED = DOCUMENT_KINDS  # what the import graph reads; archives are unpacked into these first
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
    size = checked_size(path)
    kind = SUPPORTED.get(path.suffix.lower())
    if kind is None:
        raise ValidationError(refusal(path.name))
    check_size(path.name, size, max_mb)
    return kind


def checked_size(path: Path) -> int:
    try:
        if not path.exists():
            raise FileProcessingError(f"文件不存在：{path}")
        if not path.is_file():
            raise ValidationError(f"“{path}”不是文件（是文件夹？请用命令行导入整个文件夹）。")
        return path.stat().st_size
    except OSError as exc:
        raise unreadable(path, exc) from exc


def check_size(name: str, size: int, max_mb: int) -> None:
    if size == 0:
        raise ValidationError(f"文件“{name}”是空的（0 字节），没有可导入的内容。")
    if size > max_mb * 1024 * 1024:
        raise ValidationError(f"文件“{name}”有 {size / 1024 / 1024:.1f} MB，超过了 {max_mb} MB 的上限。")


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


class StagedFields(TypedDict):
    """A staged file as a queued job carries it (JSON)."""
    task_id: str
    name: str
    display_name: str
    path: str
    doc_key: str
    content_hash: str
    original_key: str
    folders: list[str]
    archive: str


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
    archive: str = ""    # a page unpacked from an archive: the archive's folder, which its pictures share

    def as_dict(self) -> StagedFields:
        return {"task_id": self.task_id, "name": self.name, "display_name": self.display_name, "path": str(self.path),
                "doc_key": self.doc_key, "content_hash": self.content_hash, "original_key": self.original_key,
                "folders": list(self.folders), "archive": self.archive}

    @classmethod
    def from_dict(cls, data: StagedFields) -> "StagedFile":
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


class StagedBatch(list):
    """The staged files of one upload, plus a line per archive about what in it was not imported."""

    def __init__(self, files=(), notes: list[str] | None = None):
        super().__init__(files)
        self.notes = notes or []


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def _unpack_archive(archive: Path, folder: Path, display: str, settings: Settings,
                    notes: list[str]) -> list[tuple[str, str, Path, str, tuple[str, ...], str]]:
    """An uploaded archive -> its pages and manuals as received files (their pictures beside them in
    `folder`); the archive file itself goes once unpacked. A page that fails its check is skipped."""
    try:
        unpacked = unpack(archive, folder, display_name=display, max_files=settings.archive_max_files,
                          max_mb=settings.archive_max_mb, clean_name=safe_filename)
    finally:
        archive.unlink(missing_ok=True)
    received = []
    for rel in unpacked.documents:
        page = folder / rel
        size = page.stat().st_size
        if size == 0 or size > settings.max_upload_mb * 1024 * 1024:
            unpacked.skip("是空的（0 字节）" if size == 0 else f"超过了 {settings.max_upload_mb} MB 的上限", rel)
            page.unlink()
            continue
        received.append((uuid.uuid4().hex, rel, page, file_sha256(page), client_folders(rel), str(folder)))
    if not received:
        raise UploadRejected(400, f"压缩包“{display}”里没有可导入的说明书：{unpacked.skipped_text()}。")
    notes.append(unpacked.note(display, len(received)))
    return received


def stage_uploads(files: list[tuple[str | None, BinaryIO]], settings: Settings) -> StagedBatch:
    """Save every file under {DATA_DIR}/uploads/YYYYMMDD/{task_id}/{name}, check it and store its
    original; all files are accepted or none (nothing is left behind). An archive (.zip / .tar.gz)
    is unpacked into its task folder and stands for the pages and manuals in it."""
    if len(files) > MAX_FILES:
        raise UploadRejected(400, f"一次最多上传 {MAX_FILES} 个文件，本次收到 {len(files)} 个。")
    day = datetime.now().strftime("%Y%m%d")
    created: list[Path] = []
    notes: list[str] = []
    received: list[tuple[str, str, Path, str, tuple[str, ...], str]] = []
    try:
        for raw_name, stream in files:
            task_id = uuid.uuid4().hex
            folder = settings.data_dir / "uploads" / day / task_id
            name = safe_filename(raw_name)
            display = display_filename(raw_name, name)
            archive = is_archive(name)
            # an archive arrives beside the folder it is unpacked into
            target = _target(folder.parent, f"{task_id}-{name}") if archive else _target(folder, name)
            folder.parent.mkdir(parents=True, exist_ok=True)
            if not archive:
                folder.mkdir(exist_ok=False)
            created.append(folder)
            created.append(target)
            digest = hashlib.sha256()
            with target.open("xb") as out:
                while block := stream.read(1024 * 1024):
                    digest.update(block)
                    out.write(block)
            try:
                if archive:
                    check_size(display, target.stat().st_size, settings.max_upload_mb)
                    received += _unpack_archive(target, folder, display, settings, notes)
                    continue
                validate_file(target, settings.max_upload_mb)
            except ImportProcessError as exc:
                raise UploadRejected(400, exc.message) from exc
            received.append((task_id, display, target, digest.hexdigest(), client_folders(raw_name), ""))
        store = get_object_store(settings)
        staged = StagedBatch(notes=notes)
        for task_id, shown, target, digest, carried, archive_folder in received:
            # an archive's page is named by its place in the archive: two `index.md` stay two documents
            key_name = shown if archive_folder else target.name
            doc_key = f"upload:{key_name}:{digest}"
            try:
                original = store.upload_original(target, doc_identity(target, doc_key)[1])
            except ImportProcessError as exc:
                raise UploadRejected(503, f"原件保存失败，没有开始导入：{exc.message}") from exc
            staged.append(StagedFile(task_id, target.name, shown, target, doc_key, digest, original, carried,
                                     archive_folder))
    except BaseException:
        for path in created:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        raise
    return staged


def discard(staged: list[StagedFile]) -> None:
    """Remove the task folders of files that will not be imported (of an archive's page, the page
    alone: its pictures serve the archive's other pages too)."""
    for item in staged:
        if item.archive:
            item.path.unlink(missing_ok=True)
        else:
            shutil.rmtree(item.path.parent, ignore_errors=True)
