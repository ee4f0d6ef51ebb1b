"""Pictures of documents at {LOCAL_URL_PREFIX}/upload-images/..., for signed-in users only.

Both object-store backends are read through this route: the local folder directly, an S3 bucket
(which nobody but the app may read) through the app's own credentials. Answers and the knowledge-base
view link pictures here, so a picture is as private as the answer it belongs to.
"""
from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route, Router
from starlette.staticfiles import StaticFiles

from api.auth import SignedInOnly
from services.errors import MinioError
from services.object_store import IMAGES_PREFIX, LOCAL_URL_PREFIX, ObjectStore, content_type, get_object_store, local_images_root
from services.settings import Settings

NOT_FOUND_CODES = {"NoSuchKey", "NoSuchBucket"}


def stored_images(store: ObjectStore) -> Router:
    """Pictures read from the store on each request."""

    async def picture(request: Request) -> Response:
        name = f"{IMAGES_PREFIX}/{request.path_params['name']}"
        try:
            data = await asyncio.to_thread(store.open_image, name)
        except MinioError as exc:
            # no such picture, or a name the store refuses outright (it never asked the server)
            if exc.cause is None or getattr(exc.cause, "code", None) in NOT_FOUND_CODES:
                return JSONResponse({"error": "图片不存在"}, status_code=404)
            return JSONResponse({"error": f"图片暂时无法读取：{exc.message}"}, status_code=503)
        return Response(data, media_type=content_type(name), headers={"Cache-Control": "private, max-age=3600"})

    return Router([Route("/{name:path}", picture, methods=["GET"])])


def images_mount(settings: Settings) -> Mount:
    store = get_object_store(settings)
    if store.backend == "local":
        root = local_images_root(settings)
        root.mkdir(parents=True, exist_ok=True)
        app = StaticFiles(directory=root)
    else:
        app = stored_images(store)
    return Mount(f"{LOCAL_URL_PREFIX}/{IMAGES_PREFIX}", app=SignedInOnly(app), name="kb-images")
