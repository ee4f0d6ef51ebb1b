"""node_doc_to_md: Word / HTML / text manual -> Markdown with its pictures beside it, converted in a
process of its own."""
from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

from langchain_core.runnables import RunnableConfig

from graphs.base import graph_node
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.images import image_root, resolve_image
from graphs.importing.state import ImportGraphState, ImportUpdate
from services.converter_box import convert_to_markdown
from services.doc_converter import KIND_NAMES
from services.errors import DocumentConversionError


@graph_node("import", "node_doc_to_md", "文档转 Markdown", DocumentConversionError)
def node_doc_to_md(state: ImportGraphState, config: RunnableConfig) -> ImportUpdate:
    source = Path(state["doc_path"])
    kind = state["file_type"]
    out_dir = Path(state["work_dir"]) / kind
    settings = ImportConfiguration.from_runnable_config(config).settings
    shutil.rmtree(out_dir, ignore_errors=True)  # a re-import converts afresh
    # Pictures a web page names by path follow the same rule as a Markdown file's own.
    root = image_root(source, settings.data_dir)
    converted = convert_to_markdown(
        source, kind, out_dir, max_bytes=settings.max_upload_mb * 1024 * 1024,
        resolve_image=partial(resolve_image, md_file=source, root=root), settings=settings)
    return {
        "md_path": str(converted.md_path),
        "_summary": f"{KIND_NAMES[kind]} → {converted.md_path.name}：标题 {converted.headings} 个，"
                    f"表格 {converted.tables} 个，图片 {converted.images} 张",
        "_detail": {"headings": converted.headings, "tables": converted.tables, "images": converted.images},
    }
