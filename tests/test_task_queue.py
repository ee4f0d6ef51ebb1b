"""Imports on the embedded task queue (Huey over SQLite, consumed inside this process): bounded
concurrency, a task delivered twice or handed on after its worker died runs once in effect, and
transient faults (MinerU 5xx) are retried with a growing delay while lasting ones fail at once."""
from __future__ import annotations

import io
import time

import pymupdf
import pytest

import services.pdf_parser as pdf_parser
from api_fixtures import api, api_server  # noqa: F401 (fixtures)
from bench.cluster import free_port
from fakes.mineru_server import FAILED_MSG, FakeMinerU
from graphs.importing import enqueue_reimport, enqueue_set, hand_on_expired, jobs, stage_uploads, stop_in_app_workers
from import_fixtures import assert_consistent, store
from queue_fixtures import break_queue_after_first
from services.documents import get_document_registry
from services.errors import StorageError, ValidationError
from services.history_store import now_ts
from services.settings import get_settings
from services.task_store import get_task_store
from services.vector_store import eq_filter

MANUAL = "# {name} 使用说明书\n\n## 开机\n\n长按电源键 3 秒，{name} 的指示灯亮起。\n\n## 复位\n\n用牙签按住 RESET 键 10 秒。\n"


@pytest.fixture
def queue_env(env, tmp_path):
    """Own DATA_DIR, short delays; the in-process consumer this test starts is stopped after it."""
    def apply(**extra):
        return env(DATA_DIR=str(tmp_path / "data"), IMPORT_RETRY_DELAY_S="0.2", **extra)

    yield apply
    stop_in_app_workers()


def upload(*named: tuple[str, bytes]) -> list[str]:
    return enqueue_set(stage_uploads([(name, io.BytesIO(data)) for name, data in named], get_settings()))


def watch(task_ids: list[str], timeout: float = 180) -> tuple[dict[str, dict], list[dict[str, str]]]:
    """Poll until every task has ended: (final tasks, the statuses seen on each poll)."""
    tasks, seen = get_task_store(), []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # one read of the store per poll: tasks read one by one could show one ending and the next
        # starting as if both ran at once
        listed = {t["task_id"]: t for t in tasks.list(limit=1000)}
        now = {t: listed[t] for t in task_ids}
        seen.append({t: task["status"] for t, task in now.items()})
        if all(task["status"] in ("completed", "failed") for task in now.values()):
            return now, seen
        time.sleep(0.05)
    raise TimeoutError(f"tasks did not finish: {seen[-1]}")


def chunks_of(doc_id: str) -> int:
    s = store()
    return s.count(s.chunks, eq_filter("doc_id", doc_id))


def test_queued_imports_run_at_most_import_workers_at_a_time_and_a_second_delivery_does_nothing(queue_env):
    queue_env(IMPORT_WORKERS="2")
    ids = upload(*[(f"机型{i}.md", MANUAL.format(name=f"星火 X{i} 路由器").encode()) for i in range(4)])
    done, seen = watch(ids)
    assert [t["status"] for t in done.values()] == ["completed"] * 4, done
    assert max(sum(s == "processing" for s in poll.values()) for poll in seen) <= 2
    assert len({t["worker"] for t in done.values()}) == 2  # both threads took tasks
    assert all(t["attempts"] == 1 for t in done.values())

    first = done[ids[0]]
    doc_id, chunks = first["result"]["doc_id"], first["result"]["chunks"]
    jobs._queue().send(jobs.RUN_TASK, ids[0])  # the same message again
    time.sleep(1.0)
    again = get_task_store().get(ids[0])
    assert (again["status"], again["attempts"], again["updated"]) == ("completed", 1, first["updated"])
    assert chunks_of(doc_id) == chunks
    assert_consistent()


