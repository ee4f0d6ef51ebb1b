"""TaskStore on the same backends as the history (fixtures shared from test_history_store)."""
from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT
from services.errors import StorageError
from services.task_store import GIVE_UP, INTERRUPTED_ERROR, RETRY, TaskStore, get_task_store
from test_history_store import assert_fails_fast, settings, unreachable_mongo  # noqa: F401 - fixture

NODES = ["node_entry", "node_pdf_to_md", "node_md_img", "node_document_split"]


@pytest.fixture
def store(settings):  # noqa: F811 - the imported fixture
    return TaskStore(settings)


def test_task_lifecycle(store):
    created = store.create("t1", "说明书.pdf", product="X1")
    assert created["status"] == "pending" and created["done_list"] == [] and created["running_list"] == []
    assert store.get("t1") == created

    store.start("t1", lease_s=30)
    store.node_started("t1", NODES[0])
    store.node_started("t1", NODES[1])
    store.node_finished("t1", NODES[0])
    task = store.get("t1")
    assert (task["status"], task["done_list"], task["running_list"]) == ("processing", [NODES[0]], [NODES[1]])

    store.node_finished("t1", NODES[1])
    store.complete("t1", {"chunks": 12, "product": "X1"})
    task = store.get("t1")
    assert task["status"] == "completed" and task["result"] == {"chunks": 12, "product": "X1"}
    assert task["done_list"] == NODES[:2] and task["running_list"] == []
    assert task["file_name"] == "说明书.pdf" and task["error"] == ""
    assert task["created"] <= task["updated"]


def test_failure_and_unknown_tasks(store):
    store.create("t1", "a.pdf")
    store.start("t1", lease_s=30)
    store.node_started("t1", NODES[0])
    store.fail("t1", "PDF 解析失败")
    task = store.get("t1")
    assert (task["status"], task["error"], task["running_list"]) == ("failed", "PDF 解析失败", [])

    assert store.get("missing") is None
    with pytest.raises(StorageError, match="导入任务不存在"):
        store.start("missing", lease_s=30)


def test_list_newest_first(store):
    for i in range(5):
        store.create(f"t{i}", f"{i}.pdf")
    assert [t["task_id"] for t in store.list()] == ["t4", "t3", "t2", "t1", "t0"]
    assert [t["task_id"] for t in store.list(limit=2)] == ["t4", "t3"]
    store.create("t0", "again.pdf")  # re-creating starts the task over
    assert store.list(limit=1)[0]["file_name"] == "again.pdf" and len(store.list()) == 5


def test_a_new_process_leaves_running_tasks_alone_until_their_lease_runs_out(settings):  # noqa: F811
    before = TaskStore(settings)
    before.create("pending", "a.pdf", job={"kind": "import"})
    before.create("running", "b.pdf")
    before.start("running", lease_s=0.5)
    before.node_started("running", NODES[0])
    before.create("retried", "c.pdf", job={"kind": "import"})
    before.claim("retried", lease_s=0.5)
    before.create("done", "d.pdf")
    before.complete("done", {})

    after = TaskStore(settings)  # a new process on the same data: nothing is touched because it started
    assert after.expired() == []
    assert after.hand_on("running", max_attempts=3) is None
    time.sleep(0.6)
    assert sorted(t["task_id"] for t in after.expired()) == ["retried", "running"]
    assert after.hand_on("running", max_attempts=3) == GIVE_UP  # no job: it cannot be run again
    running = after.get("running")
    assert (running["status"], running["error"], running["running_list"]) == ("failed", INTERRUPTED_ERROR, [])
    assert after.hand_on("retried", max_attempts=3) == RETRY
    assert after.get("retried")["status"] == "pending" and "正在重试" in after.get("retried")["error"]
    assert after.hand_on("retried", max_attempts=3) is None  # handed on once, by whoever came first
    assert [after.get(t)["status"] for t in ("pending", "done")] == ["pending", "completed"]


def test_claims_decide_who_runs_a_task(store):
    store.create("t1", "a.pdf", job={"kind": "import"})
    first = store.claim("t1", lease_s=0.4)
    assert (first["status"], first["attempts"]) == ("processing", 1)
    assert store.claim("t1", lease_s=0.4) is None  # delivered twice: the live lease wins
    time.sleep(0.5)
    again = store.claim("t1", lease_s=0.4)  # the holder stopped renewing: someone else may take it
    assert again["attempts"] == 2
    with store.leased("t1", lease_s=0.3):
        time.sleep(0.5)  # renewed in the background meanwhile
        assert store.expired() == [] and store.claim("t1", lease_s=0.3) is None
    store.complete("t1", {})
    assert store.claim("t1", lease_s=0.4) is None and store.get("t1")["attempts"] == 2
    time.sleep(0.5)
    assert store.hand_on("t1", max_attempts=1) is None  # finished tasks have no lease to run out

    store.create("t2", "b.pdf", job={"kind": "import"})
    store.claim("t2", lease_s=0.1)
    time.sleep(0.2)
    assert store.hand_on("t2", max_attempts=1) == GIVE_UP
    assert "已尝试 1 次仍未完成" in store.get("t2")["error"]


HAMMER = """
import sys
from services.settings import Settings
from services.task_store import TaskStore
from pathlib import Path
store = TaskStore(Settings(data_dir=Path(sys.argv[1])))
for i in range(int(sys.argv[3])):
    store.node_started("shared", f"{sys.argv[2]}-{i}")
    store.claim(f"{sys.argv[2]}-{i}", lease_s=60)
"""


def test_several_processes_on_one_embedded_database_lose_no_update(tmp_path):
    """montydb updates are read-modify-write in Python: without the cross-process lock two writers
    to one file overwrite each other's changes, or fail with "database is locked"."""
    from services.settings import Settings

    settings = Settings(data_dir=tmp_path / "data")
    store = TaskStore(settings)
    store.create("shared", "a.pdf")
    names, rounds = ["p0", "p1", "p2"], 15
    for name in names:
        for i in range(rounds):
            store.create(f"{name}-{i}", "x.pdf")
    procs = [subprocess.Popen([sys.executable, "-c", HAMMER, str(settings.data_dir), name, str(rounds)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for name in names]
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], errors
    assert sorted(store.get("shared")["running_list"]) == sorted(f"{n}-{i}" for n in names for i in range(rounds))
    assert all(store.get(f"{n}-{i}")["attempts"] == 1 for n in names for i in range(rounds))


def test_parallel_nodes_lose_no_update(store):
    store.create("t1", "a.pdf")
    nodes = [f"node_{i}" for i in range(8)]

    def run(node: str) -> None:
        for _ in range(5):
            store.node_started("t1", node)
            store.node_finished("t1", node)

    threads = [threading.Thread(target=run, args=(node,)) for node in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    task = store.get("t1")
    assert sorted(task["done_list"]) == nodes and task["running_list"] == []


def test_factory_shares_one_database_with_history(settings):  # noqa: F811
    from services.history_store import get_history_store

    assert get_task_store(settings) is get_task_store(settings)
    assert get_task_store(settings).db is get_history_store(settings).db


def test_unreachable_mongodb_raises_storage_error(tmp_path):
    store = TaskStore(unreachable_mongo(tmp_path))
    error = assert_fails_fast(lambda: store.expired())
    assert "读取过期的导入任务失败" in str(error)
