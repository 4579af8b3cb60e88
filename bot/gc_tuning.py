"""Garbage-collector settings for a long-running service: no collection that stops every chat for long.

After start-up the process holds hundreds of thousands of long-lived objects (the agent stack, SDKs,
SQLAlchemy's compiled caches). CPython's default thresholds (700, 10, 10) make every full collection
walk all of them: 150-375 ms pauses, several per 10k messages. ``gc.freeze()`` moves everything alive
into a permanent generation the collector skips. Freezing once at start-up was not enough: per-chat state
(thread map entries, reply budgets, debounce timers) and the messages in flight of a burst of 10,000 new
chats reached the old generation by the hundred thousand, and full collections of 0.3-1.6 s came back
(issue 32). So:

* **Survivors are frozen at once**: after every collection of the youngest generation (every 10,000
  net allocations, a few milliseconds) whatever survived it is frozen (:func:`freeze_survivors`, a
  ``gc.callbacks`` hook). The middle and old generations stay empty, so no automatic collection walks
  more than the newest 10,000-odd objects. Freezing is a list splice; an object that later dies by
  reference counting is freed as usual, frozen or not. Only garbage *cycles* among frozen objects wait
  (about 7 objects per message in ``bench/manager.py``).
* **Full collections when idle**: :class:`GcKeeper` unfreezes, collects everything (freeing those
  cycles) and freezes what is left when no message is in flight and enough was frozen since the last
  time (``FULL_AFTER_YOUNG`` young collections) — or, at the latest, after ``FULL_EVERY`` seconds, the
  one pause left under uninterrupted load (it walks the whole heap).
* **A young collection at least every ``YOUNG_EVERY`` while messages are in flight**: the threshold
  counts *net* allocations, and in a fast burst the frees of frozen in-flight objects cancel the
  allocations, so the young generation grew to 40,000-75,000 objects (27-78 ms) between two automatic
  collections once new chats' lookups were batched (a burst ran 2.5x faster). Collected every 20 ms it
  holds what 20 ms allocated.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from types import ModuleType

log = logging.getLogger(__name__)

#: Youngest generation every 10k net allocations; the others never by themselves (they stay empty).
THRESHOLDS = (5_000, 1_000_000, 1_000_000)
#: How often the keeper looks (seconds).
CHECK_EVERY = 2.0
#: While the service is busy, a young collection at least this often (seconds); when idle, the keeper
#: looks every ``IDLE_POLL`` seconds whether that started.
YOUNG_EVERY = 0.02
IDLE_POLL = 0.25
#: At the latest, a full collection after this long without an idle moment (seconds).
FULL_EVERY = 1800.0
#: No full collection sooner than this after the last one, even when idle (seconds).
FULL_AT_MOST_EVERY = 60.0
#: Nor before this many young collections froze their survivors (~500,000 net allocations): a quiet bot
#: that answers a message a minute would otherwise pay a full walk of the heap after each one.
FULL_AFTER_YOUNG = 100


def freeze_survivors(phase: str, info: dict[str, int]) -> None:
    """``gc.callbacks`` hook: freeze what survived a collection of the youngest generation.

    Called when that collection has finished (``stop``), so the generations are consistent; freezing
    moves the survivors (now in the middle generation) into the permanent one.
    """
    if phase == "stop" and info["generation"] == 0:
        gc.freeze()


_pause_lock = threading.Lock()
_pauses = 0  # collection_paused() blocks under way, in any thread
_resume = False  # whether the collector was enabled when the first of them began


@contextlib.contextmanager
def collection_paused() -> Iterator[None]:
    """No automatic collection while start-up imports the service's packages (in any thread).

    Why: importing FastAPI, SQLAlchemy, LangChain and LangGraph allocates over a million objects that
    live as long as the process (modules, classes, functions, pydantic schemas). With the default
    thresholds each young collection promotes them and each older one walks them again: 0.25 s of the
    1.95 s of CPU ``import bot.app, agent.runtime`` takes, with nothing to free. The few cycles an import
    leaves are collected by the next collection (:func:`tune_gc`'s, once start-up is done). Blocks may
    overlap (the agent's import runs beside the service's start): the collector comes back after the
    last, and only if it was on before the first."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


def import_paused(name: str) -> ModuleType:
    """``importlib.import_module(name)`` under :func:`collection_paused` (for ``asyncio.to_thread``)."""
    with collection_paused():
        return importlib.import_module(name)


def tune_gc(thresholds: tuple[int, int, int] = THRESHOLDS) -> None:
    """Collect once, freeze what survived start-up, set the thresholds and freeze survivors from now on.

    Call once, after start (calling it again changes nothing more)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    if freeze_survivors not in gc.callbacks:
        gc.callbacks.append(freeze_survivors)


def untune_gc() -> None:
    """Back to CPython's defaults (benchmarks and tests that tuned in a shared process)."""
    if freeze_survivors in gc.callbacks:
        gc.callbacks.remove(freeze_survivors)
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)


