"""Issue 18 (scheduled tasks): /schedule in chat fires at the right time as an ordinary, durable turn."""

from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.conftest import fresh_pg_database, make_settings
from tests.fakes.openai_server import FakeOpenAI
from tests.harness import Harness
from tests.tasks.kit import card_body

TZ = "Europe/Berlin"


class Clock:
    """A clock the test moves by hand; the scheduler is poked after each move."""

    def __init__(self, start: datetime) -> None:
        self.now = start.timestamp()

    def __call__(self) -> float:
        return self.now


def settings_for(tmp_path: Path, llm: FakeOpenAI, **extra):  # type: ignore[no-untyped-def]
    return make_settings(tmp_path, llm, agent={"timezone": TZ}, **extra)


async def move(h: Harness, clock: Clock, to: datetime) -> None:
    clock.now = to.timestamp()
    h.service.schedules.book.scheduler.poke()
    await asyncio.sleep(0.2)  # let the scheduler hand the run to the bus
    await h.idle()


def answers(h: Harness, text: str, chat: str = "chat-1") -> int:
    return sum(1 for m in h.chat.in_chat(chat) if card_body(m.text) == f"echo: {text}")


async def test_a_weekday_schedule_fires_at_its_time_in_its_chat_and_only_then(tmp_path, llm):
    clock = Clock(datetime(2026, 12, 1, 8, 0, tzinfo=ZoneInfo(TZ)))  # Tuesday 08:00
    async with Harness.running(settings_for(tmp_path, llm), clock=clock) as h:
        created = await h.ask("/schedule every weekday 09:00 post the standup link")
        assert created.startswith("⏰ Scheduled ")
        assert "every weekday 09:00 — next Tue 1 Dec 09:00 (Europe/Berlin)" in created
        await move(h, clock, datetime(2026, 12, 1, 8, 59, tzinfo=ZoneInfo(TZ)))
        assert answers(h, "post the standup link") == 0
        await move(h, clock, datetime(2026, 12, 1, 9, 0, 5, tzinfo=ZoneInfo(TZ)))
        assert answers(h, "post the standup link") == 1
        await move(h, clock, datetime(2026, 12, 1, 17, 0, tzinfo=ZoneInfo(TZ)))
        assert answers(h, "post the standup link") == 1  # not again the same day
        await move(h, clock, datetime(2026, 12, 2, 9, 0, 1, tzinfo=ZoneInfo(TZ)))
        assert answers(h, "post the standup link") == 2
        listing = await h.ask("/schedule list")
    assert "every weekday 09:00 · next Thu 3 Dec 09:00 · post the standup link" in listing
    # The run is an ordinary turn of the creator's conversation: the model got the text as the user.
    users = [m["content"] for m in llm.completions[-1]["messages"] if m["role"] == "user"]
    assert users[-1] == "post the standup link"


async def test_a_cancelled_schedule_does_not_fire_and_others_cannot_cancel_it(tmp_path, llm):
    clock = Clock(datetime(2026, 12, 1, 8, 0, tzinfo=ZoneInfo(TZ)))
    async with Harness.running(settings_for(tmp_path, llm), clock=clock) as h:
        created = await h.ask(
            "/schedule in 10m water the plants", chat="group", sender="alice", private=False
        )
        schedule_id = created.split()[2].rstrip(":")
        refused = await h.ask(f"/schedule cancel {schedule_id}", chat="group", sender="bob", private=False)
        cancelled = await h.ask(
            f"/schedule cancel {schedule_id}", chat="group", sender="alice", private=False
        )
        await move(h, clock, datetime(2026, 12, 1, 8, 11, tzinfo=ZoneInfo(TZ)))
        again = await h.ask(f"/schedule cancel {schedule_id}", chat="group", sender="alice", private=False)
    assert refused == f"Only the person who set up {schedule_id} can cancel it."
    assert cancelled == f"⏹ Cancelled {schedule_id}."
    assert answers(h, "water the plants", chat="group") == 0
    assert again == f"There is no scheduled task {schedule_id} in this chat."


async def test_what_cannot_be_scheduled_gets_a_clear_answer_and_stores_nothing(tmp_path, llm):
    async with Harness.running(settings_for(tmp_path, llm)) as h:
        unreadable = await h.ask("/schedule sometime soon do the thing")
        nothing_to_do = await h.ask("/schedule in 5m")
        nested = await h.ask("/schedule in 5m /schedule in 5m spam")
        listing = await h.ask("/schedule list")
    assert unreadable.startswith("I could not read when to run that. When can be: in 20m")
    assert nothing_to_do.startswith("Say what to do after the time")
    # Any command, /schedule included: an occurrence is plain text, so a command could never run.
    assert nested.startswith("Not scheduled: a scheduled task is sent to me later as a plain message")
    assert listing == "No scheduled tasks in this chat. Add one with /schedule <when> <what>."


