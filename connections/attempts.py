"""A brake on guessing connect codes: failed ``/connect`` attempts per sender and per chat, in a window.

Codes are long and random, so guessing one is hopeless anyway; the brake keeps it hopeless (and keeps a
script from hammering the database) without getting in the way of a person who mistyped once or twice.
A successful connect clears the sender's and the chat's count. Counts live in memory: they are per
instance and start from zero after a restart, which an attacker cannot cause.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable


class AttemptLimiter:
    """At most ``limit`` failures per key in any ``window`` seconds."""

    def __init__(self, limit: int, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self.clock = clock
        self._failures: dict[Hashable, deque[float]] = {}

    def _recent(self, key: Hashable, now: float) -> deque[float]:
        times = self._failures.get(key)
        if times is None:
            return deque()
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
        return times

    def blocked_for(self, keys: Iterable[Hashable]) -> float:
        """Seconds until every key may try again (0 when none is blocked)."""
        now = self.clock()
        wait = 0.0
        for key in keys:
            times = self._recent(key, now)
            if len(times) >= self.limit:
                wait = max(wait, times[0] + self.window - now)
        return wait

    def failed(self, keys: Iterable[Hashable]) -> None:
        now = self.clock()
        for key in keys:
            self._recent(key, now)
            self._failures.setdefault(key, deque()).append(now)

    def succeeded(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self._failures.pop(key, None)
