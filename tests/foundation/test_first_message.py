"""A chat's first message in a burst of new chats: its lookups are batched, not one query per chat.

A private chat's first message looks its conversation up (the owner check) and its sender's owner up
before anything is cached; one pooled connection and SELECT per new chat was the largest part of a first
message's cost (docs/PERFORMANCE.md). These run the real stores over a real SQLite file and count the
statements the database sees.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import event

from bot.db import Database
from bot.threads import ThreadStore
from bot.threads import metadata as threads_metadata
from connections import ConnectionStore, OwnerResolver, PlatformIdentity
from connections import metadata as connections_metadata


@pytest.fixture
async def db(tmp_path) -> AsyncIterator[Database]:  # type: ignore[no-untyped-def]
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'first.db'}")
    await database.create_schema([threads_metadata, connections_metadata])
    try:
        yield database
    finally:
        await database.close()


def count_selects(db: Database, table: str) -> list[str]:
    """The SELECT statements on ``table`` the database is sent from now on."""
    seen: list[str] = []

    def before(conn, cursor, statement: str, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT") and f"FROM {table}" in statement:
            seen.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", before)
    return seen


async def test_a_burst_of_new_chats_is_looked_up_in_a_few_selects_and_nothing_absent_is_cached(
    db: Database,
) -> None:
    threads = ThreadStore(db)
    existing = await threads.get_or_create(("bench", "", "old", ""), "alice")
    selects = count_selects(db, "conversations")
    keys = [("bench", "", f"chat-{i}", "") for i in range(1200)]
    found = await asyncio.gather(*(threads.get(key) for key in keys), threads.get(existing.key))
    assert found[:-1] == [None] * len(keys)
    assert found[-1] == existing  # cached: no query
    assert len(selects) == 3  # 1,200 keys, 500 per SELECT — not 1,200 SELECTs

    # Nothing negative was cached: a conversation created since (here by another instance) is found.
    other_instance = ThreadStore(db)
    created = await other_instance.get_or_create(keys[0], "bob")
    assert await threads.get(keys[0]) == created


async def test_a_failed_batch_fails_its_waiters_and_the_next_lookup_queries_again(db: Database) -> None:
    threads = ThreadStore(db)
    keys = [("bench", "", f"chat-{i}", "") for i in range(3)]

    def broken(conn, cursor, statement: str, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("storage is down")

    event.listen(db.engine.sync_engine, "before_cursor_execute", broken)
    results = await asyncio.gather(*(threads.get(key) for key in keys), return_exceptions=True)
    assert all(isinstance(r, Exception) for r in results)
    event.remove(db.engine.sync_engine, "before_cursor_execute", broken)
    assert await threads.get(keys[0]) is None


async def test_a_burst_of_new_senders_is_resolved_in_a_few_selects(db: Database) -> None:
    store = ConnectionStore(db.engine)
    resolver = OwnerResolver(store)
    issued = await store.create_code("alice", "telegram")
    bound = PlatformIdentity("telegram", "", "sender-7")
    await store.bind_with_code(issued.code, bound)
    selects = count_selects(db, "connections")
    senders = [f"sender-{i}" for i in range(600)] + ["sender-1"] * 50  # new senders, one of them in 51 chats
    resolved = await asyncio.gather(*(resolver.resolve("telegram", "", s) for s in senders))
    assert len(selects) == 2  # 600 identities, 500 per SELECT — not 650 SELECTs
    assert resolved[7].owner == "alice" and resolved[7].bound
    assert resolved[1].owner == "telegram:-:sender-1" and not resolved[1].bound
    assert all(r == resolved[1] for r in resolved[600:])
    await resolver.resolve("telegram", "", "sender-3")
    assert len(selects) == 2  # cached


class SlowAnswers(ConnectionStore):
    """The real store, whose first batched answer is held after the query ran (a slow round trip)."""

    def __init__(self, db: Database) -> None:
        super().__init__(db.engine)
        self.queried, self.release = asyncio.Event(), asyncio.Event()

    async def owners_of(self, identities: list[PlatformIdentity]) -> dict[PlatformIdentity, str]:
        owners = await super().owners_of(identities)
        if not self.queried.is_set():
            self.queried.set()
            await self.release.wait()
        return owners


async def test_a_lookup_made_after_a_bind_never_gets_an_answer_from_before_it(db: Database) -> None:
    store = SlowAnswers(db)
    resolver = OwnerResolver(store)
    identity = PlatformIdentity("telegram", "", "sender-1")
    issued = await store.create_code("alice", "telegram")
    first = asyncio.ensure_future(resolver.resolve("telegram", "", "sender-1"))
    await asyncio.wait_for(store.queried.wait(), 10)  # read before the bind, the answer not back yet
    await store.bind_with_code(issued.code, identity)
    after = asyncio.ensure_future(resolver.resolve("telegram", "", "sender-1"))
    await asyncio.sleep(0.05)
    store.release.set()
    assert not (await first).bound  # read before the bind
    assert (await after).owner == "alice"  # made after it: its own batch, not the one in flight
    assert (await resolver.resolve("telegram", "", "sender-1")).owner == "alice"  # nothing stale cached


async def test_a_batch_of_lookups_searches_the_primary_key_and_finds_exactly_its_keys(db: Database) -> None:
    """SQLite scans the whole table for a row-value IN list; a burst of first messages then scanned the
    growing conversations table once per batch. The batched SELECT must be an index search, and
    grouping the keys must not match a row that only shares parts with them."""
    creator = ThreadStore(db)
    made = await asyncio.gather(
        *(
            creator.get_or_create((provider, workspace, f"chat-{i}", topic), "alice")
            for provider, workspace, topic in [("slack", "T1", ""), ("slack", "T2", ""), ("discord", "", "9")]
            for i in range(3)
        )
    )
    selects = count_selects(db, "conversations")
    wanted = [
        ("slack", "T1", "chat-0", ""),  # exists
        ("slack", "T2", "chat-1", ""),  # exists
        ("discord", "", "chat-2", "9"),  # exists
        ("slack", "T1", "chat-1", "9"),  # chat and topic exist, not together
        ("slack", "T2", "chat-7", ""),  # no such chat
        ("discord", "T1", "chat-0", "9"),  # no such workspace for that provider
    ]
    reader = ThreadStore(db)  # nothing cached: one batch, one SELECT
    found = await asyncio.gather(*(reader.get(key) for key in wanted))
    by_key = {conv.key: conv for conv in made}
    assert found == [by_key[wanted[0]], by_key[wanted[1]], by_key[wanted[2]], None, None, None]
    assert len(selects) == 1
    async with db.engine.connect() as conn:
        for statement in selects:
            compiled = statement.replace("?", "''")
            plan = [row[3] for row in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + compiled)]
            assert not any(step.startswith("SCAN conversations") for step in plan), plan


async def test_new_conversations_are_not_read_back_and_a_batch_with_an_existing_one_is(db: Database) -> None:
    """A batch whose every row was inserted needs no SELECT; one row created meanwhile by another
    instance makes the batch read its rows back, so everyone agrees on that instance's thread."""
    selects = count_selects(db, "conversations")
    keys = [("bench", "", f"chat-{i}", "") for i in range(20)]
    created = await asyncio.gather(*(ThreadStore(db).get_or_create(key, "alice") for key in keys[:1]))
    assert selects == []  # inserted: nothing to read back
    mine = ThreadStore(db)
    fresh = await asyncio.gather(*(mine.get_or_create(key, "bob") for key in keys[1:10]))
    assert selects == [] and len({conv.thread_id for conv in fresh}) == 9
    assert all(conv.owner == "bob" and conv.model is None for conv in fresh)
    other_instance = ThreadStore(db)
    mixed = await asyncio.gather(*(other_instance.get_or_create(key, "carol") for key in keys[:15]))
    assert len(selects) == 1
    assert mixed[:10] == [*created, *fresh]  # the rows stored first, not this instance's new ids
    assert all(conv.owner == "carol" for conv in mixed[10:])
    assert [await ThreadStore(db).get(key) for key in keys[:15]] == mixed  # and that is what is stored


