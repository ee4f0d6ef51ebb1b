"""node_bge_embedding: dense (+ sparse) vectors for every chunk, in batches."""
from __future__ import annotations

from langchain_core.runnables import RunnableConfig

from graphs.base import emit, graph_node
from graphs.importing.chunking import embed_text
from graphs.importing.configuration import ImportConfiguration
from graphs.importing.state import Chunk, ImportGraphState, ImportUpdate
from services.errors import EmbeddingError


@graph_node("import", "node_bge_embedding", "向量化", EmbeddingError)
def node_bge_embedding(state: ImportGraphState, config: RunnableConfig) -> ImportUpdate:
    cfg = ImportConfiguration.from_runnable_config(config)
    embedder = cfg.embedder
    chunks = state["chunks"]
    batch = max(1, cfg.settings.embed_batch_size)
    embedded: list[Chunk] = []
    for i in range(0, len(chunks), batch):
        group = chunks[i:i + batch]
        embedded += [{**chunk, "dense": vec["dense"], "sparse": vec["sparse"]}
                     for chunk, vec in zip(group, embedder.embed([embed_text(c) for c in group]))]
        emit({"type": "node_progress", "node": "node_bge_embedding",
              "text": f"已向量化 {min(i + batch, len(chunks))}/{len(chunks)}"})
    return {"chunks": embedded, "_summary": f"{len(chunks)} 个切片（{embedder.name}，{embedder.dim} 维）"}
