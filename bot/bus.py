"""The message bus between channel workers and the manager.

Workers call :meth:`MessageBus.publish` (it is their ``InboundSink``); the manager consumes with
:meth:`get`. The bound counts every accepted-but-unfinished message, not just the queue, so memory stays
bounded even when many messages wait in per-thread lanes. When full, ``publish`` raises
:class:`channels.errors.Backpressure` *before* storing anything, so the platform redelivers later and
nothing is acknowledged-then-dropped.
"""

from __future__ import annotations

import asyncio
import logging

from bot.inbox import FAILED, Inbox, InboxEntry
from channels.errors import Backpressure
from channels.types import InboundMessage

log = logging.getLogger(__name__)


class MessageBus:
    def __init__(self, inbox: Inbox, capacity: int) -> None:
        self.inbox = inbox
        self.capacity = capacity
        self._queue: asyncio.Queue[InboxEntry | None] = asyncio.Queue()
        self._in_flight: set[str] = set()
        self._reserved = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self.refused = 0  # publishes turned away by back-pressure (what the platform must redeliver)

    def _reserve(self) -> None:
        self._reserved += 1
        self._idle.clear()

    def _unreserve(self) -> None:
        self._reserved -= 1
        if self._reserved == 0:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Return once every accepted message is finished (done, failed or abandoned)."""
        await self._idle.wait()

    @property
    def load(self) -> int:
        """Accepted messages not yet finished (plus those being stored right now)."""
        return self._reserved

    async def publish(self, message: InboundMessage) -> bool:
        """Store and enqueue ``message``. True if new, False if it was a duplicate that will not run again."""
        if self._closed:
            self.refused += 1
            raise Backpressure("the service is shutting down")
        if self._reserved >= self.capacity:
            self.refused += 1
            raise Backpressure(f"inbox full ({self.capacity} unfinished messages)")
        self._reserve()
        try:
            entry = await self.inbox.accept(message)
        except BaseException:
            self._unreserve()
            raise
        # Dead-lettered entries stay set aside: only the operator's ``switchboard inbox retry`` revives one.
        # A pending duplicate this process is not running belongs to another instance on the same
        # PostgreSQL database (this process queues its own pending entries at start): not run twice.
        if entry.duplicate and (entry.status != FAILED or entry.id in self._in_flight):
            self._unreserve()
            return False
        # New, or a redelivery of one that failed earlier and is not running: (re)run it.
        self._in_flight.add(entry.id)
        self._queue.put_nowait(entry)
        return not entry.duplicate

    async def resume_unfinished(self) -> int:
        """Queue every message a previous run accepted but did not finish. Called once at start-up."""
        entries = await self.inbox.unfinished()
        for entry in entries:
            if entry.id in self._in_flight:
                continue
            self._in_flight.add(entry.id)
            self._reserve()
            self._queue.put_nowait(entry)
        if entries:
            log.info("resuming %d unfinished message(s) from the inbox", len(entries))
        return len(entries)

    async def resume_retries(self) -> int:
        """Queue the entries an operator asked to retry (polled by the service while it runs)."""
        if self._closed:
            return 0
        queued = 0
        for entry in await self.inbox.take_retries():
            if entry.id in self._in_flight:
                continue
            self._in_flight.add(entry.id)
            self._reserve()
            self._queue.put_nowait(entry)
            queued += 1
        if queued:
            log.info("retrying %d inbox message(s) an operator queued", queued)
        return queued

    def redeliver_later(self, entry: InboxEntry, delay: float) -> None:
        """Run a failed entry again after ``delay`` seconds in this process, not only at the next start.

        It counts as unfinished meanwhile (``wait_idle`` waits for it). If the bus closes first, the
        entry stays failed in the inbox and the next start resumes it.
        """
        if self._closed or entry.id in self._in_flight:
            return
        self._in_flight.add(entry.id)
        self._reserve()
        asyncio.get_running_loop().call_later(delay, self._redeliver, entry)

    def _redeliver(self, entry: InboxEntry) -> None:
        if self._closed:
            self.release(entry.id)
            return
        self._queue.put_nowait(entry)

    async def get(self) -> InboxEntry | None:
        """Next message for the manager; ``None`` once the bus is closed and empty."""
        return await self._queue.get()

    def release(self, entry_id: str) -> None:
        """The manager is finished with ``entry_id`` (done, failed, or abandoned at shutdown)."""
        if entry_id in self._in_flight:
            self._in_flight.discard(entry_id)
            self._unreserve()

    def close(self) -> None:
        """Refuse new input and wake the consumer so it can finish."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)
