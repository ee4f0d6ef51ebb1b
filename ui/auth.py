"""Password login for the web UI: users from AUTH_USERS and the admin, throttled logins, and a
signing secret that survives restarts."""
from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import secrets
from pathlib import Path

import chainlit as cl
from starlette.types import ASGIApp, Receive, Scope, Send

from services.accounts import Identity, ensure_admin_password, password_identity
from services.errors import StorageError
from services.login_throttle import get_login_throttle
from services.settings import Settings

log = logging.getLogger("ui.auth")

SECRET_FILE = ".chainlit_secret"

# the address of the browser behind the login request being handled (set by LoginAddress)
login_address: contextvars.ContextVar[str] = contextvars.ContextVar("login_address", default="")


class LoginAddress:
    """ASGI middleware: remembers the client address of POST /login, which the login callback
    does not otherwise see. Every other request passes untouched."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path", "").endswith("/login"):
            client = scope.get("client") or ("", 0)
            token = login_address.set(str(client[0]))
            try:
                return await self.app(scope, receive, send)
            finally:
                login_address.reset(token)
        return await self.app(scope, receive, send)


async def check_login(settings: Settings, name: str, password: str, address: str = "") -> Identity | None:
    """The user, or None for a wrong password or a locked name/address (the reason goes to the log,
    not to the browser: a stranger learns nothing about which names exist)."""
    throttle = get_login_throttle(settings)
    try:  # counted before the password is checked: guesses sent at once are all counted
        wait = await asyncio.to_thread(throttle.attempt, name, address)
    except StorageError as exc:  # Redis down: this process still counts, logins still work
        log.warning("shared login throttle unavailable, counting in this process: %s", exc)
        throttle = get_login_throttle(settings.replace(redis_url=""))
        wait = throttle.attempt(name, address)
    if wait > 0:
        log.warning("login refused: %r from %s is locked for %.0f s more", name[:40], address or "?", wait)
        return None
    identity = await asyncio.to_thread(password_identity, settings, name, password)
    if identity is None:
        delay = await asyncio.to_thread(throttle.failed, name, address)
        log.warning("login failed for %r from %s", name[:40], address or "?")
        await asyncio.sleep(delay)
        return None
    await asyncio.to_thread(throttle.succeeded, name, address)
    return identity


def announce_admin_password(settings: Settings) -> None:
    """On the first run, generate the admin password and show it this once (only its hash is kept)."""
    password = ensure_admin_password(settings)
    if password:
        print(f"🔑 已生成管理员账号：用户名 admin，密码 {password}\n"
              f"   只显示这一次（只保存了它的哈希）。忘记时删除 {settings.data_dir}/admin_password.hash 后重启，"
              f"或在 .env 中设置 ADMIN_PASSWORD。", flush=True)


def chat_user() -> Identity:
    """Who is using this chat session (role from the login)."""
    user = cl.user_session.get("user")
    role = ((getattr(user, "metadata", None) or {}).get("role")) or "reader"
    return Identity(getattr(user, "identifier", "") or "", role)


def ensure_auth_secret(data_dir: Path) -> str:
    """CHAINLIT_AUTH_SECRET from the environment, else one generated once and kept in DATA_DIR."""
    secret = os.environ.get("CHAINLIT_AUTH_SECRET", "").strip()
    if not secret:
        path = data_dir / SECRET_FILE
        if path.is_file() and path.read_text(encoding="utf-8").strip():
            secret = path.read_text(encoding="utf-8").strip()
        else:
            secret = secrets.token_urlsafe(48)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secret, encoding="utf-8")
            path.chmod(0o600)
        os.environ["CHAINLIT_AUTH_SECRET"] = secret
    return secret
