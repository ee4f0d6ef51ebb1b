"""The vector store against a Milvus server (`python -m services.milvus_server`, a real gRPC Milvus endpoint):
no process-wide lock, and reads paged past any cap."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

import services.vector_store as vector_store
from services.embeddings import get_embedder
from services.errors import ConfigurationError, MilvusError
from services.settings import get_settings
from services.vector_store import VectorStore, get_vector_store


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(data_dir, port: int, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "services.milvus_server", "--data-dir", str(data_dir),
                             "--host", "127.0.0.1", "--port", str(port)], **kwargs)


@pytest.fixture(scope="module")
def milvus_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("milvus")


@pytest.fixture(scope="module")
def milvus_url(milvus_dir):
    port = free_port()
    proc = serve(milvus_dir, port, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("services.milvus_server did not start")
            time.sleep(0.2)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=20)


def rows_for(doc_id: str, name: str, n: int) -> list[dict]:
    texts = [f"{name} 第 {i} 节：接口与供电说明" for i in range(n)]
    return [{"content": t, "title": f"第 {i} 节", "parent_title": name, "file_title": f"{doc_id}.md",
             "doc_id": doc_id, "product": name, "part": 1, **v}
            for i, (t, v) in enumerate(zip(texts, get_embedder().embed(texts)))]


def call_in_flight(store: VectorStore):
    """Start a store call that stays in flight until released (an import's long write, say)."""
    started, release = threading.Event(), threading.Event()
    worker = threading.Thread(target=store._call, args=("长操作", lambda: (started.set(), release.wait(30))))
    worker.start()
    assert started.wait(10)
    return release, worker


def finishes_within(fn, seconds: float) -> bool:
    done = threading.Event()
    threading.Thread(target=lambda: (fn(), done.set()), daemon=True).start()
    return done.wait(seconds)


def test_server_calls_do_not_wait_for_each_other_and_reads_are_paged(milvus_url, monkeypatch):
    store = VectorStore(get_settings().replace(milvus_url=milvus_url), get_embedder())
    try:
        assert store.backend == "milvus"
        store.replace_document("doc-a", rows_for("doc-a", "星河 QX10 开发板", 30),
                               {"file_title": "doc-a.md", "product": "星河 QX10 开发板",
                                **get_embedder().embed(["星河 QX10 开发板"])[0]})
        release, worker = call_in_flight(store)
        try:
            assert finishes_within(lambda: store.count(), 10), "a question waited for another call"
        finally:
            release.set()
            worker.join()
        monkeypatch.setattr(vector_store, "QUERY_PAGE", 7)  # 30 rows in 5 pages
        rows = store.query(store.chunks, 'doc_id == "doc-a"', ["chunk_id", "title"])
        assert len(rows) == len({r["chunk_id"] for r in rows}) == store.count() == 30
        assert store.product_names() == ["星河 QX10 开发板"]
    finally:
        store.close()


def test_product_names_another_process_writes_show_at_once_and_unchanged_ones_are_not_reread(milvus_url):
    settings = get_settings().replace(milvus_url=milvus_url, chunks_collection="names_chunks",
                                      product_collection="names_items")
    reader, writer = VectorStore(settings, get_embedder()), VectorStore(settings, get_embedder())

    def put(doc_id: str, name: str) -> None:
        writer.replace_document(doc_id, rows_for(doc_id, name, 2),
                                {"file_title": f"{doc_id}.md", "product": name, **get_embedder().embed([name])[0]})

    reads = []
    read_all = reader._read_all
    reader._read_all = lambda *args: reads.append(args[0]) or read_all(*args)
    try:
        put("doc-x", "星河 QX10 开发板")
        assert reader.product_names() == ["星河 QX10 开发板"]
        assert reader.product_names() == ["星河 QX10 开发板"] and reads == ["names_items"]  # not read again
        put("doc-y", "晨光 M2 模块")
        assert sorted(reader.product_names()) == sorted(["星河 QX10 开发板", "晨光 M2 模块"])
        put("doc-x", "星河 QX20 开发板")  # renamed: one row in, one out, the count unchanged
        assert sorted(reader.product_names()) == sorted(["星河 QX20 开发板", "晨光 M2 模块"])
        writer.delete_document("doc-y")
        assert reader.product_names() == ["星河 QX20 开发板"]
        assert len(reads) == 4
    finally:
        reader.close()
        writer.close()


def test_milvus_lite_calls_stay_serial_and_reads_are_paged(corpus_results, monkeypatch):
    store = get_vector_store()
    assert store.backend == "milvus-lite"
    release, worker = call_in_flight(store)
    try:
        assert not finishes_within(lambda: store.count(), 1.0), "Lite calls must be serial"
    finally:
        release.set()
        worker.join()
    monkeypatch.setattr(vector_store, "QUERY_PAGE", 7)
    rows = store.query(store.chunks, "chunk_id >= 0", ["chunk_id"])
    assert len(rows) == len({r["chunk_id"] for r in rows}) == store.count() > 7 * 3


def test_benchmark_on_a_server_uses_collections_of_its_own_and_drops_them(milvus_url):
    from pymilvus import MilvusClient

    from bench.common import isolated_data_dir

    before = get_settings()
    with isolated_data_dir(milvus_url=milvus_url):
        inside = get_settings()
        assert inside.milvus_url == milvus_url and inside.chunks_collection.startswith("bench_zgzk_bench_")
        get_vector_store().open()
        made = {inside.chunks_collection, inside.product_collection}
        assert made <= set(MilvusClient(milvus_url).list_collections())
    assert not made & set(MilvusClient(milvus_url).list_collections())
    after = get_settings()
    assert (after.milvus_url, after.chunks_collection, after.data_dir) == (
        before.milvus_url, before.chunks_collection, before.data_dir)


def test_a_second_server_or_client_on_the_same_file_is_refused(milvus_dir, milvus_url, env):
    second = serve(milvus_dir, free_port(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = second.communicate(timeout=30)
    assert second.returncode == 1 and "已被另一个进程打开" in err
    env(DATA_DIR=str(milvus_dir), MILVUS_URL="")
    with pytest.raises(MilvusError, match="无法连接向量库"):
        VectorStore(get_settings(), get_embedder()).open()


def test_a_lite3_data_folder_is_named_and_reindexing_sets_it_aside(tmp_path, env):
    old = tmp_path / "milvus.db"
    (old / "collections").mkdir(parents=True)
    served = serve(tmp_path, free_port(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert served.wait(30) == 1 and "Milvus Lite 3" in served.stderr.read()
    env(DATA_DIR=str(tmp_path), MILVUS_URL="")
    store = VectorStore(get_settings(), get_embedder())
    with pytest.raises(ConfigurationError, match="旧版 Milvus Lite 3 的数据目录.*重建索引"):
        store.open()
    try:
        store.recreate()
        assert old.is_file() and store.count() == 0
        kept = [p for p in tmp_path.iterdir() if p.name.startswith("milvus.db.lite3-")]
        assert len(kept) == 1 and (kept[0] / "collections").is_dir()
    finally:
        store.close()
