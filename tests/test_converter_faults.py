"""Parsers cannot take the server down: a real API server process (uvicorn) given invalid PDFs at
once, then restarted with poison tasks in its queue and a converter that crashes its process."""
from __future__ import annotations

import secrets
import time
from pathlib import Path

import httpx
import pytest

from bench.load import Server, wait_tasks
from bench.security import broken_pdf, files_left
from conftest import CORPUS_DOCS, ROOT
from graphs.importing import enqueue_set, stage_uploads
from services.task_store import get_task_store

BTT_V3_PDF = CORPUS_DOCS[8]


def _server(data_dir: Path, key: str, **env) -> Server:
    server = Server(data_dir, key, None)
    server.env.update(PYTHONPATH=str(ROOT / "tests"), IMPORT_IN_APP="true", IMPORT_RETRY_DELAY_S="0.2", TASK_LEASE_S="2",
                      **env)
    return server


def _client(server: Server, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def _stage(settings, path: Path) -> list:
    with path.open("rb") as stream:
        return stage_uploads([(path.name, stream)], settings)


@pytest.mark.skipif(not BTT_V3_PDF.exists(), reason="BTT sample PDF not available")
def test_invalid_pdfs_at_once_then_a_restart_with_poison_tasks_and_a_crashing_converter(tmp_path, env):
    data_dir, key = tmp_path / "data", secrets.token_urlsafe(12)
    bad = [broken_pdf(tmp_path / f"坏文件{i}.pdf", 8) for i in range(2)]

    # 1. two large invalid PDFs in one upload, parsed at once by two import workers
    with _server(data_dir, key) as server, _client(server, key) as client:
        reply = client.post("/api/upload", files=[("files", (p.name, p.read_bytes(), "application/pdf")) for p in bad])
        assert reply.status_code == 200, reply.text
        tasks = wait_tasks(client, reply.json()["task_ids"], deadline=time.monotonic() + 180)
        assert [t["status"] for t in tasks] == ["failed", "failed"]
        assert all("PDF 文件已损坏" in t["error"] or "PDF 文件不完整" in t["error"] for t in tasks), tasks
        assert client.get("/api/health").status_code == 200
        assert server.proc.poll() is None
        assert files_left(data_dir) == []

    # 2. while it is down: a queued task, one whose worker died holding it, and a failed one whose
    #    files were never removed (its process died before the clean-up)
    settings = env(DATA_DIR=str(data_dir), IMPORT_IN_APP="false", TASK_LEASE_S="2")
    queued = enqueue_set(_stage(settings, BTT_V3_PDF))[0]
    held = enqueue_set(_stage(settings, bad[0]))[0]
    store = get_task_store(settings)
    assert store.claim(held, 0.01) is not None
    failed_staged = _stage(settings, tmp_path / "坏文件1.pdf")[0]
    store.create(failed_staged.task_id, failed_staged.name, job={"kind": "import", "staged": failed_staged.as_dict()})
    store.fail(failed_staged.task_id, "导入失败：进程崩溃")
    assert len(files_left(data_dir)) == 6  # three staged copies, three originals

    # 3. restarted with a converter that crashes its process: it comes up, answers, fails the tasks
    # tasks queued in-process have no uploader: their status is for an admin
    with _server(data_dir, key, CONVERTER_OVERRIDE="fakes.converters:segfault", API_KEYS=f"bench:{key}:admin") as server, \
            _client(server, key) as client:
        tasks = wait_tasks(client, [queued, held], deadline=time.monotonic() + 180)
        assert [t["status"] for t in tasks] == ["failed", "failed"], tasks
        for task in tasks:
            assert "PDF 解析失败：解析进程崩溃（SIGSEGV），换新进程重试 1 次仍失败" in task["error"]
        assert client.get("/api/health").status_code == 200 and server.proc.poll() is None
        assert files_left(data_dir) == []
        # and it still imports what needs no converter
        reply = client.post("/api/upload", files=[("files", ("lamp.md", "# Lumora K1 台灯\n\n长按调光环 3 秒。".encode(),
                                                             "text/markdown"))])
        assert wait_tasks(client, reply.json()["task_ids"], deadline=time.monotonic() + 120)[0]["status"] == "completed"
