"""Issue 12: /memory asked in a Telegram group posts no remembered fact into the group."""

from __future__ import annotations

import asyncio

from tests.agent.test_memory_durability import kiwi_memory
from tests.conftest import make_settings
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness

from .conftest import BOT_USERNAME, telegram_config

GROUP = -1009876


async def test_memory_in_a_telegram_group_posts_no_fact_and_a_dm_still_shows_it(
    tmp_path, llm, tg: FakeTelegram
):
    from channels.telegram.channel import TelegramChannel

    llm.default_reply = kiwi_memory
    settings = make_settings(tmp_path, llm, memory={"enabled": True, "debounce_seconds": 0})
    channel = TelegramChannel(telegram_config(tg), settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
        tg.user_message(42, "I grow kiwis")
        await tg.wait_for_bot_text(42, "echo: I grow kiwis")
        await h.idle()
        shown = ""
        for _ in range(50):  # extraction runs just after the turn; ask until the fact is stored
            before = len(tg.bot_messages(42))
            tg.user_message(42, "/memory")
            while len(tg.bot_messages(42)) == before:
                await asyncio.sleep(0.05)
            shown = tg.bot_messages(42)[-1].text
            if "Grows kiwis" in shown:
                break
            await asyncio.sleep(0.1)
        tg.user_message(GROUP, f"/memory@{BOT_USERNAME}", chat_type="supergroup", user_id=42)
        answer = await tg.wait_for_bot_text(GROUP, "private chat")
        await h.idle()
    assert "Grows kiwis" in shown
    assert answer.text.startswith("Ask me in a private chat")
    assert not any("kiwi" in m.text.lower() for m in tg.bot_messages(GROUP))
