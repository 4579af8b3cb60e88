"""Issue 18 (scheduled tasks): what people type after /schedule, and when it then runs."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from bot.schedule_spec import ScheduleError, parse_schedule

TZ = "Europe/Berlin"
# Tuesday 1 December 2026, 10:00 in Berlin.
NOW = datetime(2026, 12, 1, 10, 0, tzinfo=ZoneInfo(TZ)).timestamp()


def local(ts: float | None) -> str:
    assert ts is not None
    return datetime.fromtimestamp(ts, ZoneInfo(TZ)).strftime("%a %Y-%m-%d %H:%M")


@pytest.mark.parametrize(
    ("typed", "when", "what", "first", "second"),
    [
        ("in 2h check the build", "in 2h", "check the build", "Tue 2026-12-01 12:00", None),
        ("at 09:00 standup", "at 09:00", "standup", "Wed 2026-12-02 09:00", None),  # 9:00 has passed today
        ("at 17:30 go home", "at 17:30", "go home", "Tue 2026-12-01 17:30", None),
        ("tomorrow 08:15 coffee", "tomorrow 08:15", "coffee", "Wed 2026-12-02 08:15", None),
        (
            "2026-12-24 18:00 merry christmas",
            "2026-12-24 18:00",
            "merry christmas",
            "Thu 2026-12-24 18:00",
            None,
        ),
        (
            "every weekday 09:00 post the standup link",
            "every weekday 09:00",
            "post the standup link",
            "Wed 2026-12-02 09:00",
            "Thu 2026-12-03 09:00",
        ),
        (
            "every fri 16:00 weekly summary",
            "every fri 16:00",
            "weekly summary",
            "Fri 2026-12-04 16:00",
            "Fri 2026-12-11 16:00",
        ),
        (
            "every mon,wed 18:30 gym",
            "every mon,wed 18:30",
            "gym",
            "Wed 2026-12-02 18:30",
            "Mon 2026-12-07 18:30",
        ),
        (
            "every 15m poll the queue",
            "every 15m",
            "poll the queue",
            "Tue 2026-12-01 10:15",
            "Tue 2026-12-01 10:30",
        ),
        (
            "cron 0 9 * * 1-5 standup",
            "cron 0 9 * * 1-5",
            "standup",
            "Wed 2026-12-02 09:00",
            "Thu 2026-12-03 09:00",
        ),
    ],
)
def test_when_and_what_are_read_and_the_next_runs_follow(typed, when, what, first, second):
    spec = parse_schedule(typed, now=NOW, tz=TZ)
    assert (spec.when, spec.what) == (when, what)
    next_run = spec.next_after(NOW, TZ)
    assert local(next_run) == first
    if second is None:
        assert spec.cron is None and spec.next_after(next_run, TZ) is None
    else:
        assert local(spec.next_after(next_run, TZ)) == second


def test_weekends_and_daylight_saving_follow_the_time_zone():
    # Berlin leaves summer time on 25 October 2026: 09:00 stays 09:00 local, the UTC hour moves.
    before = datetime(2026, 10, 23, 12, 0, tzinfo=ZoneInfo(TZ)).timestamp()
    spec = parse_schedule("every day 09:00 hello", now=before, tz=TZ)
    saturday = spec.next_after(before, TZ)
    monday = spec.next_after(spec.next_after(spec.next_after(saturday, TZ), TZ), TZ)  # type: ignore[arg-type]
    assert local(saturday) == "Sat 2026-10-24 09:00" and local(monday) == "Tue 2026-10-27 09:00"
    assert datetime.fromtimestamp(saturday, ZoneInfo("UTC")).hour == 7  # type: ignore[arg-type]
    assert datetime.fromtimestamp(monday, ZoneInfo("UTC")).hour == 8  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("typed", "message"),
    [
        ("whenever you like", "I could not read when to run that. When can be: in 20m"),
        ("every weekday 09:00", "Say what to do after the time"),
        ("every 2m spam", "Repeating tasks run at most every 5 minutes."),
        ("cron * * * * * spam", "Repeating tasks run at most every 5 minutes."),
        ("cron 0 9 * * 9 bad", "is not a valid cron expression"),
        ("2026-02-30 10:00 no such day", "2026-02-30 is not a date."),
        ("2026-01-01 10:00 long ago", "is already in the past."),
        ("at 25:00 late", "25:00 is not a time of day."),
        ("every someday 10:00 x", "I could not read when to run that."),
    ],
)
def test_what_cannot_be_read_gets_a_clear_sentence(typed, message):
    with pytest.raises(ScheduleError) as refused:
        parse_schedule(typed, now=NOW, tz=TZ)
    assert message in str(refused.value)