async def test_a_burst_of_new_senders_is_an_index_search_that_finds_exactly_the_bound_ones(
    db: Database,
) -> None:
    """The owner lookup of a burst's new senders had the same row-value IN as the conversations: SQLite
    scanned the whole index of active identities per batch. It must search it and match only whole keys."""
    store = ConnectionStore(db.engine)
    for owner, provider, sender in [
        ("alice", "telegram", "1"),
        ("bob", "slack", "2"),
        ("carol", "telegram", "3"),
    ]:
        issued = await store.create_code(owner, provider)
        await store.bind_with_code(issued.code, PlatformIdentity(provider, "", sender))
    sent: list[tuple[str, object]] = []

    def before(conn, cursor, statement: str, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT") and "FROM connections" in statement:
            sent.append((statement, parameters))

    event.listen(db.engine.sync_engine, "before_cursor_execute", before)
    wanted = [
        PlatformIdentity("telegram", "", "1"),  # bound
        PlatformIdentity("telegram", "", "2"),  # that sender is bound on another platform only
        PlatformIdentity("telegram", "", "7"),  # nobody
    ]
    owners = await store.owners_of(wanted)
    assert owners == {wanted[0]: "alice"}
    assert len(sent) == 1
    statement, parameters = sent[0]
    async with db.engine.connect() as conn:
        plan = [row[3] for row in await conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters)]
    assert not any(step.startswith("SCAN") for step in plan), plan


async def test_on_postgres_batched_reads_of_several_groups_find_exactly_their_keys(pg_url: str) -> None:
    """The batched reads' statements are built once with bound parameters and an expanding IN per group
    of keys (config.batching.KeyQuery); asyncpg must get them right too, across groups and batch sizes."""
    db = Database(pg_url)
    await db.create_schema([threads_metadata, connections_metadata])
    try:
        made = await asyncio.gather(
            *(
                ThreadStore(db).get_or_create((provider, workspace, f"chat-{i}", topic), "alice")
                for provider, workspace, topic in [("slack", "T1", ""), ("discord", "", "9")]
                for i in range(3)
            )
        )
        by_key = {conv.key: conv for conv in made}
        reader = ThreadStore(db)
        for wanted in (
            [("slack", "T1", "chat-0", ""), ("discord", "", "chat-2", "9"), ("slack", "T1", "chat-1", "9")],
            [("discord", "", "chat-1", "9"), ("slack", "T1", "chat-2", ""), ("slack", "T1", "chat-7", "")],
        ):  # the same shape twice (two groups), other values
            found = await asyncio.gather(*(reader.get(key) for key in wanted))
            assert found == [by_key[wanted[0]], by_key[wanted[1]], None]
        store = ConnectionStore(db.engine)
        issued = await store.create_code("bob", "telegram")
        await store.bind_with_code(issued.code, PlatformIdentity("telegram", "", "1"))
        asked = [PlatformIdentity("telegram", "", "1"), PlatformIdentity("slack", "T1", "1")]
        assert await store.owners_of(asked) == {asked[0]: "bob"}
        assert await store.owners_of(asked[1:]) == {}
    finally:
        await db.close()
