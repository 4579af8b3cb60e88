"""How an inbox entry ends, and the one-off notices that go with it.

Done once its answer is out; failed (counted, run again later) when handling it broke; set aside as dead
after ``bus.max_attempts`` failures, with one word to the user and the operator. The router, the turn
runner and the commands all end entries and send notices the same way, through one :class:`Settler`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from bot.bus import MessageBus
from bot.faults import StorageRetry, is_storage_error
from bot.inbox import DEAD, Inbox
from bot.logs import trace_id_var
from channels.base import Channel
from channels.types import Action, InboundMessage

log = logging.getLogger(__name__)

DEAD_LETTER_NOTE = (
    "⚠️ Sorry — I tried {attempts} times and could not handle this message, so I have stopped trying "
    "and set it aside for the operator (trace {trace})."
)


class Settler:
    """Marks inbox entries done or failed (dead-lettering them, with a word to the user) and sends notices."""

    def __init__(
        self, *, inbox: Inbox, bus: MessageBus, channels: Mapping[str, Channel], storage: StorageRetry
    ) -> None:
        self.inbox = inbox
        self.bus = bus
        self.channels = channels
        self.storage = storage

    async def send_notice(
        self,
        message: InboundMessage,
        text: str,
        *,
        private: bool = False,
        actions: Sequence[Action] = (),
        resume_ref: str | None = None,
    ) -> str | None:
        """A one-off answer (command output, gate messages): one message, no placeholder.

        ``private`` asks for an answer only the sender sees where the platform has one; ``actions`` are
        buttons that stay on it; ``resume_ref`` edits that earlier notice instead (its buttons go).
        Returns the message's reference, where the platform gives one.
        """
        reply = self.channels[message.provider].open_reply(message, private=private, resume_ref=resume_ref)
        await reply.finish(text, actions=actions)
        return reply.ref

    async def complete(self, entry_id: str, note: str | None = None) -> None:
        try:
            await self.inbox.mark_done(entry_id, note)
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            # Storage is away: retried with back-off until it answers (the first try is made above,
            # without the retry loop's coroutine and closure: this runs once per message).
            await self.storage.call(
                "marking a message done", lambda: self.inbox.mark_done(entry_id, note), failed=exc
            )
        self.bus.release(entry_id)

    async def fail(
        self,
        entry_id: str,
        error: str,
        reply_text: str | None = None,
        *,
        message: InboundMessage,
        shown: str | None = None,
    ) -> str:
        """Count the failed attempt; return the entry's new status (``failed`` or ``dead``).

        ``shown``: the reply's message in the chat ("…" or "⏳ Queued"), which a dead-letter note
        replaces instead of leaving it behind."""
        try:
            status = await self.inbox.mark_failed(entry_id, error, reply_text)
        finally:
            self.bus.release(entry_id)
        if status == DEAD:
            # Said once, when the entry is set aside; it is never run (or answered) again by itself.
            log.error(
                "inbox entry %s failed %d times; dead-lettered: %s", entry_id, self.inbox.max_attempts, error
            )
            note = DEAD_LETTER_NOTE.format(attempts=self.inbox.max_attempts, trace=trace_id_var.get() or "-")
            try:
                await self.send_notice(message, note, resume_ref=shown)
            except Exception as exc:  # the platform may be what keeps failing
                log.warning("could not tell the user their message was set aside: %s", exc)
        return status