def test_a_task_whose_worker_died_runs_again_from_its_job_without_duplicating(queue_env, caplog):
    queue_env(TASK_LEASE_S="1")
    [task_id] = upload(("星火Y1.md", MANUAL.format(name="星火 Y1 扫地机").encode()))
    done, _ = watch([task_id])
    result = done[task_id]["result"]
    assert done[task_id]["status"] == "completed"

    # as if its worker had died after writing the chunks, before saying so: processing, lease run out.
    # The consumer's own lease watcher (every TASK_LEASE_S / 3) is what hands it on; a sweep by this
    # test at the same moment must not hand it on a second time.
    tasks = get_task_store()
    with tasks._tasks("test") as raw:
        raw.update_one({"task_id": task_id}, {"$set": {"status": "processing", "lease_until": now_ts() - 1}})
    with caplog.at_level("WARNING", logger="import.jobs"):
        hand_on_expired()
        done, _ = watch([task_id])
        assert hand_on_expired() == 0
    assert (done[task_id]["status"], done[task_id]["attempts"]) == ("completed", 2)
    assert [r.getMessage() for r in caplog.records if "worker died" in r.getMessage()] == [
        f"task {task_id}: its worker died, queued again"]  # handed on once, by whichever sweep came first
    assert done[task_id]["result"]["doc_id"] == result["doc_id"]
    assert chunks_of(result["doc_id"]) == result["chunks"]  # replaced by its identity, not added again
    record = get_document_registry().get(result["doc_id"], with_chunk_ids=True)
    assert record["status"] == "ready" and record["chunks"] == result["chunks"] == len(record["chunk_ids"])
    assert_consistent()


def test_a_reimport_is_a_task_too_recording_its_steps_and_an_unknown_document_is_refused_at_once(queue_env):
    queue_env()
    [first] = upload(("星火R1.md", MANUAL.format(name="星火 R1 路由器").encode()))
    result = watch([first])[0][first]["result"]
    task_id = enqueue_reimport(result["doc_id"], "tester")
    task = watch([task_id])[0][task_id]
    assert (task["status"], task["attempts"], task["job"]["kind"], task["by"]) == ("completed", 1, "reimport", "tester")
    assert task["result"]["doc_id"] == result["doc_id"] and chunks_of(result["doc_id"]) == result["chunks"]
    # what a viewer in another process replays: every node started and ended, in order, with its summary
    ends = [st for st in task["steps"] if st["type"] == "node_end"]
    assert [st["node"] for st in task["steps"] if st["type"] == "node_start"] == [st["node"] for st in ends]
    assert ends[0]["label"] == "检查文件" and all(st["seconds"] >= 0 and "summary" in st for st in ends)
    with pytest.raises(ValidationError, match="文档不存在"):
        enqueue_reimport("no-such-doc")
    assert len(get_task_store().list()) == 2  # nothing was queued for it
    assert_consistent()


def tiny_pdf() -> bytes:
    doc = pymupdf.open()
    page = doc.new_page()
    page.insert_text((72, 72), "Spark Z1 Router - User Manual", fontsize=18)
    page.insert_text((72, 120), "Hold the RESET button for 10 seconds to restore factory settings.", fontsize=11)
    return doc.tobytes()


@pytest.fixture
def fast_mineru_retries(monkeypatch):
    monkeypatch.setattr(pdf_parser, "RETRY_BACKOFF_S", 0.01)


def test_a_mineru_outage_is_retried_with_backoff_and_never_shown_as_failed(queue_env, fast_mineru_retries):
    # the parser's own retries (1 + 3 requests) all meet the outage: the queue tries again later
    with FakeMinerU(token="tok", outage=1 + pdf_parser.MAX_RETRIES) as mineru:
        queue_env(MINERU_API_TOKEN="tok", MINERU_BASE_URL=mineru.base_url, MINERU_POLL_INTERVAL_S="0.05")
        started = time.monotonic()
        [task_id] = upload(("z1.pdf", tiny_pdf()))
        done, seen = watch([task_id])
    task = done[task_id]
    assert (task["status"], task["attempts"], task["error"]) == ("completed", 2, ""), task
    assert "failed" not in {poll[task_id] for poll in seen}  # a client polling never saw it give up
    assert time.monotonic() - started >= 0.2  # waited IMPORT_RETRY_DELAY_S before the second attempt


