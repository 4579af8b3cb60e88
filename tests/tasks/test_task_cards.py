"""Issue 36: a scheduled run shows in its chat as one task card, edited in place, with a Stop button.

What a person notices on Telegram and Slack: when a schedule fires, one message appears saying the task
is queued, then running, then done with its result — the same message all along, never a second one;
⏹ Stop on the card stops the job and the card says so; ``/tasks`` lists the chat's tasks and
``/tasks ID`` shows one with its steps. Real Telegram and Slack channels against the platforms' fakes,
a real service, the fake model; the clock is moved by hand so the schedule fires when the test says.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from bot.inbox import inbox_table
from channels.slack.channel import SlackChannel
from channels.telegram.channel import TelegramChannel
from channels.types import InboundMessage
from tests.channels.slack.conftest import slack_section
from tests.channels.telegram.conftest import BOT_USERNAME, telegram_config
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeMessage, FakeTelegram
from tests.harness import Harness
from tests.schedules.test_schedules import TZ, Clock
from tests.tasks.kit import STOP, card_body, card_status, is_card, running_card

pytestmark = pytest.mark.slow  # platform fakes and the fake model on real sockets

START = datetime(2026, 12, 1, 8, 0, tzinfo=ZoneInfo(TZ))
WHAT = "summarize the overnight alerts"
RESULT = "Overnight: two disk alerts on db-2, both cleared by 03:10. Nothing else."
CHAT = 4242


def statuses(history: list[str]) -> list[str]:
    """The card's status words in the order the chat showed them, repeats folded."""
    seen: list[str] = []
    for text in history:
        word = card_status(text).split(" — ")[0]
        if word and (not seen or seen[-1] != word):
            seen.append(word)
    return seen


@asynccontextmanager
async def telegram_service(
    tmp_path: Path, llm: FakeOpenAI, clock: Clock, tg: FakeTelegram, **extra: Any
) -> AsyncIterator[Harness]:
    settings = make_settings(tmp_path, llm, agent={"timezone": TZ}, memory={"enabled": False}, **extra)
    channel = TelegramChannel(telegram_config(tg), settings=settings)  # type: ignore[arg-type]
    async with Harness.running(settings, channels={"telegram": channel}, clock=clock) as h:  # type: ignore[dict-item]
        yield h


@asynccontextmanager
async def telegram_bot(
    tmp_path: Path, llm: FakeOpenAI, clock: Clock, **extra: Any
) -> AsyncIterator[tuple[Harness, FakeTelegram]]:
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        async with telegram_service(tmp_path, llm, clock, tg, **extra) as h:
            yield h, tg


async def fire(h: Harness, clock: Clock, minutes: int = 6) -> None:
    clock.now += minutes * 60
    h.service.schedules.book.scheduler.poke()


def telegram_card(tg: FakeTelegram) -> FakeMessage | None:
    return next((m for m in tg.bot_messages(CHAT) if is_card(m.text)), None)


