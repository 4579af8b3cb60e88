"""Rate-limit budgets: a token bucket per scope (chat, workspace, bot), shared by every reply drawing on it.

Why one place: each platform states its limits per scope (Telegram ~1 message/s per chat and 20/min per
group, Slack tiers per workspace …); a reply draws on every scope its call kind touches, finals first.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol

log = logging.getLogger(__name__)
#: The longest a platform's ``retry_after`` may hold a scope (a bigger value is a bug or an attack).
MAX_RETRY_WAIT = 60.0


class RateBudget:
    """Spacing of outbound calls for one rate-limit scope (a chat, a workspace's method, a group's cap).

    A token bucket holding ``burst`` calls, refilled one per ``min_interval``: the placeholder and the
    first real text go out back to back (so the first words are not held for a whole interval), while
    sustained streaming settles at one call per interval.

    Waiting callers are served in order, except that a *priority* call (a final answer) goes ahead of
    every ordinary one, and only priority calls may take the last ``reserve`` tokens: in a scope busy
    with intermediate edits a final still goes out as soon as the platform allows, not after them.
    ``held_by_retry_after`` says whether the platform's "wait N seconds" on a call holds this whole
    scope (a chat, a Slack method's workspace bucket) or only the chat it was answered for (a bot-wide
    cap that a flood wait in one chat says nothing about).
    """

    __slots__ = (
        "_arrivals",
        "_blocked_until",
        "_changed",
        "_tokens",
        "_updated",
        "_waiting",
        "burst",
        "held_by_retry_after",
        "min_interval",
        "reserve",
    )

    def __init__(
        self, min_interval: float, burst: int = 2, *, reserve: int = 0, held_by_retry_after: bool = True
    ) -> None:
        if not 0 <= reserve < burst:
            raise ValueError("a budget must leave ordinary calls at least one of its burst tokens")
        self.min_interval = min_interval
        self.burst = burst
        self.reserve = reserve
        self.held_by_retry_after = held_by_retry_after
        self._tokens = float(burst)
        self._updated = time.monotonic()
        self._blocked_until = 0.0
        # One per chat, kept for thousands of chats: small, and no lock or queue until a call must wait
        # (each of those is an object the garbage collector would walk in every full collection).
        self._waiting: list[tuple[int, int]] | None = None  # heap of (0 = priority / 1 = ordinary, arrival)
        self._arrivals = 0
        self._changed: asyncio.Condition | None = None

    def penalize(self, seconds: float) -> None:
        """The platform said wait: nothing goes to this scope before then, and no burst after it."""
        self._blocked_until = max(self._blocked_until, time.monotonic() + min(seconds, MAX_RETRY_WAIT))
        self._tokens = 0.0
        self._updated = self._blocked_until

    def _refill(self, now: float) -> None:
        if self.min_interval <= 0:
            self._tokens = float(self.burst)
        elif now > self._updated:
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) / self.min_interval)
        self._updated = max(self._updated, now)

    def _wait_time(self, now: float, priority: bool) -> float:
        """Seconds until a call of this kind may go (0: now)."""
        if now < self._blocked_until:
            return self._blocked_until - now
        self._refill(now)
        needed = 1.0 if priority else 1.0 + self.reserve
        return max(0.0, (needed - self._tokens) * self.min_interval)

    async def acquire(self, *, priority: bool = False) -> None:
        if not self._waiting and self._wait_time(time.monotonic(), priority) <= 0:
            # Nobody queued and a token free: what the queue below would decide at once, without a
            # lock, a ticket and a wake-up of nobody (every reply call of an idle chat comes here).
            self._tokens -= 1.0
            return
        self._arrivals += 1
        ticket = (0 if priority else 1, self._arrivals)
        if self._changed is None:
            self._changed = asyncio.Condition()
        if self._waiting is None:
            self._waiting = []
        changed, waiting = self._changed, self._waiting
        async with changed:
            heapq.heappush(waiting, ticket)
            changed.notify_all()  # a priority call may now be first: the old head re-checks
            try:
                while True:
                    if waiting[0] != ticket:
                        await changed.wait()
                        continue
                    wait = self._wait_time(time.monotonic(), priority)
                    if wait <= 0:
                        self._tokens -= 1.0
                        return
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await changed.wait()
            finally:
                waiting.remove(ticket)
                heapq.heapify(waiting)
                changed.notify_all()


class Budget(Protocol):
    """What a transport that paces its own extra calls (a second file upload) needs of a budget."""

    async def acquire(self, *, priority: bool = False) -> None: ...

    def penalize(self, seconds: float) -> None: ...


#: What a reply call does. A channel puts each kind on the budgets its platform meters it by (Slack meters
#: chat.update per workspace, chat.postMessage per channel).
CallKind = Literal["send", "edit", "native", "typing", "files"]
CALL_KINDS: tuple[CallKind, ...] = ("send", "edit", "native", "typing", "files")


class Pacing:
    """The budgets one reply draws on: its chat's for every call, then the shared scopes per call kind.

    A call waits on each budget in order (the chat's first, so a chat that is itself the bottleneck
    does not hold tokens of a shared scope other chats could use). A ``RetryAfter`` holds the chat and
    every shared scope of that kind that is ``held_by_retry_after``.
    """

    def __init__(
        self, chat: RateBudget, shared: Mapping[CallKind, Sequence[RateBudget]] | None = None
    ) -> None:
        self.chat = chat
        given = shared or {}
        solo = (chat,)  # a kind with no shared scope (most kinds, on most platforms): one shared tuple
        self._budgets: dict[CallKind, tuple[RateBudget, ...]] = {
            kind: (chat, *(b for b in given[kind] if b is not chat)) if given.get(kind) else solo
            for kind in CALL_KINDS
        }

    def budgets(self, kind: CallKind) -> tuple[RateBudget, ...]:
        return self._budgets[kind]

    async def acquire(
        self, kind: CallKind, *, priority: bool = False, skip: tuple[RateBudget, ...] = ()
    ) -> None:
        for budget in self._budgets[kind]:
            if budget not in skip:
                await budget.acquire(priority=priority)

    def penalize(self, kind: CallKind, seconds: float) -> None:
        for budget in self._budgets[kind]:
            if budget is self.chat or budget.held_by_retry_after:
                budget.penalize(seconds)

    def of_kind(self, kind: CallKind) -> Budget:
        """These budgets as one, for a transport pacing its own extra calls of ``kind``."""
        return _KindBudget(self, kind)


class _KindBudget:
    def __init__(self, pacing: Pacing, kind: CallKind) -> None:
        self.pacing, self.kind = pacing, kind

    async def acquire(self, *, priority: bool = False) -> None:
        await self.pacing.acquire(self.kind, priority=priority)

    def penalize(self, seconds: float) -> None:
        self.pacing.penalize(self.kind, seconds)


class BudgetRegistry:
    """Budgets per scope key (chat, workspace, group), bounded so thousands of chats do not grow it."""

    def __init__(
        self,
        min_interval: float,
        max_chats: int = 10_000,
        *,
        burst: int = 2,
        reserve: int = 0,
        held_by_retry_after: bool = True,
    ) -> None:
        self.min_interval = min_interval
        self.max_chats = max_chats
        self.burst, self.reserve, self.held_by_retry_after = burst, reserve, held_by_retry_after
        self._budgets: OrderedDict[str, RateBudget] = OrderedDict()

    def for_chat(self, chat_key: str) -> RateBudget:
        budget = self._budgets.get(chat_key)
        if budget is None:
            budget = self._budgets[chat_key] = RateBudget(
                self.min_interval,
                self.burst,
                reserve=self.reserve,
                held_by_retry_after=self.held_by_retry_after,
            )
            if len(self._budgets) > self.max_chats:
                self._budgets.popitem(last=False)
        else:
            self._budgets.move_to_end(chat_key)
        return budget
