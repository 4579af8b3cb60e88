"""The message bus between channel workers and the manager.

Workers call :meth:`MessageBus.publish` (it is their ``InboundSink``); the manager consumes with
:meth:`get`. The bound counts every accepted-but-unfinished message, not just the queue, so memory stays
bounded even when many messages wait in per-thread lanes. When full, ``publish`` raises
:class:`channels.errors.Backpressure` *before* storing anything, so the platform redelivers later and
nothing is acknowledged-then-dropped.

With a :class:`bot.cluster.Cluster` (PostgreSQL) the bus does not queue what it accepts: it stores it,
wakes the cluster, and a claim loop queues only what this instance claimed (oldest first, at most
``bus.max_concurrent_turns + cluster.claim_ahead`` at once), whichever instance accepted it. Pending entries wait in the
database, not in memory, so the bound is on what runs here. Without one (SQLite) nothing changes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bot import tracing
from bot.inbox import FAILED, Inbox, InboxEntry
from channels.errors import Backpressure
from channels.types import InboundMessage

if TYPE_CHECKING:
    from bot.cluster import Cluster, IsCommand

log = logging.getLogger(__name__)


class MessageBus:
    def __init__(
        self, inbox: Inbox, capacity: int, *, cluster: Cluster | None = None, max_claims: int = 32
    ) -> None:
        self.inbox = inbox
        self.capacity = capacity
        self.cluster = cluster
        self.max_claims = max_claims
        self._claimer: asyncio.Task[None] | None = None
        #: Cluster: entries accepted (or requeued) here that no full claim pass has looked at yet. They
        #: count as unfinished, so ``wait_idle`` does not return before this instance had a chance.
        self._unoffered = 0
        #: Cluster: 1 from start-up until the first full claim pass — the reservation that keeps
        #: ``wait_idle`` from returning before it. It stands for no message, so back-pressure skips it.
        self._start_pass = 0
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
        if self._reserved - self._start_pass >= self.capacity:
            self.refused += 1
            raise Backpressure(f"inbox full ({self.capacity} unfinished messages)")
        self._reserve()
        try:
            # The trace id is given here and stored with the message (bot/tracing.py).
            with tracing.receive(message), tracing.span("store", message):
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
        if self.cluster is not None:
            # Any instance may run it: wake them. A pending duplicate is running or waiting somewhere.
            if entry.duplicate and entry.status == FAILED:
                await self.cluster.requeue(entry.id)
            elif not entry.duplicate:
                self.cluster.wake()
            else:
                self._unreserve()
                return False
            self._unoffered += 1  # the reservation stays until a claim pass has seen it
            return not entry.duplicate
        # New, or a redelivery of one that failed earlier and is not running: (re)run it.
        self._in_flight.add(entry.id)
        self._queue.put_nowait(entry)
        return not entry.duplicate

    async def resume_unfinished(self) -> int:
        """Queue every message a previous run accepted but did not finish. Called once at start-up."""
        if self.cluster is not None:  # pending ones are claimed like any other; failed ones run again
            self._reserve()  # unfinished until the first claim pass has looked (wait_idle)
            self._unoffered += 1
            self._start_pass = 1
            return await self.cluster.requeue_failed()
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
        if self.cluster is not None:  # back to pending: whichever instance claims it runs it
            queued = len(await self.inbox.take_retries())
            if queued:
                self.cluster.wake()
                log.info("retrying %d inbox message(s) an operator queued", queued)
            return queued
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
        if self.cluster is not None:  # back to pending; the claim loop (here or elsewhere) takes it
            task = asyncio.get_running_loop().create_task(self.cluster.requeue(entry.id))
            task.add_done_callback(lambda _t: self._requeued(entry.id))
            return
        self._queue.put_nowait(entry)

    def _requeued(self, entry_id: str) -> None:
        if entry_id in self._in_flight:  # its reservation now waits for a claim pass instead
            self._in_flight.discard(entry_id)
            self._unoffered += 1

    # --- cluster: claim what runs here ---------------------------------------------------------------
    def start_claiming(self, is_command: IsCommand) -> None:
        """Cluster only: take claimed entries to the manager from now on (it is ready to run them)."""
        if self.cluster is not None and self._claimer is None:
            self._claimer = asyncio.create_task(self._claim_loop(is_command), name="cluster-claims")

    async def _claim_loop(self, is_command: IsCommand) -> None:
        assert self.cluster is not None
        cluster = self.cluster
        while not self._closed:
            free = self.max_claims - len(self._in_flight)
            offered = self._unoffered
            entries: list[InboxEntry] = []
            complete = False
            if free > 0:
                try:
                    entries, waiting_here = await cluster.claim(free, is_command)
                    # It saw every runnable entry, and none waits behind a thread running here.
                    complete = len(entries) < free and not waiting_here
                except Exception as exc:  # PostgreSQL briefly away: the next wake-up or poll tries again
                    log.warning("cluster: looking for work failed: %s", exc)
            for entry in entries:
                if self._closed:
                    cluster.release(entry.id)
                    continue
                self._in_flight.add(entry.id)
                self._reserve()
                self._queue.put_nowait(entry)
            if complete:  # what was accepted before this pass is claimed here, elsewhere, or waits its turn
                self._unoffered -= offered
                if offered:
                    self._start_pass = 0
                for _ in range(offered):
                    self._unreserve()
                await cluster.wait_for_work()
            elif not entries or len(entries) < free:
                await cluster.wait_for_work()

    async def get(self) -> InboxEntry | None:
        """Next message for the manager; ``None`` once the bus is closed and empty."""
        return await self._queue.get()

    def release(self, entry_id: str) -> None:
        """The manager is finished with ``entry_id`` (done, failed, or abandoned at shutdown)."""
        if entry_id in self._in_flight:
            self._in_flight.discard(entry_id)
            self._unreserve()
        if self.cluster is not None:
            self.cluster.release(entry_id)

    def close(self) -> None:
        """Refuse new input and wake the consumer so it can finish."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)
            if self.cluster is not None:
                self.cluster.wake_here()  # the claim loop sees the bus closed and ends (finish_claiming)

    async def finish_claiming(self) -> None:
        """Cluster: wait for the claim loop to end after :meth:`close` (what it claimed last is released)."""
        if self._claimer is not None:
            await self._claimer
            self._claimer = None