def _young_collections() -> int:
    return int(gc.get_stats()[0]["collections"])


class GcKeeper:
    """Collects fully — unfreezing first — when the service is idle, or after ``full_every`` at the latest.

    ``idle`` says whether nothing is in flight (the bus's load is 0). :meth:`step` is one look; the
    service runs :meth:`run` as a task after :func:`tune_gc`.
    """

    def __init__(
        self,
        idle: Callable[[], bool],
        *,
        full_every: float = FULL_EVERY,
        full_at_most_every: float = FULL_AT_MOST_EVERY,
        full_after_young: int = FULL_AFTER_YOUNG,
    ) -> None:
        self.idle = idle
        self.full_every = full_every
        self.full_at_most_every = full_at_most_every
        self.full_after_young = full_after_young
        self._seen = _young_collections()
        self._last_full = time.monotonic()
        self.full_collections = 0
        # Young collections made by :meth:`young` since the last full one: they are not counted towards
        # ``full_after_young`` (a quiet bot's one slow turn would otherwise make hundreds).
        self._paced = 0

    def step(self) -> bool:
        """One look; True when it collected (something was frozen since the last time, and it is time)."""
        since_full = time.monotonic() - self._last_full
        young = _young_collections() - self._seen
        if young == 0:
            return False  # nothing frozen since the last full collection
        young -= self._paced  # (paced ones still count for ``full_every``: their cycles wait too)
        idle_and_worth_it = (
            young >= self.full_after_young and since_full >= self.full_at_most_every and self.idle()
        )
        if not (since_full >= self.full_every or idle_and_worth_it):
            return False
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self._last_full = time.monotonic()
        self._seen = _young_collections()
        self._paced = 0
        self.full_collections += 1
        return True

    def young(self) -> None:
        """A young collection now (its survivors are frozen by :func:`freeze_survivors`)."""
        gc.collect(0)
        self._paced += 1

    async def run(
        self, every: float = CHECK_EVERY, young_every: float = YOUNG_EVERY, idle_poll: float = IDLE_POLL
    ) -> None:
        last_step = time.monotonic()
        while True:
            busy = not self.idle()
            await asyncio.sleep(young_every if busy else idle_poll)
            try:
                if busy and not self.idle():
                    self.young()
                if time.monotonic() - last_step >= every:
                    last_step = time.monotonic()
                    self.step()
            except Exception:  # never let the keeper die: without it frozen cycles are never freed
                log.exception("garbage-collector keeper step failed")


def start_keeper(idle: Callable[[], bool]) -> asyncio.Task[None]:
    """Start a :class:`GcKeeper` for the running service (after :func:`tune_gc`)."""
    return asyncio.get_running_loop().create_task(GcKeeper(idle).run(), name="gc-keeper")


async def stop_keeper(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
