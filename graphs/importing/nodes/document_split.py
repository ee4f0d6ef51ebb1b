"""node_document_split: heading-aware chunks (2000 max / 500 merge), code fences respected."""
from __future__ import annotations

import json
import logging
from pathlib import Path

from graphs.base import graph_node
from graphs.importing.chunking import (
    MAX_CONTENT_LENGTH, MIN_CONTENT_LENGTH, html_to_markdown, normalize_newlines, split_markdown,
)
from graphs.importing.state import ImportGraphState, ImportUpdate
from services.errors import DocumentSplitError, ValidationError

log = logging.getLogger("import.node_document_split")


@graph_node("import", "node_document_split", "文档切分", DocumentSplitError)
def node_document_split(state: ImportGraphState) -> ImportUpdate:
    text = html_to_markdown(normalize_newlines(state.get("md_content") or ""))
    if not text.strip():
        raise ValidationError("文档没有可导入的文字内容。")
    chunks = split_markdown(text, state["file_title"], MAX_CONTENT_LENGTH, MIN_CONTENT_LENGTH)
    chunks = [c for c in chunks if c["content"].strip()]
    if not chunks:
        raise ValidationError("文档切分后没有任何内容，无法导入。")
    backup = Path(state["work_dir"]) / "chunks.json"
    try:
        backup.write_text(json.dumps(chunks, ensure_ascii=False, indent=1), encoding="utf-8")
    except OSError as exc:  # the backup is a convenience; the import goes on without it
        log.warning("chunks.json backup failed: %s", exc)
    lengths = sorted(len(c["content"]) for c in chunks)
    return {
        "chunks": chunks,
        "_summary": f"{len(chunks)} 个切片，最长 {lengths[-1]} 字，中位数 {lengths[len(lengths) // 2]} 字",
    }
