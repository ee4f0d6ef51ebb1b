"""Chainlit's interface texts, corrected to what this app does.

The footer says who writes the answers as configured (Chainlit's own line warns that a language
model may err, model or not), and a finished step's header has no "已使用" before its name (a
skipped step would read "已使用 联网搜索"; its name says "已跳过" instead). The login form asks for a
user name (Chainlit's asks for an e-mail address), and a refused login says a lock may be why.
The upload toasts name the accepted types from the import's own list.
"""
from __future__ import annotations

from chainlit.config import config
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from graphs.importing import accepted_labels
from services.settings import get_settings
from ui.format import footer_text

ROUTE = "/project/translations"
TYPES_ROUTE = "/project/accepted-types"  # what the upload toasts say is accepted (public/zhanggui.js)


def corrected(translation: dict) -> dict:
    settings = get_settings()
    chat = translation.setdefault("chat", {})
    chat["watermark"] = footer_text(settings.llm_enabled, settings.llm_default_model)
    chat.setdefault("messages", {}).setdefault("status", {})["used"] = ""
    login = translation.setdefault("auth", {}).setdefault("login", {})
    form = login.setdefault("form", {})
    form["email"] = {**form.get("email", {}), "label": "用户名", "required": "用户名是必填项", "placeholder": "请输入用户名"}
    login.setdefault("errors", {})["credentialsSignin"] = "登录失败：用户名或密码错误；多次失败后需等几分钟再试"
    return translation


async def project_translations(request: Request) -> JSONResponse:
    # The configured language wins, as in Chainlit's own route; the loader keeps to its folder.
    language = config.ui.language or request.query_params.get("language") or "en-US"
    return JSONResponse({"translation": corrected(config.load_translation(language))})


async def accepted_types(_: Request) -> JSONResponse:
    return JSONResponse({"labels": accepted_labels(), "max_mb": get_settings().max_upload_mb})


def mount_translations(app: Starlette) -> None:
    """Answer before Chainlit's routes (the first matching route wins; its catch-all GET serves the page)."""
    app.router.routes.insert(0, Route(ROUTE, project_translations, methods=["GET"]))
    app.router.routes.insert(0, Route(TYPES_ROUTE, accepted_types, methods=["GET"]))
