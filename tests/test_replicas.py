"""Replicas and workers as separate processes sharing only their stores: a real Redis (the queue),
a Milvus Lite server, one DATA_DIR; two API processes and two queue workers (scripts/worker.sh).

Kept to two tests (each process loads the libraries and the embedding model once)."""
from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest

from bench.cluster import ClusterError, LocalCluster
from conftest import CORPUS
from services.documents import get_document_registry
from services.task_store import get_task_store
from services.vector_store import eq_filter, get_vector_store

LEASE_S = 3.0
MANUAL = "# {name} 使用说明书\n\n## 开机\n\n长按电源键 3 秒，{name} 的指示灯亮起。\n\n## 复位\n\n按住 RESET 键 10 秒。\n"
BTT_V3 = CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V3.0使用手册.pdf"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        with LocalCluster(tmp_path_factory.mktemp("cluster"), lease_s=LEASE_S) as running:
            running.start_worker()
            running.start_worker()
            running.start_app()
            running.start_app()
            yield running
    except ClusterError as exc:
        if "redis-server" in str(exc):
            pytest.skip(str(exc))
        raise


@pytest.fixture
def shared(cluster, env):
    """This process on the cluster's stores (to look at what the others wrote)."""
    return env(**cluster.env)


def wait_all(client: httpx.Client, task_ids: list[str], timeout: float = 300) -> dict[str, dict]:
    deadline, done = time.monotonic() + timeout, {}
    while time.monotonic() < deadline and len(done) < len(task_ids):
        for task_id in set(task_ids) - set(done):
            status = client.get(f"/api/status/{task_id}").json()
            if status["status"] in ("completed", "failed"):
                done[task_id] = status
        time.sleep(0.2)
    assert len(done) == len(task_ids), f"unfinished: {set(task_ids) - set(done)}"
    return done


def assert_registry_matches_chunks(doc_id: str) -> int:
    store, record = get_vector_store(), get_document_registry().get(doc_id, with_chunk_ids=True)
    rows = store.query(store.chunks, eq_filter("doc_id", doc_id), ["chunk_id", "content"])
    assert record["status"] == "ready" and "pending" not in record
    assert sorted(str(r["chunk_id"]) for r in rows) == sorted(str(i) for i in record["chunk_ids"])
    assert len(rows) == record["chunks"]
    twice = [c for c, n in Counter(r["content"] for r in rows).items() if n > 1]
    assert not twice, f"{len(twice)} chunks stored twice"
    return len(rows)


def test_ten_uploads_on_two_replicas_are_spread_over_two_workers(cluster, shared):
    (_, app_a), (_, app_b) = cluster.apps
    with httpx.Client(base_url=app_a, timeout=60) as a, httpx.Client(base_url=app_b, timeout=60) as b:
        ids = []
        for i in range(10):
            client = a if i % 2 else b
            body = MANUAL.format(name=f"星海 R{i} 路由器").encode()
            reply = client.post("/api/upload", files=[("files", (f"r{i}.md", body, "text/markdown"))])
            assert reply.status_code == 200, reply.text
            ids += reply.json()["task_ids"]
        done = wait_all(b, ids[1::2]) | wait_all(a, ids[::2])  # each replica answers for the other's uploads
        assert [s["status"] for s in done.values()] == ["completed"] * 10, done
        listed = {d["file_name"] for d in b.get("/api/documents").json()} & {d["file_name"] for d in a.get(
            "/api/documents").json()}
        assert listed >= {f"r{i}.md" for i in range(10)}
        queue = a.get("/api/health").json()["task_queue"]
        assert (queue["backend"], queue["ok"]) == ("redis", True)

    tasks = get_task_store()
    owners = Counter(cluster.worker_pid(tasks.get(t)["worker"]) for t in ids)
    assert set(owners) == {w.pid for w in cluster.workers}, owners  # both workers took some
    for task_id in ids:
        task = tasks.get(task_id)
        assert task["attempts"] == 1
        assert assert_registry_matches_chunks(task["result"]["doc_id"]) == task["result"]["chunks"]


def test_a_worker_killed_mid_import_has_its_task_finished_by_the_other(cluster, shared):
    (_, app_a), (_, app_b) = cluster.apps
    tasks = get_task_store()
    with httpx.Client(base_url=app_a, timeout=60) as a, httpx.Client(base_url=app_b, timeout=60) as b:
        reply = a.post("/api/upload", files=[("files", (BTT_V3.name, BTT_V3.read_bytes(), "application/pdf"))])
        [task_id] = reply.json()["task_ids"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            task = tasks.get(task_id)
            if task["status"] == "processing" and task["running_list"] and task["running_list"] != ["node_entry"]:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"the import never got under way: {tasks.get(task_id)}")
        victim = next(w for w in cluster.workers if w.pid == cluster.worker_pid(task["worker"]))
        survivor = next(w for w in cluster.workers if w is not victim)
        cluster.kill(victim)
        killed_at = time.monotonic()

        status = wait_all(b, [task_id])[task_id]
    assert status["status"] == "completed", status
    # handed on once the lease ran out (renewed every third of it), not before
    assert time.monotonic() - killed_at >= LEASE_S * 2 / 3
    task = tasks.get(task_id)
    assert task["attempts"] == 2 and cluster.worker_pid(task["worker"]) == survivor.pid
    assert assert_registry_matches_chunks(task["result"]["doc_id"]) == task["result"]["chunks"] > 0
