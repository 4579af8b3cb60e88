"""Nothing lost while away: Discord's gateway never redelivers, so after a restart (or a session Discord
would not resume) the bot reads the history of the channels it follows and answers what it missed —
each message exactly once, and nothing older than ``backfill_minutes``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from channels.discord.channel import DiscordChannel
from config.schema import Settings
from tests.channels.discord.conftest import USER_ID, discord_config, eventually, final_reply
from tests.conftest import make_settings
from tests.fakes.discord import FakeDiscord
from tests.fakes.openai_server import FakeOpenAI, Hold, Reply
from tests.harness import Harness

pytestmark = pytest.mark.slow  # several whole services in a row


@asynccontextmanager
async def running(settings: Settings, fake: FakeDiscord, **config: Any) -> AsyncIterator[DiscordChannel]:
    """One service lifetime with a Discord channel; waits until the READY backfill has finished."""
    channel = DiscordChannel(discord_config(fake, **config), settings=settings)
    async with Harness.running(settings, channels={"discord": channel}) as harness:  # type: ignore[dict-item]
        await eventually(lambda: not channel.backfilling, what="the backfill to finish")
        yield channel
        await harness.idle(timeout=30)


def bot_texts(fake: FakeDiscord, channel_id: str) -> list[str]:
    return [m.text for m in fake.in_channel(channel_id)]


async def test_dm_messages_sent_while_the_service_was_down_are_answered_after_the_restart_once(
    settings, discord_fake
):
    dm = discord_fake.new_id()
    async with running(settings, discord_fake):
        discord_fake.message_create(dm, USER_ID, "hello")
        await final_reply(discord_fake, dm, "echo: hello")

    # Nobody is connected: the fake keeps the messages in the DM's history, as Discord does.
    discord_fake.message_create(dm, USER_ID, "are you there?")
    discord_fake.message_create(dm, USER_ID, "and this one?")

    async with running(settings, discord_fake) as channel:
        await final_reply(discord_fake, dm, "echo: and this one?")
        assert channel.backfilled >= 2
    assert bot_texts(discord_fake, dm) == ["echo: hello", "echo: are you there?", "echo: and this one?"]

    async with running(settings, discord_fake):  # a third start reads nothing new and answers nothing
        pass
    assert bot_texts(discord_fake, dm) == ["echo: hello", "echo: are you there?", "echo: and this one?"]
    assert discord_fake.calls_to("history"), "the restart read the DM's history through the REST API"


async def test_thread_follow_ups_and_new_mentions_from_the_downtime_are_answered_after_the_restart(
    settings, discord_fake
):
    channel_id, bot = discord_fake.channel_id, discord_fake.bot_id
    async with running(settings, discord_fake):
        started = discord_fake.message_create(channel_id, USER_ID, f"<@{bot}> open a thread", mentions=[bot])
        thread = started["id"]  # Discord gives a thread started from a message that message's id
        await final_reply(discord_fake, thread, "echo: open a thread")

    discord_fake.message_create(thread, USER_ID, "a follow-up while you were away")
    mention = discord_fake.message_create(channel_id, USER_ID, f"<@{bot}> a new question", mentions=[bot])
    discord_fake.message_create(channel_id, USER_ID, "chatter that does not mention the bot")

    async with running(settings, discord_fake):
        await final_reply(discord_fake, thread, "echo: a follow-up while you were away")
        await final_reply(discord_fake, mention["id"], "echo: a new question")

    assert bot_texts(discord_fake, thread) == ["echo: open a thread", "echo: a follow-up while you were away"]
    assert bot_texts(discord_fake, mention["id"]) == ["echo: a new question"]
    assert bot_texts(discord_fake, channel_id) == []  # answers go to threads; the chatter got none


async def test_messages_older_than_backfill_minutes_are_not_answered(settings, discord_fake):
    dm = discord_fake.new_id()
    async with running(settings, discord_fake, backfill_minutes=30):
        discord_fake.message_create(dm, USER_ID, "hello")
        await final_reply(discord_fake, dm, "echo: hello")

    old = FakeDiscord.id_at(datetime.now(UTC) - timedelta(minutes=45))
    discord_fake.message_create(dm, USER_ID, "from long ago", message_id=old)
    discord_fake.message_create(dm, USER_ID, "from just now")

    async with running(settings, discord_fake, backfill_minutes=30):
        await final_reply(discord_fake, dm, "echo: from just now")
    assert bot_texts(discord_fake, dm) == ["echo: hello", "echo: from just now"]


async def test_after_a_reconnect_discord_would_not_resume_the_missed_messages_are_answered(
    settings, discord_fake
):
    dm = discord_fake.new_id()
    async with running(settings, discord_fake) as channel:
        discord_fake.message_create(dm, USER_ID, "before the outage")
        await final_reply(discord_fake, dm, "echo: before the outage")

        discord_fake.refuse_resume = True  # the session expired: a fresh IDENTIFY, no replay
        discord_fake.gateway_down = True
        discord_fake.drop_connections()
        await eventually(lambda: discord_fake.connected == 0, what="the gateway to drop")
        discord_fake.message_create(dm, USER_ID, "during the outage")
        discord_fake.gateway_down = False

        await final_reply(discord_fake, dm, "echo: during the outage", timeout=60)
        assert len(discord_fake.identifies) == 2 and discord_fake.resumes
        await eventually(lambda: not channel.backfilling, what="the backfill to finish")
    assert bot_texts(discord_fake, dm) == ["echo: before the outage", "echo: during the outage"]


async def test_a_stop_while_the_bus_is_full_loses_nothing_and_the_restart_answers_once(
    tmp_path, llm: FakeOpenAI, discord_fake
):
    """The service stops while the only slot is taken and a second message waits for room: the first
    turn drains, the second message is left to the next start's backfill, which answers it once.

    The stop begins while the first answer is still held, so it lands while the bus is full. Stopping only
    after the first turn ended would race the channel's next retry, which finds room and rightly answers
    the message before the stop (the likely cause of its one failure under load; the product promises
    "once", not "in the next lifetime")."""
    settings = make_settings(tmp_path, llm, bus={"queue_size": 1})
    busy, waiting = discord_fake.new_id(), discord_fake.new_id()
    hold = Hold()  # the first answer waits until the service is stopping
    channel = DiscordChannel(discord_config(discord_fake), settings=settings)
    harness = Harness(settings, channels={"discord": channel})  # type: ignore[dict-item]
    await harness.start()
    try:
        await eventually(lambda: not channel.backfilling, what="the backfill to finish")
        llm.script(Reply(text="the first answer", hold=hold))
        discord_fake.message_create(busy, USER_ID, "take the only slot")
        await eventually(lambda: discord_fake.in_channel(busy), what="the first turn to start")
        # A DM the bot never saw before, refused by the full bus, and then the service stops.
        discord_fake.message_create(waiting, "5151", "sent during the crunch")
        await eventually(lambda: channel.cursors.cursors.get(waiting), what="the refused message to be noted")
        stopping = asyncio.create_task(harness.stop(grace=30))  # the drain ends when the first turn does
        await eventually(lambda: channel.paused, what="the channel to stop taking messages")
        hold.open()
        await stopping
    finally:
        hold.open()
        await harness.stop()
    assert bot_texts(discord_fake, waiting) == []
    assert bot_texts(discord_fake, busy) == ["the first answer"], "the running turn drained at the stop"

    async with running(settings, discord_fake):
        await final_reply(discord_fake, waiting, "echo: sent during the crunch")
    assert bot_texts(discord_fake, waiting) == ["echo: sent during the crunch"]
    assert bot_texts(discord_fake, busy) == ["the first answer"]


async def test_a_live_message_before_ready_does_not_skip_what_was_sent_while_down(settings, discord_fake):
    # discord.py dispatches messages as soon as the session exists, before on_ready (which waits for
    # guild data): such an early message must not move the cursor past the ones sent while down.
    dm = discord_fake.new_id()
    async with running(settings, discord_fake):
        discord_fake.message_create(dm, USER_ID, "hello")
        await final_reply(discord_fake, dm, "echo: hello")
    discord_fake.message_create(dm, USER_ID, "sent while down")

    channel = DiscordChannel(discord_config(discord_fake, guild_ready_timeout=1.5), settings=settings)
    harness = Harness(settings, channels={"discord": channel})  # type: ignore[dict-item]
    starting = asyncio.create_task(harness.start())
    try:
        await eventually(lambda: len(discord_fake.identifies) == 2, what="the second session")
        discord_fake.message_create(dm, USER_ID, "sent before ready")
        await starting
        await final_reply(discord_fake, dm, "echo: sent before ready")
        await final_reply(discord_fake, dm, "echo: sent while down")
        await eventually(lambda: not channel.backfilling, what="the backfill to finish")
        await harness.idle(timeout=30)
    finally:
        await harness.stop()
    assert sorted(bot_texts(discord_fake, dm)) == sorted(
        ["echo: hello", "echo: sent while down", "echo: sent before ready"]
    )


async def test_a_server_channel_without_read_message_history_is_named_in_the_log_not_skipped_silently(
    settings, discord_fake, caplog
):
    # Discord answers a history read without Read Message History with an empty page, not an error:
    # without asking first, the backfill would look like "nothing was missed".
    channel_id, bot = discord_fake.channel_id, discord_fake.bot_id
    async with running(settings, discord_fake):
        started = discord_fake.message_create(channel_id, USER_ID, f"<@{bot}> hello", mentions=[bot])
        await final_reply(discord_fake, started["id"], "echo: hello")

    discord_fake.no_history_channels.add(channel_id)  # an admin took the permission away meanwhile
    away = discord_fake.message_create(channel_id, USER_ID, f"<@{bot}> while you were away", mentions=[bot])
    with caplog.at_level(logging.WARNING, logger="channels.discord.channel"):
        async with running(settings, discord_fake):
            pass
    warnings = [r.getMessage() for r in caplog.records if "Read Message History" in r.getMessage()]
    assert any(channel_id in w for w in warnings), warnings
    assert bot_texts(discord_fake, away["id"]) == [], "the history could not be read, so it was not answered"


async def test_a_channel_followed_for_the_first_time_is_written_at_once_not_a_flush_round_later(
    tmp_path, monkeypatch
):
    """Until its cursor row exists, a crash forgets a newly followed DM, and the next start never reads
    what was sent to it while down. Progress in a known channel may wait for the next round (a crash
    then only re-reads a few messages); the first follow may not."""
    from channels.discord import backfill

    monkeypatch.setattr(backfill, "FLUSH_SECONDS", 60.0)  # a round far longer than the test
    store = backfill.CursorStore(f"sqlite+aiosqlite:///{tmp_path / 'cursors.db'}")
    cursors = backfill.Cursors(store)
    await cursors.start()
    try:
        cursors.handled("555", None, 1_000, stored=True)
        deadline = asyncio.get_running_loop().time() + 5
        while not await store.load() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        saved = await store.load()
        assert "555" in saved and saved["555"].done == 1_000

        cursors.handled("555", None, 1_001, stored=True)  # progress in a known channel: next round
        await asyncio.sleep(0.5)
        assert (await store.load())["555"].done == 1_000
    finally:
        await cursors.stop()
    assert (await _reopened(tmp_path)).get("555") == 1_001  # written at stop


async def _reopened(tmp_path) -> dict[str, int]:
    from channels.discord import backfill

    store = backfill.CursorStore(f"sqlite+aiosqlite:///{tmp_path / 'cursors.db'}")
    try:
        return {channel: cursor.done for channel, cursor in (await store.load()).items()}
    finally:
        await store.close()


async def test_a_stop_that_cuts_a_cursor_write_short_still_writes_that_cursor(tmp_path):
    """The database is slow (another writer holds SQLite's lock) while a newly followed DM's cursor is being
    written, and the service stops: the stop cancels that write, so its final flush must write the cursor
    again. It used to find nothing "dirty" (the flag was cleared before the cut-off write) and saved nothing,
    and the next start never read what was sent to that DM while the service was down."""
    import sqlite3

    from channels.discord import backfill

    path = tmp_path / "cursors.db"
    store = backfill.CursorStore(f"sqlite+aiosqlite:///{path}")
    cursors = backfill.Cursors(store)
    await cursors.start()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer: the flusher's save waits for the lock
        cursors.handled("555", None, 1_000, stored=True)
        await eventually(lambda: not cursors.cursors["555"].dirty, what="the flusher to start writing")
        stopping = asyncio.create_task(cursors.stop())
        await asyncio.sleep(0.2)  # the stop has cut the write short and waits for the lock itself
        other.execute("ROLLBACK")
        await asyncio.wait_for(stopping, 15)
    finally:
        other.close()
    again = backfill.CursorStore(f"sqlite+aiosqlite:///{path}")
    try:
        saved = await again.load()
    finally:
        await again.close()
    assert "555" in saved and saved["555"].done == 1_000
