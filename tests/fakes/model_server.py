"""A model server on 127.0.0.1 speaking the embeddings and rerank protocols, backed by real models.

`POST /v1/embeddings` answers in the OpenAI format with vectors of the real offline embedding model;
`POST /rerank` answers in TEI's format (`[{index, score}]`) or, with `shape="infinity"`, in
Infinity's (`{results: [{index, relevance_score}]}`), with scores of the real offline scorer.

    with ModelServer() as server:
        env(EMBEDDINGS_URL=server.base_url, RERANK_URL=server.rerank_url)
"""
from __future__ import annotations

import json
import threading
import time

from fakes._http import QuietHandler, ThreadedServer


class ModelServer(ThreadedServer):
    def __init__(self, api_key: str | None = None, shape: str = "tei"):
        from services.embeddings import get_embedder
        from services.reranker import OfflineReranker
        from services.settings import get_settings

        # the in-process offline models, whatever the settings the app under test points elsewhere
        settings = get_settings().replace(embeddings_url="", rerank_url="", bge_m3_path="")
        self.embedder = get_embedder(settings)
        self.reranker = OfflineReranker(settings)
        self.api_key = api_key  # when set, requests without `Bearer <api_key>` get 401
        self.shape = shape
        self.delay_s = 0.0  # wait before every answer (time-out tests)
        self.status: int | None = None  # answer every request with this HTTP error
        self.requests: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        self.base_url = self.rerank_url = ""

    def _handler_class(self) -> type[QuietHandler]:
        return _make_handler(self)

    def _on_started(self, port: int) -> str:
        self.rerank_url = f"http://127.0.0.1:{port}"
        self.base_url = f"{self.rerank_url}/v1"
        return self.base_url

    def embeddings(self, body: dict) -> dict:
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = self.embedder.embed(texts)
        return {"object": "list", "model": body.get("model", ""),
                "data": [{"object": "embedding", "index": i, "embedding": v["dense"]} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": sum(map(len, texts)), "total_tokens": sum(map(len, texts))}}

    def rerank(self, body: dict):
        texts = body.get("texts") or body.get("documents") or []
        scores = self.reranker.score(body["query"], [{"content": t} for t in texts])
        ranked = sorted(enumerate(scores), key=lambda p: -p[1])  # both servers answer best first
        if self.shape == "infinity":
            return {"object": "rerank", "results": [{"index": i, "relevance_score": s} for i, s in ranked]}
        return [{"index": i, "score": s} for i, s in ranked]


def _make_handler(server: ModelServer) -> type[QuietHandler]:
    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = json.loads(self.read_body() or b"{}")
            path = self.path.rstrip("/")
            with server._lock:
                server.requests.append((path, body))
            time.sleep(server.delay_s)
            if server.api_key and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                self.send_json(401, {"error": {"message": "invalid api key"}})
            elif server.status:
                self.send_json(server.status, {"error": {"message": f"scripted status {server.status}"}})
            elif path == "/v1/embeddings":
                self.send_json(200, server.embeddings(body))
            elif path == "/rerank":
                self.send_json(200, server.rerank(body))
            else:
                self.send_json(404, {"error": {"message": f"no route {self.path}"}})

    return Handler
