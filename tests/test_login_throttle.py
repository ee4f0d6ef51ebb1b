"""Login throttling: every attempt is counted before its password is checked, so a burst of
parallel guesses is held to the limit in one process and across replicas sharing a real Redis;
guesses spread over two replicas count together, a lock set on one holds on the other, a Redis
outage leaves logins working, and a wrong password takes as long for a name that exists as for
one that does not."""
from __future__ import annotations

import asyncio
import logging
import socket
import statistics
import time

import pytest

import services.accounts as accounts
import ui.auth
from queue_fixtures import redis_url  # noqa: F401 (fixture)
from services.accounts import password_identity
from services.login_throttle import LoginThrottle, MemoryLoginThrottle, RedisLoginThrottle, get_login_throttle
from ui.auth import check_login

BURST, RIGHT_AT = 30, 20


def fail(throttle: LoginThrottle, name: str, address: str) -> float:
    """One whole wrong attempt: counted up front, then found wrong; the delay it waits."""
    assert throttle.attempt(name, address) == 0.0
    return throttle.failed(name, address)


def test_failures_on_two_replicas_count_together_and_lock_both(redis_url):
    a = RedisLoginThrottle(redis_url, max_failures=4, lock_s=1.5, delay_s=0.05)
    b = RedisLoginThrottle(redis_url, max_failures=4, lock_s=1.5, delay_s=0.05)
    assert fail(a, "mallory", "10.1.0.1") == 0.05
    assert fail(b, "Mallory ", "10.1.0.2") == 0.1  # the same name, another replica and address
    assert fail(a, "mallory", "10.1.0.3") == 0.2
    assert b.locked("mallory", "10.1.0.9") == 0.0
    # the 4th in a row locks the name; the wait is the new address's first
    assert fail(b, "mallory", "10.1.0.4") == 0.05
    assert 1.0 < a.locked("mallory", "") <= 1.5 and b.locked("MALLORY", "10.1.0.9") > 1.0
    assert 1.0 < b.attempt("mallory", "10.1.0.9") <= 1.5  # refused, and not counted for the new address
    assert a.locked("trent", "10.1.0.1") == 0.0  # one failure of that address is no lock
    time.sleep(1.6)
    assert a.locked("mallory", "") == 0.0 and fail(b, "mallory", "10.1.0.5") == 0.05  # a new run


def test_a_success_clears_the_name_on_every_replica_and_is_no_failure_of_the_address(redis_url):
    a = RedisLoginThrottle(redis_url, max_failures=3, lock_s=30, delay_s=0.01)
    b = RedisLoginThrottle(redis_url, max_failures=3, lock_s=30, delay_s=0.01)
    fail(a, "peggy", "10.1.1.1")
    fail(a, "peggy", "10.1.1.1")
    assert b.attempt("peggy", "10.1.1.1") == 0.0
    b.succeeded("peggy", "10.1.1.1")
    assert fail(a, "peggy", "") == 0.01 and a.locked("peggy", "") == 0.0
    # the address has its two failures, not three: one more is its third, which locks it (the wait
    # is the new name's first)
    assert fail(a, "quentin", "10.1.1.1") == 0.01 and a.locked("someone", "10.1.1.1") > 25


