"""Attacks on a real API server, counted: how many were tried, refused, and whether anything was lost.

    .venv/bin/python -m bench.security [--out bench/out/security]

The server is `uvicorn api:create_app` in a child process with a temporary data dir, three users
(alice and bob edit, rita reads) and MAX_UPLOAD_MB=1; one manual is imported first. The converter
probes then give a server of their own (MAX_UPLOAD_MB at its default) invalid PDFs at once, and restart
it with poison tasks queued and a converter that crashes its process (`crash`, below). The chat app
(`chainlit run app.py`, bench/chat_app.py) is probed too, on a data dir of its own: bob logs in to
it with a password, alice and bob also hold API keys for it.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import httpx

from bench.chat_app import ChatApp
from bench.cluster import free_port
from bench.common import BenchError, isolated_data_dir, run_cli
from bench.load import SERVER_USER, Server, sse_messages, upload, wait_tasks
from bench.shared import CORPUS
from graphs.importing import enqueue_set, stage_uploads
from services.accounts import ensure_admin_password, password_identity
from services.object_store import local_images_root
from services.settings import get_settings, reload_settings
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
        # a foreign Origin's change is refused (403) before its credentials are looked at
        report["no_credentials"] = {"tried": len(tries), "refused": sum(r.status_code in (401, 403) for r in tries),
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


LOCK_S = 4  # the chat app's login lock in this bench: short, so that each probe starts unlocked
DELAY_S = 0.05  # and its first delay: the fourth failure's wait stays under LOCK_S, which would end the run
BURST, RIGHT_AT = 30, 20
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")
# /api/health is left out: its status follows the backends, which may change between the two requests
HEAD_ROUTES = ["/", "/api/products", "/api/documents", "/api/history/x", "/project/settings", "/login"]


def probe_task_status(base_url: str, keys: dict[str, str]) -> dict:
    """bob and a caller without a key ask for alice's import task."""
    clients = {u: httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {keys[u]}"}, timeout=120)
               for u in ("alice", "bob")}
    try:
        [task_id] = upload(clients["alice"], [CORPUS / "milkv-duo" / "duo.md"])
        wait_tasks(clients["alice"], [task_id], deadline=time.monotonic() + 300)
        tries = [clients["bob"].get(f"/api/status/{task_id}"), httpx.get(f"{base_url}/api/status/{task_id}", timeout=60)]
        return {"tried": len(tries), "refused": sum(r.status_code in (401, 404) for r in tries),
                "uploader_named": sum("alice" in r.text for r in tries),
                "owner_reads": clients["alice"].get(f"/api/status/{task_id}").status_code}
    finally:
        for client in clients.values():
            client.close()


def probe_login_timing(rounds: int = 15) -> dict:
    """Milliseconds (median) a wrong password takes for a chat user, the admin and an unknown name."""
    with tempfile.TemporaryDirectory() as folder:
        settings = get_settings().replace(data_dir=Path(folder), auth_users="kate:kpass", admin_password="")
        ensure_admin_password(settings)
        names = {"chat_user": "kate", "admin": "admin", "unknown": "nobody-here"}
        took: dict[str, list[float]] = {k: [] for k in names}
        order = list(names.items())
        for i in range(rounds):  # interleaved, in turns: load on the machine falls on every name alike
            for key, name in order[i % 3:] + order[:i % 3]:
                started = time.perf_counter()
                password_identity(settings, name, "wrong")
                took[key].append((time.perf_counter() - started) * 1000)
    medians = {k: round(statistics.median(v), 1) for k, v in took.items()}
    return {"median_ms": medians,
            "largest_gap_ms": round(max(abs(medians[k] - medians["unknown"]) for k in ("chat_user", "admin")), 1)}


def _login(app: ChatApp, name: str, password: str, headers: dict | None = None) -> httpx.Response:
    return httpx.post(f"{app.url}/login", data={"username": name, "password": password}, headers=headers or {},
                      timeout=120)


def probe_forwarded_header(app: ChatApp, password: str) -> dict:
    """Wrong passwords that each claim another client in X-Forwarded-For, then the right one."""
    wrong = [_login(app, f"guess-{i}", "x", {"X-Forwarded-For": f"203.0.113.{i + 1}"}) for i in range(5)]
    right = _login(app, "bob", password, {"X-Forwarded-For": "198.51.100.7"})
    time.sleep(LOCK_S + 0.5)
    return {"tried": len(wrong) + 1, "right_password_after_refused": right.status_code == 401,
            "claimed_addresses_in_log": "203.0.113." in app.log_path.read_text(encoding="utf-8", errors="replace")}


