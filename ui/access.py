"""Who may change the knowledge base from the chat: the login's role decides (admins and editors)."""
from __future__ import annotations

import chainlit as cl

from ui.auth import chat_user


def can_edit() -> bool:
    return chat_user().can_edit


def is_admin() -> bool:
    return chat_user().role == "admin"


def user_name() -> str:
    return chat_user().name


def refusal() -> str:
    return f"❌ 账号“{chat_user().name}”是只读角色，不能导入或修改说明书；请联系管理员。"


async def may_change_knowledge_base() -> bool:
    """Readers ask questions; importing, renaming, moving, deleting and reindexing are for admins and editors."""
    if can_edit():
        return True
    await cl.Message(content=refusal()).send()
    return False
