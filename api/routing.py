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


# what the request parser says (in English) when a body is not the form it claims to be
PARSER_ERRORS = {
    "There was an error parsing the body": "请求体无法解析",
}


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int):
        super().__init__(413, f"请求体过大：上限为 {limit / 1024 / 1024:.2f} MB")


def error_response(status: int, message: str, *, detail: list | None = None,
                   headers: dict | None = None) -> JSONResponse:
    body = {"error": message} if detail is None else {"error": message, "detail": detail}
    return JSONResponse(body, status_code=status, headers=headers)


def body_limit(limit: Callable[[], int]):
    """Decorator for an endpoint accepting bodies bigger than JSON_BODY_LIMIT; `limit()` is read per request."""
    def mark(endpoint):
        endpoint.max_body = limit
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


def _capped(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def capped() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            body = message.get("body", b"")
            seen += len(body)
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return capped


class ApiRoute(APIRoute):
    """Caps the request body (Content-Length first, then while reading) and answers every error
    as JSON {"error": 中文说明}."""

    def get_route_handler(self) -> Callable[[Request], object]:
        inner = super().get_route_handler()
        limit_of = getattr(self.endpoint, "max_body", lambda: JSON_BODY_LIMIT)

        async def handler(request: Request) -> Response:
            limit = limit_of()
            declared = request.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                return error_response(413, BodyTooLarge(limit).detail)
            try:
                return await inner(Request(request.scope, _capped(request.receive, limit)))
            except RequestValidationError as exc:
                errors = list(exc.errors())
                brief = [{k: jsonable_encoder(e.get(k)) for k in ("type", "loc", "msg")} for e in errors]
                return error_response(422, describe_validation(errors), detail=brief)
            except StarletteHTTPException as exc:  # FastAPI's, and the request parser's own
                detail = str(exc.detail)
                return error_response(exc.status_code, PARSER_ERRORS.get(detail, detail), headers=exc.headers)

        return handler
