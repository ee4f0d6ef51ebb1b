"""A stranger's web site serving pictures (and traps) over real HTTP, counting every request.

    with FakeImageSite() as site:
        site.url("/track.png")   # -> http://127.0.0.1:PORT/track.png
        site.requests            # [(method, path, Host header), ...]
"""
from __future__ import annotations

import struct
import time
import zlib

from fakes._http import QuietHandler, ThreadedServer


def tiny_png(width: int = 2, height: int = 2) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


class FakeImageSite(ThreadedServer):
    """/*.png a real PNG; /big.png 64 KB; /page.png HTML; /fake.png text called PNG; /moved.png a
    redirect; /slow.png answers after 3 s."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str]] = []
        self.base_url = ""

    def url(self, path: str) -> str:
        return self.base_url + path

    def _on_started(self, port: int) -> str:
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    def _handler_class(self) -> type[QuietHandler]:
        site = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                site.requests.append(("GET", self.path, self.headers.get("Host", "")))
                if self.path == "/big.png":
                    self.send_bytes(200, tiny_png() + b"\x00" * 65536, "image/png")
                elif self.path == "/page.png":
                    self.send_bytes(200, b"<html>not a picture</html>", "text/html")
                elif self.path == "/fake.png":
                    self.send_bytes(200, b"GIF? no, plain text", "image/png")
                elif self.path == "/moved.png":
                    self.send_response(302)
                    self.send_header("Location", "/track.png")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/slow.png":
                    time.sleep(3)
                    self.send_bytes(200, tiny_png(), "image/png")
                else:
                    self.send_bytes(200, tiny_png(), "image/png")

        return Handler
