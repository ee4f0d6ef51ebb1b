"""API key check: when settings.api_key is set, every /api route but health needs `Authorization: Bearer KEY`."""
from __future__ import annotations

import secrets

from fastapi import Depends, HTTPException
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from services.settings import get_settings

bearer = HTTPBearer(auto_error=False, description="设置了 API_KEY 时必填：Authorization: Bearer <API_KEY>")


def require_api_key(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    expected = get_settings().api_key  # read per request: the key can change without a restart
    if not expected:
        return
    given = credentials.credentials if credentials else ""
    if not secrets.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
        message = "API 密钥错误" if given else "缺少 API 密钥：请在请求头中提供 Authorization: Bearer <API_KEY>"
        raise HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})
