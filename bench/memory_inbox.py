"""An in-memory stand-in for :class:`bot.inbox.Inbox`, for benchmarks only.

It keeps entries in a dict and never touches a disk, so running the same manager over it and over the
durable inbox in one process shows what durability costs ("durability tax"). It is not safe to use in
the service: nothing survives a restart.
"""

from __future__ import annotations

import time
import uuid

from bot.inbox import DEAD, DONE, FAILED, PENDING, InboxEntry
from channels.resume import ReplyState
from channels.types import InboundMessage


class MemoryInbox:
    """The subset of the inbox API the bus and manager call, with the same dedupe and status rules."""

    def __init__(self, *, max_attempts: int = 5) -> None:
        self.max_attempts = max_attempts
        self._entries: dict[str, InboxEntry] = {}
        self._by_key: dict[tuple[str, str, str, str], str] = {}

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def accept(self, message: InboundMessage) -> InboxEntry:
        existing = self._by_key.get(message.dedupe_key)
        if existing is not None:
            entry = self._entries[existing]
            return InboxEntry(
                id=entry.id,
                message=entry.message,
                status=entry.status,
                attempts=entry.attempts,
                reply_ref=entry.reply_ref,
                reply_state=entry.reply_state,
                reply_text=entry.reply_text,
                duplicate=True,
            )
        now = time.time()
        entry = InboxEntry(uuid.uuid4().hex, message, PENDING, created_at=now, updated_at=now)
        self._entries[entry.id] = entry
        self._by_key[message.dedupe_key] = entry.id
        return entry

    async def mark_done(self, entry_id: str, note: str | None = None) -> None:
        self._entries[entry_id].status = DONE

    async def mark_failed(self, entry_id: str, error: str, reply_text: str | None = None) -> str:
        entry = self._entries[entry_id]
        entry.attempts += 1
        entry.status = DEAD if entry.attempts >= self.max_attempts else FAILED
        entry.error, entry.reply_text = error, reply_text or entry.reply_text
        return entry.status

    async def take_retries(self, limit: int = 50) -> list[InboxEntry]:
        return []

    def set_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
        entry = self._entries[entry_id]
        entry.reply_ref, entry.reply_state = reply.first_ref, reply.to_json()

    def stage_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
        self.set_reply_ref(entry_id, reply)

    async def save_reply_ref(self, entry_id: str, reply: ReplyState) -> None:
        self.set_reply_ref(entry_id, reply)

    async def unfinished(self) -> list[InboxEntry]:
        return [e for e in self._entries.values() if e.status in (PENDING, FAILED)]

    async def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for entry in self._entries.values():
            found[entry.status] = found.get(entry.status, 0) + 1
        return found
