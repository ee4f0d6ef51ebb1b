"""Pictures a document links from the web, fetched once at import so that answers never hot-link them.

Only hosts in REMOTE_IMAGE_HOSTS are asked, and only when every address they resolve to is a public
one (never loopback, private, link-local or reserved: a document must not make the server probe its
own network). The connection goes to the address that was checked, so a second DNS answer cannot
swap it; no redirects, a deadline, a size cap, and the bytes must be a raster image.
"""
from __future__ import annotations

import ipaddress
import socket
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx

from services.settings import Settings

# content type -> (suffix, how the file starts). No SVG: it may itself link out or carry scripts.
RASTER_TYPES = {
    "image/png": (".png", (b"\x89PNG\r\n\x1a\n",)),
    "image/jpeg": (".jpg", (b"\xff\xd8\xff",)),
    "image/gif": (".gif", (b"GIF87a", b"GIF89a")),
    "image/webp": (".webp", (b"RIFF",)),
    "image/bmp": (".bmp", (b"BM",)),
}


class RemoteImageRefused(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def is_remote(src: str) -> bool:
    return src.lower().startswith(("http://", "https://", "//"))


def public_addresses(host: str, port: int) -> list[str]:
    """The host's addresses, all of them public; refused when any is not (or it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise RemoteImageRefused(f"无法解析主机 {host}") from exc
    addresses = list(dict.fromkeys(info[4][0] for info in infos))
    for address in addresses:
        if not ipaddress.ip_address(address.split("%")[0]).is_global:
            raise RemoteImageRefused(f"主机 {host} 指向内网或本机地址 {address}，不抓取")
    return addresses


def fetch_image(src: str, settings: Settings, dest_dir: Path, stem: str) -> Path:
    """Download one remote picture into `dest_dir/{stem}{suffix}`; RemoteImageRefused says why not."""
    url = "https:" + src if src.startswith("//") else src
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise RemoteImageRefused("不是 http(s) 图片地址")
    if host not in settings.remote_image_hosts:
        raise RemoteImageRefused(f"主机 {host} 不在 REMOTE_IMAGE_HOSTS 允许列表中")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    address = public_addresses(host, port)[0]
    netloc = f"[{address}]" if ":" in address else address
    pinned = urlunsplit((parts.scheme, f"{netloc}:{port}", parts.path or "/", parts.query, ""))
    cap = int(settings.remote_image_max_mb * 1024 * 1024)
    try:
        with httpx.Client(timeout=settings.remote_image_timeout_s, follow_redirects=False, trust_env=False) as client:
            with client.stream("GET", pinned, headers={"Host": parts.netloc.rsplit("@", 1)[-1]},
                               extensions={"sni_hostname": host}) as reply:
                if reply.status_code != 200:
                    raise RemoteImageRefused(f"服务器返回 HTTP {reply.status_code}")
                kind = reply.headers.get("content-type", "").split(";")[0].strip().lower()
                if kind not in RASTER_TYPES:
                    raise RemoteImageRefused(f"内容类型 {kind or '未知'} 不是支持的图片格式")
                declared = reply.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > cap:
                    raise RemoteImageRefused(f"图片超过 {settings.remote_image_max_mb:g} MB 上限")
                data = bytearray()
                for chunk in reply.iter_bytes():
                    data.extend(chunk)
                    if len(data) > cap:
                        raise RemoteImageRefused(f"图片超过 {settings.remote_image_max_mb:g} MB 上限")
    except httpx.TimeoutException as exc:
        raise RemoteImageRefused(f"超过 {settings.remote_image_timeout_s:g} 秒没有下载完") from exc
    except httpx.HTTPError as exc:
        raise RemoteImageRefused(f"下载失败：{type(exc).__name__}") from exc
    suffix, magics = RASTER_TYPES[kind]
    if not bytes(data).startswith(magics):
        raise RemoteImageRefused("文件内容与图片类型不符")
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / f"{stem}{suffix}"
    path.write_bytes(bytes(data))
    return path
