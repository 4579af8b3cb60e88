"""Where Discord left off: the channels the bot follows and the last message id handled in each.

Discord's gateway does not redeliver. A resumed session replays what it missed, but after a restart (or a
reconnect Discord refuses to resume) every MESSAGE_CREATE sent in between is simply gone from the
gateway. The messages are still in each channel's history, so the channel keeps, per followed channel
(DM, thread or server channel where a message was stored), the id up to which everything was handled,
and on READY reads the history after it (see :meth:`channels.discord.DiscordChannel._backfill`).

The cursor is conservative on purpose: it never passes a message that is still being handed to the
inbox or that was turned away while the service stopped (a *hole*), so a crash at any moment re-reads at
worst a few messages the inbox already holds — and the inbox dedupes them on the message id. Cursors are
written at most once a second (and at stop), not per message, to stay off the inbox's write path.

The table belongs to this channel (``discord_cursors``); :mod:`bot.migrations` registers it with the
service's schema, and :meth:`CursorStore.open` creates it too, so the channel also works on its own.
Only SQLAlchemy is imported here, never discord.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from sqlalchemy import Column, Float, MetaData, String, Table, delete, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

log = logging.getLogger(__name__)

metadata = MetaData()
discord_cursors = Table(
    "discord_cursors",
    metadata,
    Column("channel_id", String(32), primary_key=True),
    Column("guild_id", String(32)),  # None for a DM
    Column("last_message_id", String(32), nullable=False),
    Column("updated_at", Float, nullable=False),
)

#: How often changed cursors are written. A crash loses at most this much progress, which only means
#: re-reading (and deduplicating) a few messages.
FLUSH_SECONDS = 1.0
#: Followed channels forgotten after this long without a message (so a bot in many servers does not
#: re-read hundreds of quiet channels on every start). Older than any backfill window anyway.
FORGET_AFTER_SECONDS = 30 * 24 * 3600


@dataclass
class Cursor:
    """One followed channel: handled up to ``done``, with messages still open below it."""

    guild_id: str | None
    done: int
    updated_at: float = field(default_factory=time.time)
    #: message ids handed to the inbox right now, or turned away at shutdown, or a backfill's lower bound.
    open: set[int] = field(default_factory=set)
    dirty: bool = False

    @property
    def position(self) -> int:
        """The id to read history after: below every open message, else the last handled one."""
        if self.open:
            return min(self.done, min(self.open) - 1)
        return self.done


class CursorStore:
    """The ``discord_cursors`` table on the service's database (its own small engine)."""

    def __init__(self, url: str) -> None:
        kwargs: dict[str, object] = {}
        if make_url(url).get_backend_name() == "sqlite":
            kwargs["connect_args"] = {"timeout": 10.0}  # share the file politely with the inbox writer
        else:
            kwargs.update(pool_size=2, max_overflow=0, pool_pre_ping=True)
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)

    async def open(self) -> None:
        async with self.engine.begin() as conn:
            await conn.run_sync(metadata.create_all)

    async def load(self) -> dict[str, Cursor]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(discord_cursors))).all()
        return {
            row.channel_id: Cursor(row.guild_id, int(row.last_message_id), row.updated_at) for row in rows
        }

    async def save(self, cursors: dict[str, Cursor], forgotten: list[str]) -> None:
        async with self.engine.begin() as conn:
            if forgotten:
                await conn.execute(delete(discord_cursors).where(discord_cursors.c.channel_id.in_(forgotten)))
            for channel_id, cursor in cursors.items():
                values = {
                    "guild_id": cursor.guild_id,
                    "last_message_id": str(cursor.position),
                    "updated_at": cursor.updated_at,
                }
                done = await conn.execute(
                    update(discord_cursors).where(discord_cursors.c.channel_id == channel_id).values(values)
                )
                if not done.rowcount:
                    await conn.execute(insert(discord_cursors).values(channel_id=channel_id, **values))

    async def close(self) -> None:
        await self.engine.dispose()


