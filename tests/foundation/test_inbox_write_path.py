"""The inbox's write path: reply references reach the disk before a crash can lose them, the writer's
urgent lane, and SQLite batches that find the database locked (they wait off the event loop)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from bot.db import Database
from bot.inbox import Inbox, InboxEntry, metadata
from channels.memory import MemoryChannel
from channels.resume import ReplyState
from config.writer import GroupCommitWriter
from tests.conftest import fresh_pg_database


@pytest.fixture
async def sqlite_inbox(tmp_path: Path) -> AsyncIterator[tuple[Inbox, Path]]:
    path = tmp_path / "inbox.db"
    db = Database(f"sqlite+aiosqlite:///{path}")
    await db.create_schema([metadata])
    inbox = Inbox(db)
    await inbox.start()
    yield inbox, path
    await inbox.close()
    await db.close()


def stored_ref(path: Path, entry_id: str) -> str | None:
    """What another process would read: only committed rows are visible to a second connection."""
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT reply_ref FROM inbox WHERE id = ?", (entry_id,)).fetchone()
    finally:
        conn.close()
    return row[0] if row else None


@contextlib.asynccontextmanager
async def started_inbox(backend: str, tmp_path: Path) -> AsyncIterator[tuple[Inbox, str]]:
    """A started inbox on a fresh SQLite file or PostgreSQL database, and the database's URL."""
    database = fresh_pg_database() if backend == "postgres" else contextlib.nullcontext(None)
    async with database as pg_url:
        url = pg_url or f"sqlite+aiosqlite:///{tmp_path / 'inbox.db'}"
        db = Database(url)
        await db.create_schema([metadata])
        inbox = Inbox(db)
        await inbox.start()
        try:
            yield inbox, url
        finally:
            await inbox.close()
            await db.close()


async def committed(url: str, entry_id: str) -> InboxEntry | None:
    """The entry as a second engine reads it: only what is committed."""
    other = Database(url)
    try:
        return await Inbox(other).get(entry_id)
    finally:
        await other.close()


async def test_a_reply_reference_is_committed_before_set_reply_ref_returns(sqlite_inbox):
    """The platform has created the placeholder; a kill -9 from here on must not lose its id."""
    inbox, path = sqlite_inbox
    entry = await inbox.accept(MemoryChannel("memory").make_message("hi", message_id="r1"))
    inbox.set_reply_ref(
        entry.id, ReplyState.first_only("placeholder-7")
    )  # not awaited, and nothing awaited after it
    assert stored_ref(path, entry.id) == "placeholder-7"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_queued_notice_reference_is_durable_when_save_reply_ref_returns(backend, tmp_path):
    async with started_inbox(backend, tmp_path) as (inbox, url):
        entry = await inbox.accept(MemoryChannel("memory").make_message("hi", message_id="n1"))
        await inbox.save_reply_ref(entry.id, ReplyState.first_only("notice-3"))
        stored = await committed(url, entry.id)
        assert stored is not None and stored.reply_ref == "notice-3"


async def test_an_urgent_write_heads_the_next_batch_ahead_of_queued_bulk_writes():
    batches: list[list[str]] = []

    async def apply(ops: Sequence[str]) -> list[None]:
        batches.append(list(ops))
        return [None] * len(ops)

    writer: GroupCommitWriter[str] = GroupCommitWriter("test", apply, max_batch=3)
    writer.start()
    bulk = [writer.enqueue(f"bulk-{i}") for i in range(5)]
    urgent = writer.enqueue("ref", urgent=True)
    await asyncio.gather(urgent, *bulk)
    await writer.close()
    assert batches[0] == ["ref", "bulk-0", "bulk-1"], "the urgent write waited behind queued bulk writes"
    assert [op for batch in batches for op in batch] == ["ref", *(f"bulk-{i}" for i in range(5))]


async def test_a_batch_that_finds_the_database_locked_waits_for_it_without_blocking_the_loop(sqlite_inbox):
    inbox, path = sqlite_inbox
    chat = MemoryChannel("memory")
    first = await inbox.accept(chat.make_message("before", message_id="l0"))
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another writer (say, `switchboard inbox retry`) holds the lock
    try:
        accepting = asyncio.create_task(inbox.accept(chat.make_message("while locked", message_id="l1")))
        inbox.set_reply_ref(first.id, ReplyState.first_only("ref-while-locked"))
        # The loop keeps running meanwhile (a wait on the loop would hold it until the lock timeout,
        # and this writer could never have committed: a deadlock ending in "database is locked").
        await asyncio.sleep(0.2)
        assert not accepting.done(), "the accept did not wait for the lock"
    finally:
        other.execute("COMMIT")
        other.close()
    entry = await asyncio.wait_for(accepting, 15)
    assert not entry.duplicate
    stored = await inbox.get(entry.id)
    assert stored is not None and stored.message.text == "while locked"
    await inbox.close()  # flushes the queued reference
    assert stored_ref(path, first.id) == "ref-while-locked"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_staged_reply_state_and_its_done_mark_are_one_write(backend, tmp_path):
    """A final answer's state, staged just before its entry's done, lands with it: one statement and the
    state kept. The state is the answer's newest (an older one staged for the same entry loses)."""
    async with started_inbox(backend, tmp_path) as (inbox, url):
        entry = await inbox.accept(MemoryChannel("memory").make_message("hi", message_id="d1"))
        applied: list[list[str]] = []
        apply = inbox._apply

        async def counting(ops: Sequence[object]) -> list[object]:
            applied.append([op.kind for op in ops])  # type: ignore[attr-defined]
            return await apply(ops)  # type: ignore[arg-type]

        inbox._writer._apply = counting  # type: ignore[assignment]
        inbox.stage_reply_ref(entry.id, ReplyState.first_only("placeholder-1"))
        inbox.stage_reply_ref(entry.id, ReplyState.first_only("answer-2"))
        assert applied == []  # staged: never a commit of its own before the caller goes on
        await inbox.mark_done(entry.id)
        assert applied == [["reply_ref", "reply_ref", "done"]]  # one batch
        stored = await committed(url, entry.id)
        assert stored is not None and (stored.status, stored.reply_ref) == ("done", "answer-2")