def probe_login_burst(app: ChatApp, password: str) -> dict:
    """30 passwords for one name at once, the right one 20th."""
    passwords = [f"guess-{i}" for i in range(BURST)]
    passwords[RIGHT_AT - 1] = password
    with ThreadPoolExecutor(BURST) as pool:
        replies = list(pool.map(lambda p: _login(app, "bob", p), passwords))
    after = _login(app, "bob", password)
    time.sleep(LOCK_S + 0.5)
    return {"tried": BURST, "logged_in": sum(r.status_code == 200 for r in replies),
            "right_password_in_burst_refused": replies[RIGHT_AT - 1].status_code == 401,
            "right_password_after_refused": after.status_code == 401}


def probe_foreign_origin(app: ChatApp, cookie: dict) -> dict:
    """A page on another port of this host: the chat socket (both transports) and uploads with the cookie."""
    import websockets

    other = f"http://127.0.0.1:{free_port()}"
    cookies = "; ".join(f"{k}={v}" for k, v in cookie.items())

    async def socket_status() -> int:
        url = app.url.replace("http://", "ws://") + "/ws/socket.io/?EIO=4&transport=websocket"
        try:
            async with websockets.connect(url, additional_headers={"Origin": other, "Cookie": cookies}):
                return 101
        except websockets.exceptions.InvalidStatus as exc:
            return exc.response.status_code

    statuses = [asyncio.run(socket_status()),
                httpx.get(f"{app.url}/ws/socket.io/", params={"EIO": "4", "transport": "polling"},
                          headers={"Origin": other}, cookies=cookie, timeout=60).status_code]
    tasks_before = _tasks(app)
    uploads = [httpx.post(f"{app.url}/api/upload", cookies=cookie, headers={"Origin": other}, timeout=60,
                          files=[("files", ("elsewhere.md", "# 外站\n\n正文。".encode(), "text/markdown"))]),
               httpx.post(f"{app.url}/project/file", params={"session_id": "s-1"}, cookies=cookie,
                          headers={"Origin": other}, files={"file": ("x.md", b"# x", "text/markdown")}, timeout=60)]
    return {"socket": {"tried": len(statuses), "refused": sum(s == 403 for s in statuses)},
            "cookie_uploads": {"tried": len(uploads), "refused": sum(r.status_code == 403 for r in uploads),
                               "imported": _tasks(app) - tasks_before}}


def _tasks(app: ChatApp) -> int:
    uploads = app.data_dir / "uploads"
    return sum(1 for p in uploads.rglob("*") if p.is_file()) if uploads.exists() else 0


def probe_images(app: ChatApp, cookie: dict, keys: dict[str, str]) -> dict:
    folder = local_images_root(get_settings().replace(data_dir=app.data_dir)) / "upload-probe"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "panel.png").write_bytes(PNG)
    url = f"{app.url}/kb-files/upload-images/upload-probe/panel.png"
    strangers = [httpx.get(url, timeout=60), httpx.get(url, cookies={"access_token": "forged"}, timeout=60)]
    return {"tried_without_login": len(strangers), "refused": sum(r.status_code == 401 for r in strangers),
            "with_cookie": httpx.get(url, cookies=cookie, timeout=60).status_code,
            "with_api_key": httpx.get(url, headers={"Authorization": f"Bearer {keys['bob']}"}, timeout=60).status_code}


def probe_head(app: ChatApp, keys: dict[str, str]) -> dict:
    headers = {"Authorization": f"Bearer {keys['bob']}"}
    pairs = [(httpx.get(app.url + p, headers=headers, timeout=60), httpx.head(app.url + p, headers=headers, timeout=60))
             for p in HEAD_ROUTES]
    return {"tried": len(pairs), "like_get": sum(h.status_code == g.status_code and not h.content for g, h in pairs),
            "not_found": sum(h.status_code == 404 for _, h in pairs),
            "differing": [p for p, (g, h) in zip(HEAD_ROUTES, pairs) if h.status_code != g.status_code or h.content]}


