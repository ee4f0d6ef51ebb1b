"""A .zip or .tar.gz of a site or of several manuals, unpacked safely into one upload folder.

Safe by construction rather than by cleaning up afterwards: every entry's name is checked before
anything is written (an absolute name or a `..` that would leave the folder refuses the whole archive),
only regular files are ever created (symbolic and hard links, devices and pipes are ignored), the entry
count and the unpacked size are checked against the limits before extraction for a zip (its central
directory declares them) and entry by entry for a tar, and the bytes actually written are counted too,
since a declared size may lie. Any refusal removes the folder: nothing of a refused archive is left.
"""
from __future__ import annotations

import gzip
import shutil
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Callable, Iterator

from graphs.importing.filetypes import (
    ARCHIVE_EXTENSIONS, DOCUMENT_KINDS, accepted_labels, extension_of, file_type, shown_name,
)
from services.errors import ValidationError

CHUNK = 1024 * 1024
# Folders and files that archivers and desktops add on their own; never the user's content.
NOISE = {"__MACOSX", ".DS_Store", "Thumbs.db", "desktop.ini"}
ZIP_UTF8_FLAG = 0x800


def is_archive(name: str) -> bool:
    return extension_of(name) in ARCHIVE_EXTENSIONS


@dataclass
class Unpacked:
    root: Path
    documents: list[str] = field(default_factory=list)  # relative POSIX paths of the pages and manuals
    images: int = 0
    skipped: dict[str, list[str]] = field(default_factory=dict)  # reason -> relative names

    def skip(self, reason: str, name: str) -> None:
        self.skipped.setdefault(reason, []).append(name)

    def skipped_text(self, most: int = 5) -> str:
        return "；".join(f"未导入（{reason}）：{'、'.join(names[:most])}" + (f" 等 {len(names)} 个" if len(names) > most else "")
                        for reason, names in self.skipped.items())

    def note(self, display_name: str, documents: int) -> str:
        """The archive's line in the import summary: what came in, what did not and why."""
        line = f"📦 《{display_name}》：{documents} 份文档" + (f"、{self.images} 张图片" if self.images else "")
        return line + (f"；{self.skipped_text()}" if self.skipped else "") + "。"


@dataclass(frozen=True)
class Entry:
    name: str          # as the archive spells it, decoded
    size: int          # declared unpacked size
    kind: str          # "file" | "dir" | "link" | "other"
    open: Callable[[], BinaryIO]


def _zip_name(info: zipfile.ZipInfo) -> str:
    """Archivers on Chinese Windows write GBK names without the UTF-8 flag; zipfile then decodes
    them as CP437. Undo that when the bytes read as UTF-8 or GBK."""
    if info.flag_bits & ZIP_UTF8_FLAG:
        return info.filename
    raw = info.filename.encode("cp437", errors="replace")
    for encoding in ("utf-8", "gbk"):
        try:
            return raw.decode(encoding)
        except UnicodeDecodeError:
            continue
    return info.filename


def _zip_entries(archive: zipfile.ZipFile) -> list[Entry]:
    entries = []
    for info in archive.infolist():
        mode = info.external_attr >> 16  # Unix mode, when the archiver recorded one (type bits may be 0)
        kind = ("dir" if info.is_dir() else "link" if stat.S_ISLNK(mode)
                else "other" if stat.S_IFMT(mode) and not stat.S_ISREG(mode) else "file")
        entries.append(Entry(_zip_name(info), info.file_size, kind, lambda info=info: archive.open(info)))
    return entries


def _tar_entries(archive: tarfile.TarFile) -> Iterator[Entry]:
    # One header at a time (never getmembers()): a huge declared size is refused before the stream
    # behind it is decompressed.
    while (member := archive.next()) is not None:
        kind = ("dir" if member.isdir() else "link" if member.issym() or member.islnk()
                else "file" if member.isreg() else "other")
        yield Entry(member.name, member.size if kind == "file" else 0, kind,
                    lambda member=member: archive.extractfile(member))


