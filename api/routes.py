"""The /api endpoints: importing, asking, history and task status, in one router."""
from __future__ import annotations

import asyncio
import uuid
from typing import Annotated, AsyncIterator

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from api import sse
from api.auth import current_user, require_editor
from api.health import health_report
from api.routing import ApiRoute, body_limit, error_response
from api.models import (
    SESSION_ID_PATTERN, Answer, ErrorBody, Health, History, HistoryDeleted, QueryRequest, StreamStarted,
    TaskStatus, UploadResponse,
)
from api.runs import QueryRuns, ServerBusy, SessionBusy
from api.uploads import receive_upload, upload_body_limit, upload_schema
from graphs.importing import (
    StagedBatch, UploadRejected, accepted_labels, discard, enqueue_set, queued_part,
)
from services.accounts import Identity
from services.errors import StorageError
from services.history_store import get_history_store
from services.settings import get_settings
from services.task_store import get_task_store

ERRORS = {status: {"model": ErrorBody} for status in (400, 401, 403, 404, 413, 422, 503)}
NO_SESSION = "会话不存在：{session_id}"
UPLOAD_DESCRIPTION = (
    "一次上传的文件作为一组导入（按整组识别产品）。压缩包（.zip / .tar.gz）会被解开：保留文件夹结构用于识别产品，"
    "页面引用的图片从包内解析（相对路径、以 / 开头的站点路径、Windows 反斜杠路径均可）；其他文件不导入，在 notes 中逐项说明。"
    "解压有数量和大小上限（ARCHIVE_MAX_FILES、ARCHIVE_MAX_MB），超出（例如压缩炸弹）、含有指向包外的路径或损坏的压缩包"
    "整个被拒绝（400），不留下任何文件；包内的符号链接一律忽略。`products` 的键可以是包内路径，如 \"router-x1/index.md\"。")

SessionId = Annotated[str, Path(pattern=SESSION_ID_PATTERN, description="会话 ID")]


class ApiRuntime:
    """What the API keeps between requests; one per app, in app.state."""

    def __init__(self) -> None:
        self.runs = QueryRuns()

    async def aclose(self) -> None:
        await self.runs.aclose()


def runtime(request: Request) -> ApiRuntime:
    return request.app.state.zgzk_api


Runtime = Annotated[ApiRuntime, Depends(runtime)]
User = Annotated[Identity, Depends(current_user)]
Editor = Annotated[Identity, Depends(require_editor)]

router = APIRouter(prefix="/api", tags=["api"], route_class=ApiRoute)
protected = APIRouter(dependencies=[Depends(current_user)], route_class=ApiRoute, responses=ERRORS)


@protected.post("/upload", response_model=UploadResponse, summary=f"上传说明书（{accepted_labels()}），后台导入",
                description=UPLOAD_DESCRIPTION, openapi_extra={"requestBody": upload_schema()})
@body_limit(upload_body_limit)
async def upload(request: Request, user: Editor):
    try:
        staged, product, per_file = await receive_upload(request, get_settings())
    except UploadRejected as exc:
        return error_response(exc.status, exc.message)
    except ClientDisconnect:  # nobody reads this answer; what had arrived is gone already
        return error_response(400, "上传中断：连接已断开，已收到的部分没有保留。")
    return await asyncio.to_thread(_enqueue, staged, product, per_file, user)


def _enqueue(staged: StagedBatch, product: str | None, per_file: dict[str, str], user: Identity):
    try:
        by_name = {str(s.path): per_file[s.display_name] for s in staged if s.display_name in per_file}
        task_ids = enqueue_set(staged, product, by_name, updated_by=user.name)
        return {"task_ids": task_ids, "files": [s.display_name for s in staged], "notes": staged.notes}
    except StorageError as exc:
        queued = queued_part(exc)  # a set that broke off part way: the queued files go on
        discard([s for s in staged if s.task_id not in queued])
        if queued:
            names = "、".join(s.display_name for s in staged if s.task_id not in queued)
            return error_response(503, f"只有部分文件排上了导入队列（任务 {'、'.join(queued)} 会照常导入），"
                                       f"{names} 没有开始导入：{exc.message}")
        return error_response(503, f"导入任务无法创建，没有开始导入：{exc.message}")


@protected.get("/status/{task_id}", response_model=TaskStatus, responses={404: {"model": ErrorBody}},
               summary="导入任务进度")
def task_status(task_id: Annotated[str, Path(max_length=64)], user: User):
    task = storage(lambda: get_task_store().get(task_id))
    # another user's task is as unknown as one that never was: its file and uploader stay private
    if task is None or (task.get("by") != user.name and user.role != "admin"):
        raise HTTPException(404, f"导入任务不存在：{task_id}")
    result = task.get("result") or {}
    return {**task, "error": task.get("error") or None, "product": result.get("product"),
            "chunks": result.get("chunks")}


