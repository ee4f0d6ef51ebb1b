"""node_bge_embedding: dense (+ sparse) vectors for every chunk, in batches."""
from __future__ import annotations

from graphs.base import emit, graph_node
from services.embeddings import get_embedder
from services.errors import EmbeddingError
from services.settings import get_settings


def embed_text(chunk: dict) -> str:
    # The product name in the embedded text separates near-identical instructions of twins.
    return f"{chunk['item_name']}\n{chunk['content']}"


@graph_node("import", "node_bge_embedding", "向量化", EmbeddingError)
def node_bge_embedding(state: dict) -> dict:
    settings = get_settings()
    embedder = get_embedder(settings)
    chunks = state["chunks"]
    batch = max(1, settings.embed_batch_size)
    for i in range(0, len(chunks), batch):
        group = chunks[i:i + batch]
        for chunk, vec in zip(group, embedder.embed([embed_text(c) for c in group])):
            chunk["dense"], chunk["sparse"] = vec["dense"], vec["sparse"]
        emit({"type": "node_progress", "node": "node_bge_embedding",
              "text": f"已向量化 {min(i + batch, len(chunks))}/{len(chunks)}"})
    return {"chunks": chunks, "_summary": f"{len(chunks)} 个切片（{embedder.name}，{embedder.dim} 维）"}
