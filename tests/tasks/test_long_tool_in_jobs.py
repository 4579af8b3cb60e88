"""A long tool call inside a job that has its own task card is a step of that card, not a second card.

What a person notices on Telegram and Slack: a scheduled run (or a goal's step) that runs a slow command
stays one card in the chat — its status line names the command, then says how it ended, and ``/tasks ID``
lists both as the job's steps; ⏹ Stop on the job's card stops the command too (its heartbeat stops). A
slow command in an ordinary chat turn still gets a card of its own. Real channels against the platforms'
fakes, a real service, the real sandbox, the fake model; the schedule fires when the test moves the clock.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from agent.goals import EVALUATOR_MARKER
from agent.tables import subagent_tasks
from channels.slack.channel import SlackChannel
from channels.telegram.channel import TelegramChannel
from tests.agent.helpers import system_text, wait_until
from tests.agent.test_sandbox import HEARTBEAT, beat, beating
from tests.channels.slack.conftest import slack_section
from tests.channels.telegram.conftest import BOT_USERNAME, telegram_config
from tests.conftest import make_settings
from tests.fakes.openai_server import FakeOpenAI, Reply, ToolCall, last_user_text
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeMessage, FakeTelegram
from tests.harness import Harness
from tests.schedules.test_schedules import TZ, Clock
from tests.tasks import kit
from tests.tasks.kit import card_body, card_status, is_card
from tests.tasks.test_task_cards import CHAT, START, STOP, WHAT, fire

pytestmark = pytest.mark.slow  # platform fakes, the fake model and sandboxed processes

#: Past the 0.5 s threshold on a loaded machine with room to spare; short enough for a test.
SLOW = "sleep 3; echo BUILD-RESULT-8812"
SHOWN = f"running `{SLOW}`"  # the call's masked progress line (Slack shows it as it is)
SHOWN_TG = f"running {SLOW}"  # Telegram shows the backticks as code formatting
RESULT = "The build printed BUILD-RESULT-8812."


def bash(command: str) -> Reply:
    return Reply(tool_calls=[ToolCall("bash", {"command": command})])


def settings_for(tmp_path: Path, llm: FakeOpenAI, **extra: Any) -> Any:
    return make_settings(
        tmp_path, llm, agent={"timezone": TZ, "long_tool_seconds": 0.5}, memory={"enabled": False}, **extra
    )


@asynccontextmanager
async def telegram_bot(tmp_path: Path, llm: FakeOpenAI) -> AsyncIterator[tuple[Harness, FakeTelegram, Clock]]:
    clock = Clock(START)
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as tg:
        settings = settings_for(tmp_path, llm)
        channel = TelegramChannel(telegram_config(tg), settings=settings)
        async with Harness.running(settings, channels={"telegram": channel}, clock=clock) as h:  # type: ignore[dict-item]
            yield h, tg, clock


def cards(tg: FakeTelegram) -> list[FakeMessage]:
    return kit.telegram_cards(tg, CHAT)


async def became_long(h: Harness, timeout: float = 30) -> None:
    """Wait until the running call is a long one (recorded, kind ``tool``): past the threshold, so a card
    of its own would be in the chat by now if it got one."""
    t = subagent_tasks.c
    query = select(t.task_id).where(t.kind == "tool", t.status == "running")
    async with asyncio.timeout(timeout):
        while True:
            async with h.service.db.engine.connect() as conn:
                if (await conn.execute(query)).first() is not None:
                    return
            await asyncio.sleep(0.1)


async def stop_on_the_jobs_card(
    tmp_path: Path, h: Harness, tg: FakeTelegram
) -> tuple[FakeMessage, list[FakeMessage]]:
    """Wait until the job's command runs and is long, press Stop on the one live card, and check the
    command stopped; the card and every card shown before Stop."""
    await wait_until(lambda: beat(tmp_path) != "", timeout=30)
    assert await beating(tmp_path, within=10)
    await became_long(h)
    await asyncio.sleep(1)  # time for a card of its own to be posted, if it got one
    live = await tg.wait_until(
        lambda: next((m for m in cards(tg) if m.buttons == [STOP] and HEARTBEAT[:20] in m.text), None),
        30,
    )
    shown = cards(tg)
    tg.press(CHAT, live.message_id, STOP, user_id=CHAT)
    await tg.wait_until(lambda: "⏹ Stopped" in card_status(live.text), 30)
    await h.idle(timeout=30)
    assert not await beating(tmp_path), "the command still runs after Stop on its job's card"
    return live, shown


async def steps_of(tg: FakeTelegram, card: FakeMessage) -> str:
    """``/tasks ID`` for the card: its recorded steps, as the chat shows them."""
    short = card.text.split(":")[0].split()[-1]
    tg.user_message(CHAT, f"/tasks {short}", user_id=CHAT)
    detail = await tg.wait_for_bot_text(CHAT, "Steps:")
    return detail.text


async def test_a_scheduled_runs_long_command_is_a_step_of_its_one_card_and_a_chat_turns_gets_its_own(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.script(
        bash(SLOW), Reply(text=RESULT), bash("sleep 3; echo AGAIN-4410"), Reply(text="Built it again.")
    )
    async with telegram_bot(tmp_path, llm) as (h, tg, clock):
        tg.user_message(CHAT, f"/schedule in 5m {WHAT}", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "⏰ Scheduled")
        await fire(h, clock)
        await tg.wait_until(lambda: any("✅ Done" in card_status(m.text) for m in cards(tg)), 60)
        await h.idle(timeout=30)
        after_run = cards(tg)
        assert len(after_run) == 1, [m.text for m in after_run]  # no second card for the command
        [card] = after_run
        steps = await steps_of(tg, card)
        # An ordinary turn in the same chat: its long command still gets a card of its own.
        tg.user_message(CHAT, "build it again", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "Built it again.", timeout=30)
        await h.idle(timeout=30)
        later = cards(tg)
    assert card.text.startswith("🗂 Scheduled task") and card_body(card.text) == RESULT
    # The command's progress line, then its outcome, are the job's steps (the chat's edits may be paced
    # past the first while the command runs; /tasks lists every step).
    assert f"1. {SHOWN_TG}\n2. {SHOWN_TG} · ✅ Done" in steps, steps
    assert any(f"{SHOWN_TG} · ✅ Done" in card_status(v) for v in card.history), card.history
    assert len(later) == 2 and later[0].message_id == card.message_id
    tool_card = later[1]
    assert tool_card.text.startswith("🗂 Tool call") and "AGAIN-4410" in tool_card.text.split("\n")[0]
    assert card_status(tool_card.text) == "✅ Done" and "AGAIN-4410" in card_body(tool_card.text)


async def test_stop_on_a_scheduled_runs_card_stops_its_long_command(tmp_path: Path, llm: FakeOpenAI):
    llm.script(bash(HEARTBEAT), Reply(text="This must not be asked for."))
    async with telegram_bot(tmp_path, llm) as (h, tg, clock):
        tg.user_message(CHAT, f"/schedule in 5m {WHAT}", user_id=CHAT)
        await tg.wait_for_bot_text(CHAT, "⏰ Scheduled")
        await fire(h, clock)
        live, shown = await stop_on_the_jobs_card(tmp_path, h, tg)
        everything = [m.text for m in tg.bot_messages(CHAT)]
    assert shown == [live], "the long command opened a card of its own"
    assert cards(tg) == [live] and live.text.startswith("🗂 Scheduled task")
    assert live.buttons == []
    assert not any("must not be asked" in t for t in everything)


def goal_with_a_long_command() -> Any:
    """A goal whose step 1 runs the slow command and then answers; step 2 reaches it."""
    ran: list[bool] = []

    def reply(body: dict[str, Any]) -> Reply:
        text = last_user_text(body)
        if EVALUATOR_MARKER in system_text(body):
            done = "STEP-TWO" in text
            return Reply(text=json.dumps({"decision": "satisfied" if done else "continue", "reason": "ok"}))
        if text.startswith("[Goal continuation 1/8]"):
            if not ran:
                ran.append(True)
                return bash(SLOW)
            return Reply(text="STEP-ONE: the build ran.")
        if text.startswith("[Goal continuation 2/8]"):
            return Reply(text="STEP-TWO: all done.")
        return Reply(text="I will build it.")

    return reply


async def test_a_goal_steps_long_command_is_a_step_of_the_goals_one_card_on_slack(
    tmp_path: Path, llm: FakeOpenAI
):
    llm.default_reply = goal_with_a_long_command()
    with FakeSlack() as slack:
        settings = settings_for(tmp_path, llm, channels={"slack": slack_section(slack)})
        channel = SlackChannel(settings.channels.slack, settings=settings)
        async with Harness.running(settings, channels={"slack": channel}, clock=Clock(START)) as h:  # type: ignore[dict-item]
            await slack.wait_connected()
            slack.dm("U1", "/goal build the project")
            card = await slack.wait_for_text("✅ Done", "DU1", timeout=60)
            await h.idle(timeout=30)
            shown = [m for m in slack.channel_messages("DU1") if is_card(m.text)]
            posts = [c for c in slack.calls_to("chat.postMessage") if is_card(str(c.args.get("text", "")))]
            slack.dm("U1", f"/tasks {card.text.split(':')[0].split()[-1]}")
            detail = await slack.wait_for_text("Steps:", "DU1")
    assert shown == [card], [m.text for m in shown]
    assert len(posts) == 1, "one card, posted once"
    assert card.text.startswith("🗂 Goal")
    assert f"step 1 of 8 · {SHOWN} · ✅ Done" in detail.text, detail.text
    assert "STEP-TWO" in card_body(card.text)


async def test_stop_on_a_goals_card_stops_its_steps_long_command_and_the_card_ends_stopped(
    tmp_path: Path, llm: FakeOpenAI
):
    plain = goal_with_a_long_command()
    started: list[bool] = []

    def reply(body: dict[str, Any]) -> Reply:
        if last_user_text(body).startswith("[Goal continuation 1/8]") and not started:
            started.append(True)
            return bash(HEARTBEAT)
        return plain(body)

    llm.default_reply = reply
    async with telegram_bot(tmp_path, llm) as (h, tg, _clock):
        tg.user_message(CHAT, "/goal build the project", user_id=CHAT)
        live, shown = await stop_on_the_jobs_card(tmp_path, h, tg)
    assert shown == [live], "the long command opened a card of its own"
    assert cards(tg) == [live] and live.text.startswith("🗂 Goal")
    ended = live.history.index(next(v for v in live.history if "⏹ Stopped" in card_status(v)))
    assert all("⏹ Stopped" in card_status(v) for v in live.history[ended:]), live.history[ended:]
    assert live.buttons == []


async def test_in_a_group_only_the_runs_starter_stops_its_long_command(tmp_path: Path, llm: FakeOpenAI):
    """The job's Stop is the command's: someone else in the group (not an admin) pressing it stops
    nothing; the person who scheduled the run does."""
    group, starter, other = -5151, 5151, 6262
    llm.script(bash(HEARTBEAT), Reply(text="This must not be asked for."))
    async with telegram_bot(tmp_path, llm) as (h, tg, clock):
        tg.user_message(
            group, f"/schedule@{BOT_USERNAME} in 5m {WHAT}", user_id=starter, username="sam", first_name="Sam"
        )
        await tg.wait_for_bot_text(group, "⏰ Scheduled")
        await fire(h, clock)
        await wait_until(lambda: beat(tmp_path) != "", timeout=30)
        await became_long(h)
        await asyncio.sleep(1)  # time for a card of its own to be posted, if it got one
        live = await tg.wait_until(
            lambda: next((m for m in kit.telegram_cards(tg, group) if m.buttons == [STOP]), None), 30
        )
        shown = kit.telegram_cards(tg, group)
        tg.press(group, live.message_id, STOP, user_id=other, username="olga", first_name="Olga")
        await asyncio.sleep(2)
        refused = await beating(tmp_path, within=10) and card_status(live.text).startswith("▶️ Running")
        tg.press(group, live.message_id, STOP, user_id=starter, username="sam", first_name="Sam")
        await tg.wait_until(lambda: "⏹ Stopped" in card_status(live.text), 30)
        await h.idle(timeout=30)
        assert not await beating(tmp_path), "the command still runs after its starter's Stop"
    assert shown == [live], "the long command opened a card of its own"
    assert refused, "someone else's Stop stopped the run and its command"
    assert kit.telegram_cards(tg, group) == [live]
