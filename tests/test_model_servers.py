"""Models out of process: embeddings and rerank servers on 127.0.0.1, speaking the real protocols."""
from __future__ import annotations

import socket

import numpy as np
import pytest

from fakes.model_server import ModelServer
from graphs.importing import run_import
from import_fixtures import doc_chunks, fresh_data, name_rows, store  # noqa: F401  (fresh_data is a fixture)
from graphs.query.nodes.rerank import node_rerank
from graphs.query.calibration import calibration
from graphs.query.retrieval import is_thin
from graphs.query.runner import run_query
from services.embeddings import HttpEmbedder, get_embedder
from services.errors import EmbeddingError, RerankError
from services.reranker import HttpReranker, OfflineReranker, get_reranker
from services.settings import get_settings

OFF = {"web_search": False, "hyde": False}
QUESTION = "Duo S 的以太网口支持 PoE 吗？"
PASSAGES = [{"content": "Duo S 的以太网口不支持 PoE 供电，需要外接电源。"},
            {"content": "BTT SKR MINI E3 V3.0 主板的热床接口位于左上角。"},
            {"content": "MF1 模块通过串口输出识别结果。"}]


@pytest.fixture
def server():
    with ModelServer() as s:
        yield s


def closed_port_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}"


def offline_settings():
    return get_settings().replace(embeddings_url="", rerank_url="")


def test_embeddings_server_gives_the_vectors_of_the_model_it_runs(env, server):
    env(EMBEDDINGS_URL=server.base_url, EMBEDDINGS_MODEL="use-m3", EMBED_BATCH_SIZE=8, EMBEDDINGS_API_KEY="k1")
    server.api_key = "k1"
    embedder = get_embedder()
    assert isinstance(embedder, HttpEmbedder)
    assert (embedder.name, embedder.dim, embedder.sparse_mode) == ("use-m3", 512, "bm25")
    texts = [f"第 {i} 段：Duo S 的以太网口" for i in range(20)]
    server.requests.clear()
    remote = embedder.embed(texts)
    local = get_embedder(offline_settings()).embed(texts)
    assert np.allclose([v["dense"] for v in remote], [v["dense"] for v in local], atol=1e-6)
    assert all(v["sparse"] is None for v in remote)
    # batched by EMBED_BATCH_SIZE, OpenAI's request shape
    assert [len(b["input"]) for _, b in server.requests] == [8, 8, 4]
    assert {(p, b["model"]) for p, b in server.requests} == {("/v1/embeddings", "use-m3")}
    assert embedder.embed([]) == []


@pytest.mark.parametrize("shape", ["tei", "infinity"])
def test_rerank_server_scores_in_input_order_for_both_reply_shapes(env, server, shape):
    server.shape = shape
    env(RERANK_URL=server.rerank_url, RERANK_MODEL="bge-reranker-v2-m3")
    reranker = get_reranker()
    assert isinstance(reranker, HttpReranker) and reranker.name == "rerank-server:bge-reranker-v2-m3"
    scores = reranker.score(QUESTION, PASSAGES)
    assert scores == OfflineReranker(offline_settings()).score(QUESTION, PASSAGES)
    assert scores[0] == max(scores)  # the server answered best first; the order is given back as asked
    path, body = server.requests[-1]
    assert (path, body["query"], body["texts"], body["model"]) == (
        "/rerank", QUESTION, [p["content"] for p in PASSAGES], "bge-reranker-v2-m3")
    assert reranker.score(QUESTION, []) == []


def test_question_through_both_servers_answers_as_in_process(env, server, product_of):
    env(RERANK_URL=server.rerank_url)  # the same calibration (a cross-encoder's) on both sides
    local = run_query(QUESTION, options=OFF)
    env(EMBEDDINGS_URL=server.base_url, EMBEDDINGS_MODEL="use-m3", RERANK_URL=server.rerank_url)
    before = len(server.requests)
    remote = run_query(QUESTION, options=OFF)
    assert remote["type"] == "final" and remote["products"] == [product_of["duos"]]
    # the same vectors retrieve the same chunks
    assert [r["chunk_id"] for r in remote["rrf"]] == [r["chunk_id"] for r in local["rrf"]]
    # a rerank server sees only texts (no stored vectors), and its scores decide the order
    # (the rerank step's call is the run's first; grading scores the kept passages afterwards)
    _, body = [r for r in server.requests[before:] if r[0] == "/rerank"][0]
    # every fused candidate is scored (recall keeps up to recall_limit from each of its two lists)
    assert 10 <= len(body["texts"]) == len(remote["rrf"]) <= 2 * calibration().recall_limit
    expected = OfflineReranker(offline_settings()).score(body["query"], [{"content": t} for t in body["texts"]])
    info = remote["rerank_info"]
    assert info["scorer"] == "rerank-server:bge-reranker-large"
    # the kept sources are the server's best, in its order (texts went in RRF order); chunks with
    # no text of their own (headings, pictures) go last whatever their score
    s = store()
    rows = {str(r["chunk_id"]): r for r in s.query_all(s.chunks, f"chunk_id in {[int(h['chunk_id']) for h in remote['rrf']]}",
                                                       ["chunk_id", "content", "title"])}
    by_server = sorted(zip(expected, remote["rrf"]), key=lambda p: (is_thin(rows[p[1]["chunk_id"]]), -p[0]))
    assert info["scores"] == [score for score, _ in by_server]
    kept = next(e["detail"]["kept"] for e in remote["node_log"] if e["node"] == "node_rerank")
    best = by_server[:info["cutoff"]]
    assert [(k["title"], k["score"]) for k in kept] == [(rows[h["chunk_id"]]["title"], round(sc, 4)) for sc, h in best]


