"""Store, then confirm: Telegram forgets an update only after it is in the inbox, and nothing is lost at stop."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from bot.inbox import inbox_table
from channels.telegram.channel import TelegramChannel
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply, echo_reply, last_user_text
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

from .conftest import telegram_config


def slow_echo(request: dict[str, Any]) -> Reply:
    """An answer that streams for a while, so messages pile up behind it."""
    return Reply(text=f"echo: {last_user_text(request)}", chunk_size=2, delay=0.1)


async def stored_ids(harness: Harness) -> set[str]:
    async with harness.service.db.engine.connect() as conn:
        rows = await conn.execute(inbox_table.select().with_only_columns(inbox_table.c.platform_message_id))
        return {str(r[0]) for r in rows}


async def test_telegram_keeps_every_update_that_is_not_yet_stored(tg: FakeTelegram, tmp_path: Path):
    with FakeOpenAI(default_reply=slow_echo) as llm:
        settings = make_settings(tmp_path, llm, bus={"queue_size": 1})  # type: ignore[arg-type]
        channel = TelegramChannel(telegram_config(tg), settings=settings)
        async with Harness.running(settings, channels={"telegram": channel}) as harness:  # type: ignore[dict-item]
            sent = [tg.user_message(chat, f"question {chat}", user_id=chat) for chat in (71, 72, 73)]
            update_of = {u["update_id"]: str(m["message_id"]) for u, m in zip(tg.updates, sent, strict=True)}
            await tg.wait_for_bot_text(71, "echo")  # the first one is being answered; the bus is full

            # Read Telegram's side first: storing happens before confirming, never the other way round.
            confirmed, held = list(tg.confirmed), set(tg.pending_updates())
            stored = await stored_ids(harness)
            not_stored = {str(m["message_id"]) for m in sent} - stored
            assert not_stored, "the full service could not take every message yet"
            assert not_stored <= {update_of[u] for u in held}, "Telegram still holds what is not stored"
            assert {update_of[u] for u in confirmed} <= stored, "only stored updates were confirmed"

            for chat in (71, 72, 73):
                await tg.wait_for_bot_text(chat, f"echo: question {chat}", timeout=30)
            await harness.idle(timeout=30)
            await asyncio.sleep(1.2)  # one more poll carries the final offset
            assert tg.pending_updates() == [], "once stored, every update was confirmed"
            assert harness.service.bus.refused >= 1


async def test_a_graceful_stop_with_a_full_bus_loses_nothing_and_answers_everything_once(
    tg: FakeTelegram, tmp_path: Path
):
    chats = (81, 82, 83)
    texts = [f"m{i}" for i in range(12)]
    with FakeOpenAI(default_reply=slow_echo) as llm:
        settings = make_settings(tmp_path, llm, bus={"queue_size": 2, "drain_seconds": 0.3})  # type: ignore[arg-type]

        async def trickle() -> None:
            for i, text in enumerate(texts):
                chat = chats[i % len(chats)]
                tg.user_message(chat, text, user_id=chat)
                await asyncio.sleep(0.15)

        first = Harness(
            settings, channels={"telegram": TelegramChannel(telegram_config(tg), settings=settings)}
        )  # type: ignore[dict-item]
        await first.start()
        feeder = asyncio.create_task(trickle())
        await asyncio.sleep(1.0)
        await first.stop(grace=0.3)  # what SIGTERM does: pause channels, drain, stop
        refused = first.service.bus.refused
        await feeder  # messages keep arriving while the service is down

        second = Harness(
            settings, channels={"telegram": TelegramChannel(telegram_config(tg), settings=settings)}
        )  # type: ignore[dict-item]
        await second.start()
        try:
            for i, text in enumerate(texts):
                await tg.wait_for_bot_text(chats[i % len(chats)], f"echo: {text}", timeout=60)
            await second.idle(timeout=30)
        finally:
            await second.stop()

    assert refused >= 1, "the first service was full and pushed back"
    for chat in chats:
        expected = sorted(f"echo: {t}" for i, t in enumerate(texts) if chats[i % len(chats)] == chat)
        assert sorted(tg.bot_texts(chat)) == expected, f"chat {chat}: every message answered exactly once"


async def test_an_update_the_stopping_service_could_not_store_stays_with_telegram(
    tg: FakeTelegram, tmp_path: Path
):
    """At stop the poller gives up on an update the full service keeps refusing. Confirming it then (an
    offset past it) would make Telegram forget a message nobody stored: it must stay unconfirmed, and
    the next start answers it, once."""
    chats = (91, 92, 93, 94)

    def very_slow_echo(request: dict[str, Any]) -> Reply:
        """The first turn holds the only slot for seconds: well past the stop's grace, however busy."""
        return Reply(text=f"echo: {last_user_text(request)}", chunk_size=2, delay=1.0)

    with FakeOpenAI(default_reply=very_slow_echo) as llm:
        settings = make_settings(tmp_path, llm, bus={"queue_size": 1, "drain_seconds": 0.2})  # type: ignore[arg-type]
        # The poller's own grace at stop (5 s by default) is the one the refusal must outlast.
        stopping = telegram_config(tg, stop_store_grace_seconds=0.3)
        first = Harness(settings, channels={"telegram": TelegramChannel(stopping, settings=settings)})  # type: ignore[dict-item]
        await first.start()
        sent = {chat: tg.user_message(chat, f"held {chat}", user_id=chat) for chat in chats}
        update_of = {
            str(m["message_id"]): u["update_id"] for u, m in zip(tg.updates, sent.values(), strict=True)
        }
        async with asyncio.timeout(30):
            while first.service.bus.refused < 1:  # until the poller holds an update the service refuses
                await asyncio.sleep(0.02)
        await first.stop(grace=0.3)  # the refusal lasts past both graces: the poller gives up on it
        not_stored = {m for m in update_of if m not in await stored_ids(first)}
        assert not_stored, "the full service could not take every message before it stopped"
        held = set(tg.pending_updates())
        assert {update_of[m] for m in not_stored} <= held, "what was never stored was never confirmed"

        llm.default_reply = echo_reply
        second = Harness(
            settings, channels={"telegram": TelegramChannel(telegram_config(tg), settings=settings)}
        )  # type: ignore[dict-item]
        await second.start()
        try:
            for chat in chats:
                await tg.wait_for_bot_text(chat, f"echo: held {chat}", timeout=60)
            await second.idle(timeout=30)
        finally:
            await second.stop()
    for chat in chats:
        assert tg.bot_texts(chat) == [f"echo: held {chat}"], f"chat {chat}: answered exactly once"
