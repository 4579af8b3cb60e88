"""Reading ``/schedule <when> <what>``: when a task runs, in words people type, or as a cron expression.

Accepted ``<when>`` forms (case-insensitive; times are in the schedule's time zone):

* once: ``in 90s`` / ``in 20m`` / ``in 2h`` / ``in 1d`` (also ``minutes``, ``hours``…), ``at 17:30``
  (today, or tomorrow if that has passed), ``tomorrow 09:00``, ``2026-12-24 09:00``;
* repeating: ``every day 09:00``, ``every weekday 09:00``, ``every weekend 10:00``, ``every monday
  09:00``, ``every mon,wed,fri 18:30``, ``every hour``, ``every 15m`` / ``every 2h``;
* ``cron M H DOM MON DOW`` — a five-field cron expression.

Everything after ``<when>`` is ``<what>``, the message the task sends as its creator. A ``<when>`` that
does not parse is refused with the list of forms, and nothing is stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DAYS = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 0}
DAY_WORD = r"(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*"
TIME = r"(?P<hour>\d{1,2}):(?P<minute>\d{2})"
HELP = (
    "When can be: in 20m · in 2h · at 17:30 · tomorrow 09:00 · 2026-12-24 09:00 · every day 09:00 · "
    "every weekday 09:00 · every monday 09:00 · every mon,wed 18:30 · every hour · every 15m · "
    "cron 0 9 * * 1-5"
)
MIN_INTERVAL_MINUTES = 5


class ScheduleError(ValueError):
    """``<when>`` or ``<what>`` cannot be used; the message says what would work."""


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A parsed ``<when>``: either one moment (``at``) or a cron rule (``cron``), plus the text."""

    when: str
    what: str
    at: float | None = None
    cron: str | None = None

    def next_after(self, moment: float, tz: str) -> float | None:
        """The first run strictly after ``moment`` (``None`` when a one-off has passed)."""
        if self.cron is None:
            return self.at if self.at is not None and self.at > moment else None
        return next_cron(self.cron, moment, tz)


def next_cron(expression: str, moment: float, tz: str) -> float:
    base = datetime.fromtimestamp(moment, ZoneInfo(tz))
    return float(croniter(expression, base).get_next(datetime).timestamp())


def _clock(match: re.Match[str]) -> tuple[int, int]:
    hour, minute = int(match.group("hour")), int(match.group("minute"))
    if hour > 23 or minute > 59:
        raise ScheduleError(f"{hour}:{minute:02d} is not a time of day. {HELP}")
    return hour, minute


def _days(words: str) -> str:
    picked = []
    for word in re.split(r"\s*,\s*", words):
        key = word[:3]
        if key not in DAYS:
            raise ScheduleError(f"{word!r} is not a day of the week. {HELP}")
        picked.append(str(DAYS[key]))
    return ",".join(picked)


def parse_schedule(text: str, *, now: float, tz: str) -> ScheduleSpec:
    """Split ``<when> <what>`` and work out when it runs; raises :class:`ScheduleError`."""
    source = " ".join(text.split())
    zone = ZoneInfo(tz)
    local_now = datetime.fromtimestamp(now, zone)
    for parse in (_relative, _absolute, _repeating, _cron):
        found = parse(source, local_now, zone)
        if found is not None:
            when, what, at, cron = found
            what = what.strip()
            if not what:
                raise ScheduleError(
                    f"Say what to do after the time, e.g. /schedule {when} post the standup link"
                )
            if at is not None and at <= now:
                raise ScheduleError(f"{when} is already in the past.")
            return ScheduleSpec(when=when, what=what, at=at, cron=cron)
    raise ScheduleError(f"I could not read when to run that. {HELP}")


Found = tuple[str, str, float | None, str | None] | None


def _relative(source: str, now: datetime, zone: ZoneInfo) -> Found:
    match = re.match(
        r"^in\s+(\d+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hrs?|hours?|d|days?)\b(.*)$", source, re.I
    )
    if not match:
        return None
    seconds = int(match.group(1)) * UNITS[match.group(2)[0].lower()]
    if seconds <= 0:
        raise ScheduleError("The delay must be more than zero.")
    when = source[: len(source) - len(match.group(3))].strip()
    return when, match.group(3), (now + timedelta(seconds=seconds)).timestamp(), None


