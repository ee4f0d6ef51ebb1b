"""Query runs and their per-session event channels (the SSE side of POST /api/query).

One `QueryRuns` belongs to one app (created by `mount_api`), never to the module, so two apps in
one process — or two test servers — share nothing. Each session has at most one run at a time
and belongs to the user who started it. Event ids only grow (across runs and restarts), so a client
reconnecting with the last id it saw resumes right after it from a bounded buffer; a client that
connects once the run is over gets the stored result alone. Finished channels expire after `ttl_s`.

With REDIS_URL set every run's events are also written to Redis (services/event_bus.py): a replica
that did not take the question streams it from there, and "one run per session" holds across
replicas.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Iterator

from graphs.query import answer_of, astream_query
from services.errors import StorageError
from services.event_bus import FINAL_EVENTS, RunBus
from services.settings import get_settings

log = logging.getLogger("api.runs")


class SessionBusy(Exception):
    """The session already has a run in progress."""


class ServerBusy(Exception):
    """Too many runs in progress."""


@dataclass(frozen=True)
class Event:
    seq: int
    name: str   # progress | delta | final | error
    data: dict


class Channel:
    """The events of one run of one session."""

    def __init__(self, session_id: str, max_events: int, ids: Iterator[int], owner: str = "",
                 mirror: Callable[[Event], None] | None = None):
        self.session_id = session_id
        self.owner = owner
        self.events: deque[Event] = deque(maxlen=max_events)  # `final` / `error` is always the newest
        self.done_list: list[str] = []
        self.running_list: list[str] = []
        self.result: Event | None = None
        self.done = False
        self.finished_at = 0.0
        self.task: asyncio.Task | None = None
        self._ids = ids
        self._wake = asyncio.Event()
        self._mirror = mirror
        self.forwarder: asyncio.Task | None = None  # writes the events to Redis (QueryRuns.begin)

    def publish(self, name: str, data: dict) -> None:
        event = Event(next(self._ids), name, data)
        self.events.append(event)
        if self._mirror is not None:
            self._mirror(event)
        if name in ("final", "error"):
            self.result = event
        self._wake.set()
        self._wake = asyncio.Event()

    def close(self) -> None:
        self.done, self.finished_at = True, time.monotonic()
        self._wake.set()

    def on_runner_event(self, event: dict) -> None:
        kind = event.get("type")
        if kind in ("node_start", "node_end", "node_error"):
            node = event["node"]
            if kind == "node_start":
                self.running_list.append(node)
            elif node in self.running_list:  # one run ended: a node fanned out in parallel may still run
                self.running_list.remove(node)
            progress = {"node": node, "label": event.get("label", "")}
            if kind == "node_end":
                self.done_list.append(node)
                # what the node found (hit lists, rerank scores, skip reasons), for clients that show steps
                progress.update(status=event.get("status"), summary=event.get("summary"), detail=event.get("detail"))
            self.publish("progress", {"done_list": list(self.done_list), "running_list": list(self.running_list),
                                      **progress})
        elif kind == "delta":
            self.publish("delta", {"delta": event["delta"]})
        elif kind == "final":
            self.publish("final", dict(answer_of(event)))
        elif kind == "error":
            self.publish("error", {"error": event.get("error") or "处理问题时出错", "node": event.get("node", "")})

    def finished_before(self, last_id: int) -> bool:
        """Whether a client that saw `last_id` already has everything, result included."""
        return self.done and self.result is not None and last_id >= self.result.seq

    async def follow(self, keepalive_s: float, after: int = 0) -> AsyncIterator[Event | None]:
        """The buffered events after id `after`, then live ones until the run ends; with no `after`
        on a finished run, only its result. Yields None when nothing happened for `keepalive_s`
        (the caller sends a keep-alive)."""
        if not after and self.done and self.result is not None:
            yield self.result
            return
        last = after
        while True:
            for event in [e for e in self.events if e.seq > last]:
                last = event.seq
                yield event
            if self.done:
                return
            wake = self._wake  # no await between the check above and this: no wake-up can be missed
            try:
                await asyncio.wait_for(wake.wait(), keepalive_s)
            except TimeoutError:
                yield None


class RemoteChannel:
    """A run taken by another replica, followed through Redis."""

    task = None

    def __init__(self, session_id: str, info: dict, bus: RunBus):
        self.session_id, self.owner = session_id, info["owner"]
        self._info, self._bus = info, bus

    def finished_before(self, last_id: int) -> bool:
        return self._info["done"] and last_id >= self._info["result_seq"]

    async def follow(self, keepalive_s: float, after: int = 0) -> AsyncIterator[Event | None]:
        async for item in self._bus.follow(self.session_id, after, keepalive_s):
            yield None if item is None else Event(*item)


class QueryRuns:
    """The app's registry of query runs, one channel per session."""

    def __init__(self, *, ttl_s: float = 600.0, max_events: int = 4000, max_channels: int = 2000,
                 max_active: int = 64, keepalive_s: float = 15.0):
        self.ttl_s = ttl_s
        self.keepalive_s = keepalive_s  # silence after which a stream gets a keep-alive comment
        self.max_events = max_events
        self.max_channels = max_channels
        self.max_active = max_active
        self._channels: dict[str, Channel] = {}
        self._buses: dict[str, RunBus] = {}
        # microseconds since the epoch to start with: ids keep growing across runs and restarts
        self._ids = itertools.count(time.time_ns() // 1000)

    def active(self) -> int:
        return sum(1 for c in self._channels.values() if not c.done)

    def get(self, session_id: str) -> Channel | None:
        self._expire()
        return self._channels.get(session_id)

    def start(self, session_id: str, query: str, product: str | None, owner: str = "",
              mirror: Callable[[Event], None] | None = None) -> Channel:
        self._check(session_id)
        channel = self._channels[session_id] = Channel(session_id, self.max_events, self._ids, owner, mirror)
        channel.task = asyncio.create_task(self._run(channel, query, product), name=f"query-{session_id}")
        return channel

    def _check(self, session_id: str) -> None:
        self._expire()
        current = self._channels.get(session_id)
        if current is not None and not current.done:
            raise SessionBusy(session_id)
        if self.active() >= self.max_active:
            raise ServerBusy()

    def _bus(self) -> RunBus | None:
        url = get_settings().redis_url
        if url and url not in self._buses:
            self._buses[url] = RunBus(url, ttl_s=self.ttl_s, max_events=self.max_events)
        return self._buses.get(url) if url else None

    async def begin(self, session_id: str, query: str, product: str | None, owner: str = "") -> Channel:
        """start(), and with Redis: busy on any replica is busy here; the events go to Redis too.
        StorageError when Redis cannot be reached (nothing is started)."""
        bus = self._bus()
        if bus is None:
            return self.start(session_id, query, product, owner)
        self._check(session_id)
        if not await bus.open_run(session_id, owner):
            raise SessionBusy(session_id)
        outbox: asyncio.Queue[Event] = asyncio.Queue()

        async def forward() -> None:  # in order, after the fact: the run never waits for Redis
            while True:
                event = await outbox.get()
                try:
                    await bus.publish(session_id, event.seq, event.name, event.data)
                except StorageError as exc:  # followers on this replica still get everything
                    log.warning("run %s: an event did not reach Redis: %s", session_id, exc)
                if event.name in FINAL_EVENTS:
                    return

        channel = self.start(session_id, query, product, owner, mirror=outbox.put_nowait)
        channel.forwarder = asyncio.create_task(forward(), name=f"query-events-{session_id}")
        return channel

    async def find(self, session_id: str) -> Channel | RemoteChannel | None:
        """This replica's channel of the session, else (with Redis) the run another replica holds."""
        local = self.get(session_id)
        bus = self._bus()
        if local is not None or bus is None:
            return local
        info = await bus.info(session_id)
        return RemoteChannel(session_id, info, bus) if info else None

    async def _run(self, channel: Channel, query: str, product: str | None) -> None:
        try:
            async for event in astream_query(query, session_id=channel.session_id, product=product,
                                             owner=channel.owner):
                channel.on_runner_event(event)
        except asyncio.CancelledError:
            channel.publish("error", {"error": "服务正在关闭，回答已中止", "node": ""})
            raise
        except Exception as exc:  # astream_query reports its own failures; this is the last guard
            log.exception("query run crashed")
            channel.publish("error", {"error": f"处理问题时出错：{exc}", "node": ""})
        finally:
            if channel.result is None:
                channel.publish("error", {"error": "回答没有正常结束", "node": ""})
            channel.close()

    def _expire(self) -> None:
        now = time.monotonic()
        finished = sorted((c for c in self._channels.values() if c.done), key=lambda c: c.finished_at)
        excess = len(self._channels) - self.max_channels
        for i, channel in enumerate(finished):
            if i < excess or now - channel.finished_at > self.ttl_s:
                # only drop the channel if it was not replaced by a newer run meanwhile
                if self._channels.get(channel.session_id) is channel:
                    del self._channels[channel.session_id]

    async def aclose(self) -> None:
        tasks = [c.task for c in self._channels.values() if c.task and not c.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for bus in self._buses.values():
            await bus.aclose()