class Cursors:
    """The in-memory cursors, kept by the gateway handlers and flushed to a :class:`CursorStore`."""

    def __init__(self, store: CursorStore | None) -> None:
        self.store = store
        self.cursors: dict[str, Cursor] = {}
        self._forgotten: list[str] = []
        self._floors: dict[str, int] = {}  # pinned cursors waiting for their backfill
        self._flusher: asyncio.Task[None] | None = None
        #: Set when a channel is followed for the first time: the flusher writes it at once (see
        #: :meth:`_flush_loop`).
        self._newly_followed = asyncio.Event()

    async def start(self) -> None:
        if self.store is not None:
            await self.store.open()
            self.cursors = await self.store.load()
            self._floors.clear()
            self.hold_all()
            self._flusher = asyncio.create_task(self._flush_loop(), name="discord-cursors")

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
            self._flusher = None
        with contextlib.suppress(Exception):
            await self.flush()
        if self.store is not None:
            await self.store.close()

    # --- what the gateway handlers report ----------------------------------------------------------
    def begin(self, channel_id: str, message_id: int) -> None:
        """A message of a followed channel is on its way to the inbox: the cursor must wait for it."""
        cursor = self.cursors.get(channel_id)
        if cursor is not None:
            cursor.open.add(message_id)

    def handled(self, channel_id: str, guild_id: str | None, message_id: int, *, stored: bool) -> None:
        """The message is in the inbox (``stored``) or needs nothing from the bot: move past it.

        A stored message makes its channel followed, which is what decides what is backfilled.
        """
        cursor = self.cursors.get(channel_id)
        if cursor is None:
            if not stored:
                return
            cursor = self.cursors[channel_id] = Cursor(guild_id, message_id - 1)
            self._newly_followed.set()
        cursor.open.discard(message_id)
        cursor.done = max(cursor.done, message_id)
        cursor.updated_at, cursor.dirty = time.time(), True

    def left_open(self, channel_id: str, guild_id: str | None, message_id: int) -> None:
        """The message was turned away (the service is stopping): keep the cursor below it.

        Its channel is followed from now on even if it was not, so the next start reads the message.
        """
        cursor = self.cursors.get(channel_id)
        if cursor is None:
            cursor = self.cursors[channel_id] = Cursor(guild_id, message_id - 1)
            self._newly_followed.set()
        cursor.open.add(message_id)
        cursor.dirty = True

    def follow(self, channel_id: str, guild_id: str | None, after: int) -> None:
        """Follow a channel from ``after`` on (a thread the bot opened: after its starter message)."""
        if channel_id not in self.cursors:
            self.cursors[channel_id] = Cursor(guild_id, after, dirty=True)
            self._newly_followed.set()

    def hold_all(self) -> None:
        """No session yet (start-up) or the session dropped: pin every cursor where it is now.

        Until that channel's backfill has read what came in between, a live message (discord.py
        dispatches them even before ``on_ready``) must not move the cursor past the unread ones.
        """
        for channel_id, cursor in self.cursors.items():
            if channel_id not in self._floors:
                self._floors[channel_id] = cursor.position
                cursor.open.add(cursor.position + 1)

    def floor(self, channel_id: str) -> int:
        """Where this channel's backfill starts reading: the pinned position, else the current one."""
        if channel_id in self._floors:
            return self._floors[channel_id]
        return self.cursors[channel_id].position

    def release(self, channel_id: str) -> None:
        """This channel's backfill is done (or a resumed session replayed what it missed)."""
        floor = self._floors.pop(channel_id, None)
        cursor = self.cursors.get(channel_id)
        if floor is not None and cursor is not None:
            cursor.open.discard(floor + 1)
            cursor.dirty = True

    def release_all(self) -> None:
        for channel_id in list(self._floors):
            self.release(channel_id)

    def followed(self) -> dict[str, Cursor]:
        """Channels to backfill, forgetting those quiet for longer than ``FORGET_AFTER_SECONDS``."""
        cutoff = time.time() - FORGET_AFTER_SECONDS
        quiet = [c for c, cur in self.cursors.items() if cur.updated_at < cutoff and not cur.open]
        for channel_id in quiet:
            del self.cursors[channel_id]
            self._forgotten.append(channel_id)
        return dict(self.cursors)

    # --- persistence -------------------------------------------------------------------------------
    async def flush(self) -> None:
        if self.store is None:
            return
        changed = {c: cur for c, cur in self.cursors.items() if cur.dirty}
        forgotten, self._forgotten = self._forgotten, []
        if not changed and not forgotten:
            return
        for cursor in changed.values():
            cursor.dirty = False
        try:
            await self.store.save(changed, forgotten)
        except BaseException:
            # Also when the write is cut off (:meth:`stop` cancels the flusher mid-save): the rows were
            # not written, so the final flush at stop must write them again, not find nothing dirty.
            for cursor in changed.values():
                cursor.dirty = True
            self._forgotten.extend(forgotten)
            raise

    async def _flush_loop(self) -> None:
        """Write changed cursors every ``FLUSH_SECONDS``, and a newly followed channel at once.

        Progress in a known channel can wait a round: a crash only re-reads a few messages. A channel
        followed for the first time cannot: until its row exists, a crash forgets the channel, and the
        next start does not read what was sent to it while the service was down (a DM whose first
        message was answered in under a second, then a kill -9, lost everything sent after it)."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._newly_followed.wait(), FLUSH_SECONDS)
            self._newly_followed.clear()
            try:
                await self.flush()
            except Exception as exc:  # a busy database only delays the cursor; the next round retries
                log.warning("saving Discord cursors failed: %s", exc)
