"""Issue 36: a subagent started by the ``task`` tool shows in the chat as its own task card.

What a person notices on Telegram and Slack: asking for delegated work, one card appears for the job and
goes running → done with the job's result — one message, edited in place — and the turn's answer arrives
once, after it. ⏹ Stop on the card stops that job and the commands it started in the sandbox, and the
turn goes on without it. Real channels against the platforms' fakes, the real runtime and sandbox; the fake
model tells the turn's requests from the subagent's by their prompts (``script_for``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from channels.telegram.channel import TelegramChannel
from tests.agent.helpers import agent_settings
from tests.agent.test_sandbox import HEARTBEAT, beating
from tests.channels.telegram.conftest import BOT_USERNAME, telegram_config
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness
from tests.tasks.kit import (
    STOP,
    card_body,
    card_status,
    is_card,
    slack_dm_turn,
    stop_heartbeat_on_card,
    telegram_card_posts,
    telegram_cards,
)

pytestmark = pytest.mark.slow  # platform fakes, the fake model and sandboxed processes

PARENT = "PARENT-PROMPT-4410"
CHAT = 5151


def settings_for(tmp_path: Path, llm: FakeOpenAI, **extra: Any) -> Any:
    return agent_settings(
        tmp_path,
        llm,
        agent={"system_prompt": PARENT, "subagents": {"enabled": True}},
        memory={"enabled": False},
        **extra,
    )


def delegate(title: str, prompt: str) -> Reply:
    return Reply(tool_calls=[ToolCall("task", {"title": title, "prompt": prompt, "kind": "general"})])


@asynccontextmanager
async def telegram_bot(tmp_path: Path, llm: FakeOpenAI) -> AsyncIterator[tuple[Harness, FakeTelegram]]:
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        settings = settings_for(tmp_path, llm)
        channel = TelegramChannel(telegram_config(tg), settings=settings)
        async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
            yield h, tg


async def test_a_subagents_card_on_telegram_goes_running_to_done_with_its_result_and_the_answer_comes_once(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script_for(
        PARENT, delegate("count the logs", "JOB-COUNT: count the log files"), Reply(text="There are 7 logs.")
    )
    llm.script_for("JOB-COUNT", Reply(text="RESULT: 7 log files", chunk_size=4, delay=0.05))
    async with telegram_bot(tmp_path, llm) as (h, tg):
        tg.user_message(CHAT, "how many logs are there?", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "There are 7 logs.", timeout=30)
        await h.idle(timeout=30)
        cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
        answers = [m for m in tg.bot_messages(CHAT) if "There are 7 logs." in m.text]
    [card] = cards
    assert "count the logs" in card.text
    assert any(card_status(v).startswith("▶️ Running") for v in card.history)
    assert card_status(card.text) == "✅ Done"
    assert card_body(card.text) == "RESULT: 7 log files"
    assert card.buttons == [], "the finished card keeps no Stop button"
    assert len(answers) == 1, "the turn's answer was delivered once"


async def test_stop_on_a_subagents_card_stops_its_sandbox_commands_and_the_turn_goes_on(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script_for(
        PARENT, delegate("watch the disk", "JOB-WATCH: keep watching"), Reply(text="The watcher was stopped.")
    )
    llm.script_for("JOB-WATCH", Reply(tool_calls=[ToolCall("bash", {"command": HEARTBEAT})]))
    async with telegram_bot(tmp_path, llm) as (h, tg):
        live = await stop_heartbeat_on_card(
            h, tg, tmp_path, CHAT, "watch the disk for me", "The watcher was stopped."
        )
        assert not await beating(tmp_path), "the subagent's sandbox command still runs after Stop"
    assert card_status(live.text) == "⏹ Stopped"
    assert live.buttons == []


async def test_a_stop_pressed_before_a_subagents_card_is_confirmed_ends_that_same_card(
    tmp_path: Path, llm: FakeOpenAI
):
    """The chat shows the subagent's card while Telegram's answer (its message id) is still on the way, and
    the person presses the turn's ⏹ Stop: that card still ends "⏹ Stopped" with its button gone, and no
    second card repeats it. A stop used to cut the card's posting short, so the card kept a live ⏹ Stop
    above a second, stopped card."""
    llm.script_for(PARENT, delegate("watch the disk", "JOB-WATCH: keep watching"), Reply(text="unused"))
    llm.script_for("JOB-WATCH", Reply(text="RESULT: nothing to see"))
    async with telegram_bot(tmp_path, llm) as (h, tg):
        tg.answer_late("sendMessage", 3.0, when=lambda params: is_card(str(params.get("text", ""))))
        tg.user_message(CHAT, "watch the disk for me", user_id=CHAT)
        card = await tg.wait_until(lambda: next(iter(telegram_cards(tg, CHAT)), None), timeout=30)
        placeholder = next(m for m in tg.bot_messages(CHAT) if not is_card(m.text) and m.buttons == [STOP])
        tg.press(CHAT, placeholder.message_id, STOP, user_id=CHAT)
        await tg.wait_until(lambda: placeholder.text.endswith("⏹ Stopped."), timeout=20)
        await tg.wait_until(lambda: card_status(card.text) == "⏹ Stopped", timeout=20)
        await h.idle(timeout=30)
        assert [m.message_id for m in telegram_cards(tg, CHAT)] == [card.message_id], "one card, no second"
        assert telegram_card_posts(tg) == 1
    assert card.buttons == [], "the stopped card keeps no Stop button"


async def test_a_subagents_card_on_slack_is_one_message_posted_once_then_updated(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script_for(PARENT, delegate("size the repo", "JOB-SIZE: measure it"), Reply(text="It is 12 MB."))
    llm.script_for("JOB-SIZE", Reply(text="RESULT: 12 MB", chunk_size=4, delay=0.05))
    cards, posts, answers = await slack_dm_turn(
        lambda **extra: settings_for(tmp_path, llm, **extra), "how big is the repo?", "It is 12 MB."
    )
    [card] = cards
    assert posts == 1, "the card was posted once and then only updated"
    assert card_status(card.text) == "✅ Done"
    assert card_body(card.text) == "RESULT: 12 MB"
    assert card.labels == []
    assert answers == 1
