"""GET /api/health: which backend each part uses, and whether it answers right now."""
from __future__ import annotations

import asyncio
import time
from typing import Callable

import httpx

from services.embeddings import get_embedder
from services.history_store import get_database
from services.object_store import get_object_store
from services.reranker import get_reranker
from services.settings import Settings
from services.task_queue import get_task_queue
from services.vector_store import get_vector_store

CHECK_TIMEOUT_S = 5.0
PROBE_TEXT = "健康检查"


async def _check(target: Callable[[], object], backend: Callable[[object], str],
                 probe: Callable[[object], bool]) -> dict:
    """Build the part with `target()` (a missing model or bad setting is a failed check, not a 500),
    name it with `backend`, then `probe` it in a thread with a deadline."""
    started = time.perf_counter()
    name, ok, error = "未知", False, None
    try:
        part = await asyncio.wait_for(asyncio.to_thread(target), CHECK_TIMEOUT_S)
        name = backend(part)
        ok = bool(await asyncio.wait_for(asyncio.to_thread(probe, part), CHECK_TIMEOUT_S))
        if not ok:
            error = "无法连接"
    except TimeoutError:
        error = f"超过 {CHECK_TIMEOUT_S:g} 秒没有响应"
    except Exception as exc:
        error = str(exc) or type(exc).__name__
    return {"backend": name, "ok": ok, "error": error, "ms": round((time.perf_counter() - started) * 1000, 1)}


async def _chat_model(settings: Settings) -> dict:
    out = {"backend": settings.llm_default_model, "configured": settings.llm_enabled, "ok": None, "error": None,
           "ms": None}
    if not settings.llm_enabled:
        out["error"] = "未配置 OPENAI_API_KEY：使用离线摘录式回答"
        return out
    started = time.perf_counter()
    try:
        async with httpx.AsyncClient(timeout=CHECK_TIMEOUT_S) as client:
            reply = await client.get(f"{settings.openai_api_base.rstrip('/')}/models",
                                     headers={"Authorization": f"Bearer {settings.openai_api_key}"})
        out["ok"] = reply.status_code == 200
        if not out["ok"]:
            out["error"] = f"模型服务返回 HTTP {reply.status_code}"
    except httpx.HTTPError as exc:
        out["ok"], out["error"] = False, f"模型服务不可达：{type(exc).__name__}"
    out["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return out


async def health_report(settings: Settings) -> dict:
    checks = await asyncio.gather(
        _check(lambda: get_vector_store(settings), lambda v: v.backend, lambda v: v.ping()),
        _check(lambda: get_database(settings), lambda d: d.backend, lambda d: d.ping()),
        _check(lambda: get_object_store(settings), lambda o: o.backend, lambda o: o.ping()),
        _check(lambda: get_task_queue(settings), lambda q: q.backend, lambda q: q.ping()),
        _check(lambda: get_embedder(settings), lambda e: e.name, lambda e: bool(e.embed_query(PROBE_TEXT)["dense"])),
        _check(lambda: get_reranker(settings), lambda r: r.name,
               lambda r: len(r.score(PROBE_TEXT, [{"content": PROBE_TEXT}])) == 1),
        _chat_model(settings),
    )
    vector, history, objects, queue, embedder, reranker, chat = checks
    healthy = all(c["ok"] for c in checks[:6]) and chat["ok"] is not False
    return {"status": "ok" if healthy else "degraded", "vector_store": vector, "history_store": history,
            "object_store": objects, "task_queue": queue,
            "models": {"embedder": embedder, "reranker": reranker, "chat": chat}}
