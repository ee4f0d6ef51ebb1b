"""ASGI middleware around the whole app (the chat and the API).

Same origin only: a page of another origin may not open the chat socket, nor change anything
with the login cookie the browser attaches for it (a page on another port of this host is such a
page: cookies do not tell ports apart, origins do).

Requests that carry `Authorization` (API keys) are not the browser's doing and pass; so do reads
(GET / HEAD / OPTIONS) outside the socket, and requests without an `Origin` (not from a browser page:
browsers send one with every socket and every POST, PUT, PATCH and DELETE).

HEAD answers like GET without a body: FastAPI routes take only the methods they name.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.settings import get_settings

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SOCKET_PATH = "/ws/socket.io"
REFUSED = "已拒绝来自其他网站（{origin}）的请求：请在本站页面中操作；需要跨站调用时，请把该来源加入 CORS_ORIGINS，或改用 API 密钥"


def _netloc(origin: str) -> str:
    """host[:port] of an origin, lower-case; the scheme is left out on purpose: behind a proxy that
    ends TLS the app sees http while the browser says https, and one host:port serves one scheme."""
    try:
        return urlsplit(origin).netloc.lower()
    except ValueError:
        return ""


def foreign_origin(scope: Scope) -> str:
    """The request's Origin when it is neither this app's own (its Host) nor one of CORS_ORIGINS;
    "" when the request may go on."""
    headers = Headers(scope=scope)
    origin = headers.get("origin")
    if origin is None:
        return ""
    own = headers.get("host", "").lower()
    allowed = {_netloc(o) for o in get_settings().cors_origins}
    netloc = _netloc(origin)
    return "" if netloc and (netloc == own or netloc in allowed) else origin


class SameOrigin:
    """ASGI middleware: refuses (403) a foreign origin's socket, and its state changes without an API key."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not self._guarded(scope):
            return await self.app(scope, receive, send)
        origin = foreign_origin(scope)
        if not origin:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":  # closing before accepting answers the handshake with 403
            await receive()
            await send({"type": "websocket.close", "code": 1008})
            return
        await JSONResponse({"error": REFUSED.format(origin=origin[:200])}, status_code=403)(scope, receive, send)

    @staticmethod
    def _guarded(scope: Scope) -> bool:
        if scope["type"] == "websocket" or SOCKET_PATH in scope.get("path", ""):
            return True
        return scope["method"] not in SAFE_METHODS and "authorization" not in Headers(scope=scope)


class HeadAsGet:
    """ASGI middleware: a HEAD request runs as GET; its status and headers go out, its body does not."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)
        ended = False

        async def headers_only(message: Message) -> None:
            nonlocal ended
            if message["type"] != "http.response.body":
                return await send(message)
            if not ended:  # one empty, final body; a streamed reply's later parts are dropped
                ended = True
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        await self.app({**scope, "method": "GET"}, receive, headers_only)
