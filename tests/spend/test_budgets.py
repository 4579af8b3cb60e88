"""Issue 34 (prices, usage, budgets) through Telegram's fake Bot API and the fake OpenAI server.

The fake model reports usage the way OpenAI's streaming API does with ``stream_options.include_usage``
(a last chunk with ``prompt_tokens``, ``completion_tokens`` and ``prompt_tokens_details.cached_tokens``).
Every answer here reports 1,000 prompt tokens (400 of them cached) and 200 completion tokens; at
$2.50 / $1.25 (cached) / $10.00 per million tokens a turn costs exactly
600 × 2.50 + 400 × 1.25 + 200 × 10.00 = 4,000 millionths of a dollar: $0.004.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from bot import metrics
from channels.telegram.channel import TelegramChannel
from tests.agent.helpers import agent_settings
from tests.channels.telegram.conftest import BOT_USERNAME, telegram_config
from tests.fakes.openai_server import FakeOpenAI, Reply, last_user_text
from tests.fakes.telegram import FakeTelegram
from tests.harness import Harness
from tests.tasks.kit import card_body

pytestmark = pytest.mark.slow  # a fake Bot API and a fake model server

GROUP = -100_700
ALICE, ADMIN = 1001, 2002
PRICING = {"input": "2.50", "cached": "1.25", "output": "10.00", "currency": "USD"}
TURN_COST = Decimal("0.004")
ASKED = re.compile(r"/approve ([A-Z2-9]{6})")


def answer(body: dict[str, Any]) -> Reply:
    return Reply(
        text=f"echo: {last_user_text(body)}", prompt_tokens=1000, cached_tokens=400, completion_tokens=200
    )


def priced_settings(tmp_path: Path, llm: FakeOpenAI, budgets: dict[str, Any]) -> Any:
    settings = agent_settings(tmp_path, llm, sandbox={"mode": "host"}, budgets=budgets)
    for model in settings.models:
        model.pricing = PRICING  # type: ignore[assignment]
    return settings


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start.timestamp()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tg() -> Any:
    with FakeTelegram(bot_username=BOT_USERNAME, long_poll_cap=0.5) as server:
        yield server


def say(tg: FakeTelegram, text: str, user: int = ALICE) -> None:
    tg.user_message(GROUP, f"@{BOT_USERNAME} {text}", chat_type="supergroup", user_id=user,
                    username="alice" if user == ALICE else "lead", first_name="Alice" if user == ALICE else "Lee")  # fmt: skip


async def test_ten_priced_turns_cost_what_usage_says_and_the_daily_budget_stops_until_an_admin_raises_it(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    llm.default_reply = answer
    # Alice may spend $0.03 a day: seven turns ($0.028) run, the eighth ($0.032 after it) still starts
    # below the limit, the ninth does not.
    settings = priced_settings(tmp_path, llm, {"per_owner": {"day": "0.03"}, "on_limit": "ask_admin"})
    channel = TelegramChannel(telegram_config(tg, admins=[str(ADMIN)]), settings=settings)
    cost_before = metrics.COST.value("default", "default")
    async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
        for n in range(1, 9):
            say(tg, f"question {n}")
            await tg.wait_for_bot_text(GROUP, f"echo: question {n}", timeout=30)
            await h.idle(timeout=20)

        # 80 % ($0.024) was crossed by turn 6: Alice was told once — in the group without her amounts
        # (her spending is private; Telegram has no message only she would see).
        warnings = [t for t in tg.bot_texts(GROUP) if "Heads-up" in t]
        assert warnings == ["💸 Heads-up: 80 % of Alice's daily budget is spent."]

        # Turn 9: over budget. It asks the admins; the admin denies, and the turn ends with a sentence.
        say(tg, "question 9")
        request = await tg.wait_for_bot_text(GROUP, "this turn is over budget", timeout=30)
        assert "Alice's daily budget is used up" in request.text
        assert request.buttons == ["Approve", "Deny"]
        tg.press(GROUP, request.message_id, "Approve")  # Alice herself may not approve spending
        await tg.wait_for_bot_text(GROUP, "only an admin of this chat can approve", timeout=20)
        tg.press(GROUP, request.message_id, "Deny", user_id=ADMIN, username="lead", first_name="Lee")
        refusal = await tg.wait_for_bot_text(GROUP, "This turn did not run", timeout=30)
        await h.idle(timeout=20)
        assert refusal.text == (
            "💸 This turn did not run: Alice's daily budget is used up. An admin did not approve going over "
            "it. It resets at midnight UTC."
        )
        assert not any("echo: question 9" in t for t in tg.bot_texts(GROUP))

        # Turn 10: asks again; the admin approves; it runs, and the limit is raised for the rest of today.
        say(tg, "question 10")
        request = await tg.wait_until(
            lambda: next((m for m in tg.bot_messages(GROUP) if "over budget" in m.text and m.keyboard), None),
            timeout=30,
        )
        tg.press(GROUP, request.message_id, "Approve", user_id=ADMIN, username="lead", first_name="Lee")
        await tg.wait_for_bot_text(GROUP, "echo: question 10", timeout=30)
        await h.idle(timeout=20)
        say(tg, "question 11")  # raised for today: no second request
        await tg.wait_for_bot_text(GROUP, "echo: question 11", timeout=30)
        await h.idle(timeout=20)
        assert sum("over budget" in t for t in tg.bot_texts(GROUP)) == 2
        assert not any("$" in t for t in tg.bot_texts(GROUP)), "a person's spending was shown in a group"

        # /usage in her direct messages: ten turns ran (1–8, 10, 11) at $0.004 each.
        tg.user_message(ALICE, "/usage")
        usage = await tg.wait_for_bot_text(ALICE, "Your usage", timeout=20)
        assert (
            "Today: $0.0400 — 10 turn(s), 10,000 in, 4,000 cached / 2,000 out (budget $0.0300)" in usage.text
        )
        assert "Top spenders" not in usage.text  # she is not an admin

        # The admin's /usage in a direct message also lists the top spenders.
        tg.user_message(ADMIN, "/usage", user_id=ADMIN, username="lead", first_name="Lee")
        admin_view = await tg.wait_for_bot_text(ADMIN, "Top spenders", timeout=20)
        assert "1. telegram:-:1001: $0.0400 — 10 turn(s)" in admin_view.text

    spent = Decimal(str(metrics.COST.value("default", "default") - cost_before)).quantize(Decimal("0.000001"))
    assert spent == 10 * TURN_COST


async def test_a_scheduled_task_over_its_budget_does_not_run_and_says_so_in_its_chat(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    llm.default_reply = answer
    # One run of the schedule costs $0.004: its daily budget allows one.
    settings = priced_settings(tmp_path, llm, {"per_schedule": {"day": "0.004"}})
    channel = TelegramChannel(telegram_config(tg), settings=settings)
    clock = Clock(datetime(2026, 12, 1, 8, 0, tzinfo=ZoneInfo("UTC")))
    async with Harness.running(settings, channels={"telegram": channel}, clock=clock) as h:  # type: ignore[dict-item]
        tg.user_message(ALICE, "/schedule every day 09:00 post the news")
        created = await tg.wait_for_bot_text(ALICE, "⏰ Scheduled", timeout=20)
        schedule_id = created.text.split()[2].rstrip(":")
        await h.idle(timeout=20)

        async def move(to: datetime) -> None:
            clock.now = to.timestamp()
            h.service.schedules.book.scheduler.poke()

        await move(datetime(2026, 12, 1, 9, 0, 5, tzinfo=ZoneInfo("UTC")))
        await tg.wait_for_bot_text(ALICE, "echo: post the news", timeout=30)
        await h.idle(timeout=20)
        await move(datetime(2026, 12, 2, 9, 0, 5, tzinfo=ZoneInfo("UTC")))
        stopped = await tg.wait_for_bot_text(ALICE, "did not run", timeout=30)
        await h.idle(timeout=20)
    assert card_body(stopped.text) == (  # the run's task card (docs/tasks.md) says why it did not run
        f"💸 This scheduled task did not run: the daily budget of scheduled task {schedule_id} is used up "
        "($0.0040 of $0.0040 today). It resets at midnight UTC."
    )
    assert sum("echo: post the news" in t for t in tg.bot_texts(ALICE)) == 1
    await asyncio.sleep(0)


async def test_stop_withdraws_a_waiting_budget_request_and_nothing_runs(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    llm.default_reply = answer
    settings = priced_settings(tmp_path, llm, {"per_chat": {"day": "0"}})  # this chat may spend nothing
    channel = TelegramChannel(telegram_config(tg, admins=[str(ADMIN)]), settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
        say(tg, "question 1")
        request = await tg.wait_for_bot_text(GROUP, "this turn is over budget", timeout=30)
        assert "this chat's daily budget is used up ($0.0000 of $0.0000 today)" in request.text
        placeholder = next(m for m in tg.bot_messages(GROUP) if m.buttons == ["⏹ Stop"])
        tg.press(GROUP, placeholder.message_id, "⏹ Stop")
        await tg.wait_until(lambda: placeholder.text.endswith("⏹ Stopped."), timeout=20)
        await tg.wait_until(lambda: "withdrawn" in request.text and request.keyboard is None, timeout=20)
        await h.idle(timeout=20)
    assert llm.completions == [], "the model was never asked"


async def test_a_stop_pressed_before_the_request_is_confirmed_withdraws_that_same_message(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    """The chat shows the budget request while Telegram's answer (its message id) is still on the way and
    the person presses Stop: the request is still edited to say it was withdrawn, its buttons gone, and no
    second message repeats it."""
    llm.default_reply = answer
    settings = priced_settings(tmp_path, llm, {"per_chat": {"day": "0"}})
    channel = TelegramChannel(telegram_config(tg, admins=[str(ADMIN)]), settings=settings)
    tg.answer_late("sendMessage", 3.0, when=lambda params: "over budget" in str(params.get("text", "")))
    async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
        say(tg, "question 1")
        request = await tg.wait_for_bot_text(GROUP, "this turn is over budget", timeout=30)
        placeholder = next(m for m in tg.bot_messages(GROUP) if m.buttons == ["⏹ Stop"])
        tg.press(GROUP, placeholder.message_id, "⏹ Stop")
        await tg.wait_until(lambda: placeholder.text.endswith("⏹ Stopped."), timeout=20)
        await tg.wait_until(lambda: "withdrawn" in request.text and request.keyboard is None, timeout=20)
        await h.idle(timeout=20)
    assert [t for t in tg.bot_texts(GROUP) if "Approval" in t] == [request.text]
    assert llm.completions == [], "the model was never asked"


async def test_a_stop_pressed_while_a_finished_turns_cost_is_being_written_still_records_that_cost(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI, pg_url: str
):
    """The model has answered (and been paid) and the turn is writing its cost when the person presses ⏹
    Stop (the ledger's table is locked by another writer, so the write waits): the stop ends the turn,
    but the cost is still recorded. A stop used to cut the write short, and the turn escaped the budget."""
    import asyncpg
    from sqlalchemy.engine import make_url

    llm.default_reply = lambda body: Reply(
        text=f"echo: {last_user_text(body)}",
        chunk_size=4,
        delay=0.05,
        prompt_tokens=1000,
        cached_tokens=400,
        completion_tokens=200,
    )
    settings = priced_settings(tmp_path, llm, {"per_chat": {"day": "1"}})
    settings.database.url = pg_url
    channel = TelegramChannel(telegram_config(tg, admins=[str(ADMIN)]), settings=settings)
    url = make_url(pg_url)
    other = await asyncpg.connect(
        host=url.host, port=url.port or 5432, user=url.username, password=url.password, database=url.database
    )
    try:
        async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
            locked = other.transaction()
            await locked.start()
            await other.execute("LOCK TABLE spend_daily IN EXCLUSIVE MODE")  # another writer holds it
            try:
                say(tg, "question 1")
                waiting = (
                    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'spend_daily'::regclass"
                )
                for _ in range(600):
                    if await other.fetchval(waiting):
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("the turn never started writing its cost")
                placeholder = next(m for m in tg.bot_messages(GROUP) if m.buttons == ["⏹ Stop"])
                tg.press(GROUP, placeholder.message_id, "⏹ Stop")
                await tg.wait_until(lambda: placeholder.text.endswith("⏹ Stopped."), timeout=20)
            finally:
                await locked.rollback()
            await h.idle(timeout=20)
            for _ in range(100):  # the write goes on after the stop, now that the table is free
                if await other.fetchval("SELECT coalesce(sum(cost_micros), 0) FROM spend_daily"):
                    break
                await asyncio.sleep(0.05)
        spent = await other.fetchval("SELECT coalesce(sum(cost_micros), 0) FROM spend_daily")
    finally:
        await other.close()
    assert spent == 4_000, "the finished turn's cost was recorded although the turn was stopped"


async def test_a_named_agents_budget_counts_its_own_turns_and_stops_only_that_agent(
    tg: FakeTelegram, tmp_path: Path, llm: FakeOpenAI
):
    """Issue 34: ``budgets.per_agent`` counts under the named agent the binding chose (bot/agents/), so the
    agent bound to this group runs out while the built-in agent in Alice's direct messages does not."""
    llm.default_reply = answer
    settings = agent_settings(
        tmp_path,
        llm,
        sandbox={"mode": "host"},
        budgets={"per_agent": {"day": "0.008"}, "on_limit": "stop"},  # two turns of $0.004
        agents=[{"name": "helper", "system_prompt": "You are Helper."}],
        bindings=[{"agent": "helper", "provider": "telegram", "chat": str(GROUP)}],
    )
    for model in settings.models:
        model.pricing = PRICING  # type: ignore[assignment]
    channel = TelegramChannel(telegram_config(tg, admins=[str(ADMIN)]), settings=settings)
    async with Harness.running(settings, channels={"telegram": channel}) as h:  # type: ignore[dict-item]
        for n in (1, 2):
            say(tg, f"question {n}")
            await tg.wait_for_bot_text(GROUP, f"echo: question {n}", timeout=30)
            await h.idle(timeout=20)
        say(tg, "question 3")
        refusal = await tg.wait_for_bot_text(GROUP, "did not run", timeout=30)
        await h.idle(timeout=20)
        assert "the daily budget of agent helper is used up" in refusal.text
        assert not any("echo: question 3" in t for t in tg.bot_texts(GROUP))

        tg.user_message(ALICE, "still here?")  # her direct messages: the built-in agent, its own count
        await tg.wait_for_bot_text(ALICE, "echo: still here?", timeout=30)
        await h.idle(timeout=20)
