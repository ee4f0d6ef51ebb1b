"""Request limits and error bodies shared by every API route.

Done in a route class rather than app middleware or app exception handlers, so that mounting the
API into the Chainlit app changes nothing for Chainlit's own routes.
"""
from __future__ import annotations

from typing import Callable

from fastapi import HTTPException, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Message, Receive

JSON_BODY_LIMIT = 256 * 1024  # a 10,000-character question is at most ~60 KB even \u-escaped

PROBLEMS = {
    "missing": "缺少必填字段", "json_invalid": "JSON 格式错误", "string_too_long": "内容过长",
    "string_too_short": "内容过短", "string_pattern_mismatch": "格式不正确", "string_type": "应为字符串",
    "bool_parsing": "应为 true 或 false", "bool_type": "应为 true 或 false", "model_attributes_type": "应为 JSON 对象",
    "dict_type": "应为 JSON 对象", "list_type": "应为列表", "int_parsing": "应为整数",
    "greater_than_equal": "数值过小", "less_than_equal": "数值过大",
}


PART_HEADROOM = 64 * 1024  # a part's own headers and framing, on top of the file it carries
# what the request parser says (in English) when a body is not the form it claims to be
PARSER_ERRORS = {
    "Invalid multipart data.": "上传数据无法解析：不是合法的 multipart/form-data（文件名中不能有回车、换行等控制字符）",
    "Missing boundary in multipart.": "上传数据缺少 multipart 分隔符（boundary）",
    "There was an error parsing the body": "请求体无法解析",
}


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"请求体过大：上限为 {limit / 1024 / 1024:.2f} MB")


class PartTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"请求体过大：单个文件超过了 {limit / 1024 / 1024:g} MB 的上限，已停止接收")


def error_response(status: int, message: str, *, detail: list | None = None,
                   headers: dict | None = None) -> JSONResponse:
    body = {"error": message} if detail is None else {"error": message, "detail": detail}
    return JSONResponse(body, status_code=status, headers=headers)


def body_limit(limit: Callable[[], int], part_limit: Callable[[], int] | None = None):
    """Decorator for an endpoint accepting bodies bigger than JSON_BODY_LIMIT; `limit()` is read per
    request. `part_limit()`: the most one multipart part (one file) may carry."""
    def mark(endpoint):
        endpoint.max_body = limit
        endpoint.max_part = part_limit
        return endpoint
    return mark


def describe_validation(errors: list[dict]) -> str:
    parts = []
    for err in errors:
        loc = list(err.get("loc", ()))
        if err.get("type") == "json_invalid":
            parts.append("请求体不是合法的 JSON")
            continue
        where = ".".join(str(p) for p in loc[1:])  # loc[0] says where: body / query / path / form
        problem = PROBLEMS.get(err.get("type", ""), err.get("msg", ""))
        if err.get("type") == "value_error":  # our own validators speak Chinese already
            problem = str(err.get("msg", "")).removeprefix("Value error, ")
        parts.append(f"{where}：{problem}" if where else problem)
    return "请求参数不合法：" + "；".join(parts)


class PartMeter:
    """Bytes since the last multipart delimiter, counted as the body arrives, so one oversized file
    is refused at its limit rather than once it has been received (and spooled to disk) whole."""

    def __init__(self, boundary: bytes, limit: int):
        self.delimiter = b"\r\n--" + boundary
        self.limit = limit
        self.part = 0
        self.tail = b""

    def feed(self, chunk: bytes) -> None:
        data = self.tail + chunk
        found = data.rfind(self.delimiter)
        self.part = len(data) - found - len(self.delimiter) if found >= 0 else self.part + len(chunk)
        self.tail = data[-(len(self.delimiter) - 1):]
        if self.part > self.limit + PART_HEADROOM:
            raise PartTooLarge(self.limit)


def _boundary(content_type: str) -> bytes | None:
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        return None
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode("latin-1", "replace")
    return None


def _capped(receive: Receive, limit: int, meter: PartMeter | None = None) -> Receive:
    seen = 0

    async def capped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            body = message.get("body", b"")
            seen += len(body)
            if seen > limit:
                raise BodyTooLarge(limit)
            if meter is not None:
                meter.feed(body)
        return message

    return capped


class ApiRoute(APIRoute):
    """Caps the request body (Content-Length first, then while reading) and answers every error
    as JSON {"error": 中文说明}."""

    def get_route_handler(self) -> Callable[[Request], object]:
        inner = super().get_route_handler()
        limit_of = getattr(self.endpoint, "max_body", lambda: JSON_BODY_LIMIT)
        part_limit_of = getattr(self.endpoint, "max_part", None)

        async def handler(request: Request) -> Response:
            limit = limit_of()
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                return error_response(413, BodyTooLarge(limit).detail)
            boundary = _boundary(request.headers.get("content-type", "")) if part_limit_of else None
            meter = PartMeter(boundary, part_limit_of()) if boundary else None
            try:
                return await inner(Request(request.scope, _capped(request.receive, limit, meter)))
            except RequestValidationError as exc:
                errors = list(exc.errors())
                brief = [{k: jsonable_encoder(e.get(k)) for k in ("type", "loc", "msg")} for e in errors]
                return error_response(422, describe_validation(errors), detail=brief)
            except StarletteHTTPException as exc:  # FastAPI's, and the request parser's own
                detail = str(exc.detail)
                return error_response(exc.status_code, PARSER_ERRORS.get(detail, detail), headers=exc.headers)

        return handler
