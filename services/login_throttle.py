"""Failed logins per user name and per address: each failure waits longer (the delay doubles), and
`max_failures` in a row lock that name or address for `lock_s`, right password or not.

Every attempt counts as a failure *before* its password is checked, in one atomic step: N guesses
sent at once count N, so a burst gets `max_failures` of them checked and the rest refused, whatever
they hold. A right password then takes its attempt back (`succeeded`).

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
    """The rule and its limits; where the counts live is the subclass's.

    One login is `attempt()` (refused when it returns more than 0), the password check, then
    `failed()` or `succeeded()`."""

    def __init__(self, max_failures: int = 5, lock_s: float = 300.0, delay_s: float = 0.5):
        self.max_failures, self.lock_s, self.delay_s = max_failures, lock_s, delay_s

    def delay(self, count: int) -> float:
        """The wait after the count-th failure in a row (none when it locked)."""
        return min(self.delay_s * 2 ** (count - 1), MAX_DELAY_S) if count else 0.0

    def locked(self, name: str, address: str) -> float:
        """Seconds the name or the address stays locked (0 when neither is)."""
        raise NotImplementedError

    def attempt(self, name: str, address: str) -> float:
        """Count this attempt as a failure, atomically; the seconds the name or address is locked
        (then the password must not be checked), 0 when it may be."""
        raise NotImplementedError

    def failed(self, name: str, address: str) -> float:
        """The attempt's password was wrong: a run that reached `max_failures` locks; the delay to
        wait before answering."""
        raise NotImplementedError

    def succeeded(self, name: str, address: str) -> None:
        """The attempt's password was right: it was no failure of the address, and the name's run ends."""
        raise NotImplementedError


class MemoryLoginThrottle(LoginThrottle):
    """The counts in this process's memory."""

    def __init__(self, max_failures: int = 5, lock_s: float = 300.0, delay_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(max_failures, lock_s, delay_s)
        self.clock = clock
        self._seen: dict[str, _Failures] = {}
        self._lock = threading.Lock()

    def _wait(self, keys: list[str], now: float) -> float:
        return max([self._seen[k].locked_until - now for k in keys if k in self._seen] + [0.0])

    def locked(self, name: str, address: str) -> float:
        with self._lock:
            return self._wait(throttle_keys(name, address), self.clock())

    def attempt(self, name: str, address: str) -> float:
        now, keys = self.clock(), throttle_keys(name, address)
        with self._lock:
            wait = self._wait(keys, now)
            if wait > 0:
                return wait
            for key in keys:
                entry = self._seen.setdefault(key, _Failures())
                if now - entry.last > self.lock_s:  # an old run of failures is forgotten
                    entry.count = 0
                entry.count, entry.last = entry.count + 1, now
                if entry.count > self.max_failures:  # more guesses in flight than the rule allows
                    entry.count, entry.locked_until = 0, now + self.lock_s
                    wait = self.lock_s
            return wait

    def failed(self, name: str, address: str) -> float:
        now, delay = self.clock(), 0.0
        with self._lock:
            for key in throttle_keys(name, address):
                entry = self._seen.setdefault(key, _Failures())
                if entry.count >= self.max_failures:
                    entry.count, entry.locked_until = 0, now + self.lock_s
                delay = max(delay, self.delay(entry.count))
        return delay

    def succeeded(self, name: str, address: str) -> None:
        keys = throttle_keys(name, address)
        with self._lock:
            for i, key in enumerate(keys):
                if key in self._seen:
                    entry = self._seen[key]
                    entry.count = 0 if i == 0 else max(0, entry.count - 1)


# KEYS: lock and count key of each throttled key, in pairs; ARGV: max_failures, lock_ms.
# Returns the milliseconds a lock still holds (0: the attempt was counted and may be checked).
_ATTEMPT = """
local wait = 0
for i = 1, #KEYS, 2 do
  local ttl = redis.call('PTTL', KEYS[i])
  if ttl > wait then wait = ttl end
end
if wait > 0 then return wait end
for i = 1, #KEYS, 2 do
  local n = redis.call('INCR', KEYS[i + 1])
  redis.call('PEXPIRE', KEYS[i + 1], ARGV[2])
  if n > tonumber(ARGV[1]) then
    redis.call('SET', KEYS[i], 1, 'PX', ARGV[2])
    redis.call('DEL', KEYS[i + 1])
    wait = tonumber(ARGV[2])
  end
end
return wait
"""
# Same KEYS and ARGV: a run that reached max_failures locks; returns each key's count left.
_FAILED = """
local counts = {}
for i = 1, #KEYS, 2 do
  local n = tonumber(redis.call('GET', KEYS[i + 1]) or '0')
  if n >= tonumber(ARGV[1]) then
    redis.call('SET', KEYS[i], 1, 'PX', ARGV[2])
    redis.call('DEL', KEYS[i + 1])
    n = 0
  end
  counts[#counts + 1] = n
end
return counts
"""
# KEYS: the name's count, then (optionally) the address's count.
_SUCCEEDED = """
redis.call('DEL', KEYS[1])
if KEYS[2] and tonumber(redis.call('GET', KEYS[2]) or '0') > 0 then redis.call('DECR', KEYS[2]) end
return 1
"""


class RedisLoginThrottle(LoginThrottle):
    """The same rule with the counts in Redis: a run of failures is a counter that expires `lock_s`
    after the last attempt, a lock is a key that expires when the lock ends. Each step is one Lua
    script, so replicas counting at the same moment never lose a count."""

    def __init__(self, url: str, max_failures: int = 5, lock_s: float = 300.0, delay_s: float = 0.5):
        import redis

        super().__init__(max_failures, lock_s, delay_s)
        self._redis = redis.Redis.from_url(url, decode_responses=True, socket_timeout=5)
        self._attempt = self._redis.register_script(_ATTEMPT)
        self._failed = self._redis.register_script(_FAILED)
        self._succeeded = self._redis.register_script(_SUCCEEDED)

    def _call(self, fn: Callable):
        from redis.exceptions import RedisError

        try:
            return fn()
        except (RedisError, OSError) as exc:
            raise StorageError(f"登录限制无法经 Redis 记录：{exc}", cause=exc) from exc

    def _pairs(self, name: str, address: str) -> list[str]:
        return [f"{PREFIX}{kind}:{key}" for key in throttle_keys(name, address) for kind in ("lock", "count")]

    @property
    def _limits(self) -> list[int]:
        return [self.max_failures, max(1, int(self.lock_s * 1000))]

    def locked(self, name: str, address: str) -> float:
        ttls = self._call(lambda: [self._redis.pttl(f"{PREFIX}lock:{k}") for k in throttle_keys(name, address)])
        return max([t / 1000 for t in ttls if t > 0] + [0.0])

    def attempt(self, name: str, address: str) -> float:
        return int(self._call(lambda: self._attempt(keys=self._pairs(name, address), args=self._limits))) / 1000

    def failed(self, name: str, address: str) -> float:
        counts = self._call(lambda: self._failed(keys=self._pairs(name, address), args=self._limits))
        return max(self.delay(int(n)) for n in counts)

    def succeeded(self, name: str, address: str) -> None:
        keys = [f"{PREFIX}count:{k}" for k in throttle_keys(name, address)]
        self._call(lambda: self._succeeded(keys=keys))


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