def test_embeddings_server_down_says_so_in_chinese(env):
    url = closed_port_url()
    env(EMBEDDINGS_URL=f"{url}/v1")
    with pytest.raises(EmbeddingError, match=r"无法连接向量服务（http://127\.0\.0\.1:\d+/v1/embeddings）.*请确认服务已启动"):
        get_embedder()


def test_embeddings_server_time_out_and_http_errors(env, server):
    env(EMBEDDINGS_URL=server.base_url, EMBEDDINGS_MODEL="use-m3", EMBEDDINGS_TIMEOUT_S=0.5)
    embedder = get_embedder()
    server.delay_s = 1.5
    with pytest.raises(EmbeddingError, match=r"在 0\.5 秒内没有响应，.*EMBEDDINGS_TIMEOUT_S"):
        embedder.embed_query("以太网口")
    server.delay_s, server.status = 0.0, 503
    with pytest.raises(EmbeddingError, match="返回错误 HTTP 503"):
        embedder.embed_query("以太网口")
    server.status, server.api_key = None, "right-key"
    with pytest.raises(EmbeddingError, match="返回错误 HTTP 401"):
        embedder.embed_query("以太网口")


def test_question_with_embeddings_server_down_is_a_chinese_error_event(env, server, product_of):
    env(EMBEDDINGS_URL=server.base_url, EMBEDDINGS_MODEL="use-m3")
    get_embedder()  # started while the server was up
    server.status = 500
    result = run_query(QUESTION, options=OFF)
    assert result["type"] == "error" and "向量服务" in result["error"] and "HTTP 500" in result["error"]


def test_rerank_server_down_keeps_rrf_order(env):
    env(RERANK_URL=closed_port_url())
    with pytest.raises(RerankError, match="无法连接精排服务"):
        get_reranker().score(QUESTION, PASSAGES)
    docs = [{**p, "chunk_id": str(i), "title": f"t{i}"} for i, p in enumerate(PASSAGES)]
    out = node_rerank({"rewritten_query": QUESTION, "rrf_chunks": docs})
    info = out["rerank_info"]
    assert info["scorer"].startswith("rerank-server:bge-reranker-large（失败，保留 RRF 顺序：无法连接精排服务")
    assert [d["chunk_id"] for d in out["reranked_docs"]] == ["0", "1", "2"]


def test_rerank_server_bad_reply_is_refused(env, server):
    env(RERANK_URL=server.rerank_url)
    server.rerank = lambda body: [{"index": 0, "score": 0.5}]  # one score for three passages
    with pytest.raises(RerankError, match="为 3 段文本返回了 1 个分数"):
        get_reranker().score(QUESTION, PASSAGES)
    server.rerank = lambda body: {"unexpected": True}
    with pytest.raises(RerankError, match="回复格式无法识别"):
        get_reranker().score(QUESTION, PASSAGES)


MANUAL = """# 星河 QX10 开发板使用手册

## 供电

开发板使用 5V Type-C 供电，峰值电流 2A。

## 固件烧录

按住 BOOT 键上电，进入烧录模式，然后用烧录工具写入固件。
"""


def test_import_while_the_embeddings_server_fails_writes_nothing_then_succeeds(fresh_data, env, server, tmp_path):
    env(EMBEDDINGS_URL=server.base_url, EMBEDDINGS_MODEL="use-m3")
    md = tmp_path / "星河QX10.md"
    md.write_text(MANUAL, encoding="utf-8")
    server.status = 503
    failed = run_import(md)
    assert failed.status == "failed" and "向量服务" in failed.error and "HTTP 503" in failed.error
    assert failed.chunks == 0
    server.status = None
    done = run_import(md)
    assert done.status == "completed", done.error
    assert len(doc_chunks(done.doc_id)) == done.chunks >= 1
    assert [r["product"] for r in name_rows()] == [done.product]
    assert any(b["input"] for p, b in server.requests if p == "/v1/embeddings")


def test_embeddings_server_bad_reply_is_refused(env, server):
    env(EMBEDDINGS_URL=server.base_url, EMBEDDINGS_MODEL="use-m3")
    embedder = get_embedder()
    real = server.embeddings
    server.embeddings = lambda body: {"data": real(body)["data"][:1]}  # one vector for two texts
    with pytest.raises(EmbeddingError, match="为 2 段文本返回了 1 个向量"):
        embedder.embed(["供电", "固件"])
    server.embeddings = lambda body: {"unexpected": True}
    with pytest.raises(EmbeddingError, match="回复格式无法识别"):
        embedder.embed(["供电"])
