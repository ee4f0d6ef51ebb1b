"""node_import_milvus: replace the document in `kb_chunks` and `kb_item_names` (idempotent).

Chunks go first and the product name last, so a crash in between leaves no product that has no
chunks; a re-run replaces both by the document's identity.
"""
from __future__ import annotations

from graphs.base import graph_node
from services.embeddings import get_embedder
from services.errors import MilvusError
from services.settings import get_settings
from services.vector_store import get_vector_store


@graph_node("import", "node_import_milvus", "写入向量库", MilvusError)
def node_import_milvus(state: dict) -> dict:
    settings = get_settings()
    store = get_vector_store(settings)
    rows = [
        {**c, "file_title": state["file_title"], "doc_id": state["doc_id"], "part": int(c.get("part") or 1)}
        for c in state["chunks"]
    ]
    ids = store.replace_document(state["doc_id"], rows)
    name = state["item_name"]
    store.replace_item_name(state["doc_id"], state["file_title"], name, get_embedder(settings).embed([name])[0])
    chunks = [{**c, "chunk_id": i} for c, i in zip(state["chunks"], ids)]
    return {"chunks": chunks, "chunk_ids": ids, "_summary": f"写入 {len(ids)} 个切片，商品名“{name}”"}
