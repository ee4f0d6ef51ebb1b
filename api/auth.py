"""Who is asking the API: a user with a role, from an API key or the chat's login cookie.

On by default: every /api route but health needs credentials unless API_AUTH=off (loopback
development only: then everyone is one local admin).
"""
from __future__ import annotations

import os

import jwt
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from services.accounts import ROLES, Identity, key_identity
from services.settings import get_settings

OPEN_IDENTITY = Identity("local", "admin")
CHAT_COOKIE = os.environ.get("CHAINLIT_AUTH_COOKIE_NAME", "access_token")
MISSING = "缺少 API 密钥：请在请求头中提供 Authorization: Bearer <API 密钥>，或先登录网页"

bearer = HTTPBearer(auto_error=False, description="API 密钥（API_KEYS 中的 用户:密钥）或网页登录令牌")


def _unauthorized(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


def chat_identity(token: str) -> Identity | None:
    """The user a chat login token names, when the token is signed with this app's secret and unexpired."""
    secret = os.environ.get("CHAINLIT_AUTH_SECRET", "")
    if not secret or not token:
        return None
    try:
        claims = jwt.decode(token, secret, algorithms=["HS256"], options={"require": ["exp"]})
    except jwt.PyJWTError:
        return None
    name = claims.get("identifier")
    role = (claims.get("metadata") or {}).get("role")
    if not isinstance(name, str) or not name:
        return None
    return Identity(name, role if role in ROLES else "reader")


def _cookie_token(request: Request) -> str:
    """The login cookie, whole or in the numbered chunks a long token is split into."""
    if request.cookies.get(CHAT_COOKIE):
        return request.cookies[CHAT_COOKIE]
    parts, i = [], 0
    while f"{CHAT_COOKIE}_{i}" in request.cookies:
        parts.append(request.cookies[f"{CHAT_COOKIE}_{i}"])
        i += 1
    return "".join(parts)


def current_user(request: Request, credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> Identity:
    settings = get_settings()  # read per request: keys can change without a restart
    if not settings.api_auth:
        return OPEN_IDENTITY
    if credentials:
        identity = key_identity(settings, credentials.credentials) or chat_identity(credentials.credentials)
        if identity is None:
            raise _unauthorized("API 密钥错误")
        return identity
    token = _cookie_token(request)
    if token:
        identity = chat_identity(token)
        if identity is None:
            raise _unauthorized("登录已失效，请重新登录网页或改用 API 密钥")
        return identity
    raise _unauthorized(MISSING)


def require_editor(user: Identity = Depends(current_user)) -> Identity:
    """Knowledge-base changes: admins and editors only."""
    if not user.can_edit:
        raise HTTPException(403, f"用户“{user.name}”是只读角色：只有管理员或编辑可以修改知识库")
    return user


class SignedInOnly:
    """ASGI wrapper: `app` answers only requests `current_user` accepts (the others get its 401)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            try:
                current_user(request, await bearer(request))
            except HTTPException as exc:
                refusal = JSONResponse({"error": exc.detail}, status_code=exc.status_code, headers=exc.headers)
                return await refusal(scope, receive, send)
        await self.app(scope, receive, send)