async def test_a_run_missed_while_down_runs_once_at_start_and_is_never_repeated(tmp_path, llm):
    clock = Clock(datetime(2026, 12, 1, 8, 0, tzinfo=ZoneInfo(TZ)))
    settings = settings_for(tmp_path, llm)
    async with Harness.running(settings, clock=clock) as first:
        await first.ask("/schedule every day 09:00 morning report")
    # Down over two 09:00s; back at 09:30 on Thursday.
    clock.now = datetime(2026, 12, 3, 9, 30, tzinfo=ZoneInfo(TZ)).timestamp()
    async with Harness.running(settings, clock=clock) as second:
        await asyncio.sleep(0.3)
        await second.idle()
    assert answers(second, "morning report") == 1
    # A third start at the same moment: the run was handed over already (same inbox id), nothing repeats.
    async with Harness.running(settings, clock=clock) as third:
        await asyncio.sleep(0.3)
        await third.idle()
    assert answers(third, "morning report") == 0


async def test_skip_leaves_missed_runs_out(tmp_path, llm):
    clock = Clock(datetime(2026, 12, 1, 8, 0, tzinfo=ZoneInfo(TZ)))
    settings = settings_for(tmp_path, llm, schedules={"missed": "skip"})
    async with Harness.running(settings, clock=clock) as first:
        await first.ask("/schedule every day 09:00 morning report")
    clock.now = datetime(2026, 12, 3, 9, 30, tzinfo=ZoneInfo(TZ)).timestamp()
    async with Harness.running(settings, clock=clock) as second:
        await asyncio.sleep(0.3)
        await second.idle()
        listing = await second.ask("/schedule list", message_id="list-after-restart")
    assert answers(second, "morning report") == 0
    assert "next Fri 4 Dec 09:00" in listing


async def test_the_assistant_can_schedule_list_and_cancel_for_the_person_it_talks_to(tmp_path, llm):
    from tests.fakes.openai_server import Reply, ToolCall

    clock = Clock(datetime(2026, 12, 1, 8, 0, tzinfo=ZoneInfo(TZ)))
    llm.script(
        Reply(
            tool_calls=[
                ToolCall("schedule_task", {"when": "every monday 09:00", "what": "timesheet reminder"})
            ]
        ),
        Reply(text="Done — every Monday at 9."),
    )
    async with Harness.running(settings_for(tmp_path, llm), clock=clock) as h:
        answer = await h.ask("remind me every Monday at 9 to fill in my timesheet")
        listing = await h.ask("/schedule list")
        await move(h, clock, datetime(2026, 12, 7, 9, 0, 2, tzinfo=ZoneInfo(TZ)))
        fired = answers(h, "timesheet reminder")
        schedule_id = listing.splitlines()[1].split(" · ")[0]
        llm.script(
            Reply(tool_calls=[ToolCall("cancel_scheduled_task", {"id": schedule_id})]),
            Reply(text="Cancelled."),
        )
        await h.ask("stop the timesheet reminders")
        after = await h.ask("/schedule list")
    tool_results = [m["content"] for r in llm.completions for m in r["messages"] if m["role"] == "tool"]
    assert (
        tool_results[0].startswith("⏰ Scheduled ")
        and "every monday 09:00 — next Mon 7 Dec 09:00" in tool_results[0]
    )
    assert answer == "Done — every Monday at 9."
    assert "every monday 09:00 · next Mon 7 Dec 09:00 · timesheet reminder" in listing
    assert fired == 1
    assert f"⏹ Cancelled {schedule_id}." in tool_results
    assert after == "No scheduled tasks in this chat. Add one with /schedule <when> <what>."


@pytest.mark.postgres
async def test_two_instances_on_one_postgres_fire_a_due_run_exactly_once(tmp_path, llm):
    clock = Clock(datetime(2026, 12, 1, 8, 0, tzinfo=ZoneInfo(TZ)))
    async with fresh_pg_database() as url:
        settings = settings_for(tmp_path, llm, database={"url": url})
        async with Harness.running(settings, clock=clock) as one:
            await one.ask("/schedule in 10m stand-up time")
            async with Harness.running(settings, clock=clock) as two:
                clock.now += 11 * 60
                # Both instances see the due run at the same moment and both hand it to their bus.
                one.service.schedules.book.scheduler.poke()
                two.service.schedules.book.scheduler.poke()
                await asyncio.sleep(0.5)
                await one.idle()
                await two.idle()
        total = answers(one, "stand-up time") + answers(two, "stand-up time")
    assert total == 1
