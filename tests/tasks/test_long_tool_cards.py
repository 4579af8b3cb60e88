"""Issue 36: a tool call still running after ``agent.long_tool_seconds`` shows as its own task card.

What a person notices on Telegram and Slack: a command that takes a while gets a card (its title is the
command) that goes running → done with the command's output, one message edited in place, and the turn's
answer arrives once, after it; a quick command shows no card at all. ⏹ Stop on the card kills that command
in the sandbox (its heartbeat stops) and the model is told the person stopped it, so the turn still
answers. Real channels against the platforms' fakes, the real runtime and sandbox, the fake model.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.long_tools import TURN_STOPPED
from channels.telegram.channel import TelegramChannel
from tests.agent.helpers import agent_settings, all_tool_results
from tests.agent.test_sandbox import HEARTBEAT, beating
from tests.channels.telegram.conftest import BOT_USERNAME, telegram_config
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness
from tests.tasks.kit import (
    card_body,
    card_status,
    is_card,
    running_card,
    slack_dm_turn,
    stop_heartbeat_on_card,
)

pytestmark = pytest.mark.slow  # platform fakes, the fake model and sandboxed processes

CHAT = 6161
#: Long enough to pass the threshold on a loaded machine with room to spare; short enough for a test.
SLOW = "sleep 3; echo BUILD-RESULT-5521"


def settings_for(tmp_path: Path, llm: FakeOpenAI, after: float = 0.5, **extra: Any) -> Any:
    return agent_settings(
        tmp_path, llm, agent={"long_tool_seconds": after}, memory={"enabled": False}, **extra
    )


def delegate(title: str, prompt: str) -> Reply:
    return Reply(tool_calls=[ToolCall("task", {"title": title, "prompt": prompt, "kind": "general"})])


def bash(command: str) -> Reply:
    return Reply(tool_calls=[ToolCall("bash", {"command": command})])


@asynccontextmanager
async def telegram_bot(
    tmp_path: Path, llm: FakeOpenAI, after: float = 0.5
) -> AsyncIterator[tuple[Harness, FakeTelegram]]:
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        settings = settings_for(tmp_path, llm, after)
        channel = TelegramChannel(telegram_config(tg), settings=settings)
        async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
            yield h, tg


async def test_a_long_command_on_telegram_gets_a_card_that_goes_running_to_done_with_its_output(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script(bash(SLOW), Reply(text="The build printed its result."))
    async with telegram_bot(tmp_path, llm) as (h, tg):
        tg.user_message(CHAT, "run the build", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "The build printed its result.", timeout=30)
        await h.idle(timeout=30)
        cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
        answers = [m for m in tg.bot_messages(CHAT) if "The build printed its result." in m.text]
    [card] = cards
    assert "Tool call" in card.text and "sleep 3; echo BUILD-RESULT-5521" in card.text.split("\n")[0]
    assert any(card_status(v).startswith("▶️ Running") for v in card.history)
    assert card_status(card.text) == "✅ Done"
    assert "BUILD-RESULT-5521" in card_body(card.text)
    assert card.buttons == [], "the finished card keeps no Stop button"
    assert len(answers) == 1, "the turn's answer was delivered once"


async def test_a_quick_command_shows_no_card(tmp_path: Path, llm: FakeOpenAI):
    llm.script(bash("echo QUICK-7"), Reply(text="It printed QUICK-7."))
    # 5 s: a sandboxed echo on a loaded machine can take over the others' 0.5 s, never this.
    async with telegram_bot(tmp_path, llm, after=5) as (h, tg):
        tg.user_message(CHAT, "say quick", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "It printed QUICK-7.", timeout=30)
        await h.idle(timeout=30)
        texts = [v for m in tg.bot_messages(CHAT) for v in m.history]
    assert not any(is_card(t) for t in texts), texts


async def test_stop_on_a_long_commands_card_kills_the_command_and_the_turn_still_answers(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script(bash(HEARTBEAT), Reply(text="All right, I stopped watching."))
    async with telegram_bot(tmp_path, llm) as (h, tg):
        live = await stop_heartbeat_on_card(
            h, tg, tmp_path, CHAT, "keep a heartbeat going", "All right, I stopped watching."
        )
        assert not await beating(tmp_path), "the command still runs after Stop on its card"
    assert card_status(live.text) == "⏹ Stopped"
    assert live.buttons == []
    [result] = all_tool_results(llm)
    assert result.startswith("[stopped]") and "Stop on its task card" in result, result


async def test_a_long_commands_card_on_slack_is_one_message_posted_once_then_updated(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script(bash(SLOW), Reply(text="The build is finished."))
    cards, posts, answers = await slack_dm_turn(
        lambda **extra: settings_for(tmp_path, llm, **extra), "run the build", "The build is finished."
    )
    [card] = cards
    assert posts == 1, "the card was posted once and then only updated"
    assert card_status(card.text) == "✅ Done"
    assert "BUILD-RESULT-5521" in card_body(card.text)
    assert card.labels == []
    assert answers == 1


async def test_a_long_subagent_shows_its_own_card_only_not_a_second_one_for_its_task_call(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script_for(
        "PARENT-PROMPT-3030",
        delegate("tally the files", "JOB-TALLY: count them"),
        Reply(text="There are 9 files."),
    )
    llm.script_for("JOB-TALLY", Reply(text="RESULT: 9 files", chunk_size=2, delay=0.2))  # about 2 s
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        settings = agent_settings(
            tmp_path,
            llm,
            agent={
                "system_prompt": "PARENT-PROMPT-3030",
                "long_tool_seconds": 0.5,
                "subagents": {"enabled": True},
            },
            memory={"enabled": False},
        )
        channel = TelegramChannel(telegram_config(tg), settings=settings)
        async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
            tg.user_message(CHAT, "how many files?", user_id=CHAT)
            await tg.wait_for_bot_text(CHAT, "There are 9 files.", timeout=30)
            await h.idle(timeout=30)
            cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
    [card] = cards
    assert "tally the files" in card.text and card_body(card.text) == "RESULT: 9 files"


async def test_stop_of_the_whole_turn_still_stops_it_ends_the_card_and_the_next_turn_does_not_run_it_again(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script(bash(f"echo run >> runs.txt; {HEARTBEAT}"), Reply(text="Hello again."))
    async with telegram_bot(tmp_path, llm) as (h, tg):
        tg.user_message(CHAT, "keep a heartbeat going", user_id=CHAT)
        live = await running_card(tg, CHAT)
        assert await beating(tmp_path, within=10)
        tg.user_message(CHAT, "/stop", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "⏹ Stopped.", timeout=30)
        await h.idle(timeout=30)
        await asyncio.sleep(0.3)  # a write already under way may still land
        assert not await beating(tmp_path), "/stop left the command running"
        tg.user_message(CHAT, "hello?", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "Hello again.", timeout=30)
        await h.idle(timeout=30)
        cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
    assert [m.message_id for m in cards] == [live.message_id]
    assert card_status(live.text) == "⏹ Stopped" and live.buttons == []
    assert sum(p.read_text().count("run") for p in tmp_path.rglob("runs.txt")) == 1, "it ran again"
    assert all_tool_results(llm) == [TURN_STOPPED]


async def test_waiting_for_approval_does_not_make_a_command_long(tmp_path: Path, llm: FakeOpenAI):
    llm.script(bash("rm -rf /mnt/user-data/workspace/old-build"), Reply(text="Cleaned up."))
    async with telegram_bot(tmp_path, llm) as (h, tg):
        tg.user_message(CHAT, "clean up the old build", user_id=CHAT)
        request = await tg.wait_for_bot_text(CHAT, "🔐 Approval needed", timeout=30)
        await asyncio.sleep(2)  # four times the threshold, waiting for a person's yes
        assert not any(is_card(m.text) for m in tg.bot_messages(CHAT)), "a card for a command not yet run"
        tg.press(CHAT, request.message_id, "Approve", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "Cleaned up.", timeout=30)
        await h.idle(timeout=30)
        texts = [v for m in tg.bot_messages(CHAT) for v in m.history]
    assert not any(is_card(t) for t in texts), texts
