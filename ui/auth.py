"""Password login for the web UI: users from AUTH_USERS and the admin, throttled logins, and a
signing secret that survives restarts."""
from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import chainlit as cl
from starlette.types import ASGIApp, Receive, Scope, Send

from services.accounts import Identity, ensure_admin_password, password_identity
from services.settings import Settings

log = logging.getLogger("ui.auth")

SECRET_FILE = ".chainlit_secret"
MAX_DELAY_S = 8.0

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


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0
    locked_until: float = 0.0


@dataclass
class LoginThrottle:
    """Failed logins per user name and per address: each failure waits longer (delay_s doubled),
    and `max_failures` in a row lock that name or address for `lock_s`, right password or not."""
    max_failures: int = 5
    lock_s: float = 300.0
    delay_s: float = 0.5
    clock: object = time.monotonic
    _seen: dict[tuple[str, str], _Failures] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def keys(name: str, address: str) -> list[tuple[str, str]]:
        return [("user", name.strip().lower())] + ([("addr", address)] if address else [])

    def locked(self, name: str, address: str) -> float:
        """Seconds the name or the address stays locked (0 when neither is)."""
        now = self.clock()
        with self._lock:
            return max([self._seen[k].locked_until - now for k in self.keys(name, address) if k in self._seen] + [0.0])

    def failed(self, name: str, address: str) -> float:
        """Record a failure; the delay to wait before answering."""
        now, delay = self.clock(), 0.0
        with self._lock:
            for key in self.keys(name, address):
                entry = self._seen.setdefault(key, _Failures())
                if now - entry.last > self.lock_s:  # an old run of failures is forgotten
                    entry.count = 0
                entry.count, entry.last = entry.count + 1, now
                if entry.count >= self.max_failures:
                    entry.count, entry.locked_until = 0, now + self.lock_s
                delay = max(delay, min(self.delay_s * 2 ** (entry.count - 1), MAX_DELAY_S) if entry.count else 0.0)
        return delay

    def succeeded(self, name: str) -> None:
        with self._lock:
            self._seen.pop(self.keys(name, "")[0], None)


_throttles: dict[tuple, LoginThrottle] = {}


def throttle_for(settings: Settings) -> LoginThrottle:
    """One throttle per process and limits (tests change the limits)."""
    key = (settings.login_max_failures, settings.login_lock_s, settings.login_delay_s)
    if key not in _throttles:
        _throttles[key] = LoginThrottle(*key)
    return _throttles[key]


async def check_login(settings: Settings, name: str, password: str, address: str = "") -> Identity | None:
    """The user, or None for a wrong password or a locked name/address (the reason goes to the log,
    not to the browser: a stranger learns nothing about which names exist)."""
    throttle = throttle_for(settings)
    wait = throttle.locked(name, address)
    if wait > 0:
        log.warning("login refused: %r from %s is locked for %.0f s more", name[:40], address or "?", wait)
        return None
    identity = await asyncio.to_thread(password_identity, settings, name, password)
    if identity is None:
        delay = throttle.failed(name, address)
        log.warning("login failed for %r from %s", name[:40], address or "?")
        await asyncio.sleep(delay)
        return None
    throttle.succeeded(name)
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
