"""A turn's final reply is delivered until it lands, however long the platform rate-limits it.

Why: a run of Telegram 429s on the final edit marked the inbox row ``failed`` with the answer saved,
and nothing ran it again before the next restart — the chat kept its "…" (or "⏳ Queued") for good,
and the fallback that posted the answer as a new message left that behind too. A rate limit or a
platform's 5xx passes; the answer must not be lost to it, nor counted as a failed attempt of the
message (three bursts of 429s would set a good answer aside as poison).

So :class:`FinalDelivery` wraps the reply's ``finish``:

- the first try is the reply's own (which already retries a few times within the platform's
  ``retry_after``, channels/reply.py). A failure the error tree calls passing —
  :class:`~channels.errors.RetryAfter` or :class:`~channels.errors.NetworkError`, whichever platform
  raised it — keeps the answer with the inbox entry first (``Inbox.save_answer``: durable, not an
  attempt), then tries again after the platform's ``retry_after`` or a back-off (1, 2, 4 … s from
  ``bus.final_retry_seconds``, up to :data:`MAX_DELAY_SECONDS`), until it lands. Each try edits the
  same message(s) the reply already has, so nothing is posted twice and no "…" stays behind;
- any other failure (the bot was removed from the chat, the platform refuses the text) is raised as
  before: the manager records it as a failed attempt, with the answer saved;
- a stop during the wait (shutdown) leaves the entry pending with its answer: the next start — or, in a
  cluster, the instance that takes the claim over — delivers the saved answer into the stored message
  instead of running the model again, so the answer still arrives, once.

The turn keeps its place in its conversation's lane while it waits, so later answers of that chat do
not overtake it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from channels.errors import ChannelError, NetworkError, RetryAfter
from channels.reply import ReplyStream

log = logging.getLogger(__name__)

FIRST_DELAY_SECONDS = 1.0
#: The longest pause between two tries (a platform's own ``retry_after`` is honoured up to this too).
MAX_DELAY_SECONDS = 60.0

#: Stores the final answer with its inbox entry (``Inbox.save_answer``), durably.
SaveAnswer = Callable[[str, str], Awaitable[None]]
#: Runs a storage write again while storage is unreachable (``StorageRetry.call``).
Persist = Callable[[str, Callable[[], Awaitable[None]]], Awaitable[None]]


def passing(exc: BaseException) -> bool:
    """Whether a failed platform call may succeed later by itself: a rate limit or a network/5xx error."""
    return isinstance(exc, RetryAfter | NetworkError)


def pause_after(exc: ChannelError, tries: int, first: float = FIRST_DELAY_SECONDS) -> float:
    """Seconds before the next try: what the platform asked for, else ``first``, twice that, four
    times … (both at least ``first`` and capped)."""
    if isinstance(exc, RetryAfter):
        return min(MAX_DELAY_SECONDS, max(exc.retry_after, first))
    return float(min(MAX_DELAY_SECONDS, first * 2 ** max(0, tries - 1)))


class FinalDelivery:
    """Delivers a final reply until it lands (see the module docstring)."""

    def __init__(
        self, save_answer: SaveAnswer, persist: Persist, first_delay: float = FIRST_DELAY_SECONDS
    ) -> None:
        self.save_answer = save_answer
        self.persist = persist
        #: ``bus.final_retry_seconds``: tests set it short, so a run of failures does not wait seconds.
        self.first_delay = first_delay

    async def finish(
        self, reply: ReplyStream, text: str, files: Sequence[Path] = (), *, entry_id: str | None = None
    ) -> None:
        """``reply.finish(text, files)``, tried again while it fails in a way that passes.

        Raises what does not pass (and a cancellation) to the caller."""
        tries = 0
        saved = False
        while True:
            try:
                await reply.finish(text, files)
                if tries:
                    log.info("the final reply landed after %d more tr%s", tries, "y" if tries == 1 else "ies")
                return
            except ChannelError as exc:
                if not passing(exc):
                    raise
                tries += 1
                wait = pause_after(exc, tries, self.first_delay)
                log.warning("delivering the final reply failed (%s); trying again in %.1f s", exc, wait)
            if entry_id is not None and not saved:
                # Durable before waiting: a restart from here on delivers this answer, not a new one.
                await self.persist("saving the answer", lambda: self.save_answer(entry_id, text))
                saved = True
            await asyncio.sleep(wait)