async def test_a_telegram_card_goes_queued_running_done_in_one_message_and_tasks_lists_it(
    tmp_path: Path, llm: FakeOpenAI
):
    clock = Clock(START)
    # The run calls a tool first (its step), then answers slowly enough for "running" to be seen.
    llm.script(
        Reply(tool_calls=[ToolCall("ls", {"path": "/mnt/user-data/workspace"})]),
        Reply(text=RESULT, chunk_size=6, delay=0.05),
    )
    async with telegram_bot(tmp_path, llm, clock) as (h, tg):
        tg.user_message(CHAT, f"/schedule in 5m {WHAT}", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "⏰ Scheduled")
        await fire(h, clock)
        await tg.wait_until(lambda: (c := telegram_card(tg)) is not None and "✅ Done" in c.text, 30)
        await h.idle()
        cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
        [card] = cards
        results = sum(RESULT in m.text for m in tg.bot_messages(CHAT))
        short = card.text.split(":")[0].split()[-1]
        tg.user_message(CHAT, "/tasks", user_id=CHAT)
        listing = await tg.wait_for_bot_text(CHAT, "Tasks in this chat")
        tg.user_message(CHAT, f"/tasks {short}", user_id=CHAT)
        detail = await tg.wait_for_bot_text(CHAT, "Steps:")
        stop_edits = [
            c
            for c in tg.calls("editMessageText") + tg.calls("sendMessage")
            if str(c["params"].get("message_id", "")) == str(card.message_id) and STOP in str(c["params"])
        ]
    # One message, edited in place from queued through running to its result; no second card.
    assert statuses(card.history) == ["⏳ Queued", "▶️ Running", "✅ Done"]
    assert WHAT in card.history[0]
    assert any("▶️ Running — " in v for v in card.history), "the running card names its current step"
    assert card_body(card.text) == RESULT
    assert card.buttons == [], "no Stop button on a finished card"
    assert stop_edits, "the running card carried a Stop button"
    assert results == 1, "the result arrived once"
    assert f"{short} · Scheduled task: {WHAT} · ✅ Done" in listing.text
    assert "1. " in detail.text and RESULT in detail.text


async def test_stop_on_a_telegram_card_stops_the_job_and_the_card_says_so(tmp_path: Path, llm: FakeOpenAI):
    clock = Clock(START)
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(400)), chunk_size=8, delay=0.05))
    async with telegram_bot(tmp_path, llm, clock) as (h, tg):
        tg.user_message(CHAT, f"/schedule in 5m {WHAT}", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "⏰ Scheduled")
        await fire(h, clock)
        live = await running_card(tg, CHAT)
        tg.press(CHAT, live.message_id, STOP, user_id=CHAT)
        await tg.wait_until(lambda: "⏹ Stopped" in card_status(live.text), 30)
        await h.idle(timeout=30)
        cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
    assert cards == [live]
    assert card_status(live.text) == "⏹ Stopped"
    assert "word399" not in live.text, "the job was stopped before it finished"
    assert live.buttons == []


async def test_a_telegram_card_says_waiting_for_approval_while_its_risky_command_waits(
    tmp_path: Path, llm: FakeOpenAI
):
    clock = Clock(START)
    risky = "rm -rf /mnt/user-data/workspace/build"
    llm.script(
        Reply(tool_calls=[ToolCall("bash", {"command": "mkdir -p build"})]),
        Reply(tool_calls=[ToolCall("bash", {"command": risky})]),
        Reply(text="The build directory is gone.", chunk_size=3, delay=0.15),  # running long enough to show
    )
    async with telegram_bot(tmp_path, llm, clock, sandbox={"mode": "host"}) as (h, tg):
        tg.user_message(CHAT, f"/schedule in 5m {WHAT}", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "⏰ Scheduled")
        await fire(h, clock)
        request = await tg.wait_for_bot_text(CHAT, "🔐 Approval needed", timeout=30)
        card = await tg.wait_until(
            lambda: (
                (c := telegram_card(tg)) is not None
                and "✋ Waiting for approval" in card_status(c.text)
                and c
            ),
            15,
        )
        waiting = card_status(card.text)
        tg.press(CHAT, request.message_id, "Approve", user_id=CHAT)
        await tg.wait_until(lambda: "✅ Done" in card.text, 30)
        await h.idle(timeout=20)
    assert risky in waiting, "the card says which command waits"
    assert statuses(card.history) == [
        "⏳ Queued",
        "▶️ Running",
        "✋ Waiting for approval",
        "▶️ Running",
        "✅ Done",
    ]
    assert card_body(card.text) == "The build directory is gone."


@asynccontextmanager
async def slack_bot(
    tmp_path: Path, llm: FakeOpenAI, clock: Clock
) -> AsyncIterator[tuple[Harness, FakeSlack]]:
    with FakeSlack() as slack:
        settings = make_settings(
            tmp_path,
            llm,
            agent={"timezone": TZ},
            memory={"enabled": False},
            channels={"slack": slack_section(slack)},
        )
        channel = SlackChannel(settings.channels.slack, settings=settings)  # type: ignore[arg-type]
        async with Harness.running(settings, channels={"slack": channel}, clock=clock) as h:  # type: ignore[dict-item]
            await slack.wait_connected()
            await slack.wait_for(lambda: channel.status.state == "connected", what="status connected")
            yield h, slack


