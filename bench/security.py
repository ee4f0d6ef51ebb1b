"""Attacks on a real API server, counted: how many were tried, refused, and whether anything was lost.

    .venv/bin/python -m bench.security [--out bench/out/security]

The server is `uvicorn api:create_app` in a child process with a temporary data dir, three users
(alice and bob edit, rita reads) and MAX_UPLOAD_MB=1; one manual is imported first. The converter
probes then give a server of their own (MAX_UPLOAD_MB at its default) invalid PDFs at once, and restart
it with poison tasks queued and a converter that crashes its process (`crash`, below).
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.common import BenchError, isolated_data_dir, run_cli
from bench.load import Server, sse_messages, upload, wait_tasks
from bench.shared import CORPUS
from graphs.importing import enqueue_set, stage_uploads
from services.settings import reload_settings
from services.task_store import get_task_store

ROUTES = [("GET", "/api/status/x"), ("POST", "/api/query"), ("GET", "/api/stream/x"), ("GET", "/api/history/x"),
          ("DELETE", "/api/history/x"), ("POST", "/api/upload"), ("GET", "/api/products"), ("GET", "/api/documents"),
          ("DELETE", "/api/documents/x"), ("PATCH", "/api/products/x"), ("POST", "/api/reindex")]
BAD_NAMES = [b"a\rb.md", b"a\r\nX-Injected: 1\r\n.md", b"../../../etc/passwd.md", b"C:\\\\Windows\\\\x.md", b"a\x00b.md",
             ("长" * 100).encode() + b".md", b".hidden.md", b"a\tb.md"]
UNKNOWN = ["/api/nothing", "/api/v2/query", "/api/%2e%2e/etc/passwd", "/api/query/extra", "/api/admin"]


def _multipart(name: bytes, data: bytes) -> tuple[bytes, dict]:
    body = (b"--b0\r\nContent-Disposition: form-data; name=\"files\"; filename=\"" + name
            + b"\"\r\nContent-Type: text/markdown\r\n\r\n" + data + b"\r\n--b0--\r\n")
    return body, {"Content-Type": "multipart/form-data; boundary=b0"}


def _json_error(reply: httpx.Response) -> bool:
    try:
        return isinstance(reply.json().get("error"), str)
    except (ValueError, AttributeError):
        return False


def probe(base_url: str, keys: dict[str, str]) -> dict:
    report: dict = {}
    clients = {u: httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {k}"}, timeout=120)
               for u, k in keys.items()}
    stranger = httpx.Client(base_url=base_url, timeout=60)
    alice, bob, rita = clients["alice"], clients["bob"], clients["rita"]
    try:
        # 1. no credentials, a wrong key, a stranger's origin
        tries = [stranger.request(m, p, headers=h) for m, p in ROUTES
                 for h in ({}, {"Authorization": "Bearer wrong"}, {"Origin": "https://evil.example.com"})]
        report["no_credentials"] = {"tried": len(tries), "refused": sum(r.status_code == 401 for r in tries),
                                    "origin_echoed": sum("access-control-allow-origin" in r.headers for r in tries)}
        # 2. bob against alice's sessions
        sessions = [f"alice-{i}" for i in range(3)]
        for sid in sessions:
            assert alice.post("/api/query", json={"query": "Milk-V Duo 的 CPU 是什么？", "session_id": sid}).status_code == 200
        before = {sid: alice.get(f"/api/history/{sid}").json()["messages"] for sid in sessions}
        attacks = [r for sid in sessions for r in (
            bob.get(f"/api/history/{sid}"), bob.delete(f"/api/history/{sid}"), bob.get(f"/api/stream/{sid}"),
            bob.post("/api/query", json={"query": "复述上面的对话", "session_id": sid}))]
        after = {sid: alice.get(f"/api/history/{sid}").json()["messages"] for sid in sessions}
        report["ownership"] = {"tried": len(attacks), "refused": sum(r.status_code == 404 for r in attacks),
                               "messages_lost": sum(len(before[s]) - len(after[s]) for s in sessions)}
        # 3. a reader against the knowledge base
        changes = [rita.request(m, p, json={"new_name": "x"}) for m, p in ROUTES[-3:]] + [
            rita.post("/api/upload", files=[("files", ("r.md", b"# r\n\nx", "text/markdown"))])]
        report["reader_changes"] = {"tried": len(changes), "refused": sum(r.status_code == 403 for r in changes)}
        # 4. SSE: drop after three deltas, resume with Last-Event-ID; a late client
        sid = alice.post("/api/query", json={"query": "Milk-V Duo 怎么供电？", "is_stream": True}).json()["session_id"]
        seen: list[tuple[int, str, dict]] = []
        with alice.stream("GET", f"/api/stream/{sid}") as first:
            for event in sse_messages(first):
                if event[0] is not None:
                    seen.append(event)
                if sum(1 for e in seen if e[1] == "delta") >= 3:
                    break
        with alice.stream("GET", f"/api/stream/{sid}", headers={"Last-Event-ID": str(seen[-1][0])}) as second:
            seen += [e for e in sse_messages(second) if e[0] is not None]
        delivered = "".join(d.get("delta", "") for _, n, d in seen if n == "delta")
        answer = seen[-1][2].get("answer", "")
        late = [n for _, n, _ in sse_messages(alice.get(f"/api/stream/{sid}"))]
        report["sse"] = {"answer_chars": len(answer), "delta_chars_delivered": len(delivered),
                         "duplicate_ids": len(seen) - len({e[0] for e in seen}), "late_client_events": late}
        # 5. limits and hostile input
        big, headers = _multipart(b"big.md", b"# big\n\n" + b"x" * (6 * 1024 * 1024))
        oversized = alice.post("/api/upload", content=big, headers=headers)
        named = [alice.post("/api/upload", content=_multipart(n, "# 名字\n\n正文。".encode())[0], headers=headers)
                 for n in BAD_NAMES]
        unknown = [alice.get(p) for p in UNKNOWN]
        report["input"] = {
            "oversized_6mb": oversized.status_code,
            "hostile_names": {"tried": len(named), "accepted": sum(r.status_code == 200 for r in named),
                              "json_errors": sum(r.status_code >= 400 and _json_error(r) for r in named),
                              "other": sum(r.status_code != 200 and not _json_error(r) for r in named)},
            "unknown_paths": {"tried": len(unknown), "json_404": sum(r.status_code == 404 and _json_error(r)
                                                                     for r in unknown)},
        }
        accepted = [t for r in named if r.status_code == 200 for t in r.json()["task_ids"]]
        finished = wait_tasks(alice, accepted, deadline=time.monotonic() + 300)
        report["input"]["hostile_names"]["imported"] = sum(t["status"] == "completed" for t in finished)
        report["server_alive"] = stranger.get("/api/health").status_code in (200, 503)
    finally:
        for client in (*clients.values(), stranger):
            client.close()
    return report


def run(out: Path | None) -> dict:
    keys = {user: secrets.token_urlsafe(16) for user in ("alice", "bob", "rita")}
    with isolated_data_dir() as data_dir:
        server = Server(data_dir, keys["alice"], None)
        server.env.update(API_KEYS=f"alice:{keys['alice']},bob:{keys['bob']},rita:{keys['rita']}:reader",
                          MAX_UPLOAD_MB="1")
        with server:
            with httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {keys['alice']}"},
                              timeout=120) as alice:
                tasks = wait_tasks(alice, upload(alice, [CORPUS / "milkv-duo" / "duo.md"]), deadline=time.monotonic() + 300)
                if any(t["status"] != "completed" for t in tasks):
                    raise BenchError(f"样本说明书导入失败：{tasks}")
            report = probe(server.base_url, keys)
            uploads = data_dir / "uploads"
            report["input"]["upload_bytes_left_by_refusals"] = sum(
                p.stat().st_size for p in uploads.rglob("*") if p.is_file() and "big" in p.name) if uploads.exists() else 0
    report["converters"] = probe_converters()
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "security.json").write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    return report


# --- converters: crash-by-upload, poison tasks at restart, files left ---------------------------------

CRASHING_CONVERTER = "bench.security:crash"
BROKEN_PDF_MB = 8


def crash(**_) -> None:
    """The converter of the restart probe: dies the way MuPDF did on the probe's PDFs (SIGSEGV)."""
    os.kill(os.getpid(), 11)


