"""Progress events of the import graph and the persisted task state behind them."""
from __future__ import annotations

import time
import uuid

import pytest

from conftest import CORPUS
from graphs.importing.runner import run_import
from graphs.importing import hand_on_expired
from import_fixtures import Killed, fresh_data, store, write_md  # noqa: F401 - fresh_data is a fixture
from services.settings import get_settings
from services.task_store import INTERRUPTED_ERROR, TaskStore, get_task_store

MD_NODES = ["node_entry", "node_md_img", "node_document_split", "node_product_recognition",
            "node_bge_embedding", "node_import_milvus"]
PDF_NODES = MD_NODES[:1] + ["node_pdf_to_md"] + MD_NODES[1:]
SLOW_NODES = {"node_pdf_to_md", "node_md_img", "node_bge_embedding", "node_import_milvus"}
BTT_V2 = CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V2.0使用手册.pdf"
MF0 = CORPUS / "sipeed-mf" / "zh_CN" / "mf0_get_started.md"


def check_stream(events: list[dict], nodes: list[str], task_id: str) -> None:
    """node_start/node_end pairs for every node in order, progress only inside its own node."""
    assert all(e["task_id"] == task_id for e in events)
    framing = [(e["type"], e["node"]) for e in events if e["type"] in ("node_start", "node_end")]
    assert framing == [(kind, n) for n in nodes for kind in ("node_start", "node_end")]
    current = None
    for e in events:
        if e["type"] == "node_start":
            current = e["node"]
            assert e["label"]
        elif e["type"] == "node_end":
            assert e["node"] == current and e["status"] == "ok" and e["seconds"] >= 0 and e["summary"]
            current = None
        elif e["type"] == "node_progress":
            assert e["node"] == current and e["text"]
    progressed = {e["node"] for e in events if e["type"] == "node_progress"}
    assert progressed == SLOW_NODES & set(nodes), progressed
    assert events[-1]["type"] == "import_done"


def test_markdown_import_reports_every_node_and_persists_the_task(fresh_data):
    task_id = uuid.uuid4().hex
    tasks = get_task_store()
    assert tasks.create(task_id, MF0.name)["status"] == "pending"  # queued by the app
    seen = []

    def on_event(event):
        task = tasks.get(task_id)
        if event["type"] == "node_start":
            assert task["status"] == "processing" and task["running_list"] == [event["node"]]
        elif event["type"] == "node_end":
            assert event["node"] in task["done_list"] and task["running_list"] == []
        seen.append(event)

    result = run_import(MF0, task_id=task_id, on_event=on_event)
    assert result.status == "completed"
    check_stream(seen, MD_NODES, task_id)
    assert seen[-1]["result"]["chunks"] == result.chunks
    md_img = next(e for e in seen if e["type"] == "node_end" and e["node"] == "node_md_img")
    assert md_img["detail"] == {"uploaded": result.images_uploaded, "remote": 0, "missing": 2, "case": 0}

    restarted = TaskStore(get_settings())  # what a new process sees
    task = restarted.get(task_id)
    assert task["status"] == "completed" and task["done_list"] == MD_NODES and task["running_list"] == []
    assert task["result"]["chunks"] == result.chunks and task["result"]["product"] == result.product
    assert task["error"] == ""


def test_pdf_import_reports_the_conversion(fresh_data):
    events = []
    result = run_import(BTT_V2, on_event=events.append)
    assert result.status == "completed"
    check_stream(events, PDF_NODES, result.task_id)
    assert get_task_store().get(result.task_id)["done_list"] == PDF_NODES


def test_failed_import_reports_the_failing_node(fresh_data, tmp_path):
    md = write_md(tmp_path / "空白.md", " \n\n ")
    events = []
    result = run_import(md, on_event=events.append)
    assert result.status == "failed"
    kinds = [(e["type"], e.get("node")) for e in events]
    assert kinds == [("node_start", "node_entry"), ("node_end", "node_entry"), ("node_start", "node_md_img"),
                     ("node_error", "node_md_img"), ("import_failed", "node_md_img")]
    assert events[-1]["error"] == result.error and "没有任何文字内容" in result.error
    task = TaskStore(get_settings()).get(result.task_id)
    assert task["status"] == "failed" and task["error"] == result.error
    assert task["done_list"] == ["node_entry"] and task["running_list"] == []


def test_a_killed_import_fails_once_its_lease_runs_out(env, tmp_path):
    env(DATA_DIR=str(tmp_path / "data"), TASK_LEASE_S="1")
    client = store().client

    def killed(*args, **kwargs):
        raise Killed()

    md = write_md(tmp_path / "a.md", "# 说明\n\n一段说明文字。\n")
    task_id = uuid.uuid4().hex
    with pytest.MonkeyPatch.context() as faults, pytest.raises(Killed):
        faults.setattr(client, "insert", killed)
        run_import(md, task_id=task_id)
    restarted = TaskStore(get_settings())
    assert restarted.get(task_id)["status"] == "processing"
    assert hand_on_expired() == 0  # looked at by another process at once: left alone
    time.sleep(1.1)
    assert hand_on_expired() == 1
    task = restarted.get(task_id)
    assert task["status"] == "failed" and task["error"] == INTERRUPTED_ERROR
    assert task["done_list"] == MD_NODES[:-1]
