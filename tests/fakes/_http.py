"""Shared plumbing for the stdlib HTTP fakes: a threaded server on a free 127.0.0.1 port."""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real API servers

    def log_message(self, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def send_json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode()
        self.send_bytes(status, data, "application/json")

    def send_bytes(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ThreadedServer:
    """start() serves `handler_class` in a daemon thread; also a context manager."""

    def _handler_class(self) -> type[QuietHandler]:
        raise NotImplementedError

    def _on_started(self, port: int) -> str:
        raise NotImplementedError

    def start(self) -> str:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name=type(self).__name__, daemon=True).start()
        return self._on_started(self._httpd.server_address[1])

    def stop(self) -> None:
        httpd = getattr(self, "_httpd", None)
        if httpd:
            httpd.shutdown()
            httpd.server_close()
            self._httpd = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class UvicornThread:
    """An ASGI app served by uvicorn in a daemon thread on a free 127.0.0.1 port."""

    def __init__(self, app: Any, name: str):
        self.app, self.name = app, name
        self._server = None
        self._thread: threading.Thread | None = None

    def start(self) -> int:
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name=self.name,
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{self.name} did not start")
            time.sleep(0.02)
        return sock.getsockname()[1]

    def stop(self) -> None:
        if self._server:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = None
