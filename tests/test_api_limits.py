"""Limits while the body arrives, tidy failure, names that outgrow the file system, JSON errors.

Each test is an input that got through (or left something behind) before, refused cleanly now.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from api_fixtures import (  # noqa: F401 (fixtures)
    api, api_server, files_under, task_folders_under, wait_task,
)
from conftest import ROOT, auth_header

BOUNDARY = b"zgzk-limit-boundary"
MULTIPART = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY.decode()}"}
CHUNK = 64 * 1024


def multipart(name: bytes, size: int):
    """One file part of `size` bytes, produced as it is sent."""
    yield (b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="files"; filename="' + name
           + b'"\r\nContent-Type: application/octet-stream\r\n\r\n')
    for _ in range(size // CHUNK):
        yield b"0" * CHUNK
    yield b"\r\n--" + BOUNDARY + b"--\r\n"


async def test_an_oversized_file_is_cut_off_as_it_arrives(api_server, env, tmp_path):
    settings = env(DATA_DIR=str(tmp_path / "data"), MAX_UPLOAD_MB=1)
    sent = 0

    async def body():
        nonlocal sent
        for chunk in multipart(b"huge.pdf", 50 * 1024 * 1024):  # 50 MB, no Content-Length
            sent += len(chunk)
            yield chunk

    transport = httpx.ASGITransport(app=api_server.app)  # reads the body only as the app asks for it
    async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=auth_header()) as client:
        reply = await client.post("/api/upload", content=body(), headers=MULTIPART)
    assert reply.status_code == 413 and "单个文件超过了 1 MB 的上限" in reply.json()["error"]
    # the server stopped reading right after the file's limit, long before the 11 MB whole-body cap
    assert sent < 1.2 * 1024 * 1024
    # over a real connection too, with the size declared and below the whole-body cap
    with httpx.Client(base_url=api_server.base_url, headers=auth_header(), timeout=60) as client:
        real = client.post("/api/upload", content=b"".join(multipart(b"big.pdf", 6 * 1024 * 1024)), headers=MULTIPART)
    assert real.status_code == 413 and "已停止接收" in real.json()["error"]
    assert files_under(settings.data_dir / "uploads") == []


def _temporary_files() -> list[str]:
    """Files this process holds open in the temporary folder (a spooled upload is one, unlinked or not)."""
    tmp = os.path.realpath(tempfile.gettempdir())
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(tmp + "/"):
            held.append(target)
    return held


async def test_a_file_is_written_once_and_never_past_its_limit(api_server, env, tmp_path, monkeypatch):
    settings = env(DATA_DIR=str(tmp_path / "data"), MAX_UPLOAD_MB=1)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where a spooled part would go
    uploads = settings.data_dir / "uploads"
    limit = 1024 * 1024
    written, spooled = [], []

    async def body():
        for chunk in multipart(b"huge.pdf", 8 * 1024 * 1024):
            # sampled between chunks, while the app writes what it has read
            written.append(sum(p.stat().st_size for p in files_under(uploads)))
            spooled.extend(_temporary_files())
            yield chunk

    transport = httpx.ASGITransport(app=api_server.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api", headers=auth_header()) as client:
        reply = await client.post("/api/upload", content=body(), headers=MULTIPART)
    assert reply.status_code == 413, reply.text
    assert reply.json()["error"] == "文件“huge.pdf”太大：单个文件超过了 1 MB 的上限，已停止接收。"
    assert 0 < max(written) <= limit  # the block that would pass the limit is never written
    assert spooled == [] and not list((tmp_path / "tmp").iterdir())  # nothing went through the temporary folder
    assert files_under(uploads) == [] and task_folders_under(uploads) == []  # and the task folder went too


def _send_part_of(base_url: str, head: bytes, declared: int) -> socket.socket:
    host, port = base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    key = auth_header()["Authorization"]
    sock.sendall(f"POST /api/upload HTTP/1.1\r\nHost: {host}\r\nAuthorization: {key}\r\n"
                 f"Content-Type: {MULTIPART['Content-Type']}\r\nContent-Length: {declared}\r\n\r\n".encode() + head)
    return sock


def _wait_for(check, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_a_client_that_hangs_up_mid_file_leaves_nothing(api_server, env, tmp_path):
    settings = env(DATA_DIR=str(tmp_path / "data"))
    uploads = settings.data_dir / "uploads"
    head = (next(multipart(b"done.md", 0)) + b"# done\n\ntext\r\n"
            + next(multipart(b"first.md", 0)) + b"# first\n\n" + b"0" * 3 * CHUNK)
    sock = _send_part_of(api_server.base_url, head, 10 * 1024 * 1024)
    # the first file is complete and the second one is arriving when the client goes
    assert _wait_for(lambda: len(files_under(uploads)) == 2), files_under(uploads)
    sock.close()
    assert _wait_for(lambda: files_under(uploads) == [] and task_folders_under(uploads) == []), (
        files_under(uploads), task_folders_under(uploads))
    # the server goes on: a whole upload of several files imports, each kept once, as it was sent
    files = [("files", (f"manual-{i}.md", f"# 星海 R{i} 说明书\n\n长按电源键三秒开机。\n".encode(), "text/markdown"))
             for i in range(3)]
    with httpx.Client(base_url=api_server.base_url, headers=auth_header(), timeout=120) as client:
        reply = client.post("/api/upload", files=files)
        assert reply.status_code == 200, reply.text
        assert reply.json()["files"] == ["manual-0.md", "manual-1.md", "manual-2.md"]
        assert [wait_task(client, t)["status"] for t in reply.json()["task_ids"]] == ["completed"] * 3


def test_a_form_that_is_not_the_upload_it_claims_is_refused_with_nothing_kept(api, env, tmp_path):
    settings = env(DATA_DIR=str(tmp_path / "data"))
    file_part = next(multipart(b"ok.md", 0)) + b"# ok\n\ntext\r\n"
    end = b"--" + BOUNDARY + b"--\r\n"
    field = b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="products"\r\n\r\n'
    cases = {
        "文件以外的字段合计超过了 256 KB 的上限": (413, file_part + field + b"x" * (300 * 1024) + b"\r\n" + end),
        "文件应放在 files 字段中上传": (400, file_part.replace(b'name="files"', b'name="attachment"') + end),
        "上传数据无法解析": (400, file_part + b"--" + BOUNDARY + b"\r\nContent-Disposition: form-data\r\n\r\nx\r\n" + end),
    }
    for message, (status, body) in cases.items():
        reply = api.post("/api/upload", content=body, headers=MULTIPART)
        assert reply.status_code == status and message in reply.json()["error"], reply.text
    cut_short = api.post("/api/upload", content=file_part + b"--" + BOUNDARY[:4], headers=MULTIPART)
    assert cut_short.status_code == 400 and "上传数据无法解析" in cut_short.json()["error"], cut_short.text
    assert files_under(settings.data_dir / "uploads") == []


@pytest.mark.parametrize("name, content, reason", [
    ("只有图片.md", "![](a.png)\n\n<img src='b.png'>\n", "没有任何文字内容"),
    ("坏掉的.pdf", "%PDF-1.4 这不是一个真正的 PDF", "PDF"),
])
def test_a_failed_import_leaves_no_staged_files(api, env, tmp_path, name, content, reason):
    settings = env(DATA_DIR=str(tmp_path / "data"))
    reply = api.post("/api/upload", files=[("files", (name, content.encode(), "application/octet-stream"))])
    assert reply.status_code == 200, reply.text
    status = wait_task(api, reply.json()["task_ids"][0])
    assert status["status"] == "failed" and reason in status["error"]
    for folder in ("uploads", "work", "objects"):
        assert files_under(settings.data_dir / folder) == [], folder


def _cli(*paths: str, data_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATA_DIR": str(data_dir)}
    return subprocess.run([sys.executable, "-m", "graphs.importing", *paths, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_long_file_names_import_and_too_long_paths_fail_cleanly(api, env, tmp_path):
    settings = env(DATA_DIR=str(tmp_path / "data"))
    long_md = tmp_path / ("说" * 81 + ".md")  # 246 bytes: fits the disk, not with "_new" and a suffix added
    long_md.write_text("# 长名字的说明书\n\n按住电源键三秒开机。\n", encoding="utf-8")
    too_long = str(tmp_path / ("长" * 100 + ".md"))  # 303 bytes: cannot even exist
    done = _cli(str(long_md), too_long, data_dir=settings.data_dir)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert "Traceback" not in done.stderr and done.returncode == 1
    assert [r["status"] for r in lines] == ["completed", "failed"], lines
    assert "文件名或路径过长" in lines[1]["error"] and lines[1]["failed_node"] == "node_entry"
    written = [p for p in settings.data_dir.rglob("*")]
    assert written and all(len(p.name.encode("utf-8")) <= 255 for p in written)
    # the same through the API, with a 250-character name
    reply = api.post("/api/upload", files=[("files", ("明" * 247 + ".md", "# 明\n\n正文内容。".encode(), "text/markdown"))])
    assert reply.status_code == 200, reply.text
    assert wait_task(api, reply.json()["task_ids"][0])["status"] == "completed"


def test_every_api_error_is_chinese_json(api):
    for name in (b"a\rb.md", b"a\r\nContent-Type: x\r\n.md"):
        body = b"".join(multipart(name, CHUNK))
        reply = api.post("/api/upload", content=body, headers=MULTIPART)
        assert reply.status_code == 400 and "上传数据无法解析" in reply.json()["error"], reply.text
    no_boundary = api.post("/api/upload", content=b"x", headers={"Content-Type": "multipart/form-data"})
    assert no_boundary.status_code == 400 and "boundary" in no_boundary.json()["error"]
    for method, path in (("GET", "/api/nothing-here"), ("POST", "/api/v2/query"), ("PUT", "/api/query")):
        reply = api.request(method, path)
        assert reply.status_code == 404 and reply.json() == {
            "error": f"接口不存在：{method} {path}（接口列表见 /docs）"}
