"""Login throttling shared by replicas through a real Redis: guesses spread over two replicas count
together, a lock set on one holds on the other, and a Redis outage leaves logins working."""
from __future__ import annotations

import logging
import socket
import time

from queue_fixtures import redis_url  # noqa: F401 (fixture)
from services.login_throttle import RedisLoginThrottle
from ui.auth import check_login


def test_failures_on_two_replicas_count_together_and_lock_both(redis_url):
    a = RedisLoginThrottle(redis_url, max_failures=4, lock_s=1.5, delay_s=0.05)
    b = RedisLoginThrottle(redis_url, max_failures=4, lock_s=1.5, delay_s=0.05)
    assert a.failed("mallory", "10.1.0.1") == 0.05
    assert b.failed("Mallory ", "10.1.0.2") == 0.1  # the same name, another replica and address
    assert a.failed("mallory", "10.1.0.3") == 0.2
    assert b.locked("mallory", "10.1.0.9") == 0.0
    # the 4th in a row locks the name; the wait is the new address's first
    assert b.failed("mallory", "10.1.0.4") == 0.05
    assert 1.0 < a.locked("mallory", "") <= 1.5 and b.locked("MALLORY", "10.1.0.9") > 1.0
    assert a.locked("trent", "10.1.0.1") == 0.0  # one failure of that address is no lock
    time.sleep(1.6)
    assert a.locked("mallory", "") == 0.0 and b.failed("mallory", "10.1.0.5") == 0.05  # a new run


def test_a_success_clears_the_name_on_every_replica(redis_url):
    a = RedisLoginThrottle(redis_url, max_failures=3, lock_s=30, delay_s=0.01)
    b = RedisLoginThrottle(redis_url, max_failures=3, lock_s=30, delay_s=0.01)
    a.failed("peggy", "")
    a.failed("peggy", "")
    b.succeeded("peggy")
    assert a.failed("peggy", "") == 0.01 and a.locked("peggy", "") == 0.0


async def test_logins_through_the_shared_throttle_and_without_redis(env, tmp_path, redis_url, caplog):
    settings = env(DATA_DIR=str(tmp_path / "data"), AUTH_USERS="walter:wpass", REDIS_URL=redis_url,
                   LOGIN_MAX_FAILURES=2, LOGIN_LOCK_S=30, LOGIN_DELAY_S=0)
    assert await check_login(settings, "walter", "guess", "10.2.0.1") is None
    assert await check_login(settings, "walter", "guess", "10.2.0.2") is None  # locked now
    other_replica = RedisLoginThrottle(redis_url, 2, 30, 0)
    assert other_replica.locked("walter", "") > 25
    assert await check_login(settings, "walter", "wpass", "10.2.0.3") is None  # right password, still locked

    with socket.socket() as s:  # a port nobody listens on: Redis is down
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    caplog.set_level(logging.WARNING)
    down = env(REDIS_URL=f"redis://127.0.0.1:{closed}/0")
    assert (await check_login(down, "walter", "wpass", "10.2.0.4")).name == "walter"
    assert "shared login throttle unavailable" in caplog.text and "登录限制无法经 Redis 记录" in caplog.text
