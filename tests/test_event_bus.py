"""Query-run events through a real Redis: what one replica publishes another follows, in order, with
resume after an event id, one run per session across replicas, and an end for a run whose replica died."""
from __future__ import annotations

import asyncio

from queue_fixtures import redis_url  # noqa: F401 (fixture)
from services.event_bus import LOST, RunBus


async def collect(bus: RunBus, session: str, after: int = 0) -> list[tuple[int, str, dict]]:
    return [e async for e in bus.follow(session, after, keepalive_s=0.2) if e is not None]


async def test_events_published_on_one_replica_are_followed_on_another(redis_url):
    a, b = RunBus(redis_url), RunBus(redis_url)
    try:
        assert await a.open_run("s1", "alice")
        assert not await b.open_run("s1", "bob")  # one run per session, whichever replica asks
        live = asyncio.create_task(collect(b, "s1"))
        await asyncio.sleep(0.3)  # the follower waits on the stream before anything is published
        sent = [(101, "progress", {"node": "node_product_confirm"}), (102, "delta", {"delta": "按住"}),
                (103, "delta", {"delta": "RESET 键"}), (104, "final", {"answer": "按住RESET 键", "status": "completed"})]
        for seq, name, data in sent:
            await a.publish("s1", seq, name, data)
        assert await asyncio.wait_for(live, 10) == sent
        assert await b.info("s1") == {"owner": "alice", "done": True, "result_seq": 104}
        assert await collect(b, "s1") == sent[-1:]  # connecting after the end: the result alone
        assert await collect(b, "s1", after=102) == sent[2:]  # Last-Event-ID 102: what came after it
        assert await b.open_run("s1", "alice")  # ended: the session may ask again
        assert await b.info("s1") == {"owner": "alice", "done": False, "result_seq": 0}
        assert await b.info("nobody") is None
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_run_whose_replica_died_ends_for_its_followers(redis_url):
    dead, follower = RunBus(redis_url, busy_ttl_s=1), RunBus(redis_url)
    try:
        assert await dead.open_run("s2", "alice")
        await dead.publish("s2", 7, "delta", {"delta": "一半"})
        events = await asyncio.wait_for(collect(follower, "s2"), 10)  # nothing more comes: its keys expire
        assert events == [(7, "delta", {"delta": "一半"}), (0, "error", LOST)]
        assert await follower.open_run("s2", "alice")  # the session is free again
    finally:
        await dead.aclose()
        await follower.aclose()
