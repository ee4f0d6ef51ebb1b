"""Replicas and workers as separate processes sharing only their stores: a real Redis (the queue and
the answers' events), a Milvus Lite server, one DATA_DIR; two API processes and two queue workers
(scripts/worker.sh); the chat model is the scripted one on 127.0.0.1. The last test puts this process's
chat handlers on the same stores, as one more web replica.

Kept to four tests (each process loads the libraries and the embedding model once)."""
from __future__ import annotations

import time
from collections import Counter

import httpx
import pytest

from api_fixtures import ANSWER, HYDE, REWRITE, api_client
from bench.cluster import ClusterError, LocalCluster
from bench.load import sse_messages
from fakes.openai_server import ScriptedOpenAI
from conftest import CORPUS
from services.documents import get_document_registry
from services.task_store import get_task_store
from services.vector_store import eq_filter, get_vector_store

LEASE_S = 3.0
MANUAL = "# {name} 使用说明书\n\n## 开机\n\n长按电源键 3 秒，{name} 的指示灯亮起。\n\n## 复位\n\n按住 RESET 键 10 秒。\n"
BTT_V3 = CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V3.0使用手册.pdf"


ANSWER_TEXT = "用牙签按住 RESET 键 10 秒，指示灯闪烁后松开即可复位。[1]"


@pytest.fixture(scope="module")
def llm():
    model = ScriptedOpenAI(chunk_chars=2)
    model.start()
    model.add_rule("产品资料整理专家", "")  # imports: the offline rules name the products
    model.add_rule("用于 Markdown 图片标题", "说明书插图")
    model.add_rule(REWRITE, '{"products": [], "rewritten_query": ""}')
    model.add_rule(HYDE, "说明书中关于复位的段落。")
    model.add_rule(ANSWER, ANSWER_TEXT, delay_s=1.5)  # long enough to be followed live from elsewhere
    yield model
    model.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, llm):
    model_env = {"OPENAI_API_KEY": "test-key", "OPENAI_API_BASE": llm.base_url}
    try:
        with LocalCluster(tmp_path_factory.mktemp("cluster"), lease_s=LEASE_S, extra_env=model_env) as running:
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
    with api_client(app_a) as a, api_client(app_b) as b:
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
    with api_client(app_a) as a, api_client(app_b) as b:
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


def stream_messages(client: httpx.Client, session_id: str, last_event_id: int | None = None) -> list[tuple]:
    """(id, name, data) of GET /api/stream/{session_id}, read to its end."""
    headers = {"Last-Event-ID": str(last_event_id)} if last_event_id else {}
    with client.stream("GET", f"/api/stream/{session_id}", headers=headers, timeout=120) as response:
        assert response.status_code == 200, response.read()
        return list(sse_messages(response))


def test_a_streamed_question_posted_to_one_replica_is_read_from_the_other(cluster, shared):
    (_, app_a), (_, app_b) = cluster.apps
    with api_client(app_a) as a, api_client(app_b) as b:
        [task_id] = a.post("/api/upload", files=[("files", ("s1.md", MANUAL.format(name="星海 S1 路由器").encode(),
                                                            "text/markdown"))]).json()["task_ids"]
        assert wait_all(b, [task_id])[task_id]["status"] == "completed"

        session = a.post("/api/query", json={"query": "星海 S1 路由器 怎么复位？", "is_stream": True}).json()["session_id"]
        again = b.post("/api/query", json={"query": "再问一次", "session_id": session, "is_stream": True})
        assert again.status_code == 409, again.text  # one run per session, whichever replica is asked
        events = stream_messages(b, session)  # live, from the replica that did not take the question
        names = [name for _, name, _ in events]
        assert names[0] == "ready" and "progress" in names and names.count("delta") > 3 and names[-1] == "final", names
        final = events[-1][2]
        assert "".join(d["delta"] for _, n, d in events if n == "delta") == final["answer"] == ANSWER_TEXT
        assert final["session_id"] == session and final["products"] == ["星海 S1 路由器"]
        ids = [i for i, _, _ in events[1:]]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)

        # resuming on the other replica after an event id gives exactly what followed it
        middle = ids[len(ids) // 2]
        assert stream_messages(a, session, middle)[1:] == [e for e in events[1:] if e[0] > middle]
        assert b.get(f"/api/stream/{session}", headers={"Last-Event-ID": str(ids[-1])}).status_code == 204
        assert stream_messages(a, session)[1:] == [events[-1]]  # after the end: the result alone, anywhere
        assert stream_messages(b, session)[1:] == [events[-1]]
        other = api_client(app_b, user="alice")
        assert other.get(f"/api/stream/{session}").status_code == 404  # still nobody else's to read
        other.close()


async def test_a_chat_attachment_is_imported_by_a_worker_process_and_followed_from_the_store(cluster, shared, tmp_path):
    from test_app_handlers import Session  # the Chainlit handlers (imports the app)

    manual = tmp_path / "c1.md"
    manual.write_text(MANUAL.format(name="星海 C1 路由器"), encoding="utf-8")
    s = Session()
    await s.start()
    await s.send("", [manual])
    [done] = await s.wait_imports(1)
    assert done["output"].startswith("✅ 《c1.md》导入完成") and "商品名：**星海 C1 路由器**" in done["output"]
    updates = [d["output"] for _, n, d in s.emitter.events if n == "update_message" and d["id"] == done["id"]]
    assert any("⏳ 向量化" in u for u in updates) and any("✅ 检查文件" in u for u in updates)  # each node, as it ran
    await s.wait_for(lambda: any(r["output"].startswith("识别为 1 个产品：星海 C1 路由器") for r in s.replies()))
    [task] = [t for t in get_task_store().list() if t["file_name"] == "c1.md"]
    assert cluster.worker_pid(task["worker"]) in {w.pid for w in cluster.workers}  # not this process
    assert assert_registry_matches_chunks(task["result"]["doc_id"]) == task["result"]["chunks"] > 0