class Unpacker:
    def __init__(self, archive_name: str, dest: Path, *, max_files: int, max_bytes: int,
                 clean_name: Callable[[str], str]):
        self.archive_name, self.dest = archive_name, dest
        self.max_files, self.max_bytes, self.clean_name = max_files, max_bytes, clean_name
        self.result = Unpacked(dest)
        self.count = self.declared = self.written = 0
        self.taken: set[str] = set()  # lower-cased: two names that differ only in case would overwrite
                                      # each other on a case-insensitive disk

    def refuse(self, why: str) -> ValidationError:
        return ValidationError(f"压缩包“{self.archive_name}”没有导入：{why}")

    def parts(self, raw: str) -> list[str]:
        """The entry's path segments, or a refusal when it would leave the archive's folder."""
        name = raw.replace("\\", "/")
        if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
            raise self.refuse(f"其中的“{shown_name(raw)[:80]}”是绝对路径，会写到压缩包以外。")
        segments = [s for s in name.split("/") if s not in ("", ".")]
        if ".." in segments:
            raise self.refuse(f"其中的“{shown_name(raw)[:80]}”含有“..”，会写到压缩包以外。")
        return segments

    def count_entry(self, entry: Entry) -> None:
        self.count += 1
        self.declared += entry.size
        if self.count > self.max_files:
            raise self.refuse(f"文件超过 {self.max_files} 个。请分成几个压缩包上传。")
        if self.declared > self.max_bytes:
            raise self.refuse(f"解压后超过 {self.max_bytes // CHUNK} MB（疑似压缩炸弹，或内容太多）。请分成几个压缩包上传。")

    def add(self, entry: Entry) -> None:
        segments = self.parts(entry.name)
        shown = shown_name("/".join(segments))  # how the summary names it
        if not segments or entry.kind == "dir" or any(s in NOISE or s.startswith(".") for s in segments):
            return
        if entry.kind == "link":
            self.result.skip("符号链接或硬链接，已忽略", shown)
            return
        if entry.kind != "file":
            self.result.skip("不是普通文件，已忽略", shown)
            return
        found = file_type(segments[-1])
        if found is None or found.kind == "archive":
            self.result.skip("不支持的类型" if found is None else "压缩包里的压缩包不会展开", shown)
            return
        rel = PurePosixPath(*(self.clean_name(s) for s in segments))
        if str(rel).lower() in self.taken:
            self.result.skip("与另一个文件重名（只差大小写或特殊字符）", shown)
            return
        self.taken.add(str(rel).lower())
        target = self.dest.joinpath(*rel.parts)
        if self.dest.resolve() not in target.resolve().parents:  # belt and braces after the checks above
            raise self.refuse(f"其中的“{shown[:80]}”会写到压缩包以外。")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            out = target.open("xb")
        except (FileExistsError, NotADirectoryError):  # a file and a folder of the same name
            self.result.skip("与另一个文件或文件夹重名", shown)
            return
        with entry.open() as source, out:
            while block := source.read(CHUNK):
                self.written += len(block)
                if self.written > self.max_bytes:
                    raise self.refuse(f"解压后超过 {self.max_bytes // CHUNK} MB（文件的实际大小与压缩包声明的不符）。")
                out.write(block)
        if found.kind == "image":
            self.result.images += 1
        elif extension_of(rel.name) in DOCUMENT_KINDS:
            self.result.documents.append(str(rel))


def unpack(archive: Path, dest: Path, *, display_name: str, max_files: int, max_mb: int,
           clean_name: Callable[[str], str]) -> Unpacked:
    """Unpack `archive` into the new folder `dest`: pages, manuals and pictures keep their folders;
    other files are listed in `skipped`. A refusal (ValidationError, in Chinese) leaves no `dest`."""
    unpacker = Unpacker(display_name, dest, max_files=max_files, max_bytes=max_mb * CHUNK, clean_name=clean_name)
    dest.mkdir(parents=True, exist_ok=False)
    try:
        if zipfile.is_zipfile(archive):
            with zipfile.ZipFile(archive) as z:
                entries = _zip_entries(z)
                for entry in entries:  # the whole central directory is checked before one byte is written
                    unpacker.parts(entry.name)
                    unpacker.count_entry(entry)
                for entry in entries:
                    unpacker.add(entry)
        else:
            with tarfile.open(archive, mode="r:*") as t:
                for entry in _tar_entries(t):
                    unpacker.parts(entry.name)
                    unpacker.count_entry(entry)
                    unpacker.add(entry)
        if not unpacker.result.documents:
            raise unpacker.refuse(f"里面没有可导入的说明书（{accepted_labels()}）。")
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise unpacker.refuse("文件已损坏，或不是 .zip / .tar.gz 压缩包。") from exc
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return unpacker.result