def burst_throttle(throttle: LoginThrottle) -> None:
    """30 attempts counted at once (threads, no waiting between them): 5 may be checked, 25 are refused."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(BURST) as pool:
        waits = list(pool.map(lambda i: throttle.attempt("oscar", f"10.3.0.{i}"), range(BURST)))
    assert sum(w == 0 for w in waits) == throttle.max_failures
    assert throttle.locked("oscar", "") > 0


def test_attempts_at_once_are_each_counted_in_memory():
    burst_throttle(MemoryLoginThrottle(max_failures=5, lock_s=60, delay_s=0))


def test_attempts_at_once_are_each_counted_in_redis(redis_url):
    burst_throttle(RedisLoginThrottle(redis_url, max_failures=5, lock_s=60, delay_s=0))


async def burst_logins(settings, monkeypatch, address_of) -> None:
    """30 wrong passwords for one name at once, the right one 20th: only 5 passwords are checked,
    the right one is refused, and the name stays locked."""
    checked = []

    def counting(*args):  # the real check, counted
        checked.append(args[1])
        return password_identity(*args)

    monkeypatch.setattr(ui.auth, "password_identity", counting)
    passwords = [f"guess-{i}" for i in range(BURST)]
    passwords[RIGHT_AT - 1] = "vpass"
    results = await asyncio.gather(*(check_login(settings, "victor", p, address_of(i))
                                     for i, p in enumerate(passwords)))
    assert results == [None] * BURST
    assert len(checked) == settings.login_max_failures, checked
    assert get_login_throttle(settings).locked("victor", "") > 50
    assert await check_login(settings, "victor", "vpass", "10.9.9.9") is None


async def test_a_burst_of_wrong_passwords_locks_the_name_in_the_process(env, tmp_path, monkeypatch):
    settings = env(DATA_DIR=str(tmp_path / "data"), AUTH_USERS="victor:vpass", REDIS_URL="",
                   LOGIN_MAX_FAILURES=5, LOGIN_LOCK_S=60, LOGIN_DELAY_S=0.1)
    await burst_logins(settings, monkeypatch, lambda i: f"10.4.{i}.1")  # every guess from its own address


async def test_a_burst_of_wrong_passwords_locks_the_name_in_redis(env, tmp_path, monkeypatch, redis_url):
    settings = env(DATA_DIR=str(tmp_path / "data"), AUTH_USERS="victor:vpass", REDIS_URL=redis_url,
                   LOGIN_MAX_FAILURES=5, LOGIN_LOCK_S=60, LOGIN_DELAY_S=0.1)
    await burst_logins(settings, monkeypatch, lambda i: f"10.5.{i}.1")
    other_replica = RedisLoginThrottle(redis_url, 5, 60, 0.1)
    assert other_replica.locked("victor", "") > 50


async def test_a_burst_from_one_address_over_many_names_locks_the_address(env, tmp_path):
    settings = env(DATA_DIR=str(tmp_path / "data"), AUTH_USERS="wendy:wpass", REDIS_URL="",
                   LOGIN_MAX_FAILURES=5, LOGIN_LOCK_S=60, LOGIN_DELAY_S=0)
    results = await asyncio.gather(*(check_login(settings, f"user{i}", "guess", "10.6.0.1") for i in range(BURST)))
    assert results == [None] * BURST
    assert await check_login(settings, "wendy", "wpass", "10.6.0.1") is None  # the address is locked
    assert (await check_login(settings, "wendy", "wpass", "10.6.0.2")).name == "wendy"


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


@pytest.mark.parametrize("admin_password", ["", "admin-plain-pass"])
def test_a_wrong_password_takes_as_long_for_a_known_name_as_for_an_unknown_one(env, tmp_path, admin_password):
    settings = env(DATA_DIR=str(tmp_path / "data"), AUTH_USERS="kate:kpass", ADMIN_PASSWORD=admin_password)
    accounts.ensure_admin_password(settings)  # without ADMIN_PASSWORD the admin has a scrypt hash
    names = ("kate", "admin", "nobody-here")
    took: dict[str, list[float]] = {n: [] for n in names}
    password_identity(settings, "warm-up", "x")
    for round_ in range(11):  # interleaved, in turns, so load on the machine falls on every name alike
        for name in names[round_ % 3:] + names[:round_ % 3]:
            started = time.perf_counter()
            assert password_identity(settings, name, "wrong") is None
            took[name].append(time.perf_counter() - started)
    medians = {n: statistics.median(t) for n, t in took.items()}
    unknown = medians["nobody-here"]
    assert unknown > 0.005, medians  # a real key derivation ran
    for name in ("kate", "admin"):  # a path without the key derivation would be ~100% faster
        assert abs(medians[name] - unknown) < 0.5 * unknown, medians
    assert password_identity(settings, "kate", "kpass").name == "kate"
