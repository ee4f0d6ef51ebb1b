"""The one list of file types an import accepts: extension -> kind, label, converter, MIME types.

The file picker's accept list, the upload toasts, the API's refusal messages, the CLI's help and the
README's table are all made from FILE_TYPES, so adding a type here adds it everywhere at once.
"""
from __future__ import annotations

import unicodedata
from dataclasses import dataclass

# Where a kind goes first in the import graph ("" for archives: they are unpacked before any import).
CONVERTERS = {"pdf": "node_pdf_to_md", "md": "node_md_img", "docx": "node_doc_to_md", "html": "node_doc_to_md",
              "txt": "node_doc_to_md", "archive": "", "image": ""}


@dataclass(frozen=True)
class FileType:
    extensions: tuple[str, ...]   # lower case, with the dot (".tar.gz" counts as one)
    kind: str                     # "pdf" | "md" | "docx" | "html" | "txt" | "archive" | "image"
    label: str                    # how people call it, in Chinese
    mimes: tuple[str, ...]        # what browsers send for it
    standalone: bool = True       # False: only inside an archive (pictures belong to their pages)

    @property
    def converter(self) -> str:
        return CONVERTERS[self.kind]


FILE_TYPES: tuple[FileType, ...] = (
    FileType((".pdf",), "pdf", "PDF", ("application/pdf",)),
    FileType((".docx",), "docx", "Word（.docx）",
             ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",)),
    FileType((".html", ".htm"), "html", "网页（.html）", ("text/html",)),
    FileType((".md", ".markdown"), "md", "Markdown（.md）", ("text/markdown", "text/x-markdown")),
    FileType((".txt",), "txt", "纯文本（.txt）", ("text/plain",)),
    FileType((".zip", ".tar.gz", ".tgz"), "archive", "压缩包（.zip / .tar.gz，可含整个网站或文件夹）",
             ("application/zip", "application/x-zip-compressed", "application/gzip", "application/x-gzip",
              "application/x-tar", "application/x-compressed-tar")),
    FileType((".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".svg"), "image", "图片", (), standalone=False),
)

BY_EXTENSION = {ext: t for t in FILE_TYPES for ext in t.extensions}
# Documents the import graph itself reads (archives are unpacked into these first).
DOCUMENT_KINDS = {ext: t.kind for ext, t in BY_EXTENSION.items() if t.converter}
ARCHIVE_EXTENSIONS = tuple(ext for ext, t in BY_EXTENSION.items() if t.kind == "archive")
IMAGE_EXTENSIONS = frozenset(ext for ext, t in BY_EXTENSION.items() if t.kind == "image")


def extension_of(name: str) -> str:
    """The registry's extension of a file name ("manual.tar.gz" -> ".tar.gz"), "" when it has none."""
    lower = name.lower()
    for ext in sorted(BY_EXTENSION, key=len, reverse=True):
        if lower.endswith(ext):
            return ext
    dot = lower.rfind(".")
    return lower[dot:] if dot > 0 else ""


def shown_name(raw: str) -> str:
    """A file name as people see it: no NUL, control, format or bidi characters (a right-to-left
    override makes "invoice\u202egpj.md" read as "invoicedm.jpg"), each run of white space one space."""
    return " ".join("".join(ch for ch in raw if unicodedata.category(ch)[0] != "C").split())


def file_type(name: str) -> FileType | None:
    return BY_EXTENSION.get(extension_of(name))


def accepted_labels() -> str:
    """"PDF、Word（.docx）、……": the types a person may upload, for messages and help texts."""
    return "、".join(t.label for t in FILE_TYPES if t.standalone)


def accepted_extensions(standalone_only: bool = True) -> list[str]:
    return [ext for t in FILE_TYPES if t.standalone or not standalone_only for ext in t.extensions]


def refusal(name: str) -> str:
    """Why a file of this name is not imported, in Chinese."""
    ext = extension_of(name)
    found = BY_EXTENSION.get(ext)
    if found is not None and not found.standalone:
        return (f"单独的{found.label}文件“{name}”无法导入：请把图片和引用它们的页面一起打包成 .zip 上传，"
                "图片会随页面显示。")
    return f"不支持的文件类型“{ext or '无扩展名'}”：目前只能导入 {accepted_labels()} 文件。"


def picker_accept() -> dict[str, list[str]]:
    """The chat's file picker: MIME type -> extensions. Browsers that know no type for an extension send
    application/octet-stream, so that type is accepted for the registry's extensions only."""
    accept: dict[str, list[str]] = {}
    for t in FILE_TYPES:
        if not t.standalone:
            continue
        for mime in t.mimes:
            accept.setdefault(mime, []).extend(e for e in t.extensions if e not in accept.get(mime, []))
    accept["application/octet-stream"] = accepted_extensions()
    return accept


def markdown_table() -> str:
    """The README's table of accepted types."""
    rows = ["| 扩展名 | 类型 | 导入方式 |", "|---|---|---|"]
    how = {"node_pdf_to_md": "PDF 解析为 Markdown", "node_doc_to_md": "转换为 Markdown", "node_md_img": "直接读取",
           "": "解包，里面的文件按类型导入"}
    for t in FILE_TYPES:
        way = how[t.converter] if t.standalone else "只在压缩包里：随引用它的页面显示"
        rows.append(f"| {' '.join(f'`{e}`' for e in t.extensions)} | {t.label} | {way} |")
    return "\n".join(rows)
