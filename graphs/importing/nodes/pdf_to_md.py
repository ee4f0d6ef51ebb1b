"""node_pdf_to_md: PDF -> Markdown (MinerU API when configured, local parser otherwise), in a converter
process of its own."""
from __future__ import annotations

import shutil
from pathlib import Path

from langchain_core.runnables import RunnableConfig

from graphs.base import emit, graph_node
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.state import ImportGraphState, ImportUpdate
from services.errors import PdfConversionError
from services.converter_box import pdf_to_markdown


@graph_node("import", "node_pdf_to_md", "PDF 转 Markdown", PdfConversionError)
def node_pdf_to_md(state: ImportGraphState, config: RunnableConfig) -> ImportUpdate:
    pdf = Path(state["pdf_path"])
    out_dir = Path(state["work_dir"]) / "pdf"
    settings = ImportConfiguration.from_runnable_config(config).settings
    # A re-import converts afresh: images of an earlier conversion (MinerU names them by hash)
    # would otherwise pile up in the work folder.
    shutil.rmtree(out_dir, ignore_errors=True)

    def progress(text: str) -> None:
        emit({"type": "node_progress", "node": "node_pdf_to_md", "text": text})

    # work files are named from the document id: a user's long file name never reaches the disk here
    md_path, pages = pdf_to_markdown(pdf, out_dir, settings, progress=progress, stem=state["doc_id"])
    backend = "MinerU" if settings.mineru_api_token else "本地解析"
    return {"md_path": str(md_path), "pages": pages, "_summary": f"{backend}：{pages} 页 → {md_path.name}"}
