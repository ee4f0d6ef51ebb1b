"""web_search against a real FastMCP server on 127.0.0.1."""
import socket
import time
from pathlib import Path

import pytest
from mcp.types import CallToolResult, TextContent

from fakes.mcp_server import FakeWebSearchMCP
from services.settings import Settings
from services.web_search import SearchResultError, WebSearchResult, parse_search_result, web_search

PAGES = {"SKR": [
    {"title": " SKR MINI E3 V3 ", "url": "https://example.com/skr", "snippet": "  STM32G0B1 主控 "},
    {"title": "空摘要", "url": "https://example.com/empty", "snippet": "   "},
]}


@pytest.fixture
def mcp_server():
    with FakeWebSearchMCP(PAGES, api_key="key-1") as server:
        yield server


def _settings(url: str, key: str = "key-1") -> Settings:
    return Settings(data_dir=Path("/nonexistent"), mcp_dashscope_base_url=url, mcp_api_key=key)


@pytest.mark.asyncio
async def test_ok_filters_empty_snippets(mcp_server):
    result = await web_search("SKR MINI E3 主控", count=3, settings=_settings(mcp_server.url))
    assert result == WebSearchResult("ok", "", [
        {"title": "SKR MINI E3 V3", "url": "https://example.com/skr", "snippet": "STM32G0B1 主控"}])
    assert mcp_server.calls == [{"query": "SKR MINI E3 主控", "count": 3}]


@pytest.mark.asyncio
async def test_no_hits_is_ok_and_empty(mcp_server):
    assert await web_search("无关问题", settings=_settings(mcp_server.url)) == WebSearchResult("ok", "", [])


@pytest.mark.asyncio
async def test_skipped_when_not_configured():
    result = await web_search("SKR", settings=_settings(""))
    assert (result.status, result.reason) == ("skipped", "未配置联网搜索")


@pytest.mark.asyncio
async def test_wrong_key_is_an_auth_error(mcp_server):
    result = await web_search("SKR", settings=_settings(mcp_server.url, key="wrong"))
    assert result.status == "error" and "鉴权" in result.reason


@pytest.mark.asyncio
async def test_server_down_reports_error_fast():
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    result = await web_search("SKR", settings=_settings(f"http://127.0.0.1:{port}/mcp"))
    assert result.status == "error" and "联网搜索" in result.reason and result.pages == []
    assert time.monotonic() - started < 10


@pytest.mark.asyncio
async def test_tool_error_is_reported(mcp_server):
    mcp_server.set_error("配额不足")
    result = await web_search("SKR", settings=_settings(mcp_server.url))
    assert result.status == "error" and "配额不足" in result.reason


def _result(text: str | None = None, structured: dict | None = None, is_error: bool = False) -> CallToolResult:
    content = [TextContent(type="text", text=text)] if text is not None else []
    return CallToolResult(content=content, structuredContent=structured, isError=is_error)


PAGE = {"title": "t", "url": "u", "snippet": " s ", "extra": 1}
CLEAN = [{"title": "t", "url": "u", "snippet": "s"}]


def test_parse_structured_pages():
    assert parse_search_result(_result(structured={"pages": [PAGE]})) == CLEAN


def test_parse_structured_result_json():
    assert parse_search_result(_result(structured={"result": '{"pages": [{"title": "t", "url": "u", "snippet": "s"}]}'})) == CLEAN


def test_parse_text_content_object_and_bare_list():
    assert parse_search_result(_result('{"pages": [{"title": "t", "url": "u", "snippet": "s"}], "request_id": "x"}')) == CLEAN
    assert parse_search_result(_result('[{"title": "t", "url": "u", "snippet": "s"}]')) == CLEAN


def test_parse_errors():
    with pytest.raises(SearchResultError, match="配额不足"):
        parse_search_result(_result("配额不足", is_error=True))
    with pytest.raises(SearchResultError, match="JSON"):
        parse_search_result(_result("not json"))
