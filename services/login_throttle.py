"""Failed logins per user name and per address: each failure waits longer (the delay doubles), and
`max_failures` in a row lock that name or address for `lock_s`, right password or not.

In one process the counts live in memory; with `REDIS_URL` every replica counts in Redis, so an
attacker gains nothing by spreading guesses over replicas.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable

from services.errors import StorageError
from services.settings import Settings

MAX_DELAY_S = 8.0
PREFIX = "zgzk:login:"


def throttle_keys(name: str, address: str) -> list[str]:
    return [f"user:{name.strip().lower()}"] + ([f"addr:{address}"] if address else [])


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0
    locked_until: float = 0.0


class LoginThrottle:
    """The rule and its limits; where the counts live is the subclass's."""

    def __init__(self, max_failures: int = 5, lock_s: float = 300.0, delay_s: float = 0.5):
        self.max_failures, self.lock_s, self.delay_s = max_failures, lock_s, delay_s

    def delay(self, count: int) -> float:
        """The wait after the count-th failure in a row (none when it locked)."""
        return min(self.delay_s * 2 ** (count - 1), MAX_DELAY_S) if count else 0.0

    def locked(self, name: str, address: str) -> float:
        """Seconds the name or the address stays locked (0 when neither is)."""
        raise NotImplementedError

    def failed(self, name: str, address: str) -> float:
        """Record a failure; the delay to wait before answering."""
        raise NotImplementedError

    def succeeded(self, name: str) -> None:
        raise NotImplementedError


class MemoryLoginThrottle(LoginThrottle):
    """The counts in this process's memory."""

    def __init__(self, max_failures: int = 5, lock_s: float = 300.0, delay_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(max_failures, lock_s, delay_s)
        self.clock = clock
        self._seen: dict[str, _Failures] = {}
        self._lock = threading.Lock()

    def locked(self, name: str, address: str) -> float:
        now = self.clock()
        with self._lock:
            return max([self._seen[k].locked_until - now for k in throttle_keys(name, address) if k in self._seen]
                       + [0.0])

    def failed(self, name: str, address: str) -> float:
        now, delay = self.clock(), 0.0
        with self._lock:
            for key in throttle_keys(name, address):
                entry = self._seen.setdefault(key, _Failures())
                if now - entry.last > self.lock_s:  # an old run of failures is forgotten
                    entry.count = 0
                entry.count, entry.last = entry.count + 1, now
                if entry.count >= self.max_failures:
                    entry.count, entry.locked_until = 0, now + self.lock_s
                delay = max(delay, self.delay(entry.count))
        return delay

    def succeeded(self, name: str) -> None:
        with self._lock:
            self._seen.pop(throttle_keys(name, "")[0], None)


class RedisLoginThrottle(LoginThrottle):
    """The same rule with the counts in Redis: a run of failures is a counter that expires `lock_s`
    after the last failure, a lock is a key that expires when the lock ends."""

    def __init__(self, url: str, max_failures: int = 5, lock_s: float = 300.0, delay_s: float = 0.5):
        import redis

        super().__init__(max_failures, lock_s, delay_s)
        self._redis = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)

    def _call(self, fn: Callable):
        from redis.exceptions import RedisError

        try:
            return fn()
        except (RedisError, OSError) as exc:
            raise StorageError(f"登录限制无法经 Redis 记录：{exc}", cause=exc) from exc

    def locked(self, name: str, address: str) -> float:
        ttls = self._call(lambda: [self._redis.pttl(f"{PREFIX}lock:{k}") for k in throttle_keys(name, address)])
        return max([t / 1000 for t in ttls if t > 0] + [0.0])

    def failed(self, name: str, address: str) -> float:
        lock_ms, delay = max(1, int(self.lock_s * 1000)), 0.0
        for key in throttle_keys(name, address):
            count_key = f"{PREFIX}count:{key}"

            def count() -> int:
                with self._redis.pipeline(transaction=True) as pipe:
                    pipe.incr(count_key)
                    pipe.pexpire(count_key, lock_ms)
                    return int(pipe.execute()[0])

            n = self._call(count)
            if n >= self.max_failures:
                self._call(lambda: self._redis.pipeline(transaction=True)
                           .set(f"{PREFIX}lock:{key}", 1, px=lock_ms).delete(count_key).execute())
                n = 0
            delay = max(delay, self.delay(n))
        return delay

    def succeeded(self, name: str) -> None:
        self._call(lambda: self._redis.delete(f"{PREFIX}count:{throttle_keys(name, '')[0]}"))


_throttles: dict[tuple, LoginThrottle] = {}
_throttles_lock = threading.Lock()


def get_login_throttle(settings: Settings) -> LoginThrottle:
    """One throttle per process, backend and limits (tests change the limits)."""
    key = (settings.redis_url, settings.login_max_failures, settings.login_lock_s, settings.login_delay_s)
    with _throttles_lock:
        if key not in _throttles:
            limits = (settings.login_max_failures, settings.login_lock_s, settings.login_delay_s)
            _throttles[key] = (RedisLoginThrottle(settings.redis_url, *limits) if settings.redis_url
                               else MemoryLoginThrottle(*limits))
        return _throttles[key]
