"""A fake 百炼 web-search MCP server: real FastMCP over streamable HTTP on 127.0.0.1.

    with FakeWebSearchMCP(api_key="k", pages={"SKR": [{"title": ..., "url": ..., "snippet": ...}]}) as mcp:
        settings = settings.replace(mcp_dashscope_base_url=mcp.url, mcp_api_key="k")
"""
from __future__ import annotations

from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from fakes._http import UvicornThread


class Page(TypedDict):
    title: str
    url: str
    snippet: str


class SearchResult(TypedDict):
    pages: list[Page]


class _BearerAuth:
    """ASGI wrapper: 401 unless the request carries `Authorization: Bearer <key>`."""

    def __init__(self, app: Any, key: str):
        self.app, self.expected = app, f"Bearer {key}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"error":"invalid api key"}'})
            return
        await self.app(scope, receive, send)


class FakeWebSearchMCP:
    """Tool `bailian_web_search(query, count=5)` answering from a dict: query substring -> pages."""

    def __init__(self, pages: dict[str, list[dict]] | None = None, api_key: str | None = None):
        self.api_key = api_key
        self.calls: list[dict] = []  # arguments of every tool call
        self._pages: dict[str, list[dict]] = dict(pages or {})
        self._error: str | None = None
        self._server: UvicornThread | None = None
        self.url = ""

    def set_pages(self, pages: dict[str, list[dict]]) -> None:
        self._pages = dict(pages)

    def set_error(self, message: str | None) -> None:
        """Make the tool fail (the client gets a result with isError=True); None to heal."""
        self._error = message

    def _search(self, query: str, count: int = 5) -> SearchResult:
        self.calls.append({"query": query, "count": count})
        if self._error:
            raise ToolError(self._error)
        hits = next((p for key, p in self._pages.items() if key in query), [])
        return {"pages": [Page(title=p.get("title", ""), url=p.get("url", ""), snippet=p.get("snippet", ""))
                          for p in hits[:count]]}

    def start(self) -> str:
        mcp = FastMCP("fake-bailian-web-search", stateless_http=True, json_response=True)
        mcp.add_tool(self._search, name="bailian_web_search", description="联网搜索（测试替身）")
        app: Any = mcp.streamable_http_app()
        if self.api_key:
            app = _BearerAuth(app, self.api_key)
        self._server = UvicornThread(app, "fake-mcp")
        self.url = f"http://127.0.0.1:{self._server.start()}/mcp"
        return self.url

    def stop(self) -> None:
        if self._server:
            self._server.stop()
            self._server = None

    def __enter__(self) -> "FakeWebSearchMCP":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
