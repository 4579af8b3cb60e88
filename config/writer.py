"""The one group-commit writer behind every durable write path (the inbox and the GitHub delivery log).

Callers submit an operation and await its result; one writer task takes everything queued (up to
``max_batch``), hands the batch to the owner's ``apply`` function — which applies it in a single
transaction and returns one result per operation, in order — and resolves each caller's future. Under
a burst that turns hundreds of tiny commits into a few large ones, and SQLite never sees two writers
from this process fight over its lock, while each caller still proceeds only once its own row is
committed.

**Urgent writes** (``enqueue(op, urgent=True)``) go into a lane of their own that heads the next
batch: a small write that races something outside (the inbox's reply references) is committed in the
very next transaction, never behind ``max_batch`` queued bulk writes, and still shares that commit.

**The failure rule** (the same for every user): when a batch fails, each of its operations is applied
again on its own, so one bad operation fails only its own caller and its neighbours still commit.

It lives in ``config/`` because that is the one package every other one may import (the dependency
rules forbid ``webhooks`` from importing ``bot``); it is pure asyncio and knows nothing of databases.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

Op = TypeVar("Op")
#: Applies a batch in one transaction; returns one result per operation, in the same order.
ApplyBatch = Callable[[Sequence[Op]], Awaitable[Sequence[Any]]]
DEFAULT_MAX_BATCH = 500


class WriterClosed(RuntimeError):
    """The writer was closed (or never started); the operation was not applied."""


@dataclass(slots=True)
class _Queued(Generic[Op]):
    op: Op
    future: asyncio.Future[Any]


class GroupCommitWriter(Generic[Op]):
    def __init__(self, name: str, apply: ApplyBatch[Op], *, max_batch: int = DEFAULT_MAX_BATCH) -> None:
        self.name = name
        self._apply = apply
        self.max_batch = max_batch
        self._queue: deque[_Queued[Op] | None] = deque()  # None: the stop mark (see close)
        self._urgent: deque[_Queued[Op]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done() and not self._closing

    def start(self) -> None:
        """Start the writer task (idempotent). A closed writer may be started again."""
        if self._task is None or self._task.done():
            self._closing = False
            self._task = asyncio.create_task(self._loop(), name=f"{self.name}-writer")

    def enqueue(self, op: Op, *, urgent: bool = False) -> asyncio.Future[Any]:
        """Queue ``op`` and return its future without waiting (for writes nobody needs to await).

        ``urgent``: commit it in the next batch, ahead of everything queued without it.
        """
        if not self.running:
            raise WriterClosed(f"the {self.name} writer is not running")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._queue).append(_Queued(op, future))
        self._wake.set()
        return future

    async def submit(self, op: Op, *, urgent: bool = False) -> Any:
        """Apply ``op`` and return its result once it is committed."""
        return await self.enqueue(op, urgent=urgent)

    async def close(self) -> None:
        """Apply everything queued so far, then stop. Later submissions raise :class:`WriterClosed`."""
        if self._task is None:
            return
        if not self._task.done():
            self._closing = True
            self._queue.append(None)
            self._wake.set()
        await self._task
        self._task = None

    @property
    def queued(self) -> int:
        """Operations waiting for the next batch (the writer task is due to run when this is not 0)."""
        return len(self._urgent) + len(self._queue)

    def _take(self) -> tuple[list[_Queued[Op]], bool]:
        """The next batch (urgent operations first) and whether the stop mark was reached."""
        batch: list[_Queued[Op]] = []
        while self._urgent and len(batch) < self.max_batch:
            batch.append(self._urgent.popleft())
        while self._queue and len(batch) < self.max_batch:
            item = self._queue.popleft()
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    async def _loop(self) -> None:
        batch: list[_Queued[Op]] = []
        try:
            while True:
                if not self._urgent and not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                batch, stopping = self._take()
                if batch:
                    await self._run(batch)
                batch = []
                if stopping:
                    return
        finally:
            # Cancelled mid-batch, or work queued behind the stop mark: nobody may wait forever.
            left = [*batch, *self._urgent, *(item for item in self._queue if item is not None)]
            self._urgent.clear()
            self._queue.clear()
            for item in left:
                if not item.future.done():
                    item.future.set_exception(WriterClosed(f"the {self.name} writer stopped"))

    async def _run(self, batch: list[_Queued[Op]]) -> None:
        try:
            results = await self._apply([item.op for item in batch])
            if len(results) != len(batch):
                raise RuntimeError(f"{self.name}: apply returned {len(results)} results for {len(batch)}")
        except Exception as exc:
            if len(batch) == 1:
                log.warning("%s write failed: %s: %s", self.name, type(exc).__name__, exc)
                if not batch[0].future.done():
                    batch[0].future.set_exception(exc)
                return
            log.warning("%s: a batch of %d failed (%s); applying each on its own", self.name, len(batch), exc)
            for item in batch:
                await self._run([item])
            return
        for item, result in zip(batch, results, strict=True):
            if not item.future.done():
                item.future.set_result(result)
