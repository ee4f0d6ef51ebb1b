"""Password login for the web UI: users from AUTH_USERS, a signing secret that survives restarts."""
from __future__ import annotations

import hmac
import logging
import os
import secrets
from pathlib import Path

log = logging.getLogger("ui.auth")

DEFAULT_USERS = "admin:admin"
SECRET_FILE = ".chainlit_secret"


def parse_users(raw: str) -> dict[str, str]:
    """`name:password,name2:password2` -> {name: password}; malformed entries are skipped with a warning."""
    users: dict[str, str] = {}
    for entry in (raw or "").split(","):
        name, sep, password = entry.strip().partition(":")
        name = name.strip()
        if not entry.strip():
            continue
        if not sep or not name or not password:
            log.warning("AUTH_USERS 中的条目格式不对（应为 用户名:密码），已忽略：%r", entry.strip()[:40])
            continue
        users[name] = password
    return users


def configured_users() -> tuple[dict[str, str], bool]:
    """(users, whether the local default admin/admin is in use)."""
    users = parse_users(os.environ.get("AUTH_USERS", ""))
    if users:
        return users, False
    return parse_users(DEFAULT_USERS), True


def check_password(users: dict[str, str], username: str, password: str) -> bool:
    expected = users.get((username or "").strip())
    # compare_digest on every path, so timing does not say whether a user exists
    return hmac.compare_digest((expected or "\x00").encode(), (password or "").encode()) and expected is not None


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