@protected.post("/query", response_model=Answer | StreamStarted,
                responses={409: {"model": ErrorBody}, 500: {"model": ErrorBody}},
                summary="提问：is_stream=false 直接返回答案；true 立即返回 session_id，答案经 /api/stream 推送")
async def query(body: QueryRequest, rt: Runtime, user: User):
    session_id = body.session_id or uuid.uuid4().hex
    try:
        owned = await asyncio.to_thread(get_history_store().claim, session_id, user.name)
    except StorageError as exc:
        if body.session_id:  # a named session must be proven ours; a fresh random id belongs to no one else
            raise HTTPException(503, f"无法确认会话归属：{exc.message}") from exc
        owned = True
    if not owned:
        raise HTTPException(404, NO_SESSION.format(session_id=session_id))
    try:
        channel = await rt.runs.begin(session_id, body.query, (body.product or "").strip() or None, owner=user.name)
    except SessionBusy:
        raise HTTPException(409, "该会话的上一个问题还在回答中，请等它结束后再提问。") from None
    except ServerBusy:
        raise HTTPException(503, "同时进行的提问太多，请稍后再试。") from None
    except StorageError as exc:  # Redis, which other replicas stream it from, is out of reach
        raise HTTPException(503, f"{exc.message}，没有开始回答") from exc
    if body.is_stream:
        return {"session_id": session_id}
    # shielded: a client that hangs up does not cut the answer (and its history) short
    await asyncio.shield(channel.task)
    if channel.result.name == "error":
        return JSONResponse({**channel.result.data, "session_id": session_id}, status_code=500)
    return channel.result.data


@protected.get("/stream/{session_id}", response_class=StreamingResponse, responses={
    200: {"content": {"text/event-stream": {}},
          "description": "事件：ready、progress（done_list / running_list）、delta、final、error；每个事件带递增的 id，"
                         "断线后带 Last-Event-ID 重连只收到其后的事件；final 或 error 之后关闭；"
                         "回答结束后新打开的连接只收到 final（或 error）"},
    204: {"description": "Last-Event-ID 之后已没有事件（回答已结束），无需再重连"},
    404: {"model": ErrorBody}}, summary="SSE：一个会话的回答进度与答案")
async def stream(session_id: SessionId, rt: Runtime, user: User,
                 last_event_id: Annotated[str | None, Header(description="断线重连时：收到的最后一个事件 id")] = None):
    try:
        channel = await rt.runs.find(session_id)  # on this replica, or (with Redis) on another
    except StorageError as exc:
        raise HTTPException(503, exc.message) from exc
    if channel is None or channel.owner != user.name:
        raise HTTPException(404, "该会话没有进行中或最近完成的回答：请先以 is_stream=true 调用 POST /api/query。")
    raw_id = (last_event_id or "").strip()
    if raw_id and not raw_id.isdigit():
        raise HTTPException(400, f"Last-Event-ID 应为事件 id（数字）：{raw_id[:40]}")
    after = int(raw_id or 0)
    if channel.finished_before(after):
        return Response(status_code=204)

    async def events() -> AsyncIterator[str]:
        yield sse.encode("ready", {"session_id": session_id}, retry_ms=sse.RETRY_MS)
        async for event in channel.follow(rt.runs.keepalive_s, after=after):
            yield sse.KEEPALIVE if event is None else sse.encode(event.name, event.data, event_id=event.seq)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@protected.get("/history/{session_id}", response_model=History, summary="会话历史（从旧到新）")
def history(session_id: SessionId, user: User, limit: Annotated[int, Query(ge=1, le=500)] = 100):
    _own(session_id, user)
    messages = storage(lambda: get_history_store().recent(session_id, limit))
    return {"session_id": session_id, "messages": messages}


@protected.delete("/history/{session_id}", response_model=HistoryDeleted, summary="清空会话历史")
def delete_history(session_id: SessionId, user: User):
    _own(session_id, user)
    return {"session_id": session_id, "deleted": storage(lambda: get_history_store().delete_session(session_id))}


def _own(session_id: str, user: Identity) -> None:
    """Another user's session, or one that does not exist, is the same 404: ids tell nothing."""
    if storage(lambda: get_history_store().owner(session_id)) != user.name:
        raise HTTPException(404, NO_SESSION.format(session_id=session_id))


@router.get("/health", response_model=Health, responses={503: {"model": Health}},
            summary="各后端与模型的状态（无需 API 密钥）")
async def health():
    report = await health_report(get_settings())
    return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)


def storage(read):
    try:
        return read()
    except StorageError as exc:
        raise HTTPException(503, exc.message) from exc


router.include_router(protected)

# Mounted after every other /api router: an unknown /api path (or a method a path does not take)
# is a JSON 404; in the Chainlit app it would otherwise get the chat page.
fallback = APIRouter(prefix="/api", route_class=ApiRoute)


@fallback.api_route("/{path:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
                    include_in_schema=False)
def unknown(path: str, request: Request):
    return error_response(404, f"接口不存在：{request.method} {request.url.path}（接口列表见 /docs）")