async def test_a_slack_card_goes_queued_running_done_in_one_message(tmp_path: Path, llm: FakeOpenAI):
    clock = Clock(START)
    llm.script(Reply(text=RESULT, chunk_size=6, delay=0.05))
    async with slack_bot(tmp_path, llm, clock) as (h, slack):
        slack.dm("U1", f"/schedule in 5m {WHAT}")
        await slack.wait_for_text("⏰ Scheduled", "DU1")
        await fire(h, clock)
        card = await slack.wait_for_text("✅ Done", "DU1")
        await h.idle()
        cards = [m for m in slack.channel_messages("DU1") if is_card(m.text)]
        posts = [c for c in slack.calls_to("chat.postMessage") if is_card(str(c.args.get("text", "")))]
        updates = [c for c in slack.calls_to("chat.update") if c.args.get("ts") == card.ts]
    assert cards == [card]
    assert len(posts) == 1, "the card was posted once and then only updated"
    assert statuses(card.history) == ["⏳ Queued", "▶️ Running", "✅ Done"]
    assert any(STOP in str(u.args.get("blocks", "")) for u in updates), "the running card had a Stop button"
    assert card_body(card.text) == RESULT
    assert card.labels == []


async def test_stop_on_a_slack_card_stops_the_job(tmp_path: Path, llm: FakeOpenAI):
    clock = Clock(START)
    llm.script(Reply(text=" ".join(f"word{i}" for i in range(400)), chunk_size=8, delay=0.05))
    async with slack_bot(tmp_path, llm, clock) as (h, slack):
        slack.dm("U1", f"/schedule in 5m {WHAT}")
        await slack.wait_for_text("⏰ Scheduled", "DU1")
        await fire(h, clock)
        live = await slack.wait_for(
            lambda: next(
                (m for m in slack.channel_messages("DU1") if is_card(m.text) and m.labels == [STOP]), None
            ),
            30,
            "the running card with its Stop button",
        )
        slack.press("DU1", live.ts, STOP, user="U1")
        await slack.wait_for(lambda: "⏹ Stopped" in card_status(live.text), 30, "the card stopped")
        await h.idle(timeout=30)
    assert card_status(live.text) == "⏹ Stopped"
    assert "word399" not in live.text
    assert live.labels == []


async def a_chat_with_an_answer(h: Harness, tg: FakeTelegram) -> tuple[InboundMessage, str, str]:
    """A message answered in :data:`CHAT`, as stored, with its conversation's owner and thread: what the
    agent holds when it reports a task there."""
    tg.user_message(CHAT, "hello", user_id=CHAT)
    await tg.wait_for_bot_text(CHAT, "echo: hello")
    async with h.service.db.engine.connect() as conn:
        payloads = (await conn.execute(select(inbox_table.c.payload))).scalars().all()
    message = InboundMessage.from_json(json.loads(payloads[0]))
    conversation = await h.manager.threads.get(message.conversation_key)
    assert conversation is not None
    return message, conversation.owner, conversation.thread_id