def test_a_lasting_outage_fails_after_the_retries_and_a_refusal_at_once(queue_env, fast_mineru_retries):
    with FakeMinerU(token="tok", outage=10_000) as mineru:
        queue_env(MINERU_API_TOKEN="tok", MINERU_BASE_URL=mineru.base_url, IMPORT_RETRIES="1")
        [task_id] = upload(("z1.pdf", tiny_pdf()))
        task = watch([task_id])[0][task_id]
        posts = [r for r in mineru.requests if r[0] == "POST"]
    assert (task["status"], task["attempts"]) == ("failed", 2)
    assert "MinerU 服务暂时不可用（HTTP 503）" in task["error"] and "重试" in task["error"]
    assert len(posts) == 2 * (1 + pdf_parser.MAX_RETRIES)

    with FakeMinerU(token="tok", mode="failed") as mineru:
        queue_env(MINERU_API_TOKEN="tok", MINERU_BASE_URL=mineru.base_url, MINERU_POLL_INTERVAL_S="0.05")
        [task_id] = upload(("z2.pdf", tiny_pdf()))
        task = watch([task_id])[0][task_id]
    assert (task["status"], task["attempts"]) == ("failed", 1)  # the file itself is refused: no retry
    assert FAILED_MSG in task["error"]


def test_a_queue_that_cannot_take_the_tasks_fails_them_with_a_reason(queue_env, monkeypatch):
    queue_env()
    queue = jobs._queue()

    def broken(*args, **kwargs):
        raise OSError("disk I/O error")

    monkeypatch.setattr(queue.huey, "enqueue", broken)
    with pytest.raises(StorageError, match="任务无法加入队列"):
        upload(("a.md", MANUAL.format(name="星火 A1").encode()))
    [task] = get_task_store().list()
    assert task["status"] == "failed" and "导入任务没有排上队" in task["error"] and "disk I/O error" in task["error"]


def test_a_set_whose_queue_breaks_off_part_way_imports_what_was_queued_and_keeps_nothing_else(
        api, queue_env, monkeypatch):
    settings = queue_env()
    break_queue_after_first(monkeypatch)
    files = [("files", (f"{n}.md", MANUAL.format(name=f"星火 {n}").encode(), "text/markdown")) for n in ("C1", "C2", "C3")]
    reply = api.post("/api/upload", files=files)
    assert reply.status_code == 503, reply.text
    error = reply.json()["error"]
    assert "只有部分文件排上了导入队列" in error and "C2.md、C3.md 没有开始导入" in error and "disk I/O error" in error
    by_name = {t["file_name"]: t for t in get_task_store().list()}
    assert by_name["C1.md"]["task_id"] in error
    done, _ = watch([by_name["C1.md"]["task_id"]])  # the queued one goes on and completes
    assert done[by_name["C1.md"]["task_id"]]["status"] == "completed"
    assert all(by_name[n]["status"] == "failed" and "导入任务没有排上队" in by_name[n]["error"] for n in ("C2.md", "C3.md"))
    kept = [p.name for p in (settings.data_dir / "uploads").rglob("*") if p.is_file()]
    assert not any(name.startswith(("C2", "C3")) for name in kept)  # the refused files are not kept
    assert [r["product"] for r in get_document_registry().list()] == ["星火 C1"]


def test_an_unreachable_redis_refuses_uploads_and_questions_keeps_nothing_and_shows_in_health(api, queue_env):
    settings = queue_env(REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    health = api.get("/api/health")
    assert health.status_code == 503 and health.json()["status"] == "degraded"
    queue = health.json()["task_queue"]
    assert (queue["backend"], queue["ok"]) == ("redis", False) and "Redis不可用" in queue["error"]

    reply = api.post("/api/upload", files=[("files", ("a.md", MANUAL.format(name="星火 B1").encode(), "text/markdown"))])
    assert reply.status_code == 503, reply.text
    assert "没有开始导入" in reply.json()["error"] and "任务无法加入队列（Redis不可用）" in reply.json()["error"]
    assert not [p for p in (settings.data_dir / "uploads").rglob("*") if p.is_file()]
    [task] = get_task_store().list()
    assert task["status"] == "failed" and "导入任务没有排上队" in task["error"]

    for is_stream in (True, False):  # the answer's events go through Redis, for the other replicas
        asked = api.post("/api/query", json={"query": "星火 B1 怎么开机？", "is_stream": is_stream})
        assert asked.status_code == 503 and "回答事件无法经 Redis 传递" in asked.json()["error"], asked.text
        assert "没有开始回答" in asked.json()["error"]
    streamed = api.get(f"/api/stream/{'0' * 32}")
    assert streamed.status_code == 503 and "回答事件无法经 Redis 传递" in streamed.json()["error"]
