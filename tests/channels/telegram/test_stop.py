"""What ``TelegramChannel.stop()`` waits for: a final reply on its way, not a task card that is still live.

The grace (``STOP_REPLY_GRACE``, 5 s) exists so that a final text being delivered when the service stops
(say, waiting out a 429) still has its HTTP client. A task card stays open as long as its job runs and is
continued after a restart from its stored state (bot/tasks/), so waiting for it only delayed the stop.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from sqlalchemy import select

from bot.inbox import inbox_table
from channels.telegram.channel import TelegramChannel
from channels.types import InboundMessage, Sender
from tests.channels.telegram.conftest import BOT_USERNAME, telegram_config
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness
from tests.tasks.kit import is_card

CHAT = 4242
STOP = "⏹ Stop"


async def test_stop_returns_at_once_while_a_task_card_is_still_live(tmp_path: Path, llm: FakeOpenAI):
    """A subagent reported through the seam the agent uses gets its card; the service stops while the
    card still says Running (its Stop button on). The channel's stop does not wait for it."""
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        settings = make_settings(tmp_path, llm, memory={"enabled": False})
        channel = TelegramChannel(telegram_config(tg), settings=settings)  # type: ignore[arg-type]
        async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
            tg.user_message(CHAT, "hello", user_id=CHAT)
            await tg.wait_for_bot_text(CHAT, "echo: hello")
            async with h.service.db.engine.connect() as conn:
                payload = (await conn.execute(select(inbox_table.c.payload))).scalars().first()
            origin = InboundMessage.from_json(json.loads(payload))
            conversation = await h.manager.threads.get(origin.conversation_key)
            assert conversation is not None
            tasks = h.manager.tasks.reporter(
                origin, owner=conversation.owner, thread_id=conversation.thread_id
            )
            await tasks.started(task_id="call-1", title="research the outage", kind="subagent")
            await tasks.step(task_id="call-1", text="reading the incident log")
            await tg.wait_until(
                lambda: any(is_card(m.text) and m.buttons == [STOP] for m in tg.bot_messages(CHAT)), 15
            )
            started = time.monotonic()
            await channel.stop()
            took = time.monotonic() - started
        assert channel.status.state == "stopped"
    assert took < 2.5, f"stop() took {took:.1f} s with a live card (it waited out STOP_REPLY_GRACE)"


async def test_a_final_reply_waiting_out_a_429_when_stop_is_called_still_lands(
    tg: FakeTelegram, tg_channel: TelegramChannel
):
    """The final edit is refused with ``retry_after: 1`` just before stop(): stop() waits for the reply's
    next try instead of closing the HTTP client under it."""

    async def sink(message: InboundMessage) -> bool:
        return True

    await tg_channel.start(sink)
    tg.open_chat(42)
    message = InboundMessage(
        provider="telegram", workspace="", chat="42", sender=Sender("1001", "Alice"), text="hi",
        platform_message_id="1", is_private=True,
    )  # fmt: skip
    reply = tg_channel.open_reply(message)
    await reply.start("…")
    tg.fail_next("editMessageText", 429, retry_after=1)
    finishing = asyncio.create_task(reply.finish("the final answer"))
    await tg.wait_until(lambda: [c for c in tg.calls("editMessageText") if c["status"] == 429], 10)
    started = time.monotonic()
    await tg_channel.stop()
    took = time.monotonic() - started
    await asyncio.wait_for(finishing, 5)  # delivered, not failed with a closed client
    [answer] = tg.bot_messages(42)
    assert answer.text == "the final answer"
    assert [c["status"] for c in tg.calls("editMessageText")] == [429, 200]
    assert 0.5 < took < 4, f"stop() took {took:.1f} s"


async def test_a_stop_pressed_before_the_placeholder_is_confirmed_ends_that_same_placeholder(
    tmp_path: Path, llm: FakeOpenAI
):
    """The chat shows the reply's "…" with ⏹ Stop while Telegram's answer (its message id) is still on the
    way, and the person presses it: that message ends "⏹ Stopped." with its button gone, and no second
    message says it. (The placeholder goes out from the reply's own pump, which a stop does not cut, and
    the final waits for a call still on the wire.)"""
    from tests.fakes.openai_server import Reply

    llm.script(Reply(text="a long answer " * 40, chunk_size=4, delay=0.1))
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        settings = make_settings(tmp_path, llm, memory={"enabled": False})
        channel = TelegramChannel(telegram_config(tg), settings=settings)  # type: ignore[arg-type]
        tg.answer_late("sendMessage", 3.0, when=lambda params: params.get("text") == "…")
        async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
            tg.user_message(CHAT, "tell me a lot", user_id=CHAT)
            placeholder = await tg.wait_until(
                lambda: next((m for m in tg.bot_messages(CHAT) if m.buttons == [STOP]), None), 15
            )
            tg.press(CHAT, placeholder.message_id, STOP, user_id=CHAT)
            await tg.wait_until(lambda: placeholder.text.endswith("⏹ Stopped."), 20)
            await h.idle(timeout=20)
        assert [m.message_id for m in tg.bot_messages(CHAT)] == [placeholder.message_id]
        assert placeholder.buttons == []
