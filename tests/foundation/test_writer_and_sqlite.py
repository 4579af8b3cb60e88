"""The shared group-commit writer's one failure rule, and SQLite settings on every connection we open."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from sqlalchemy import text

from config.writer import GroupCommitWriter, WriterClosed
from tests.harness import Harness


async def test_one_bad_write_fails_only_its_own_caller_and_its_neighbours_commit():
    committed: list[str] = []
    batches: list[int] = []

    async def apply(ops: Sequence[str]) -> list[str]:
        batches.append(len(ops))
        if "bad" in ops:
            raise ValueError("bad op")  # like a constraint violation: the whole transaction rolls back
        committed.extend(ops)
        return [op.upper() for op in ops]

    writer: GroupCommitWriter[str] = GroupCommitWriter("test", apply)
    writer.start()
    results = await asyncio.gather(
        writer.submit("a"), writer.submit("bad"), writer.submit("c"), return_exceptions=True
    )
    await writer.close()

    assert results[0] == "A" and results[2] == "C"
    assert isinstance(results[1], ValueError)
    assert committed == ["a", "c"]
    assert batches[0] == 3, "the three writes were not group-committed"


async def test_close_applies_everything_queued_and_then_refuses():
    seen: list[int] = []

    async def apply(ops: Sequence[int]) -> list[None]:
        seen.extend(ops)
        return [None] * len(ops)

    writer: GroupCommitWriter[int] = GroupCommitWriter("test", apply)
    writer.start()
    futures = [writer.enqueue(i) for i in range(5)]
    await writer.close()
    assert seen == [0, 1, 2, 3, 4]
    assert all(f.done() and f.exception() is None for f in futures)
    with pytest.raises(WriterClosed):
        await writer.submit(5)


async def test_every_sqlite_connection_waits_for_locks_and_uses_wal(settings):
    async with Harness.running(settings) as h:
        db = h.service.db
        async with db.engine.connect() as conn:
            assert (await conn.execute(text("PRAGMA busy_timeout"))).scalar() == 10_000
            assert (await conn.execute(text("PRAGMA journal_mode"))).scalar() == "wal"
        # The inbox's own connection never waits on the event loop (busy_timeout 0 there); a batch
        # that finds the lock taken waits in the writer thread (test_inbox_write_path.py).
        own = h.service.inbox._sqlite.conn  # type: ignore[union-attr]
        assert own.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert own.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL: durable in WAL
        saver = h.service.agent.checkpointer  # type: ignore[union-attr]
        async with saver.conn.execute("PRAGMA busy_timeout") as cursor:
            assert (await cursor.fetchone())[0] == 10_000
        async with saver.conn.execute("PRAGMA journal_mode") as cursor:
            assert (await cursor.fetchone())[0] == "wal"


async def test_closing_the_database_waits_for_the_running_checkpoint(settings):
    """close() must not close the checkpoint connection while a maintenance thread still uses it."""
    async with Harness.running(settings) as h:
        await h.ask("hello")
        db = h.service.db
        await asyncio.sleep(1.2)  # let at least one checkpoint round run (interval: 1 s)
        task = db._maintenance
        assert task is not None and not task.done()
    assert task.done() and not task.cancelled(), "maintenance was cancelled, not stopped and awaited"
