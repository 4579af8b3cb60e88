"""Wait for a call at most a given time, and not a moment longer — even while it is being cancelled.

Why: ``asyncio.wait_for`` cancels a call that ran out of time and then *waits for the cancellation to
finish*. A database query on a stuck connection finishes cancelling only when that connection answers
or is torn down, which took seconds longer than the query was allowed in our measurements (the lease
keeper's one-second renewal took three). Loops whose timing matters (the lease keeper) and answers
that must come even when the database does not (``/health``) use :func:`within` instead: the call runs
as its own task, is cancelled when its time is up, and is left to end by itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class NoAnswer(TimeoutError):
    """The call did not finish in time (it was cancelled and left to end by itself)."""


async def within(call: Awaitable[T], seconds: float) -> T:
    """``await call``, but raise :class:`NoAnswer` after ``seconds``. A call that was cancelled from
    below (not by the caller) raises ``ConnectionError``: it never leaks a CancelledError upwards."""
    task = asyncio.ensure_future(call)
    task.add_done_callback(_retrieve)
    await asyncio.wait({task}, timeout=max(seconds, 0.0))
    if not task.done():
        task.cancel()
        raise NoAnswer(f"no answer within {seconds:.1f} s")
    if task.cancelled():
        raise ConnectionError("the call was cancelled")
    return task.result()


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Collect a left task's outcome, so asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()
