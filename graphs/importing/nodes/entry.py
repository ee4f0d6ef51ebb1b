"""node_entry: validate the file, give the document its identity, route by type."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from graphs.base import graph_node
from graphs.importing.nodes.item_name import MAX_NAME_CHARS, one_line
from services.errors import FileProcessingError, StateFieldError, ValidationError
from services.settings import get_settings
from services.vector_store import get_vector_store

SUPPORTED = {".pdf": "pdf", ".md": "md", ".markdown": "md", ".docx": "docx", ".html": "html", ".htm": "html",
             ".txt": "txt"}
# The first step after the check, by type: PDFs and the other formats are converted to Markdown first.
FIRST_STEP = {"pdf": "node_pdf_to_md", "md": "node_md_img", "docx": "node_doc_to_md", "html": "node_doc_to_md",
              "txt": "node_doc_to_md"}


def doc_identity(path: Path, doc_key: str | None = None) -> tuple[str, str]:
    """(doc_id, doc_key). The id hashes the resolved path (or a caller-given key), so
    `e20c/introduction.md` and `e52c/introduction.md` never replace each other."""
    source = doc_key or str(path.resolve())
    digest = hashlib.sha1(source.encode("utf-8")).hexdigest()[:16]
    stem = re.sub(r"[^\w.-]+", "_", path.stem, flags=re.UNICODE).strip("._")[:60] or "doc"
    return digest, f"{stem}-{digest[:8]}"


def validate_file(path: Path, max_mb: int) -> str:
    """The file's type (a SUPPORTED value), or a ValidationError saying in Chinese what is wrong."""
    if not path.exists():
        raise FileProcessingError(f"文件不存在：{path}")
    if not path.is_file():
        raise ValidationError(f"“{path}”不是文件（是文件夹？请用命令行导入整个文件夹）。")
    kind = SUPPORTED.get(path.suffix.lower())
    if kind is None:
        raise ValidationError(f"不支持的文件类型“{path.suffix or '无扩展名'}”："
                              "目前只能导入 PDF、Word（.docx）、网页（.html / .htm）、纯文本（.txt）或 Markdown（.md）文件。")
    size = path.stat().st_size
    if size == 0:
        raise ValidationError(f"文件“{path.name}”是空的（0 字节），没有可导入的内容。")
    if size > max_mb * 1024 * 1024:
        raise ValidationError(f"文件“{path.name}”有 {size / 1024 / 1024:.1f} MB，超过了 {max_mb} MB 的上限。")
    return kind


@graph_node("import", "node_entry", "检查文件")
def node_entry(state: dict) -> dict:
    raw = (state.get("import_file_path") or "").strip()
    if not raw:
        raise StateFieldError("没有给出要导入的文件路径。")
    path = Path(raw)
    settings = get_settings()
    kind = validate_file(path, settings.max_upload_mb)
    if len(one_line(state.get("product") or "")) > MAX_NAME_CHARS:  # refused before anything is written
        raise ValidationError(f"指定的商品名太长，请不要超过 {MAX_NAME_CHARS} 个字。")
    # Load the embedder and open the collections now: a wrong model path or a collection made by
    # another embedder fails here, before anything is converted or uploaded.
    get_vector_store(settings).open()
    doc_id, doc_key = doc_identity(path, state.get("doc_key"))
    work_dir = settings.data_dir / "work" / doc_key
    work_dir.mkdir(parents=True, exist_ok=True)
    out = {
        "file_type": kind, "file_title": path.stem, "doc_id": doc_id, "doc_key": doc_key,
        "work_dir": str(work_dir), "_summary": f"{path.name}（{kind.upper()}）",
    }
    out[{"pdf": "pdf_path", "md": "md_path"}.get(kind, "doc_path")] = str(path)
    return out


def route_after_entry(state: dict) -> str:
    return FIRST_STEP[state["file_type"]]
