"""Health checks that tell the truth and stay cheap: a real round trip, cached for a moment.

Why: ``/health`` said ``database ok`` and ``agent ready`` while every turn failed on a checkpoint
connection that had died with a PostgreSQL restart; and a load balancer asking ``/ready`` every second
on every instance must not become load on the database. A :class:`CachedProbe` runs its check at most
once per ``max_age`` seconds (callers in between get the last answer, and callers during a run share
it), and never waits longer than ``timeout`` for it: a database that hangs reads as unreachable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from bot import metrics
from bot.bounded import NoAnswer, within

#: How old an answer may be before the check runs again.
MAX_AGE_SECONDS = 2.0
#: How long one check may take before it counts as failed.
TIMEOUT_SECONDS = 2.0

#: Runs one check: None when healthy, else the reason in a few words (no secrets: it is served).
Check = Callable[[], Awaitable[str | None]]


class CachedProbe:
    """One component's check (see the module docstring); ``component`` names its metric label."""

    def __init__(
        self,
        component: str,
        check: Check,
        *,
        max_age: float = MAX_AGE_SECONDS,
        timeout: float = TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.component = component
        self._check = check
        self.max_age = max_age
        self.timeout = timeout
        self._clock = clock
        self._answer: str | None = None
        self._at: float | None = None
        self._running: asyncio.Future[str | None] | None = None
        self._generation = 0  # bumped by forget(): a check started before it is not cached

    async def problem(self) -> str | None:
        """None when the component is healthy (as of at most ``max_age`` ago), else why not."""
        if self._at is not None and self._clock() - self._at < self.max_age:
            return self._answer
        if self._running is None:
            self._running = asyncio.ensure_future(self._run())
        running = self._running
        return await asyncio.shield(running)

    def forget(self) -> None:
        """Drop the cached answer: the component's state has just changed, so it no longer holds.

        Without this, a service whose agent became ready went on answering ``/ready`` with the 503
        "agent starting" it had cached while the agent was built, for up to ``max_age`` more seconds.
        A check already running was asked before the change: its callers still get its answer, but
        it is not kept, and the next caller runs a new check."""
        self._answer, self._at, self._running = None, None, None
        self._generation += 1

    async def _run(self) -> str | None:
        generation = self._generation
        try:
            # Not asyncio.timeout: cancelling a query on a stalled connection can take seconds longer
            # than its time (bot/bounded.py); a health answer must come when the database does not.
            answer = await within(self._check(), self.timeout)
        except NoAnswer:
            answer = f"no answer within {self.timeout:g} s"
        except Exception as exc:  # a check that raises is a failed check, never a failed /health
            answer = f"check failed ({type(exc).__name__})"
        if generation == self._generation:  # else asked before forget(): its callers only
            self._answer, self._at, self._running = answer, self._clock(), None
            metrics.set_component_up(self.component, answer is None)
        return answer
