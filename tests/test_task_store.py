"""TaskStore on the same backends as the history (fixtures shared from test_history_store)."""
from __future__ import annotations

import threading

import pytest

from services.errors import StorageError
from services.task_store import INTERRUPTED_ERROR, TaskStore, get_task_store
from test_history_store import assert_fails_fast, settings, unreachable_mongo  # noqa: F401 - fixture

NODES = ["node_entry", "node_pdf_to_md", "node_md_img", "node_document_split"]


@pytest.fixture
def store(settings):  # noqa: F811 - the imported fixture
    return TaskStore(settings)


def test_task_lifecycle(store):
    created = store.create("t1", "说明书.pdf", product="X1")
    assert created["status"] == "pending" and created["done_list"] == [] and created["running_list"] == []
    assert store.get("t1") == created

    store.start("t1")
    store.node_started("t1", NODES[0])
    store.node_started("t1", NODES[1])
    store.node_finished("t1", NODES[0])
    task = store.get("t1")
    assert (task["status"], task["done_list"], task["running_list"]) == ("processing", [NODES[0]], [NODES[1]])

    store.node_finished("t1", NODES[1])
    store.complete("t1", {"chunks": 12, "item_name": "X1"})
    task = store.get("t1")
    assert task["status"] == "completed" and task["result"] == {"chunks": 12, "item_name": "X1"}
    assert task["done_list"] == NODES[:2] and task["running_list"] == []
    assert task["file_name"] == "说明书.pdf" and task["error"] == ""
    assert task["created"] <= task["updated"]


def test_failure_and_unknown_tasks(store):
    store.create("t1", "a.pdf")
    store.start("t1")
    store.node_started("t1", NODES[0])
    store.fail("t1", "PDF 解析失败")
    task = store.get("t1")
    assert (task["status"], task["error"], task["running_list"]) == ("failed", "PDF 解析失败", [])

    assert store.get("missing") is None
    with pytest.raises(StorageError, match="导入任务不存在"):
        store.start("missing")


def test_list_newest_first(store):
    for i in range(5):
        store.create(f"t{i}", f"{i}.pdf")
    assert [t["task_id"] for t in store.list()] == ["t4", "t3", "t2", "t1", "t0"]
    assert [t["task_id"] for t in store.list(limit=2)] == ["t4", "t3"]
    store.create("t0", "again.pdf")  # re-creating starts the task over
    assert store.list(limit=1)[0]["file_name"] == "again.pdf" and len(store.list()) == 5


def test_mark_interrupted_after_restart(settings):  # noqa: F811
    before = TaskStore(settings)
    before.create("pending", "a.pdf")
    before.create("running", "b.pdf")
    before.start("running")
    before.node_started("running", NODES[0])
    before.create("done", "c.pdf")
    before.complete("done", {})
    before.create("broken", "d.pdf")
    before.fail("broken", "原因")

    after = TaskStore(settings)  # a new process on the same data
    assert after.mark_interrupted() == 2
    for task_id in ("pending", "running"):
        task = after.get(task_id)
        assert (task["status"], task["error"], task["running_list"]) == ("failed", INTERRUPTED_ERROR, [])
    assert after.get("done")["status"] == "completed"
    assert after.get("broken")["error"] == "原因"
    assert after.mark_interrupted() == 0


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
    error = assert_fails_fast(lambda: store.mark_interrupted())
    assert "标记中断的导入任务失败" in str(error)
