"""Streaming replies: one message edited in place, paced to each platform's budget.

A channel implements only a small :class:`ReplyTransport` (send, edit, send files). Everything about pacing
is here, once: the per-chat :class:`RateBudget`, coalescing (only the newest text is ever sent; stale
intermediate updates are dropped), ``retry_after`` handling, splitting at the platform limit, and the
guarantee that the final text is delivered — by editing, by retrying, and finally by a new message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

from channels import observe
from channels.errors import ChannelError, EditFailed, MessageNotModified, RetryAfter
from channels.splitter import split_text
from channels.types import ReplyLimits

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_FINAL_ATTEMPTS = 3
MAX_RETRY_WAIT = 60.0
FINAL_RETRY_BACKOFF = 0.5  # seconds before the 2nd try of a failed final; doubles each try


class ReplyTransport(ABC):
    """The platform half of a reply: the few calls a channel must implement.

    ``send`` returns an opaque reference to the created message; ``edit`` replaces its whole text.
    Both raise :mod:`channels.errors` types. ``fallback=True`` asks for the plainest form the platform
    has (e.g. a text message instead of a card) after an edit failed.
    """

    @abstractmethod
    async def send(self, text: str, *, fallback: bool = False) -> str: ...

    @abstractmethod
    async def edit(self, ref: str, text: str) -> None: ...

    async def send_files(self, files: Sequence[Path]) -> None:
        """Deliver files produced by the agent. Channels without file support say so in text."""
        if files:
            names = ", ".join(p.name for p in files)
            await self.send(f"(files could not be attached on this platform: {names})")

    async def typing(self) -> None:  # noqa: B027 - optional hook
        """Show a typing indicator where the platform has one."""

    async def finished(self) -> None:  # noqa: B027 - optional hook
        """Called once after the final text and files were delivered (e.g. to clear a typing state)."""


class ObservedTransport(ReplyTransport):
    """Reports each call (and each rate limit) of ``inner`` for ``provider``, then delegates."""

    def __init__(self, inner: ReplyTransport, provider: str) -> None:
        self.inner = inner
        self.provider = provider

    async def _counted(self, call: Awaitable[T]) -> T:
        observe.emit(self.provider, observe.CALL)
        try:
            return await call
        except RetryAfter:
            observe.emit(self.provider, observe.RATE_LIMITED)
            raise

    async def send(self, text: str, *, fallback: bool = False) -> str:
        return await self._counted(self.inner.send(text, fallback=fallback))

    async def edit(self, ref: str, text: str) -> None:
        await self._counted(self.inner.edit(ref, text))

    async def send_files(self, files: Sequence[Path]) -> None:
        await self._counted(self.inner.send_files(files))

    async def typing(self) -> None:
        await self.inner.typing()

    async def finished(self) -> None:
        await self.inner.finished()


class RateBudget:
    """Spacing of outbound calls for one chat; shared by every reply in that chat.

    A token bucket holding ``burst`` calls, refilled one per ``min_interval``: the placeholder and the
    first real text go out back to back (so the first words are not held for a whole interval), while
    sustained streaming settles at one call per interval.
    """

    def __init__(self, min_interval: float, burst: int = 2) -> None:
        self.min_interval = min_interval
        self.burst = burst
        self._tokens = float(burst)
        self._updated = time.monotonic()
        self._blocked_until = 0.0
        self._lock = asyncio.Lock()

    def penalize(self, seconds: float) -> None:
        """The platform said wait: nothing goes to this chat before then, and no burst after it."""
        self._blocked_until = max(self._blocked_until, time.monotonic() + min(seconds, MAX_RETRY_WAIT))
        self._tokens = 0.0
        self._updated = self._blocked_until

    def _refill(self, now: float) -> None:
        if self.min_interval <= 0:
            self._tokens = float(self.burst)
        elif now > self._updated:
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) / self.min_interval)
        self._updated = max(self._updated, now)

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                if now < self._blocked_until:
                    await asyncio.sleep(self._blocked_until - now)
                    continue
                self._refill(now)
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return
                await asyncio.sleep((1.0 - self._tokens) * self.min_interval)


class BudgetRegistry:
    """Per-chat budgets, bounded so a bot in thousands of chats does not grow without limit."""

    def __init__(self, min_interval: float, max_chats: int = 10_000) -> None:
        self.min_interval = min_interval
        self.max_chats = max_chats
        self._budgets: OrderedDict[str, RateBudget] = OrderedDict()

    def for_chat(self, chat_key: str) -> RateBudget:
        budget = self._budgets.get(chat_key)
        if budget is None:
            budget = self._budgets[chat_key] = RateBudget(self.min_interval)
            if len(self._budgets) > self.max_chats:
                self._budgets.popitem(last=False)
        else:
            self._budgets.move_to_end(chat_key)
        return budget


class ReplyStream:
    """start() → update(text) … → finish(text, files), driven by the manager.

    ``update`` never blocks: it records the newest text and a background pump sends it when the chat's
    budget allows. ``finish`` stops the pump after its in-flight call and delivers the final text.
    """

    def __init__(
        self,
        transport: ReplyTransport,
        budget: RateBudget,
        limits: ReplyLimits,
        *,
        resume_ref: str | None = None,
        provider: str = "unknown",
    ) -> None:
        self.transport: ReplyTransport = ObservedTransport(transport, provider)
        self.budget = budget
        self.limits = limits
        self._sent: list[tuple[str, str]] = []  # (ref, text) per visible message, in order
        if resume_ref:
            self._sent.append((resume_ref, ""))
        self._latest: str | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._pump: asyncio.Task[None] | None = None
        self.finished = False

    @property
    def ref(self) -> str | None:
        """Reference of the first visible message (stored so a resumed run edits it, not a new one)."""
        return self._sent[0][0] if self._sent else None

    async def start(self, placeholder: str = "…") -> None:
        if not self.limits.supports_edit:
            return  # final-only platforms: nothing to show until finish()
        if not self._sent:
            await self.budget.acquire()
            try:
                ref = await self.transport.send(placeholder)
            except RetryAfter as exc:
                # The placeholder (or a queued notice) shares the chat's budget: whatever goes to this
                # chat next waits as long as the platform asked.
                self.budget.penalize(exc.retry_after)
                raise
            self._sent.append((ref, placeholder))
        elif self._sent[0][1] != placeholder:
            self.update(placeholder)

    def update(self, text: str) -> None:
        if self._closing or not self.limits.supports_edit:
            return
        self._latest = text
        self._wake.set()
        if self._pump is None:  # started on first use: a turn that finishes at once never needs it
            self._pump = asyncio.get_running_loop().create_task(self._run_pump(), name="reply-pump")

    async def _run_pump(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            await self.budget.acquire()
            text = self._latest
            if self._closing or text is None:
                return
            try:
                await self._sync(self._chunks(text), allow_new=True)
            except RetryAfter as exc:
                self.budget.penalize(exc.retry_after)  # drop this update; newer text goes later
            except MessageNotModified:
                pass
            except ChannelError as exc:
                log.info("intermediate reply update failed: %s", exc)
            except Exception:  # a bug in a transport must not kill the final delivery
                log.exception("intermediate reply update crashed")

    def _chunks(self, text: str) -> list[str]:
        """While streaming, full chunks settle and only the last one keeps being edited."""
        return split_text(text if text.strip() else "…", self.limits.text_limit)

    async def _sync(self, chunks: list[str], *, allow_new: bool) -> None:
        """Make the visible messages equal ``chunks``: edit what differs, send what is missing.

        The caller has acquired the budget for the first call; later calls acquire their own.
        """
        needs_budget = False
        for index, chunk in enumerate(chunks):
            if index < len(self._sent):
                ref, shown = self._sent[index]
                if shown == chunk:
                    continue
                if needs_budget:
                    await self.budget.acquire()
                needs_budget = True
                with contextlib.suppress(MessageNotModified):
                    await self.transport.edit(ref, chunk)
                self._sent[index] = (ref, chunk)
            elif allow_new:
                if needs_budget:
                    await self.budget.acquire()
                needs_budget = True
                ref = await self.transport.send(chunk)
                self._sent.append((ref, chunk))

    async def finish(self, text: str, files: Sequence[Path] = ()) -> None:
        """Deliver the final text (always) and any files. Safe to call once."""
        if self.finished:
            return
        self._closing = True
        self._wake.set()
        if self._pump is not None:
            try:
                await self._pump
            except asyncio.CancelledError:
                # The pump's own end is expected; the caller being cancelled (a shutdown cutting off a
                # hung delivery) is not, and swallowing it left the turn stuck in delivery forever.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        chunks = split_text(text if text.strip() else "(no answer)", self.limits.text_limit)
        await self._deliver_final(chunks)
        if files:
            await self.budget.acquire()
            try:
                await self.transport.send_files(files)
            except RetryAfter as exc:
                self.budget.penalize(exc.retry_after)
                raise
        self.finished = True
        await self.transport.finished()

    async def _deliver_final(self, chunks: list[str]) -> None:
        for attempt in range(1, MAX_FINAL_ATTEMPTS + 1):
            await self.budget.acquire()
            try:
                await self._sync(chunks, allow_new=True)
                return
            except RetryAfter as exc:
                log.info("final reply rate limited (attempt %d): %s", attempt, exc)
                self.budget.penalize(exc.retry_after)
            except EditFailed as exc:
                log.info("editing the reply failed, sending it as a new message: %s", exc)
                break
            except ChannelError as exc:
                log.info("final reply failed (attempt %d): %s", attempt, exc)
                self.budget.penalize(FINAL_RETRY_BACKOFF * 2 ** (attempt - 1))
        await self._send_fresh(chunks)

    async def _send_fresh(self, chunks: list[str]) -> None:
        """Last resort: post the reply as new messages, in the platform's plainest form."""
        remaining = [c for i, c in enumerate(chunks) if i >= len(self._sent) or self._sent[i][1] != c]
        for chunk in remaining:
            for attempt in range(1, MAX_FINAL_ATTEMPTS + 1):
                await self.budget.acquire()
                try:
                    self._sent.append((await self.transport.send(chunk, fallback=True), chunk))
                    break
                except RetryAfter as exc:
                    self.budget.penalize(exc.retry_after)
                    if attempt == MAX_FINAL_ATTEMPTS:
                        raise
