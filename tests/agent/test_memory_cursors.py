"""An extraction over many threads reads their cursors in a few batched queries, and still reads only
what each thread said after its cursor (docs/memory.md; docs/PERFORMANCE.md, burst of 10,000 new chats).

A burst of new chats leaves one owner with thousands of threads; the extraction that reads them (when
the debounce ends, or when the service stops) made one cursor query per thread. Real SQLite file; the
model is a stand-in that records the request it is sent and answers with no facts.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from agent.memory import TRANSCRIPT_MESSAGES, MemoryService, MemoryStore
from agent.tables import metadata
from config.schema import MemoryConfig


class RecordingModel:
    """Answers every extraction with no facts; keeps the transcripts it was sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def ainvoke(self, request: list[BaseMessage]) -> AIMessage:
        self.sent.append(str(request[-1].content))
        return AIMessage(json.dumps({"facts": [], "summary": ""}))


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}")
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    yield engine
    await engine.dispose()


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
