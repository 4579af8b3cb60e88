"""Task cards under ``database.retention_days``: a card whose result was delivered goes once it is older
than the period; a card still running, or with a result still owed to its chat, never does."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select, update

from bot.retention import DAY_SECONDS
from bot.tasks.store import task_cards_table
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import Harness


async def test_old_delivered_cards_are_deleted_and_running_or_owed_ones_stay(tmp_path: Path, llm: FakeOpenAI):
    settings = make_settings(tmp_path, llm, database={"retention_days": 7})
    async with Harness.running(settings) as h:
        await h.ask("hello")
        origin = h.chat.make_message("")
        conversation = await h.service.threads.get(origin.conversation_key)
        assert conversation is not None
        tasks = h.manager.tasks.reporter(origin, owner=conversation.owner, thread_id=conversation.thread_id)
        for name in ("finished", "running", "owed"):
            await tasks.started(task_id=name, title=f"the {name} one", kind="subagent")
        await tasks.finished(task_id="finished", status="done", result="all good")
        await h.manager.tasks.store.finish("owed", "done", "not shown yet")  # a restart came in between
        t = task_cards_table.c
        async with h.service.db.engine.begin() as conn:
            await conn.execute(update(task_cards_table).values(updated_at=t.updated_at - 8 * DAY_SECONDS))

        deleted = await h.service.retention.run_once()

        async with h.service.db.engine.connect() as conn:
            left = set((await conn.execute(select(t.id))).scalars())
    assert deleted["task cards"] == 1
    assert left == {"running", "owed"}