def _absolute(source: str, now: datetime, zone: ZoneInfo) -> Found:
    dated = re.match(
        rf"^(?:at\s+|on\s+)?(?P<date>\d{{4}}-\d{{2}}-\d{{2}})[ T](?:at\s+)?{TIME}\b(?P<rest>.*)$",
        source,
        re.I,
    )
    if dated:
        hour, minute = _clock(dated)
        try:
            day = datetime.strptime(dated.group("date"), "%Y-%m-%d")
        except ValueError:
            raise ScheduleError(f"{dated.group('date')} is not a date. {HELP}") from None
        moment = day.replace(hour=hour, minute=minute, tzinfo=zone)
        return _when(source, dated), dated.group("rest"), moment.timestamp(), None
    daily = re.match(rf"^(?P<day>today|tomorrow)?\s*(?:at\s+)?{TIME}\b(?P<rest>.*)$", source, re.I)
    if not daily or (daily.group("day") is None and not source.lower().startswith("at ")):
        return None
    hour, minute = _clock(daily)
    moment = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if (daily.group("day") or "").lower() == "tomorrow":
        moment += timedelta(days=1)
    elif moment <= now and daily.group("day") is None:
        moment += timedelta(days=1)  # "at 09:00" after nine means tomorrow's
    return _when(source, daily), daily.group("rest"), moment.timestamp(), None


def _repeating(source: str, now: datetime, zone: ZoneInfo) -> Found:
    interval = re.match(r"^every\s+(\d+)\s*(m|min|mins|minutes?|h|hrs?|hours?)\b(?P<rest>.*)$", source, re.I)
    if interval:
        count, unit = int(interval.group(1)), interval.group(2)[0].lower()
        if unit == "m" and count < MIN_INTERVAL_MINUTES:
            raise ScheduleError(f"Repeating tasks run at most every {MIN_INTERVAL_MINUTES} minutes.")
        if (unit == "m" and count >= 60) or (unit == "h" and count >= 24) or count == 0:
            raise ScheduleError(
                "Use every day / every weekday … HH:MM for intervals of an hour or more a day."
            )
        cron = f"*/{count} * * * *" if unit == "m" else f"0 */{count} * * *"
        return _when(source, interval), interval.group("rest"), None, cron
    hourly = re.match(r"^every\s+hour\b(?P<rest>.*)$", source, re.I)
    if hourly:
        return _when(source, hourly), hourly.group("rest"), None, "0 * * * *"
    days = re.match(
        rf"^every\s+(?P<days>day|weekday|weekend|{DAY_WORD}(?:\s*,\s*{DAY_WORD})*)\s+(?:at\s+)?{TIME}\b(?P<rest>.*)$",
        source,
        re.I,
    )
    if not days:
        return None
    hour, minute = _clock(days)
    word = days.group("days").lower()
    dow = {"day": "*", "weekday": "1-5", "weekend": "0,6"}.get(word) or _days(word)
    return _when(source, days), days.group("rest"), None, f"{minute} {hour} * * {dow}"


def _cron(source: str, now: datetime, zone: ZoneInfo) -> Found:
    match = re.match(r"^cron\s+(?P<expr>(?:\S+\s+){4}\S+)(?P<rest>.*)$", source, re.I)
    if not match:
        return None
    expression = match.group("expr")
    if not croniter.is_valid(expression):
        raise ScheduleError(f"{expression!r} is not a valid cron expression (minute hour day month weekday).")
    first, second = croniter(expression, now).get_next(float), None
    second = croniter(expression, datetime.fromtimestamp(first, zone)).get_next(float)
    if second - first < MIN_INTERVAL_MINUTES * 60:
        raise ScheduleError(f"Repeating tasks run at most every {MIN_INTERVAL_MINUTES} minutes.")
    return _when(source, match), match.group("rest"), None, expression


def _when(source: str, match: re.Match[str]) -> str:
    return source[: match.start("rest")].strip()
