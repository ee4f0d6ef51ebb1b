"""Web search through the 百炼 MCP server (`bailian_web_search`), via openai-agents' MCP client.

Never raises: the answer says whether search ran ("ok"), was not configured ("skipped") or
failed ("error"), so the query graph can go on without web results.
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, TypedDict

from services.settings import Settings, get_settings

log = logging.getLogger(__name__)

TOOL_NAME = "bailian_web_search"
CONNECT_TIMEOUT_S = 10
OVERALL_TIMEOUT_S = 15.0
# Short retries: a down server must be reported within seconds, not after long backoff.
MAX_RETRY_ATTEMPTS = 3
RETRY_BACKOFF_S = 0.2


class WebPage(TypedDict):
    title: str
    url: str
    snippet: str                 # never empty: a page without one is dropped


@dataclass
class WebSearchResult:
    status: str  # "ok" | "skipped" | "error"
    reason: str = ""
    pages: list[WebPage] = field(default_factory=list)


async def web_search(query: str, count: int = 5, settings: Settings | None = None) -> WebSearchResult:
    settings = settings or get_settings()
    if not settings.web_search_enabled:
        return WebSearchResult("skipped", "未配置联网搜索")
    if not query.strip():
        return WebSearchResult("skipped", "搜索词为空")
    try:
        result = await asyncio.wait_for(_call(settings, query, count), OVERALL_TIMEOUT_S)
    except TimeoutError:
        return WebSearchResult("error", f"联网搜索超时（超过 {OVERALL_TIMEOUT_S:g} 秒）")
    except Exception as exc:  # any failure is reported, never raised
        log.warning("web search failed: %r", exc)
        return WebSearchResult("error", _reason(exc))
    try:
        return WebSearchResult("ok", "", parse_search_result(result))
    except SearchResultError as exc:
        return WebSearchResult("error", str(exc))


async def _call(settings: Settings, query: str, count: int) -> Any:
    # the agents SDK (and the OpenAI client under it) costs a second at every start: loaded when a
    # search is made, which only a configured MCP server does
    from agents.mcp import MCPServerStreamableHttp

    headers = {"Authorization": f"Bearer {settings.mcp_api_key}"} if settings.mcp_api_key else {}
    server = MCPServerStreamableHttp(
        params={"url": settings.mcp_dashscope_base_url, "headers": headers, "timeout": CONNECT_TIMEOUT_S},
        name="bailian-web-search",
        client_session_timeout_seconds=CONNECT_TIMEOUT_S,
        max_retry_attempts=MAX_RETRY_ATTEMPTS,
        retry_backoff_seconds_base=RETRY_BACKOFF_S,
    )
    try:
        await server.connect()
        return await server.call_tool(TOOL_NAME, {"query": query, "count": count})
    finally:
        await server.cleanup()


class SearchResultError(Exception):
    """The tool answered, but with an error or an unreadable payload."""


def parse_search_result(result: Any) -> list[WebPage]:
    """Pages from a CallToolResult: structuredContent {"pages"} / {"result": json}, or JSON text."""
    if getattr(result, "isError", False):
        raise SearchResultError(f"联网搜索返回错误：{_text_of(result) or '未知错误'}")
    structured = getattr(result, "structuredContent", None)
    if isinstance(structured, dict) and "pages" in structured:
        raw = structured["pages"]
    elif isinstance(structured, dict) and "result" in structured:
        raw = _loads(structured["result"])
    else:
        raw = _loads(_text_of(result))
    if isinstance(raw, dict):
        raw = raw.get("pages", [])
    if not isinstance(raw, list):
        raise SearchResultError("联网搜索结果格式无法识别")
    return [_clean(p) for p in raw if isinstance(p, dict) and str(p.get("snippet") or "").strip()]


def _clean(page: dict) -> WebPage:
    return WebPage(title=str(page.get("title") or "").strip(), url=str(page.get("url") or "").strip(),
                   snippet=str(page.get("snippet") or "").strip())


def _loads(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise SearchResultError("联网搜索结果不是合法的 JSON") from exc


def _text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in getattr(result, "content", None) or []).strip()


def _reason(exc: BaseException) -> str:
    # ExceptionGroups from anyio hide the real cause one level down
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    detail = str(exc) or type(exc).__name__
    if "HTTP error 401" in detail or "HTTP error 403" in detail:
        return "联网搜索鉴权失败，请检查 MCP_API_KEY"
    return f"联网搜索服务不可用：{detail}"
