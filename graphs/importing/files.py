"""What an import starts from: which files, their identity, their checks, and staged uploads.

The one place that decides whether a file can be imported and what document it is, used by the
entry node, the CLI, the chat and the HTTP API alike.
"""
from __future__ import annotations

import errno
import hashlib
import re
import shutil
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import BinaryIO, TypedDict

from graphs.importing.archives import is_archive, unpack
from graphs.importing.filetypes import DOCUMENT_KINDS, refusal, shown_name
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
    kind = file_kind(path.name)
    check_size(path.name, size, max_mb)
    return kind


def file_kind(name: str) -> str:
    """The type of a file so named (a SUPPORTED value), or a ValidationError saying why it is not imported."""
    kind = SUPPORTED.get(Path(name).suffix.lower())
    if kind is None:
        raise ValidationError(refusal(name))
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
    name = UNSAFE_CHARS.sub("_", shown_name(name)).strip().lstrip(".").strip()
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        stem, suffix = name, ""
    suffix = suffix[:16]
    stem = stem.strip() or "upload"
    while len(stem.encode("utf-8")) + len(suffix) + 1 > MAX_NAME_BYTES:
        stem = stem[:-1]
    return f"{stem}.{suffix}" if suffix else stem


def display_filename(raw: str | None) -> str:
    """The name the user gave a file, as it is shown (see shown_name); its safe name when nothing else is left."""
    return shown_name(raw or "") or safe_filename(raw)


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


class UploadStager:
    """One upload being received, file by file: each file is written once, straight to where it is
    imported from ({DATA_DIR}/uploads/YYYYMMDD/{task_id}/{name}), its bytes counted as they arrive,
    so no file and no upload ever takes more disk than the limits allow. All files are accepted or
    none: leaving the `with` block by an exception (a refusal, a dropped connection) removes
    everything written so far. An archive (.zip / .tar.gz) is unpacked into its task folder and
    stands for the pages and manuals in it.

    A file is `begin` (its name), `write` (its bytes, in blocks), `end`; `stage` then stores the
    originals and returns the batch. Safe to `discard` from another thread while a write runs: a
    file written after that is refused."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.max_bytes = settings.max_upload_mb * 1024 * 1024
        self.day = datetime.now().strftime("%Y%m%d")
        self.files = 0
        self.notes: list[str] = []
        self._created: list[Path] = []
        self._received: list[tuple[str, str, Path, str, tuple[str, ...], str]] = []
        self._current: _Incoming | None = None
        self._lock = threading.Lock()
        self._discarded = False

    def __enter__(self) -> "UploadStager":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is not None:
            self.discard()

    def begin(self, raw_name: str | None) -> None:
        """A new file named `raw_name` by the client: refused before any of its bytes when it is one too
        many or of a type that is never imported."""
        self.files += 1
        if self.files > MAX_FILES:
            raise UploadRejected(400, f"一次最多上传 {MAX_FILES} 个文件，本次超过了这个数，已停止接收。")
        name = safe_filename(raw_name)
        display = display_filename(raw_name)
        archive = is_archive(name)
        if not archive:
            try:
                file_kind(name)
            except ValidationError as exc:
                raise UploadRejected(400, exc.message) from exc
        task_id = uuid.uuid4().hex
        folder = self.settings.data_dir / "uploads" / self.day / task_id
        # an archive arrives beside the folder it is unpacked into
        target = _target(folder.parent, f"{task_id}-{name}") if archive else _target(folder, name)
        with self._lock:
            if self._discarded:
                raise UploadRejected(400, "上传已取消。")
            folder.parent.mkdir(parents=True, exist_ok=True)
            if not archive:
                folder.mkdir(exist_ok=False)
            self._created += [folder, target]
            self._current = _Incoming(task_id, raw_name, display, folder, target, archive, target.open("xb"))

    def write(self, block: bytes) -> None:
        current = self._current
        if current.size + len(block) > self.max_bytes:  # refused before the block that would pass the limit
            raise UploadRejected(413, f"文件“{current.display}”太大：单个文件超过了 {self.settings.max_upload_mb} MB "
                                      "的上限，已停止接收。")
        with self._lock:
            if self._discarded:
                raise UploadRejected(400, "上传已取消。")
            current.out.write(block)
        current.size += len(block)
        current.digest.update(block)

    def end(self) -> None:
        """The file is complete: checked (an empty one is refused), an archive unpacked."""
        current, self._current = self._current, None
        current.out.close()
        try:
            if current.archive:
                check_size(current.display, current.size, self.settings.max_upload_mb)
                self._received += _unpack_archive(current.target, current.folder, current.display,
                                                  self.settings, self.notes)
                return
            validate_file(current.target, self.settings.max_upload_mb)
        except ImportProcessError as exc:
            raise UploadRejected(400, exc.message) from exc
        self._received.append((current.task_id, current.display, current.target, current.digest.hexdigest(),
                               client_folders(current.raw_name), ""))

    def receive(self, raw_name: str | None, stream: BinaryIO) -> None:
        """A whole file from an open stream (a file already on disk, such as a chat attachment)."""
        self.begin(raw_name)
        while block := stream.read(1024 * 1024):
            self.write(block)
        self.end()

    def stage(self) -> StagedBatch:
        """Store every received file's original; the batch, ready to be queued."""
        store = get_object_store(self.settings)
        staged = StagedBatch(notes=self.notes)
        for task_id, shown, target, digest, carried, archive_folder in self._received:
            # an archive's page is named by its place in the archive: two `index.md` stay two documents
            key_name = shown if archive_folder else target.name
            doc_key = f"upload:{key_name}:{digest}"
            try:
                original = store.upload_original(target, doc_identity(target, doc_key)[1])
            except ImportProcessError as exc:
                raise UploadRejected(503, f"原件保存失败，没有开始导入：{exc.message}") from exc
            staged.append(StagedFile(task_id, target.name, shown, target, doc_key, digest, original, carried,
                                     archive_folder))
        return staged

    def discard(self) -> None:
        """Remove everything this upload wrote."""
        with self._lock:
            self._discarded = True
            if self._current is not None:
                self._current.out.close()
            for path in self._created:
                if path.is_dir():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)


@dataclass
class _Incoming:
    """The file an UploadStager is receiving."""
    task_id: str
    raw_name: str | None
    display: str
    folder: Path
    target: Path
    archive: bool
    out: BinaryIO
    size: int = 0
    digest: "hashlib._Hash" = field(default_factory=hashlib.sha256)


def stage_uploads(files: list[tuple[str | None, BinaryIO]], settings: Settings) -> StagedBatch:
    """Files from open streams, kept for import as one upload (see UploadStager)."""
    with UploadStager(settings) as stager:
        for raw_name, stream in files:
            stager.receive(raw_name, stream)
        return stager.stage()


def discard(staged: list[StagedFile]) -> None:
    """Remove the task folders of files that will not be imported (of an archive's page, the page
    alone: its pictures serve the archive's other pages too)."""
    for item in staged:
        if item.archive:
            item.path.unlink(missing_ok=True)
        else:
            shutil.rmtree(item.path.parent, ignore_errors=True)
