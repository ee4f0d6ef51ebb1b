"""node_entry: validate the file, give the document its identity, route by type."""
from __future__ import annotations

from pathlib import Path

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.files import SUPPORTED, doc_identity, validate_file
from graphs.importing.naming import MAX_NAME_CHARS, one_line
from graphs.importing.state import ImportGraphState, ImportUpdate
from services.errors import StateFieldError, ValidationError

# The first step after the check, by type: PDFs and the other formats are converted to Markdown first.
FIRST_STEP = {"pdf": "node_pdf_to_md", "md": "node_md_img", "docx": "node_doc_to_md", "html": "node_doc_to_md",
              "txt": "node_doc_to_md"}


@graph_node("import", "node_entry", "检查文件")
def node_entry(state: ImportGraphState, config: RunnableConfig) -> ImportUpdate:
    cfg = ImportConfiguration.from_runnable_config(config)
    raw = (state.get("import_file_path") or "").strip()
    if not raw:
        raise StateFieldError("没有给出要导入的文件路径。")
    path = Path(raw)
    settings = cfg.settings
    # A staged upload was checked when it was received; a file given by path is checked here.
    kind = SUPPORTED.get(path.suffix.lower()) if state.get("staged") and path.is_file() else validate_file(path, settings.max_upload_mb)
    if len(one_line(state.get("requested_product") or "")) > MAX_NAME_CHARS:  # refused before anything is written
        raise ValidationError(f"指定的商品名太长，请不要超过 {MAX_NAME_CHARS} 个字。")
    # Load the embedder and open the collections now: a wrong model path or a collection made by
    # another embedder fails here, before anything is converted or uploaded.
    cfg.vector_store.open()
    doc_id, doc_key = doc_identity(path, state.get("doc_key"))
    work_dir = settings.data_dir / "work" / doc_key
    work_dir.mkdir(parents=True, exist_ok=True)
    out = {
        "identity": state.get("doc_key") or str(path.resolve()),
        "file_type": kind, "file_title": path.stem, "doc_id": doc_id, "doc_key": doc_key,
        "work_dir": str(work_dir), "_summary": f"{path.name}（{kind.upper()}）",
    }
    out[{"pdf": "pdf_path", "md": "md_path"}.get(kind, "doc_path")] = str(path)
    return out


def route_after_entry(state: ImportGraphState) -> str:
    return FIRST_STEP[state["file_type"]]
