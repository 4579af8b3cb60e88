"""Conversation → agent thread map.

A conversation is (provider, workspace, chat, topic). Its row names the current agent thread, the owner
who started it and the model chosen with ``/models``. ``/new`` points the conversation at a fresh thread;
the old thread's history stays in the checkpointer. Rows are cached in memory because every message
needs one and they change only on ``/new``, ``/models`` or creation.

New conversations are created in batches: a burst of first messages (10k new chats at once) becomes a few
INSERT … ON CONFLICT DO NOTHING + SELECT transactions on one connection each, instead of one transaction
and pooled connection per chat, which exhausted the pool. Lookups that miss the cache are batched the same
way: a private chat's first message is looked up (its owner check) before it is created, and one SELECT
per new chat — a pooled connection, a statement and a rollback each — was the largest cost of a chat's
first message. A lookup joins only a batch that has not been sent yet, so its answer is never older than
the lookup itself, as with a query of its own; nothing negative is cached (another instance may create
the row).
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace

from sqlalchemy import Column, Float, MetaData, String, Table, UniqueConstraint, select, tuple_, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import ColumnElement

from bot.db import Database

metadata = MetaData()
conversations_table = Table(
    "conversations",
    metadata,
    Column("provider", String(32), primary_key=True),
    Column("workspace", String(200), primary_key=True),
    Column("chat", String(200), primary_key=True),
    Column("topic", String(200), primary_key=True),
    Column("thread_id", String(64), nullable=False, unique=True),
    Column("owner", String(200), nullable=False),
    Column("model", String(100)),
    # This chat's override of sandbox.approval (never | risky | always), set by an admin; None: the
    # service's setting (migration step 3).
    Column("approval", String(16)),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    UniqueConstraint("provider", "workspace", "chat", "topic", name="uq_conversation"),
)

ConversationKey = tuple[str, str, str, str]
CACHE_SIZE = 50_000
MAX_CREATE_BATCH = 500  # conversations created per transaction (4 bound parameters per key)


@dataclass(frozen=True, slots=True)
class Conversation:
    key: ConversationKey
    thread_id: str
    owner: str
    model: str | None
    approval: str | None = None


class ThreadStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._cache: OrderedDict[ConversationKey, Conversation] = OrderedDict()
        self._insert = (sqlite.insert if db.is_sqlite else postgresql.insert)(conversations_table)
        # Conversations waiting to be created by the next batch: key -> (future, owner, thread id).
        self._creating: dict[ConversationKey, tuple[asyncio.Future[Conversation], str, str | None]] = {}
        self._creator: asyncio.Task[None] | None = None
        # Cache misses waiting for the next batched SELECT: key -> future (None: no such conversation).
        self._reading: dict[ConversationKey, asyncio.Future[Conversation | None]] = {}
        self._reader: asyncio.Task[None] | None = None

    def _remember(self, conv: Conversation) -> Conversation:
        self._cache[conv.key] = conv
        self._cache.move_to_end(conv.key)
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return conv

    async def get(self, key: ConversationKey) -> Conversation | None:
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        waiting = self._reading.get(key)
        if waiting is None:
            waiting = self._reading[key] = asyncio.get_running_loop().create_future()
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read_batches(), name="threads-read")
        return await asyncio.shield(waiting)  # one caller's cancellation must not fail the others

    async def _read_batches(self) -> None:
        """Look up every waiting key, up to ``MAX_CREATE_BATCH`` per SELECT on one connection."""
        await asyncio.sleep(0)  # let the rest of a burst join this batch
        while self._reading:
            batch = dict(itertools.islice(self._reading.items(), MAX_CREATE_BATCH))
            for key in batch:
                del self._reading[key]
            try:
                found = await self._read_many(list(batch))
            except Exception as exc:  # every waiter fails the same way; the manager retries its message
                for future in batch.values():
                    if not future.done():
                        future.set_exception(exc)
                        future.exception()  # retrieved here: a waiter that went away must not warn
                continue
            for key, future in batch.items():
                if future.done():
                    continue
                # Created or changed here while the SELECT ran (get_or_create, /new): that is newer.
                conv = self._cache.get(key) or found.get(key)
                future.set_result(None if conv is None else self._remember(conv))

    async def _read_many(self, keys: list[ConversationKey]) -> dict[ConversationKey, Conversation]:
        c = conversations_table.c
        query = select(conversations_table).where(tuple_(c.provider, c.workspace, c.chat, c.topic).in_(keys))
        async with self.db.engine.connect() as conn:
            read = (await conn.execute(query)).mappings().all()
        return {conv.key: conv for conv in map(self._from_row, read)}

    async def get_or_create(
        self, key: ConversationKey, owner: str, thread_id: str | None = None
    ) -> Conversation:
        """The conversation's thread; concurrent first messages agree on exactly one new thread."""
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        waiting = self._creating.get(key)
        if waiting is None:
            future: asyncio.Future[Conversation] = asyncio.get_running_loop().create_future()
            waiting = self._creating[key] = (future, owner, thread_id)
            if self._creator is None or self._creator.done():
                self._creator = asyncio.create_task(self._create_batches(), name="threads-create")
        return await asyncio.shield(waiting[0])  # one caller's cancellation must not fail the others

    async def _create_batches(self) -> None:
        """Create every waiting conversation, up to ``MAX_CREATE_BATCH`` per transaction."""
        await asyncio.sleep(0)  # let the rest of a burst join this batch
        while self._creating:
            batch = dict(itertools.islice(self._creating.items(), MAX_CREATE_BATCH))
            for key in batch:
                del self._creating[key]
            try:
                found = await self._create_many(batch)
            except Exception as exc:  # every waiter fails the same way; the manager retries its message
                for future, _owner, _thread in batch.values():
                    if not future.done():
                        future.set_exception(exc)
                        future.exception()  # retrieved here: a waiter that went away must not warn
                continue
            for key, (future, _owner, _thread) in batch.items():
                if not future.done():
                    future.set_result(self._remember(found[key]))

    async def _create_many(
        self, batch: dict[ConversationKey, tuple[asyncio.Future[Conversation], str, str | None]]
    ) -> dict[ConversationKey, Conversation]:
        now = time.time()
        rows = [
            {
                "provider": key[0],
                "workspace": key[1],
                "chat": key[2],
                "topic": key[3],
                "thread_id": thread_id or uuid.uuid4().hex,
                "owner": owner,
                "model": None,
                "created_at": now,
                "updated_at": now,
            }
            for key, (_future, owner, thread_id) in batch.items()
        ]
        c = conversations_table.c
        async with self.db.engine.begin() as conn:
            await conn.execute(
                self._insert.on_conflict_do_nothing(
                    index_elements=["provider", "workspace", "chat", "topic"]
                ),
                rows,
            )
            query = select(conversations_table).where(
                tuple_(c.provider, c.workspace, c.chat, c.topic).in_(list(batch))
            )
            read = (await conn.execute(query)).mappings().all()
        return {conv.key: conv for conv in map(self._from_row, read)}

    async def start_new_thread(self, key: ConversationKey, owner: str) -> Conversation:
        """``/new``: point the conversation at a fresh thread, keeping its model choice."""
        current = await self.get_or_create(key, owner)
        new_id = uuid.uuid4().hex
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(conversations_table)
                .where(*self._match(key))
                .values(thread_id=new_id, owner=owner, updated_at=time.time())
            )
        return self._remember(replace(current, thread_id=new_id, owner=owner))

    async def set_model(self, key: ConversationKey, owner: str, model: str) -> Conversation:
        current = await self.get_or_create(key, owner)
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(conversations_table)
                .where(*self._match(key))
                .values(model=model, updated_at=time.time())
            )
        return self._remember(replace(current, model=model))

    async def set_approval(self, key: ConversationKey, owner: str, mode: str | None) -> Conversation:
        """``/approval``: this chat's override of ``sandbox.approval`` (None: back to the service's)."""
        current = await self.get_or_create(key, owner)
        async with self.db.engine.begin() as conn:
            await conn.execute(
                update(conversations_table)
                .where(*self._match(key))
                .values(approval=mode, updated_at=time.time())
            )
        return self._remember(replace(current, approval=mode))

    @staticmethod
    def _match(key: ConversationKey) -> list[ColumnElement[bool]]:
        c = conversations_table.c
        return [c.provider == key[0], c.workspace == key[1], c.chat == key[2], c.topic == key[3]]

    @staticmethod
    def _from_row(row) -> Conversation:  # type: ignore[no-untyped-def]
        return Conversation(
            key=(row["provider"], row["workspace"], row["chat"], row["topic"]),
            thread_id=row["thread_id"],
            owner=row["owner"],
            model=row["model"],
            approval=row["approval"],
        )
