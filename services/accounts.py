"""Who may use the app: named users with a role, their passwords and API keys.

Secrets from the environment are `name:secret[:role]` lists (AUTH_USERS, API_KEYS); the `admin`
password is generated on first run and kept only as a scrypt hash under DATA_DIR, unless
ADMIN_PASSWORD sets it. Nothing here knows about HTTP or the chat framework.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from services.settings import Settings

log = logging.getLogger("services.accounts")

ROLES = ("admin", "editor", "reader")
DEFAULT_ROLE = "editor"
ADMIN_NAME = "admin"
ADMIN_HASH_FILE = "admin_password.hash"
GENERATED_PASSWORD_BYTES = 12
_SCRYPT = {"n": 2 ** 14, "r": 8, "p": 1}


@dataclass(frozen=True)
class Identity:
    """Who is asking. `name` owns conversations; `role` decides what may change."""
    name: str
    role: str

    @property
    def can_edit(self) -> bool:
        """Knowledge-base changes (upload, delete, rename, reindex) are for admins and editors."""
        return self.role in ("admin", "editor")


@dataclass(frozen=True)
class Credential:
    identity: Identity
    secret_hash: str


def hash_secret(secret: str, salt: bytes | None = None) -> str:
    salt = salt or os.urandom(16)
    digest = hashlib.scrypt(secret.encode("utf-8"), salt=salt, **_SCRYPT)
    return f"scrypt${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def verify_secret(secret: str, stored: str) -> bool:
    try:
        scheme, salt, digest = stored.split("$")
        expected = base64.b64decode(digest)
        given = hashlib.scrypt((secret or "").encode("utf-8"), salt=base64.b64decode(salt), **_SCRYPT)
    except (ValueError, TypeError):
        return False
    return scheme == "scrypt" and hmac.compare_digest(given, expected)


def key_digest(key: str) -> str:
    """API keys are long random strings: a plain SHA-256 is enough to look them up without keeping them."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse_credentials(raw: str, setting: str) -> list[tuple[str, str, str]]:
    """`name:secret[:role],...` -> [(name, secret, role)]. A trailing `:admin|editor|reader` is the
    role (editor when absent), so a secret may itself hold colons. Malformed entries are skipped."""
    entries = []
    for entry in (raw or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        name, sep, secret = entry.partition(":")
        role = DEFAULT_ROLE
        head, colon, tail = secret.rpartition(":")
        if colon and tail in ROLES and head:
            secret, role = head, tail
        name = name.strip()
        if not sep or not name or not secret:
            log.warning("%s 中的条目格式不对（应为 用户名:密钥[:角色]），已忽略：%r", setting, entry[:40])
            continue
        entries.append((name, secret, role))
    return entries


def api_keys(settings: Settings) -> dict[str, Identity]:
    """SHA-256 of each API key -> its user."""
    return {key_digest(secret): Identity(name, role)
            for name, secret, role in parse_credentials(settings.api_keys, "API_KEYS")}


def key_identity(settings: Settings, key: str) -> Identity | None:
    given = key_digest(key or "")
    for digest, identity in api_keys(settings).items():
        if hmac.compare_digest(given, digest):
            return identity
    return None


def ensure_admin_password(settings: Settings) -> str | None:
    """Make sure the admin has a password. Returns it only when it was generated just now (the one
    time it can be shown); ADMIN_PASSWORD, or a hash from an earlier run, returns None."""
    path = settings.data_dir / ADMIN_HASH_FILE
    if settings.admin_password or _read_hash(path):
        return None
    password = secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(hash_secret(password), encoding="utf-8")
    tmp.chmod(0o600)
    tmp.replace(path)
    return password


def _read_hash(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return ""


@lru_cache(maxsize=1)
def _dummy_hash() -> str:
    """A hash no password matches, for the paths that have no hash of their own to check."""
    return hash_secret(secrets.token_urlsafe(GENERATED_PASSWORD_BYTES))


def password_identity(settings: Settings, name: str, password: str) -> Identity | None:
    """The user whose password this is, or None. AUTH_USERS entries come first; `admin` falls back
    to ADMIN_PASSWORD, then to the generated hash. Every path runs one scrypt check, so how long
    a wrong password takes does not say whether the name exists or how its password is kept."""
    name = (name or "").strip()
    given = (password or "").encode("utf-8")
    plain, stored, identity = None, "", None
    for user, secret, role in parse_credentials(settings.auth_users, "AUTH_USERS"):
        if user == name:
            plain, identity = secret, Identity(user, role)
            break
    else:
        if name == ADMIN_NAME:
            identity = Identity(ADMIN_NAME, "admin")
            plain = settings.admin_password or None
            stored = "" if plain else _read_hash(settings.data_dir / ADMIN_HASH_FILE)
    hashed_ok = verify_secret(password, stored or _dummy_hash())
    ok = hmac.compare_digest(plain.encode("utf-8"), given) if plain is not None else bool(stored) and hashed_ok
    return identity if identity is not None and ok else None
