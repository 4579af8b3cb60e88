"""Pending memory notes are written in batches: one transaction for many owners, each turn's note
recorded before its hook returns, no thread lost to concurrent notes (docs/memory.md, Durability). Cursor
reads and pending-row deletes are batched too, and an extraction still reads only what each thread said
after its cursor.

Real SQLite files; a second plain ``sqlite3`` connection reads what is committed, or holds the write
lock so that notes queue up behind a transaction the way they do in a burst.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from agent.memory import TRANSCRIPT_MESSAGES, MemoryService, MemoryStore
from agent.tables import metadata
from config.schema import MemoryConfig


def _no_model(name: str | None) -> Any:
    raise AssertionError("no extraction runs in these tests (the debounce is an hour)")


async def _no_transcript(thread_id: str) -> list[Any]:
    return []


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}")
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    yield engine
    await engine.dispose()


def service(engine: AsyncEngine) -> MemoryService:
    return MemoryService(
        MemoryConfig(debounce_seconds=3600),
        MemoryStore(engine),
        chat_model=_no_model,
        transcript=_no_transcript,
    )


def committed(path: Path) -> set[tuple[str, str, str | None]]:
    """(owner, thread, model) rows another process would find after a hard kill now."""
    with contextlib.closing(sqlite3.connect(path, timeout=10)) as conn:
        return set(conn.execute("SELECT owner, thread_id, model FROM agent_memory_pending"))


@contextlib.contextmanager
def write_lock(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holds SQLite's write lock: writers wait (busy timeout) until it is let go."""
    conn = sqlite3.connect(path, timeout=10, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def count_commits(engine: AsyncEngine) -> list[int]:
    commits = [0]

    @event.listens_for(engine.sync_engine, "commit")
    def _commit(conn: Any) -> None:
        commits[0] += 1

    return commits


async def test_a_burst_of_new_owners_is_a_few_transactions_and_each_note_is_committed_when_its_turn_returns(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    memory = service(engine)
    commits = count_commits(engine)
    db = tmp_path / "m.db"
    seen_at_return: dict[str, bool] = {}

    async def turn(i: int) -> None:
        await memory.turn_finished(f"owner-{i}", f"thread-{i}", "default")
        seen_at_return[f"owner-{i}"] = (f"owner-{i}", f"thread-{i}", "default") in await asyncio.to_thread(
            committed, db
        )

    await asyncio.gather(*(turn(i) for i in range(300)))
    assert all(seen_at_return.values()) and len(seen_at_return) == 300
    assert commits[0] <= 10, f"{commits[0]} transactions for 300 notes: not batched"
    assert committed(db) == {(f"owner-{i}", f"thread-{i}", "default") for i in range(300)}
    await memory.close()


async def test_threads_and_a_model_change_noted_concurrently_all_reach_the_database(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    memory = service(engine)
    db = tmp_path / "m.db"
    with write_lock(db):  # the first note's transaction waits; everything after queues behind it
        first = asyncio.create_task(memory.turn_finished("alice", "t0", "small"))
        await asyncio.sleep(0.2)
        more = [asyncio.create_task(memory.turn_finished("alice", f"t{i}", "small")) for i in range(1, 40)]
        await asyncio.sleep(0)
        more.append(asyncio.create_task(memory.turn_finished("alice", "t40", "large")))  # a rewrite
        more += [asyncio.create_task(memory.turn_finished("bob", f"b{i}", "small")) for i in range(5)]
        await asyncio.sleep(0.2)
        assert not first.done()
    await asyncio.gather(first, *more)
    assert committed(db) == {("alice", f"t{i}", "large") for i in range(41)} | {
        ("bob", f"b{i}", "small") for i in range(5)
    }
    await memory.close()


async def test_a_turn_cancelled_while_its_batch_waits_does_not_cancel_the_others_and_is_still_noted(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    memory = service(engine)
    db = tmp_path / "m.db"
    with write_lock(db):
        turns = [asyncio.create_task(memory.turn_finished(f"o{i}", f"t{i}", None)) for i in range(3)]
        await asyncio.sleep(0.2)
        turns[1].cancel()  # e.g. the service stops while this turn's hook waits for the write
        await asyncio.sleep(0.1)
    await asyncio.gather(turns[0], turns[2])
    with pytest.raises(asyncio.CancelledError):
        await turns[1]
    await asyncio.sleep(0.1)
    assert committed(db) == {(f"o{i}", f"t{i}", None) for i in range(3)}
    await memory.close()


async def test_a_note_whose_owner_was_forgotten_while_it_queued_is_not_written(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    memory = service(engine)
    db = tmp_path / "m.db"
    with write_lock(db):
        kept = asyncio.create_task(memory.turn_finished("kept", "t1", None))
        await asyncio.sleep(0.2)  # its batch is in flight, waiting for the lock
        forgotten = asyncio.create_task(memory.turn_finished("cleared", "t2", None))
        await asyncio.sleep(0)
        memory.forget_pending("cleared")  # what /memory clear does before deleting the owner's rows
    await asyncio.gather(kept, forgotten)
    assert committed(db) == {("kept", "t1", None)}
    await memory.close()


async def test_a_failed_batch_is_raised_to_its_turns_and_the_next_batch_writes(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    memory = service(engine)
    db = tmp_path / "m.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("ALTER TABLE agent_memory_pending RENAME TO parked")
    with pytest.raises(Exception, match="agent_memory_pending"):
        await asyncio.gather(*(memory.turn_finished(f"o{i}", "t", None) for i in range(3)))
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("ALTER TABLE parked RENAME TO agent_memory_pending")
    await memory.turn_finished("later", "t", None)
    assert committed(db) == {("later", "t", None)}
    await memory.close()


async def test_on_postgres_a_batch_rewrites_and_adds_many_owners_rows(pg_url: str) -> None:
    engine = create_async_engine(pg_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        memory = service(engine)
        await memory.turn_finished("alice", "t0", "small")
        notes = [memory.turn_finished(f"owner-{i}", f"thread-{i}", None) for i in range(600)]
        notes += [memory.turn_finished("alice", f"t{i}", "small") for i in range(1, 4)]  # added rows
        notes.append(memory.turn_finished("alice", "t4", "large"))  # a rewrite of alice's rows
        commits = count_commits(engine)
        await asyncio.gather(*notes)
        assert commits[0] <= 5
        rows = set(await memory.store.all_pending())
        assert rows == {"alice"} | {f"owner-{i}" for i in range(600)}  # 600: more than one IN (...) chunk
        threads, model, _due = (await memory.store.all_pending())["alice"]
        assert threads == {f"t{i}" for i in range(5)} and model == "large"
        # Drops of several owners in one batch (a key group each): exactly those pairs go.
        await asyncio.gather(
            memory.store.drop_pending("alice", {"t0", "t1"}),
            memory.store.drop_pending("owner-1", {"thread-1"}),
            memory.store.drop_pending("owner-2", {"thread-3"}),  # owner-3's thread, not owner-2's
        )
        pending = await memory.store.all_pending()
        assert pending["alice"][0] == {"t2", "t3", "t4"} and "owner-1" not in pending
        assert pending["owner-2"][0] == {"thread-2"} and pending["owner-3"][0] == {"thread-3"}
        await memory.close()
        assert await memory.store.all_pending() == {}  # the flush dropped every pending row
    finally:
        await engine.dispose()


class Extractions:
    """The extraction model: records which model read which transcript, and learns nothing."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, str]] = []
        self._model: str | None = None

    def __call__(self, name: str | None) -> Extractions:
        self._model = name
        return self

    async def ainvoke(self, request: list[BaseMessage]) -> AIMessage:
        self.calls.append((self._model, str(request[-1].content)))
        return AIMessage('{"facts": [], "summary": ""}')


async def _one_line(thread_id: str) -> list[BaseMessage]:
    return [HumanMessage(f"hello from {thread_id}", id=f"{thread_id}-1")]


async def test_each_owner_is_extracted_once_when_quiet_for_the_debounce_from_one_timer(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    model = Extractions()
    memory = MemoryService(
        MemoryConfig(debounce_seconds=1.0), MemoryStore(engine), chat_model=model, transcript=_one_line
    )
    await asyncio.gather(
        memory.turn_finished("ann", "a1", "m"),
        memory.turn_finished("ben", "b1", "m"),
        memory.turn_finished("cat", "c1", "m"),
    )
    await asyncio.sleep(0.5)
    await memory.turn_finished("ann", "a2", "m")  # ann's deadline moves to ~1.5 s
    await memory.turn_finished("cat", "c2", "other")  # a new model: a new entry, both threads, ~1.5 s
    await asyncio.sleep(0.7)  # ~1.2 s: only ben was quiet for the whole debounce
    assert [m for m, _ in model.calls] == ["m"] and "hello from b1" in model.calls[0][1]
    for _ in range(60):
        if len(model.calls) == 3 and not memory._tasks:
            break
        await asyncio.sleep(0.05)
    by_reader = {body.split("Latest conversation:")[1]: name for name, body in model.calls[1:]}
    assert by_reader == {
        "\nUser: hello from a1\nUser: hello from a2": "m",
        "\nUser: hello from c1\nUser: hello from c2": "other",
    }
    assert committed(tmp_path / "m.db") == set()  # done: no pending note left
    await asyncio.sleep(1.2)
    assert len(model.calls) == 3  # once each
    await memory.close()


async def test_owners_waiting_for_extraction_hold_no_task_each(engine: AsyncEngine) -> None:
    memory = service(engine)
    before = len(asyncio.all_tasks())
    await asyncio.gather(*(memory.turn_finished(f"owner-{i}", "t", None) for i in range(200)))
    assert len(asyncio.all_tasks()) - before <= 2  # one timer for all of them, no sleeping task per owner
    await memory.close()


# --- Reads and deletes in batches: an extraction of many threads, a stop after a burst of new owners ---
# A burst of new chats leaves one owner with thousands of threads (or thousands of owners); the
# extraction that reads them, when the debounce ends or the service stops, made one cursor query and
# one pending-row delete per thread or owner (docs/PERFORMANCE.md, burst of 10,000 new chats).


class RecordingModel:
    """Answers every extraction with no facts; keeps the transcripts it was sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def ainvoke(self, request: list[BaseMessage]) -> AIMessage:
        self.sent.append(str(request[-1].content))
        return AIMessage(json.dumps({"facts": [], "summary": ""}))


def cursor_selects(engine: AsyncEngine) -> list[str]:
    seen: list[str] = []

    def before(conn, cursor, statement: str, parameters, context, executemany) -> None:  # type: ignore[no-untyped-def]
        if statement.lstrip().upper().startswith("SELECT") and "FROM agent_memory_cursors" in statement:
            seen.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", before)
    return seen


async def test_an_extraction_of_many_threads_reads_their_cursors_in_a_few_queries(
    engine: AsyncEngine,
) -> None:
    threads = [f"thread-{i:04d}" for i in range(1200)]
    said: dict[str, list[BaseMessage]] = {
        t: [HumanMessage(f"old words of {t}", id=f"{t}-1"), AIMessage("noted", id=f"{t}-2")] for t in threads
    }
    # Thread 7 has a long history: only its last TRANSCRIPT_MESSAGES messages after the cursor are read.
    said[threads[7]] += [HumanMessage(f"line {n}", id=f"{threads[7]}-n{n}") for n in range(40)]

    async def transcript(thread_id: str) -> list[BaseMessage]:
        return said[thread_id]

    model = RecordingModel()
    store = MemoryStore(engine)
    memory = MemoryService(MemoryConfig(), store, chat_model=lambda name: model, transcript=transcript)
    # Every other thread was read up to its first message before; thread 5 up to a message compaction
    # has since summarised away (so all of it is new).
    await store.set_cursors("alice", {t: f"{t}-1" for t in threads[::2]} | {threads[5]: "gone"})
    selects = cursor_selects(engine)

    assert await memory.extract("alice", set(threads), None) is False
    assert len(selects) == 3  # 1,200 threads, 500 per query — not 1,200 queries
    sent = model.sent[0]
    assert "User: old words of thread-0001" in sent and "User: old words of thread-0000" not in sent
    assert "Assistant: noted" in sent
    assert "User: old words of thread-0005" in sent
    assert "User: line 39" in sent and f"User: line {40 - TRANSCRIPT_MESSAGES}" in sent
    assert f"User: line {40 - TRANSCRIPT_MESSAGES - 1}" not in sent
    # Every cursor moved to its thread's newest message: nothing is read twice.
    assert await store.cursors(threads[:8]) == {t: (True, said[t][-1].id) for t in threads[:8]}
    model.sent.clear()
    assert await memory.extract("alice", set(threads), None) is False
    assert model.sent == []


async def test_cursors_of_concurrent_extractions_share_queries(engine: AsyncEngine) -> None:
    """Many owners' extractions at once (a burst of new owners, flushed when the service stops)."""

    async def transcript(thread_id: str) -> list[BaseMessage]:
        return []

    model: Any = RecordingModel()
    memory = MemoryService(
        MemoryConfig(), MemoryStore(engine), chat_model=lambda name: model, transcript=transcript
    )
    selects = cursor_selects(engine)
    await asyncio.gather(*(memory.extract(f"owner-{i}", {f"thread-{i}"}, None) for i in range(300)))
    assert len(selects) <= 2


async def test_stopping_after_a_burst_of_new_owners_reads_and_drops_their_notes_in_batches(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    """10,000 new owners each leave a pending extraction; stopping flushes them all at once. Their
    cursor reads and pending-row deletes share statements, and every pending row is gone afterwards."""

    async def transcript(thread_id: str) -> list[BaseMessage]:
        return []

    memory = MemoryService(
        MemoryConfig(debounce_seconds=3600),
        MemoryStore(engine),
        chat_model=lambda name: RecordingModel(),
        transcript=transcript,
    )
    await asyncio.gather(*(memory.turn_finished(f"owner-{i}", f"thread-{i}") for i in range(400)))
    with sqlite3.connect(tmp_path / "m.db") as conn:
        assert conn.execute("SELECT count(*) FROM agent_memory_pending").fetchone() == (400,)
    statements: list[str] = []
    event.listen(
        engine.sync_engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, parameters, context, executemany: statements.append(statement),
    )
    await memory.close()
    deletes = [s for s in statements if s.lstrip().upper().startswith("DELETE FROM AGENT_MEMORY_PENDING")]
    reads = [s for s in statements if "FROM agent_memory_cursors" in s]
    assert 1 <= len(deletes) <= 4 and 1 <= len(reads) <= 4  # not 400 each
    with sqlite3.connect(tmp_path / "m.db") as conn:
        assert conn.execute("SELECT count(*) FROM agent_memory_pending").fetchone() == (0,)