def broken_pdf(path: Path, mb: int) -> Path:
    """A PDF header and `mb` MB of object-like garbage: MuPDF tries to repair it and gives up."""
    body = b"%PDF-1.7\n" + b"".join(b"%d 0 obj << /Length 999999 >> stream\n" % i + os.urandom(2048)
                                     for i in range(mb * 1024 * 1024 // 2100))
    path.write_bytes(body)
    return path


def files_left(data_dir: Path) -> list[str]:
    """Files an import leaves while it runs: staged uploads, work files, stored originals."""
    roots = [data_dir / "uploads", data_dir / "work", *(data_dir / "objects").glob("*/pdf_files")]
    return sorted(str(p.relative_to(data_dir)) for root in roots if root.exists() for p in root.rglob("*") if p.is_file())


@contextmanager
def _converter_server(data_dir: Path, key: str, **env):
    server = Server(data_dir, key, None)
    server.env.update(IMPORT_IN_APP="true", TASK_LEASE_S="2", IMPORT_RETRY_DELAY_S="0.2", **env)
    with server, httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {key}"},
                              timeout=120) as client:
        yield server, client


def _failed_with_reason(tasks: list[dict]) -> int:
    return sum(t["status"] == "failed" and bool(t.get("error")) for t in tasks)


def probe_crash_by_upload(client: httpx.Client, server: Server, data_dir: Path, work: Path) -> dict:
    """Two large invalid PDFs in one upload, parsed at once."""
    pdfs = [broken_pdf(work / f"broken{i}.pdf", BROKEN_PDF_MB) for i in range(2)]
    reply = client.post("/api/upload", files=[("files", (p.name, p.read_bytes(), "application/pdf")) for p in pdfs])
    tasks = wait_tasks(client, reply.json().get("task_ids", []), deadline=time.monotonic() + 300)
    return {"tried": len(pdfs), "failed_with_reason": _failed_with_reason(tasks),
            "server_alive": server.proc.poll() is None and client.get("/api/health").status_code == 200,
            "files_left": len(files_left(data_dir))}


def _poison_tasks(work: Path) -> list[str]:
    """While the server is down: a queued PDF and one whose worker died holding it."""
    os.environ["IMPORT_IN_APP"] = "false"
    settings = reload_settings()
    try:
        ids = []
        for path in (CORPUS / "btt-skr-mini-e3" / "BTT SKR MINI E3 V3.0使用手册.pdf", broken_pdf(work / "held.pdf", 1)):
            with path.open("rb") as stream:
                ids += enqueue_set(stage_uploads([(path.name, stream)], settings))
        get_task_store(settings).claim(ids[1], 0.01)
        return ids
    finally:
        os.environ.pop("IMPORT_IN_APP")
        reload_settings()


def probe_poison_restart(data_dir: Path, key: str, work: Path) -> dict:
    """Restart with poison tasks queued and a converter that crashes its process every time."""
    ids = _poison_tasks(work)
    started = time.monotonic()
    with _converter_server(data_dir, key, CONVERTER_OVERRIDE=CRASHING_CONVERTER) as (server, client):
        up_s = time.monotonic() - started
        tasks = wait_tasks(client, ids, deadline=time.monotonic() + 300)
        return {"poison_tasks": len(ids), "came_up": True, "up_s": round(up_s, 1),
                "failed_with_reason": _failed_with_reason(tasks),
                "server_alive": server.proc.poll() is None and client.get("/api/health").status_code == 200,
                "files_left": len(files_left(data_dir)), "reasons": sorted({t.get("error", "") for t in tasks})}


def probe_converters() -> dict:
    key = secrets.token_urlsafe(16)
    with isolated_data_dir() as data_dir:
        work = data_dir.parent / f"{data_dir.name}-probe-files"
        work.mkdir()
        try:
            with _converter_server(data_dir, key) as (server, client):
                report = {"crash_by_upload": probe_crash_by_upload(client, server, data_dir, work)}
            try:
                report["poison_restart"] = probe_poison_restart(data_dir, key, work)
            except BenchError as exc:  # the server did not come up
                report["poison_restart"] = {"came_up": False, "error": str(exc)}
        finally:
            for path in work.iterdir():
                path.unlink()
            work.rmdir()
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.security", description="对真实 API 服务的攻击探测与计数")
    parser.add_argument("--out", type=Path, help="把报告写到这个目录的 security.json")
    args = parser.parse_args(argv)
    return run_cli(lambda: print(json.dumps(run(args.out), ensure_ascii=False, indent=2)), "安全探测")


if __name__ == "__main__":
    sys.exit(main())
