"""node_import_milvus: replace the document in `kb_chunks` and `kb_item_names` (idempotent).

The store writes the new version before it removes the old one and rolls back a failed write, so a
crash leaves the previous version (or, if the process dies in between, both, which a re-run cleans).
"""
from __future__ import annotations

from graphs.base import emit, graph_node
from services.embeddings import get_embedder
from services.errors import MilvusError
from services.settings import get_settings
from services.vector_store import get_vector_store


@graph_node("import", "node_import_milvus", "写入向量库", MilvusError)
def node_import_milvus(state: dict) -> dict:
    settings = get_settings()
    store = get_vector_store(settings)
    name = state["item_name"]
    rows = [
        {**c, "file_title": state["file_title"], "doc_id": state["doc_id"], "part": int(c.get("part") or 1)}
        for c in state["chunks"]
    ]
    # Embedded before anything is written: a failure here leaves the store untouched.
    item = {"file_title": state["file_title"], "item_name": name, **get_embedder(settings).embed([name])[0]}

    def progress(text: str) -> None:
        emit({"type": "node_progress", "node": "node_import_milvus", "text": text})

    ids = store.replace_document(state["doc_id"], rows, item, progress=progress)
    chunks = [{**c, "chunk_id": i} for c, i in zip(state["chunks"], ids)]
    return {"chunks": chunks, "chunk_ids": ids, "_summary": f"写入 {len(ids)} 个切片，商品名“{name}”"}
