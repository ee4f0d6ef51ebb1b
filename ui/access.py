"""Who may change the knowledge base from the chat. One place, so that roles can replace the rule."""
from __future__ import annotations

import chainlit as cl


def can_edit(user: cl.User | None) -> bool:
    """Any logged-in user may import, rename, move, delete and reindex."""
    return user is not None


def current_user() -> cl.User | None:
    return cl.user_session.get("user")


def user_name() -> str:
    user = current_user()
    return user.identifier if user else ""
