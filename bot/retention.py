"""Retention: finished rows older than ``database.retention_days`` are deleted, so storage stays bounded.

Every message the service accepts is a row in the inbox (its payload, the reply's reference and text)
and every GitHub delivery that starts an agent is a row with its payload. Without this they stayed
forever: a team's chats add up to gigabytes in a year, and SQLite reads and backups grow with them.

What goes, and what stays:

* Only **finished** rows go (an inbox entry ``done``, a delivery ``done``), once they were last updated
  more than ``retention_days`` ago. Pending, failed, dead and retry rows stay until an operator acts on
  them (``switchboard inbox list --failed``, ``switchboard webhooks list --failed``).
* A deleted row no longer deduplicates: a platform that delivered the same message again after the
  retention period would get it answered again. Platforms redeliver within minutes (Slack, Feishu,
  DingTalk), Telegram keeps unconfirmed updates for 24 hours, GitHub offers redelivery for 3 days;
  hence the 1-day minimum and the 30-day default.
* Task cards whose result was delivered go like finished messages (``bot/tasks/store.py``).
* Conversations, memory, goals and schedules are not touched: they are the state a team keeps, not a
  log. An agent thread is deleted only once *abandoned* — no conversation points at it any more (after
  ``/new``) and nothing in it changed for the retention period (``bot/thread_retention.py``).

The pass runs in the background once after start-up and then every ``INTERVAL_SECONDS``, deleting in
chunks of ``CHUNK_ROWS`` in separate transactions with a short pause between them, so SQLite's write lock
is never held for long and the inbox's own writer keeps committing between chunks. With several instances on PostgreSQL each runs it;
the deletes are idempotent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Protocol

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 3600.0
CHUNK_ROWS = 500
#: Between two chunks: the first pass after an upgrade may have months to delete, and back-to-back
#: chunks would keep SQLite's write lock nearly all the time, so the inbox's writes would wait on it.
CHUNK_PAUSE_SECONDS = 0.05
DAY_SECONDS = 86400.0


class Prunable(Protocol):
    """A store with a log of finished rows (the inbox, the GitHub delivery log)."""

    #: What the rows are, for the log line ("inbox entries").
    retention_label: str

    async def prune_finished(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` finished rows last updated before ``before``; how many went."""
        ...


class Retention:
    def __init__(
        self, days: float, stores: Sequence[Prunable], *, interval: float = INTERVAL_SECONDS
    ) -> None:
        self.days = days
        self.stores = list(stores)
        self.interval = interval
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self.days > 0 and bool(self.stores)

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._stop.clear()
            self._task = asyncio.create_task(self._loop(), name="retention")

    async def stop(self) -> None:
        """Cooperatively, between chunks (a chunk's transaction is never abandoned half-way)."""
        if self._task is None:
            return
        self._stop.set()
        await self._task
        self._task = None

    async def run_once(self, now: float | None = None) -> dict[str, int]:
        """One pass over every store: rows deleted per store (what the log line says too). Nothing
        when retention is off (``retention_days: 0``)."""
        if not self.enabled:
            return {}
        before = (time.time() if now is None else now) - self.days * DAY_SECONDS
        deleted: dict[str, int] = {}
        for store in self.stores:
            total = 0
            while not self._stop.is_set():
                count = await store.prune_finished(before, CHUNK_ROWS)
                total += count
                if count < CHUNK_ROWS:
                    break
                await asyncio.sleep(CHUNK_PAUSE_SECONDS)
            deleted[store.retention_label] = total
        if any(deleted.values()):
            summary = ", ".join(f"{count} {label}" for label, count in deleted.items() if count)
            log.info("retention: deleted %s finished more than %g days ago", summary, self.days)
        return deleted

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.run_once()
            except Exception as exc:  # a busy or briefly unreachable database: the next pass does it
                log.warning("retention pass failed: %s: %s", type(exc).__name__, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval)
