"""Events of query runs shared by every replica through Redis (settings.redis_url): one stream per
session holds its events in order, a hash beside it says who owns the run and whether it ended; a
key held while a run is in progress makes "one run per session" hold across replicas. All of it
expires `ttl_s` after the run ends (or `busy_ttl_s` after a replica stopped updating a run).
"""
from __future__ import annotations

import json
from typing import AsyncIterator

from services.errors import StorageError

PREFIX = "zgzk:run:"
FINAL_EVENTS = ("final", "error")
LOST = {"error": "回答所在的服务进程已退出，回答没有完成", "node": ""}


def _keys(session_id: str) -> tuple[str, str, str]:
    base = PREFIX + session_id
    return base + ":events", base + ":meta", base + ":active"


class RunBus:
    def __init__(self, url: str, *, ttl_s: float = 600.0, max_events: int = 4000, busy_ttl_s: float = 120.0):
        from redis import asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url, decode_responses=True)
        self.ttl_s, self.max_events, self.busy_ttl_s = int(ttl_s), max_events, int(busy_ttl_s)

    async def _call(self, coro):
        from redis.exceptions import RedisError

        try:
            return await coro
        except (RedisError, OSError) as exc:
            raise StorageError(f"回答事件无法经 Redis 传递：{exc}", cause=exc) from exc

    async def open_run(self, session_id: str, owner: str) -> bool:
        """Start a run of the session; False when one is in progress on any replica."""
        events, meta, active = _keys(session_id)
        if not await self._call(self._redis.set(active, owner, nx=True, ex=self.busy_ttl_s)):
            return False
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.delete(events, meta)
            pipe.hset(meta, mapping={"owner": owner, "done": 0, "result_seq": 0})
            pipe.expire(meta, self.busy_ttl_s)
            await self._call(pipe.execute())
        return True

    async def publish(self, session_id: str, seq: int, name: str, data: dict) -> None:
        events, meta, active = _keys(session_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.xadd(events, {"seq": seq, "name": name, "data": json.dumps(data, ensure_ascii=False)},
                      maxlen=self.max_events, approximate=True)
            if name in FINAL_EVENTS:
                pipe.hset(meta, mapping={"done": 1, "result_seq": seq})
                for key in (events, meta):
                    pipe.expire(key, self.ttl_s)
                pipe.delete(active)
            else:
                for key in (events, meta, active):
                    pipe.expire(key, self.busy_ttl_s)
            await self._call(pipe.execute())

    async def info(self, session_id: str) -> dict | None:
        """{owner, done, result_seq} of the session's latest run, None when there is none."""
        meta = await self._call(self._redis.hgetall(_keys(session_id)[1]))
        if not meta:
            return None
        return {"owner": meta.get("owner", ""), "done": meta.get("done") == "1",
                "result_seq": int(meta.get("result_seq") or 0)}

    async def follow(self, session_id: str, after: int, keepalive_s: float) -> AsyncIterator[tuple[int, str, dict] | None]:
        """(seq, name, data) of the events after `after`, live until the run's final event; with no
        `after` on an ended run, its final event alone. None after `keepalive_s` of silence; an
        error event (seq 0) when the run's replica stopped updating it and it expired unfinished."""
        events = _keys(session_id)[0]
        info = await self.info(session_id)
        cursor = "0-0"
        if info and info["done"] and not after:
            after = info["result_seq"] - 1
        while True:
            batch = await self._call(self._redis.xread({events: cursor}, block=int(keepalive_s * 1000), count=500))
            if not batch:
                if await self.info(session_id) is None:
                    yield 0, "error", dict(LOST)
                    return
                yield None
                continue
            for stream_id, fields in batch[0][1]:
                cursor = stream_id
                seq = int(fields["seq"])
                if seq <= after:
                    continue
                yield seq, fields["name"], json.loads(fields["data"])
                if fields["name"] in FINAL_EVENTS:
                    return

    async def aclose(self) -> None:
        await self._redis.aclose()
