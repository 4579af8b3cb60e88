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

import os
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, replace

from sqlalchemy import Column, Float, MetaData, String, Table, UniqueConstraint, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import ColumnElement

from bot.db import Database
from config.batching import Batcher, KeyQuery

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
        # Built once (their cache keys too), not per batch: see config.batching.KeyQuery.
        self._insert_new = self._insert.on_conflict_do_nothing(
            index_elements=["provider", "workspace", "chat", "topic"]
        )
        c = conversations_table.c
        self._select_keys = KeyQuery(
            [c.provider, c.workspace, c.chat, c.topic], select(conversations_table).where, varying=2
        )
        # Conversations to create in the next batch: key -> (owner, thread id) of its first caller.
        self._creating: Batcher[ConversationKey, tuple[str, str | None], Conversation] = Batcher(
            self._create_many, max_batch=MAX_CREATE_BATCH, name="threads-create"
        )
        # Cache misses for the next batched SELECT (None: no such conversation).
        self._reading: Batcher[ConversationKey, None, Conversation] = Batcher(
            self._read_many, max_batch=MAX_CREATE_BATCH, name="threads-read"
        )

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
        return await self._reading.lookup(key, None)

    async def _read_many(self, batch: dict[ConversationKey, None]) -> dict[ConversationKey, Conversation]:
        """One SELECT for a batch of cache misses (see :class:`config.batching.Batcher` for the rules)."""
        async with self.db.engine.connect() as conn:
            read = (await conn.execute(*self._select_keys(batch))).mappings().all()
        found = {conv.key: conv for conv in map(self._from_row, read)}
        answers: dict[ConversationKey, Conversation] = {}
        for key in batch:
            # Created or changed here while the SELECT ran (get_or_create, /new): that is newer.
            conv = self._cache.get(key) or found.get(key)
            if conv is not None:
                answers[key] = self._remember(conv)
        return answers

    async def get_or_create(
        self, key: ConversationKey, owner: str, thread_id: str | None = None
    ) -> Conversation:
        """The conversation's thread; concurrent first messages agree on exactly one new thread."""
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        conv = await self._creating.lookup(key, (owner, thread_id))
        if conv is None:  # the INSERT … ON CONFLICT DO NOTHING and the SELECT in one transaction: never
            raise RuntimeError(f"conversation {key} was neither created nor found")
        return conv

    async def _create_many(
        self, batch: dict[ConversationKey, tuple[str, str | None]]
    ) -> dict[ConversationKey, Conversation]:
        """Create a batch of conversations, up to ``MAX_CREATE_BATCH`` in one transaction.

        The rows are read back unless the INSERT says it inserted every one of them (SQLite sums an
        executemany's changes; asyncpg reports -1, unknown, for several rows): then each row holds what
        was just inserted, and reading it again was one more SELECT per batch of new chats."""
        now = time.time()
        fresh = os.urandom(16 * len(batch))  # one system call for the batch's new thread ids, not one each
        rows = [
            {
                "provider": key[0],
                "workspace": key[1],
                "chat": key[2],
                "topic": key[3],
                "thread_id": thread_id or uuid.UUID(bytes=fresh[16 * i : 16 * i + 16], version=4).hex,
                "owner": owner,
                "model": None,
                "created_at": now,
                "updated_at": now,
            }
            for i, (key, (owner, thread_id)) in enumerate(batch.items())
        ]
        async with self.db.engine.begin() as conn:
            inserted = await conn.execute(self._insert_new, rows)
            if inserted.rowcount == len(rows):  # all new: nobody else had created any of them
                created = [
                    Conversation(key, str(row["thread_id"]), str(row["owner"]), None)
                    for key, row in zip(batch, rows, strict=True)
                ]
            else:
                read = (await conn.execute(*self._select_keys(batch))).mappings()
                created = [self._from_row(row) for row in read]
        return {conv.key: self._remember(conv) for conv in created}  # committed: only now cached

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
