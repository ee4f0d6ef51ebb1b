"""Attacks on the running chat app (`chainlit run app.py` on 127.0.0.1, real sockets and HTTP):
a page of another origin can neither open the chat socket nor upload with the login cookie, an
X-Forwarded-For header from loopback names no other client, pictures need a login, HEAD answers.
"""
from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import websockets
from websockets.exceptions import InvalidStatus

from app_fixtures import ADMIN_PASSWORD, RunningApp, free_port, app_server
from conftest import auth_header
from services.object_store import local_images_root
from services.settings import Settings

LOCK_S = 3
ALLOWED = "https://partner.example.com"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> RunningApp:
    with app_server(tmp_path_factory.mktemp("secure-app"), LOGIN_MAX_FAILURES="3", LOGIN_LOCK_S=str(LOCK_S),
                   LOGIN_DELAY_S="0", CORS_ORIGINS=ALLOWED) as running:
        yield running


@pytest.fixture(scope="module")
def cookie(app) -> dict[str, str]:
    """The admin's login cookie, from a real login."""
    reply = httpx.post(f"{app.url}/login", data={"username": "admin", "password": ADMIN_PASSWORD}, timeout=30)
    assert reply.status_code == 200, reply.text
    return dict(reply.cookies)


def foreign(app: RunningApp) -> str:
    """A page on another port of the same host: same site, another origin."""
    return f"http://127.0.0.1:{free_port()}"


def _upload(app: RunningApp, name: str, **kwargs) -> httpx.Response:
    return httpx.post(f"{app.url}/api/upload", files=[("files", (name, f"# {name}\n\n正文。".encode(), "text/markdown"))],
                      timeout=60, **kwargs)


def _staged(app: RunningApp) -> list[str]:
    uploads = app.data_dir / "uploads"
    return sorted(p.name for p in uploads.rglob("*.md")) if uploads.exists() else []


async def test_a_foreign_origin_cannot_open_the_chat_socket(app, cookie):
    url = app.url.replace("http://", "ws://") + "/ws/socket.io/?EIO=4&transport=websocket"
    cookies = "; ".join(f"{k}={v}" for k, v in cookie.items())
    with pytest.raises(InvalidStatus) as refused:
        async with websockets.connect(url, additional_headers={"Origin": foreign(app), "Cookie": cookies}):
            pass
    assert refused.value.response.status_code == 403
    polling = httpx.get(f"{app.url}/ws/socket.io/", params={"EIO": "4", "transport": "polling"},
                        headers={"Origin": foreign(app)}, cookies=cookie, timeout=30)
    assert polling.status_code == 403 and "其他网站" in polling.json()["error"]
    async with websockets.connect(url, additional_headers={"Origin": app.url, "Cookie": cookies}) as socket:
        opened = await asyncio.wait_for(socket.recv(), 10)  # the Engine.IO "open" packet
        assert opened.startswith("0{") and '"sid"' in opened


def test_a_foreign_origin_cannot_upload_with_the_login_cookie(app, cookie):
    before = _staged(app)
    other = foreign(app)
    refused = _upload(app, "from-elsewhere.md", cookies=cookie, headers={"Origin": other})
    assert refused.status_code == 403 and other in refused.json()["error"], refused.text
    chat_upload = httpx.post(f"{app.url}/project/file", params={"session_id": "s-1"}, cookies=cookie,
                             headers={"Origin": other}, files={"file": ("x.md", b"# x", "text/markdown")}, timeout=30)
    assert chat_upload.status_code == 403
    logout = httpx.post(f"{app.url}/logout", cookies=cookie, headers={"Origin": "null"}, timeout=30)
    assert logout.status_code == 403  # a sandboxed page's "null" is no origin of ours either
    assert _staged(app) == before  # nothing was received
    # this app's own page, a listed origin, and an API key from anywhere are served
    assert _upload(app, "same-origin.md", cookies=cookie, headers={"Origin": app.url}).status_code == 200
    assert _upload(app, "partner.md", cookies=cookie, headers={"Origin": ALLOWED}).status_code == 200
    assert _upload(app, "with-key.md", headers={**auth_header("alice"), "Origin": other}).status_code == 200
    assert _staged(app) == sorted(before + ["partner.md", "same-origin.md", "with-key.md"])


def test_document_pictures_need_a_login_and_head_answers_like_get(app, cookie):
    folder = local_images_root(Settings(data_dir=app.data_dir)) / "upload-a1b2"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "panel.png").write_bytes(PNG)
    url = f"{app.url}/kb-files/upload-images/upload-a1b2/panel.png"
    stranger = httpx.get(url, timeout=30)
    assert stranger.status_code == 401 and PNG not in stranger.content
    assert httpx.get(url, cookies={"access_token": "forged"}, timeout=30).status_code == 401
    signed_in = httpx.get(url, cookies=cookie, timeout=30)
    assert signed_in.status_code == 200 and signed_in.content == PNG
    assert httpx.get(url, headers=auth_header("rita"), timeout=30).content == PNG  # an API key, a reader
    head = httpx.head(url, cookies=cookie, timeout=30)
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(len(PNG))
    for path, headers in (("/", {}), ("/api/products", auth_header("alice")), ("/project/settings", {})):
        get, head = httpx.get(app.url + path, headers=headers, timeout=60), httpx.head(app.url + path, headers=headers, timeout=60)
        assert head.status_code == get.status_code, (path, head.status_code, get.status_code)
        assert head.content == b"" and head.headers["content-type"] == get.headers["content-type"]
    health = httpx.head(f"{app.url}/api/health", timeout=60)  # 200 or 503 as the backends are, never 404
    assert health.status_code in (200, 503) and health.content == b""
    assert httpx.head(f"{app.url}/api/history/x", timeout=30).status_code == 401  # as GET: a login first


def test_x_forwarded_for_from_loopback_names_no_other_client(app):
    # every guess claims another client address; the app counts them all against 127.0.0.1
    for i in range(3):
        reply = httpx.post(f"{app.url}/login", data={"username": f"guess-{i}", "password": "x"},
                           headers={"X-Forwarded-For": f"203.0.113.{i + 1}"}, timeout=30)
        assert reply.status_code == 401
    locked = httpx.post(f"{app.url}/login", data={"username": "admin", "password": ADMIN_PASSWORD},
                        headers={"X-Forwarded-For": "198.51.100.7"}, timeout=30)
    assert locked.status_code == 401  # the address is locked: the right password does not help
    log = app.log_path.read_text(encoding="utf-8", errors="replace")
    assert "from 127.0.0.1" in log and "203.0.113." not in log
    time.sleep(LOCK_S + 0.5)
    assert httpx.post(f"{app.url}/login", data={"username": "admin", "password": ADMIN_PASSWORD},
                      timeout=30).status_code == 200  # the lock ends
