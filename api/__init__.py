"""HTTP API of 掌柜智库 under `/api`: upload / status / query / stream / history / health, and the
pictures its answers link to (api/images.py).

`mount_api(app)` adds it to any FastAPI app (the Chainlit server's, ahead of Chainlit's catch-all
route); `create_app()` is a standalone app with only the API (tests, load bench).
"""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.catalog import router as catalog_router
from api.images import images_mount
from api.middleware import HeadAsGet, SameOrigin
from api.routes import ApiRuntime, fallback, router
from graphs.importing import start_in_app_worker, stop_in_app_workers
from services.settings import get_settings

__all__ = ["HeadAsGet", "SameOrigin", "create_app", "mount_api"]


def mount_api(app: FastAPI) -> None:
    """Add the /api routes and the pictures' route in front of the routes `app` already has (a
    catch-all GET among them)."""
    if getattr(app.state, "zgzk_api", None) is not None:
        return
    app.state.zgzk_api = ApiRuntime()
    before = list(app.router.routes)
    app.include_router(router)
    app.include_router(catalog_router)
    app.include_router(fallback)  # last: it answers every /api path no other route took
    app.router.routes.append(images_mount(get_settings()))
    added = [route for route in app.router.routes if route not in before]
    app.router.routes[:] = added + before


def create_app() -> FastAPI:
    """A standalone app with only the API."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if get_settings().import_in_app:  # tasks queued before a restart go on now
            start_in_app_worker()
        yield
        await app.state.zgzk_api.aclose()
        stop_in_app_workers()

    app = FastAPI(title="掌柜智库 API", version="0.1.0", lifespan=lifespan,
                  description="产品说明书知识库：上传说明书、查询导入进度、提问（含 SSE 流式）、会话历史、健康检查。")
    mount_api(app)
    app.add_middleware(SameOrigin)
    app.add_middleware(HeadAsGet)
    return app
