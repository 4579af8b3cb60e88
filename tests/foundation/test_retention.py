"""Retention (bot/retention.py): finished messages older than ``database.retention_days`` are deleted,
unfinished ones never are, and dedupe within the retention period still holds."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
from sqlalchemy import text

from bot.inbox import FAILED, inbox_table
from bot.retention import DAY_SECONDS
from channels.types import InboundMessage
from config.loader import ConfigError
from tests.conftest import fresh_pg_database, make_settings
from tests.harness import Harness


def sqlite_url(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return f"sqlite+aiosqlite:///{tmp_path / 'data' / 'switchboard.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
async def settings(request, tmp_path, llm):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield make_settings(tmp_path, llm, database={"url": sqlite_url(tmp_path), "retention_days": 7})
        return
    async with fresh_pg_database() as url:
        yield make_settings(tmp_path, llm, database={"url": url, "retention_days": 7})


async def age(h: Harness, chat: str, days: float) -> None:
    """Let ``days`` pass for one chat's rows (what the clock would do)."""
    async with h.service.db.engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE inbox SET updated_at = updated_at - :by, created_at = created_at - :by WHERE chat = :chat"
            ),
            {"by": days * DAY_SECONDS, "chat": chat},
        )


async def store_failed(h: Harness, message: InboundMessage) -> str:
    """Store ``message`` as an entry whose one attempt failed, in one statement; returns its id.

    Not ``inbox.accept`` then ``inbox.mark_failed``: in between the entry is pending, and on PostgreSQL
    the service claims any pending entry, whoever stored it (another instance does just that). Under
    load the claim loop — woken by the release of the chats answered just before — once ran it there:
    a fourth model call, and its done mark overwritten by the test's failed one."""
    entry_id = uuid.uuid4().hex
    now = time.time()
    async with h.service.db.engine.begin() as conn:
        await conn.execute(
            inbox_table.insert().values(
                id=entry_id,
                provider=message.provider,
                workspace=message.workspace,
                chat=message.chat,
                platform_message_id=message.platform_message_id,
                payload=json.dumps(message.to_json()),
                status=FAILED,
                attempts=1,
                error="the model was down",
                created_at=now,
                updated_at=now,
            )
        )
    return entry_id


async def test_finished_messages_past_the_retention_period_are_deleted_and_nothing_else(settings, llm):
    async with Harness.running(settings) as h:
        await h.chat.say("old one", chat="old", message_id="o1")
        await h.chat.say("old two", chat="old", message_id="o2")
        await h.chat.say("this week", chat="recent", message_id="r1")
        await h.idle()
        # A message that failed eight days ago is not finished (the next start runs it again): kept,
        # however old it is.
        stuck = await store_failed(h, h.chat.make_message("never answered", chat="stuck", message_id="s1"))
        await age(h, "old", 8)
        await age(h, "stuck", 8)

        deleted = await h.service.retention.run_once()

        assert deleted == {
            "inbox entries": 2,
            "GitHub deliveries": 0,
            "abandoned threads": 0,
            "task cards": 0,
        }
        assert await h.service.inbox.counts() == {"done": 1, "failed": 1}
        assert (await h.service.inbox.get(stuck)) is not None
        # Within the retention period a redelivery is still recognised and not answered twice.
        assert await h.chat.deliver(h.chat.make_message("this week", chat="recent", message_id="r1")) is False
        await h.idle()
    assert len(llm.completions) == 3


async def test_retention_zero_keeps_everything(tmp_path, llm):
    settings = make_settings(tmp_path, llm, database={"url": sqlite_url(tmp_path), "retention_days": 0})
    async with Harness.running(settings) as h:
        await h.chat.say("keep me", chat="old")
        await h.idle()
        await age(h, "old", 3650)
        assert await h.service.retention.run_once() == {}
        assert await h.service.inbox.counts() == {"done": 1}


@pytest.mark.parametrize("days", [0.5, -1])
def test_a_retention_shorter_than_a_day_is_refused_with_the_reason(tmp_path, days):
    with pytest.raises(ConfigError) as caught:
        make_settings(tmp_path, database={"url": "sqlite+aiosqlite:///x.db", "retention_days": days})
    assert "retention_days" in str(caught.value) and "redeliver" in str(caught.value)


def test_the_default_keeps_thirty_days(tmp_path):
    assert make_settings(tmp_path).database.retention_days == 30


async def test_the_service_runs_retention_by_itself_after_start_up(tmp_path, llm):
    """No command to run: the next start (and every hour after it) deletes what is past the period."""
    settings = make_settings(tmp_path, llm, database={"url": sqlite_url(tmp_path), "retention_days": 7})
    async with Harness.running(settings) as h:
        await h.chat.say("from last month", chat="old")
        await h.chat.say("from today", chat="recent")
        await h.idle()
        await age(h, "old", 31)
    async with Harness.running(settings) as h:
        for _ in range(100):
            if await h.service.inbox.counts() == {"done": 1}:
                break
            await asyncio.sleep(0.05)
        assert await h.service.inbox.counts() == {"done": 1}