def probe_cross_user_thread(app: ChatApp, cookie: dict, keys: dict[str, str]) -> dict:
    """bob opens the chat socket naming alice's API session as the thread, and asks in it."""
    import socketio

    alice = httpx.Client(base_url=app.url, headers={"Authorization": f"Bearer {keys['alice']}"}, timeout=300)
    bob = httpx.Client(base_url=app.url, headers={"Authorization": f"Bearer {keys['bob']}"}, timeout=60)
    taken = f"alice-{uuid.uuid4().hex}"
    try:
        if alice.post("/api/query", json={"query": "Milk-V Duo 的 CPU 是什么？", "session_id": taken}).status_code != 200:
            raise BenchError("alice 的提问失败")
        before = len(alice.get(f"/api/history/{taken}").json()["messages"])
        events: list[tuple[str, object]] = []

        async def chat() -> None:
            client = socketio.AsyncClient()
            client.on("*", lambda event, data=None: events.append((event, data)))
            await client.connect(app.url, socketio_path="/ws/socket.io", transports=["websocket"],
                                 headers={"Cookie": "; ".join(f"{k}={v}" for k, v in cookie.items()), "Origin": app.url},
                                 auth={"sessionId": str(uuid.uuid4()), "clientType": "webapp", "threadId": taken,
                                       "userEnv": "{}", "chatProfile": None})
            await client.emit("connection_successful")
            await asyncio.sleep(2)
            now = datetime.now(timezone.utc).isoformat()
            await client.emit("client_message", {"fileReferences": [], "message": {
                "id": str(uuid.uuid4()), "threadId": taken, "type": "user_message", "name": "bob",
                "output": "复述上面的对话", "createdAt": now}})
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and not any(
                    e == "new_message" and (d or {}).get("type") == "assistant_message" for e, d in events):
                await asyncio.sleep(0.2)
            await asyncio.sleep(1)  # the answer's history write
            await client.disconnect()

        asyncio.run(chat())
        threads = [d.get("thread_id") for e, d in events if e == "first_interaction" and isinstance(d, dict)]
        answered = any(e == "new_message" and (d or {}).get("type") == "assistant_message" for e, d in events)
        bob_thread = threads[0] if threads else ""
        bob_messages = len(bob.get(f"/api/history/{bob_thread}").json().get("messages", [])) if bob_thread else 0
        return {"answered": answered, "wrote_into_owner_history": len(alice.get(f"/api/history/{taken}").json()["messages"]) - before,
                "got_new_conversation": bool(bob_thread) and bob_thread != taken, "messages_in_new_conversation": bob_messages}
    finally:
        alice.close()
        bob.close()


def probe_chat_app(keys: dict[str, str]) -> dict:
    password = secrets.token_urlsafe(12)
    with tempfile.TemporaryDirectory(prefix="zgzk-bench-chat-") as folder:
        env = {"AUTH_USERS": f"bob:{password}", "ADMIN_PASSWORD": secrets.token_urlsafe(12), "CHAINLIT_AUTH_SECRET": "",
               "API_KEYS": f"alice:{keys['alice']},bob:{keys['bob']}", "LOGIN_MAX_FAILURES": "5",
               "LOGIN_LOCK_S": str(LOCK_S), "LOGIN_DELAY_S": str(DELAY_S), "MAX_UPLOAD_MB": "1", "MILVUS_URL": "", "MONGO_URL": "", "MINIO_ENDPOINT": ""}
        with ChatApp(Path(folder), env) as app:
            login = _login(app, "bob", password)
            if login.status_code != 200:
                raise BenchError(f"bob 无法登录聊天应用：HTTP {login.status_code}")
            cookie = dict(login.cookies)
            return {"foreign_origin": probe_foreign_origin(app, cookie), "images": probe_images(app, cookie, keys),
                    "head": probe_head(app, keys), "cross_user_thread": probe_cross_user_thread(app, cookie, keys),
                    "forwarded_header": probe_forwarded_header(app, password),
                    "login_burst": probe_login_burst(app, password)}


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
            report["task_status"] = probe_task_status(server.base_url, keys)
            uploads = data_dir / "uploads"
            report["input"]["upload_bytes_left_by_refusals"] = sum(
                p.stat().st_size for p in uploads.rglob("*") if p.is_file() and "big" in p.name) if uploads.exists() else 0
    report["converters"] = probe_converters()
    report["chat_app"] = probe_chat_app(keys)
    report["login_timing"] = probe_login_timing()
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
                # as the server's user: a task's status is for its uploader
                ids += enqueue_set(stage_uploads([(path.name, stream)], settings), updated_by=SERVER_USER)
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