async def test_a_reported_task_gets_its_own_card_that_a_restart_continues_and_delivers_once(
    tmp_path: Path, llm: FakeOpenAI
):
    """The seam the agent's subagents use (``TurnRequest.tasks``), driven as the agent drives it: a task
    reported in a chat gets its own card with a Stop button that sets the task's stop event; after a
    restart the same task id continues that card, and its result is shown once."""
    clock = Clock(START)
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        async with telegram_service(tmp_path, llm, clock, tg) as h:
            origin, owner, thread = await a_chat_with_an_answer(h, tg)
            tasks = h.manager.tasks.reporter(origin, owner=owner, thread_id=thread)
            await tasks.started(task_id="call-1", title="research the outage", kind="subagent")
            await tasks.step(task_id="call-1", text="reading the incident log")
            live = await running_card(tg, CHAT, 15)
            stop = tasks.stop_requested("call-1")
            tg.press(CHAT, live.message_id, STOP, user_id=CHAT)
            await asyncio.wait_for(stop.wait(), 15)
        async with telegram_service(tmp_path, llm, clock, tg) as h:
            again = h.manager.tasks.reporter(origin, owner=owner, thread_id=thread)
            await again.started(task_id="call-1", title="research the outage", kind="subagent")
            await again.finished(task_id="call-1", status="stopped", result="Stopped after reading the log.")
            await again.finished(task_id="call-1", status="done", result="A second result must not show.")
        cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
    assert cards == [live], "the restarted task continued its card"
    assert any("▶️ Running — reading the incident log" in v for v in live.history)
    assert card_status(live.text) == "⏹ Stopped"
    assert card_body(live.text) == "Stopped after reading the log."
    assert not any("second result" in v for v in live.history)
    assert live.buttons == []


async def test_a_result_stored_but_not_shown_before_a_restart_is_shown_once_after_it(
    tmp_path: Path, llm: FakeOpenAI
):
    """The crash point between "result stored" and "card edited": the next start shows that stored
    result in the same card, and the job reporting again changes nothing."""
    clock = Clock(START)
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        async with telegram_service(tmp_path, llm, clock, tg) as h:
            message, owner, thread = await a_chat_with_an_answer(h, tg)
            tasks = h.manager.tasks.reporter(message, owner=owner, thread_id=thread)
            await tasks.started(task_id="call-9", title="count the alerts", kind="subagent")
            live = await tg.wait_until(lambda: telegram_card(tg), 15)
            await h.manager.tasks.store.finish("call-9", "done", "There were 7 alerts.")  # then the crash
        assert "7 alerts" not in live.text
        async with telegram_service(tmp_path, llm, clock, tg) as h:
            again = h.manager.tasks.reporter(message, owner=owner, thread_id=thread)
            await again.started(task_id="call-9", title="count the alerts", kind="subagent")
            await again.finished(task_id="call-9", status="done", result="There were 8 alerts.")
        cards = [m for m in tg.bot_messages(CHAT) if is_card(m.text)]
    assert cards == [live]
    assert card_status(live.text) == "✅ Done"
    assert card_body(live.text) == "There were 7 alerts."
    assert not any("8 alerts" in v for v in live.history)


async def test_a_run_that_waits_behind_an_answer_in_its_chat_waits_as_its_queued_card(
    tmp_path: Path, llm: FakeOpenAI
):
    clock = Clock(START)
    story = " ".join(f"word{i}" for i in range(120))
    llm.script(Reply(text=story, chunk_size=8, delay=0.05), Reply(text=RESULT, chunk_size=4, delay=0.1))
    async with telegram_bot(tmp_path, llm, clock) as (h, tg):
        tg.user_message(CHAT, f"/schedule in 5m {WHAT}", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "⏰ Scheduled")
        tg.user_message(CHAT, "tell me a story", user_id=CHAT)
        answer = await tg.wait_for_bot_text(CHAT, "word3", timeout=30)
        await fire(h, clock)
        card = await tg.wait_until(lambda: telegram_card(tg), 30)
        queued_while_answering = "word119" not in answer.text
        await tg.wait_until(lambda: "✅ Done" in card.text, 30)
        await h.idle(timeout=30)
        texts = [v for m in tg.bot_messages(CHAT) for v in m.history]
    assert queued_while_answering, "the run came while the answer was still streaming"
    assert statuses(card.history) == ["⏳ Queued", "▶️ Running", "✅ Done"]
    assert card_body(card.text) == RESULT
    assert not any(t.startswith("⏳ Queued") for t in texts), "no separate queued notice for the run"
    assert [m for m in tg.bot_messages(CHAT) if is_card(m.text)] == [card]
