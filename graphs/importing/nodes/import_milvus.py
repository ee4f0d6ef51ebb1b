"""node_import_milvus: replace the document in `kb_chunks` and `kb_item_names`, and its registry record.

The store writes the new version before it removes the old one and rolls back a failed write, so a
crash leaves the previous version (or, if the process dies in between, both, which a re-run or the
start-up repair cleans). The record is parked as pending before the write and committed after it.
"""
from __future__ import annotations

from pathlib import Path

from langchain_core.runnables import RunnableConfig

from graphs.base import emit, graph_node
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.files import file_sha256
from graphs.importing.state import ImportGraphState, ImportUpdate
from graphs.products import document_aliases
from services.documents import DocumentVersion
from services.errors import MilvusError


def record_version(state: ImportGraphState, original_key: str, chunks: int, embedder: str) -> DocumentVersion:
    """The registry fields of this version of the document."""
    path = Path(state["import_file_path"])
    images = state.get("images") or []
    return {
        "identity": state.get("identity", ""), "doc_key": state["doc_key"], "file_name": state.get("file_name") or path.name,
        "source": state.get("source") or "path",
        "source_path": str(path.resolve()) if (state.get("source") or "path") == "path" else "",
        "content_hash": state.get("content_hash") or file_sha256(path),
        "product": state["product"], "product_source": state.get("product_source", ""),
        "product_evidence": state.get("product_evidence", ""), "pages": int(state.get("pages") or 0),
        "chunks": chunks, "images_resolved": sum(1 for i in images if i["status"] == "uploaded"),
        "images_missing": sum(1 for i in images if i["status"] == "missing"), "bytes": path.stat().st_size,
        "embedder": embedder, "original_key": original_key, "set_id": state.get("set_id", ""),
        "updated_by": state.get("updated_by", ""),
    }


@graph_node("import", "node_import_milvus", "写入向量库", MilvusError)
def node_import_milvus(state: ImportGraphState, config: RunnableConfig) -> ImportUpdate:
    cfg = ImportConfiguration.from_runnable_config(config)
    store, registry, embedder = cfg.vector_store, cfg.registry, cfg.embedder
    name = state["product"]
    rows = [
        {**c, "file_title": state["file_title"], "doc_id": state["doc_id"], "part": int(c.get("part") or 1)}
        for c in state["chunks"]
    ]
    # Embedded before anything is written: a failure here leaves the store untouched.
    item = {"file_title": state["file_title"], "product": name, **embedder.embed([name])[0]}
    original = state.get("original_key") or cfg.object_store.upload_original(
        Path(state["import_file_path"]), state["doc_key"])
    version = record_version(state, original, len(rows), f"{embedder.name}/{embedder.dim}")

    def progress(text: str) -> None:
        emit({"type": "node_progress", "node": "node_import_milvus", "text": text})

    registry.begin(state["doc_id"], version)
    try:
        ids = store.replace_document(state["doc_id"], rows, item, progress=progress)
    except Exception:
        registry.abort(state["doc_id"])
        raise
    registry.commit(state["doc_id"], {"chunk_ids": ids})
    # what the document writes beside its product's name ("Sipeed（矽速）", "简称 LC4A") names it too
    registry.add_document_aliases(name, document_aliases(name, "\n".join(c["content"] for c in state["chunks"])))
    chunks = [{**c, "chunk_id": i} for c, i in zip(state["chunks"], ids)]
    return {"chunks": chunks, "chunk_ids": ids, "original_key": original,
            "_summary": f"写入 {len(ids)} 个切片，商品名“{name}”"}
