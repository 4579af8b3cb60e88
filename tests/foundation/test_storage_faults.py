"""A turn that fails because storage is unavailable is retried in place, never answered with an error.

Before: a storage fault during a turn (the agent's checkpoint store full, PostgreSQL restarting) was
answered "⚠️ Something went wrong" and its inbox entry marked done — the question was never answered.
Here the fault is real: the agent's checkpoint file (SQLite) is capped at its current size, so its next
write fails with SQLite's own "database or disk is full", exactly as on a full disk.
"""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from typing import Any

import httpx
import pytest
from sqlalchemy.exc import OperationalError as SAOperationalError

from bot.faults import DISK_FULL_NOTE, is_disk_full, is_storage_error
from bot.inbox import DONE, PENDING
from tests.conftest import make_settings
from tests.harness import Harness

UNCAPPED = 1_073_741_823  # SQLite's default max_page_count


async def cap_checkpoints(harness: Harness, pages: int | None) -> None:
    """Limit the agent's checkpoint file to its current size (None: lift the limit), on the very
    connection the checkpointer writes through: its next growth fails with SQLITE_FULL."""
    saver: Any = harness.service.agent.checkpointer  # type: ignore[union-attr]
    if pages is None:
        cursor = await saver.conn.execute("PRAGMA page_count")
        (pages,) = await cursor.fetchone()
    await saver.conn.execute(f"PRAGMA max_page_count = {pages}")


async def test_a_turn_stopped_by_a_full_checkpoint_store_stays_pending_and_is_answered_in_the_same_message(
    tmp_path, llm
):
    async with Harness.running(make_settings(tmp_path, llm)) as h:
        assert await h.ask("first", message_id="m1") == "echo: first"
        await cap_checkpoints(h, None)

        sent = await h.chat.say("second", message_id="m2")
        notice = await h.chat.wait_for_text(DISK_FULL_NOTE, timeout=20)
        entry = (await h.service.inbox.entries(limit=1))[0]
        assert entry.message.platform_message_id == sent.platform_message_id
        assert (entry.status, entry.attempts) == (PENDING, 0), "a storage fault must not finish or count"
        assert h.service.bus.load == 1, "still unfinished: it will run again"
        assert not any("went wrong" in m.text for m in h.chat.messages.values())

        await cap_checkpoints(h, UNCAPPED)  # space again
        await h.chat.wait_for(lambda ch: ch.messages[notice.ref].text == "echo: second", timeout=20)
        await h.idle(timeout=20)

        second = await h.service.inbox.get(entry.id)
        assert second is not None and second.status == DONE
        answers = [m for m in h.chat.in_chat() if m.ref != notice.ref and "second" in m.text]
        assert answers == [], "the retry edits the message that showed the note; it sends no other"
        # What the model had said stayed visible with the note while it waited.
        assert any(t.startswith("echo: second") and t.endswith(DISK_FULL_NOTE) for t in notice.history)
        # The thread's history holds the answer once the write went through.
        assert await h.ask("third", message_id="m3") == "echo: third"
    roles = [m["role"] for m in llm.completions[-1]["messages"] if m["role"] != "system"]
    assert roles[-3:] == ["user", "assistant", "user"]


def test_storage_faults_are_told_from_statement_errors_and_from_the_model_being_unreachable(tmp_path):
    """Retrying helps only when storage itself failed: a bad statement, or the model's own connection
    being refused (the same OS error class, raised by the HTTP client), must stay ordinary failures."""
    conn = sqlite3.connect(tmp_path / "x.db")
    conn.execute("CREATE TABLE t (x)")
    try:
        conn.execute("SELEC 1")
    except sqlite3.OperationalError as exc:
        assert not is_storage_error(exc)
    conn.execute(f"PRAGMA max_page_count = {conn.execute('PRAGMA page_count').fetchone()[0]}")
    try:
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 5000,)] * 50)
        raise AssertionError("the capped file grew")
    except sqlite3.OperationalError as exc:
        assert is_storage_error(exc)
        assert is_storage_error(SAOperationalError("INSERT …", {}, exc))  # SQLAlchemy's wrapper

    async def refused() -> None:
        import asyncpg

        with pytest.raises(OSError) as driver:
            await asyncpg.connect("postgresql://u@127.0.0.1:9/db", timeout=5)
        assert is_storage_error(driver.value)
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ConnectError) as model:
                await client.get("http://127.0.0.1:9/v1/chat/completions")
        assert not is_storage_error(model.value)

    asyncio.run(refused())


def test_no_space_anywhere_is_a_disk_full_storage_fault_and_other_os_errors_are_not():
    """An upload or a thread's folder that cannot be written on a full disk waits for space like the
    database does; a permission error would not pass by waiting."""
    full = OSError(errno.ENOSPC, "No space left on device")
    assert is_storage_error(full) and is_disk_full(full)
    try:
        try:
            raise full
        except OSError as exc:
            raise RuntimeError("saving the upload failed") from exc
    except RuntimeError as wrapped:
        assert is_storage_error(wrapped) and is_disk_full(wrapped)
    assert not is_storage_error(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(sqlite3.OperationalError("disk I/O error"))
